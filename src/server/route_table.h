// Internal: the routes onecard serves, as the access rules see them (which methods, open or behind the
// API key, probe or not, which error shape). httplib's router dispatches to the handlers; this table is
// what pre-routing checks (request_gate.h), the access log and the --allow-path startup check read.
#pragma once

#include "server/access_control.h"
#include "server/api_error.h"

#include <string>

namespace onecard::server {

// The methods a route answers, as a bit set (GET and DELETE share /v1/responses/{id}).
enum RouteMethod : unsigned { kGet = 1u, kPost = 2u, kDelete = 4u };

struct Route {
    const char* path;
    unsigned methods;
    bool public_route;    // reachable without an API key (liveness/readiness probes, version)
    bool probe;           // polled by monitors: no access-log line unless log_probe_requests
    bool prefix = false;  // matches every path that starts with `path` ("/v1/models/" + id)
    // Anthropic routes answer errors in Anthropic's shape and take the key from x-api-key as well.
    ErrorShape shape = ErrorShape::OpenAI;
};

// The route a request path (httplib's Request::path: decoded, no query) belongs to; nullptr for none.
const Route* find_route(const std::string& path);

// "GET, DELETE": the Allow header of a 405 and the methods a CORS preflight is told.
std::string method_list(unsigned methods);

// The RouteMethod bit of a method name; 0 for a method no route answers.
unsigned method_bit(const std::string& method);

// --allow-path: a pattern that reaches none of the routes is a typo. Throws onecard::Error naming it.
void check_allow_paths(const PathAllowlist& paths);

}  // namespace onecard::server
