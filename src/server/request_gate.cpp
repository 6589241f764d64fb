#include "server/request_gate.h"

#include "server/route_table.h"
#include "server/server_state.h"

#include <fmt/format.h>

#include <cctype>
#include <cstring>

namespace onecard::server {

namespace {

// The Access-Control-Allow-Origin value for a request's Origin under --allowed-origins ("" = none).
std::string cors_origin(const ServerOptions& o, const std::string& origin) {
    if (o.allowed_origins.empty() || origin.empty()) return {};
    for (const auto& a : o.allowed_origins) {
        if (a == "*") return "*";
        if (a == origin) return origin;
    }
    return {};
}

HeadVerdict refuse(HeadVerdict v, int status, std::string message, std::string code,
                   ErrorShape shape = ErrorShape::OpenAI) {
    v.status = status;
    v.message = std::move(message);
    v.code = std::move(code);
    v.shape = shape;
    return v;
}

bool is_space_or_tab(char c) {
    return c == ' ' || c == '\t';
}

}  // namespace

bool is_json_content_type(const std::string& value) {
    std::string media = value.substr(0, value.find(';'));
    const size_t b = media.find_first_not_of(" \t");
    const size_t e = media.find_last_not_of(" \t");
    media = b == std::string::npos ? "" : media.substr(b, e - b + 1);
    for (char& c : media) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return media == "application/json";
}

HeadVerdict screen_head(const OpenAIServer::State& s, const std::string& method, const std::string& path,
                        const httplib::Headers& headers) {
    auto header = [&](const char* name) {
        return std::string(httplib::detail::get_header_value(headers, name, 0, ""));
    };
    auto has = [&](const char* name) { return headers.find(name) != headers.end(); };
    HeadVerdict v;
    const Route* route = find_route(path);
    const ErrorShape shape = route ? route->shape : ErrorShape::OpenAI;
    // The address allowlist is not here: the front end closes a refused address's connection at
    // accept, before reading a byte (http_front.h).
    // --allow-path: a path outside it is answered exactly as a path onecard has no route for, so a
    // hidden route does not show that it exists; before CORS and the API key.
    if (!s.paths.allows(path)) return refuse(std::move(v), 404, fmt::format("no route for {}", path), "not_found");
    const std::string origin = cors_origin(s.opts, header("Origin"));
    if (!origin.empty()) {
        v.headers.emplace_back("Access-Control-Allow-Origin", origin);
        if (origin != "*") v.headers.emplace_back("Vary", "Origin");
    }
    // A CORS preflight carries no credentials: answered before the API key is asked for.
    if (method == "OPTIONS" && !origin.empty() && route != nullptr && has("Access-Control-Request-Method")) {
        v.status = 204;
        v.headers.emplace_back("Access-Control-Allow-Methods", method_list(route->methods) + ", OPTIONS");
        const std::string asked = header("Access-Control-Request-Headers");
        v.headers.emplace_back("Access-Control-Allow-Headers", asked.empty() ? "Authorization, Content-Type" : asked);
        v.headers.emplace_back("Access-Control-Max-Age", "600");
        return v;
    }
    if (route == nullptr) return refuse(std::move(v), 404, fmt::format("no route for {}", path), "not_found");
    if ((route->methods & method_bit(method)) == 0) {
        const std::string want = method_list(route->methods);
        v.headers.emplace_back("Allow", want);
        return refuse(std::move(v), 405, fmt::format("{} {} is not allowed; use {}", method, path, want),
                      "method_not_allowed", shape);
    }
    const bool open =
        route->public_route || (std::strcmp(route->path, "/metrics") == 0 && !s.opts.metrics_require_auth);
    // The Anthropic clients send the key as x-api-key; Bearer is accepted there too (DeepSeek's and
    // vLLM's Anthropic endpoints take both).
    const bool anthropic = shape == ErrorShape::Anthropic;
    if (!open && s.keys.enabled() && !s.keys.check_bearer(header("Authorization")) &&
        !(anthropic && has("x-api-key") && s.keys.check_key(header("x-api-key")))) {
        v.headers.emplace_back("WWW-Authenticate", "Bearer");
        const bool sent = has("Authorization") || (anthropic && has("x-api-key"));
        return refuse(std::move(v), 401,
                      sent        ? "incorrect API key provided"
                      : anthropic ? "missing API key: send 'x-api-key: <key>' or 'Authorization: Bearer <key>'"
                                  : "missing API key: send 'Authorization: Bearer <key>'",
                      "invalid_api_key", shape);
    }
    // No Content-Type is taken as JSON.
    if (method == "POST" && has("Content-Type") && !is_json_content_type(header("Content-Type")))
        return refuse(std::move(v), 415,
                      fmt::format("Content-Type '{}' is not supported: send 'Content-Type: application/json'",
                                  header("Content-Type")),
                      "unsupported_media_type", shape);
    // While the model loads only the probes answer (they say so themselves); nothing else has an
    // engine or the final ModelInfo to work with.
    if (!route->probe && s.engine.load(std::memory_order_acquire) == nullptr) {
        v.headers.emplace_back("Retry-After", "5");
        return refuse(std::move(v), 503, "the model is still loading", "service_unavailable", shape);
    }
    return v;
}

std::string request_path_of(const std::string& target) {
    const std::string t = target.substr(0, target.find('#'));
    std::string path;
    bool first = true;
    httplib::detail::split(t.data(), t.data() + t.size(), '?', [&](const char* b, const char* e) {
        if (first) path = httplib::detail::decode_url(std::string(b, e), false);
        first = false;
    });
    return path;
}

httplib::Headers request_headers_of(const std::vector<std::pair<std::string, std::string>>& fields) {
    httplib::Headers out;
    for (const auto& [name, value] : fields) {
        size_t b = 0, e = value.size();
        while (b < e && is_space_or_tab(value[b])) ++b;
        while (e > b && is_space_or_tab(value[e - 1])) --e;
        if (b == e) continue;  // httplib drops a header without a value
        out.emplace(name, httplib::detail::decode_url(value.substr(b, e - b), false));
    }
    return out;
}

}  // namespace onecard::server
