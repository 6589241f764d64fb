#include "server/route_table.h"

#include "core/error.h"

#include <cstring>
#include <string_view>
#include <utility>

namespace onecard::server {

namespace {

constexpr Route kRoutes[] = {
    {"/v1/chat/completions", kPost, false, false},
    {"/v1/completions", kPost, false, false},
    {"/v1/responses", kPost, false, false},
    {"/v1/responses/", kGet | kDelete, false, false, true},
    {"/v1/messages", kPost, false, false, false, ErrorShape::Anthropic},
    {"/v1/messages/count_tokens", kPost, false, false, false, ErrorShape::Anthropic},
    {"/v1/models", kGet, false, false},
    {"/v1/models/", kGet, false, false, true},
    {"/tokenize", kPost, false, false},
    {"/detokenize", kPost, false, false},
    {"/metrics", kGet, false, true},  // public unless metrics_require_auth (request_gate.cpp)
    {"/health", kGet, true, true},
    {"/ready", kGet, true, true},
    {"/version", kGet, true, true},
};

// Whether pattern `p` reaches route `r`.
bool reaches(const PathPattern& p, const Route& r) {
    const std::string_view route = r.path;
    if (!p.prefix) return find_route(p.path) == &r;
    // "/v1/*" reaches every route under /v1/; "/v1/models/d*" reaches the ids of /v1/models/.
    return route.substr(0, p.path.size()) == p.path || (r.prefix && p.path.rfind(r.path, 0) == 0);
}

}  // namespace

const Route* find_route(const std::string& path) {
    for (const auto& r : kRoutes)
        if (r.prefix ? path.size() > std::strlen(r.path) && path.rfind(r.path, 0) == 0 : path == r.path) return &r;
    return nullptr;
}

std::string method_list(unsigned methods) {
    std::string out;
    for (auto [bit, name] : {std::pair{kGet, "GET"}, std::pair{kPost, "POST"}, std::pair{kDelete, "DELETE"}})
        if (methods & bit) out += (out.empty() ? "" : ", ") + std::string(name);
    return out;
}

unsigned method_bit(const std::string& method) {
    return method == "GET" ? kGet : method == "POST" ? kPost : method == "DELETE" ? kDelete : 0u;
}

void check_allow_paths(const PathAllowlist& paths) {
    for (const auto& p : paths.patterns()) {
        bool any = false;
        for (const auto& r : kRoutes) any = any || reaches(p, r);
        ONECARD_CHECK(any, "serve: --allow-path '{}' reaches none of the routes onecard serves", p.text);
    }
}

}  // namespace onecard::server
