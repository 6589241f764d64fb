// Internal: the access log, one JSON object per line on stderr:
//   {"ts": "2026-11-29T15:32:01.123Z", "remote": "10.0.0.7", "method": "POST", "path": "/v1/chat/completions",
//    "status": 200, "duration_ms": 12.5, "bytes_in": 341, ...fields of the request}
// written by the router after every request it served, and by the front end (http_front.h) for every
// request it ended itself (refused on its head, past a limit, malformed, past a deadline), those with
// "reason" (fixed words: "headers_too_large", "header_deadline", "invalid_api_key", ...). "path" is
// a route's own path or "(other)": no line carries request text unless --log-requests-text asks.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstddef>
#include <string>

namespace onecard::server {

// UTC wall-clock time with milliseconds, ISO 8601 ("2026-11-29T15:32:01.123Z"): requests finish
// many per second, so whole seconds cannot order them.
std::string log_timestamp();

// The fields every line has. `path` is the request's path (httplib's Request::path): the line names
// its route, or "(other)".
nlohmann::json access_line(const std::string& remote, const std::string& method, const std::string& path, int status,
                           std::chrono::steady_clock::time_point start, size_t bytes_in);

// Writes `line` as one line on stderr (a single write, so lines of concurrent requests do not mix).
void write_access_line(const nlohmann::json& line);

}  // namespace onecard::server
