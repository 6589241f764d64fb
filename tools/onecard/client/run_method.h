// What a report records about how it was made: the command line, the endpoint's /v1/models answer,
// the date and the commit of the binary. Shared by bench-serve and validate.
#pragma once

#include "http_client.h"

#include <string>

namespace onecard::client {

std::string command_line();  // this process's argv, space-joined (from /proc/self/cmdline)
std::string utc_now_iso();   // e.g. 2025-06-01T12:34:56Z

// {"command", "date", "onecard_commit", "base_url", "models"}; `models` is null when the endpoint
// did not answer /v1/models.
Json run_method(HttpClient& http, const Endpoint& ep);

// The first model id /v1/models lists ("" when none).
std::string first_model_id(const Json& models);

void write_file(const std::string& path, const std::string& text);  // throws onecard::Error

}  // namespace onecard::client
