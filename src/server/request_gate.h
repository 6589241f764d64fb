// Internal: the checks a request passes on its head alone (method, path, headers), in this order:
// --allow-path (404, as for a path with no route), CORS (headers, and the preflight's 204), the route
// table (404 / 405), the API key (401), the JSON Content-Type of a POST body (415), and while the
// model loads every non-probe route (503). One home for these rules: the front end (http_front.h)
// asks as soon as a request's headers are complete, so a refused request is answered before
// "100 Continue" and before its body is read; httplib's pre-routing asks again for what passed
// (same rules, same inputs), so the router never serves a request these rules refuse.
#pragma once

#include "server/api_error.h"
#include "server/openai_server.h"

#include <httplib.h>

#include <string>
#include <utility>
#include <vector>

namespace onecard::server {

struct HeadVerdict {
    int status = 0;       // 0: on to the route; 204: a CORS preflight, answered; >= 400: refused
    std::string message;  // for the client (it may quote the request's path or Content-Type)
    std::string code;     // fixed words ("invalid_api_key"): the error's code, and the reason in the access log
    ErrorShape shape = ErrorShape::OpenAI;
    std::vector<std::pair<std::string, std::string>> headers;  // CORS, Allow, WWW-Authenticate, Retry-After

    bool refused() const { return status >= 400; }
};

// The verdict on a request's head. `path` and `headers` are in httplib's form (Request::path: the
// decoded path without query; Request::headers). Does not modify `s`; callable from any thread.
HeadVerdict screen_head(const OpenAIServer::State& s, const std::string& method, const std::string& path,
                        const httplib::Headers& headers);

// httplib's Request::path for a request target ("/v1/models/a%2Fb?x=1" -> "/v1/models/a/b"), made the
// way httplib 0.11 makes it (fragment dropped, the first non-empty '?' part, URL-decoded, '+' kept).
std::string request_path_of(const std::string& target);

// httplib's Request::headers for header fields as received: values trimmed of spaces and tabs and
// URL-decoded, empty ones dropped, as httplib 0.11 reads them.
httplib::Headers request_headers_of(const std::vector<std::pair<std::string, std::string>>& fields);

// POST bodies are JSON: whether a Content-Type value names application/json (parameters such as
// charset allowed, case ignored).
bool is_json_content_type(const std::string& value);

}  // namespace onecard::server
