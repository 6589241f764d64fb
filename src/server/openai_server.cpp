// OpenAIServer: routing, access control, error objects, access log and lifecycle. The API handlers
// live in chat_api.cpp, completions_api.cpp and info_api.cpp.
#include "server/openai_server.h"

#include "core/error.h"
#include "server/api_error.h"
#include "server/server_state.h"
#include "server/startup_checks.h"

#include <fmt/format.h>
#include <openssl/ssl.h>

#include <sys/socket.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <limits>
#include <random>
#include <thread>

namespace onecard::server {

AccessLogContext& access_log_context() {
    // One per HTTP thread; reset by the pre-routing handler at the start of every request.
    thread_local AccessLogContext ctx;
    return ctx;
}

std::string OpenAIServer::State::new_response_id(const char* prefix) {
    const uint64_t n = next_serial.fetch_add(1);
    uint64_t x = (n + id_salt) * 0x9E3779B97F4A7C15ull;
    x ^= x >> 31;
    return fmt::format("{}{:016x}{:08x}", prefix, x ^ id_salt, static_cast<uint32_t>(n));
}

void send_error(httplib::Response& res, int status, const std::string& message, const std::string& param,
                const std::string& code, int retry_after_s) {
    send_error(res, ErrorShape::OpenAI, status, message, param, code, retry_after_s);
}

void send_error(httplib::Response& res, ErrorShape shape, int status, const std::string& message,
                const std::string& param, const std::string& code, int retry_after_s) {
    res.status = status;
    if (retry_after_s > 0) res.set_header("Retry-After", std::to_string(retry_after_s));
    res.set_content(error_body(shape, status, message, param, code)
                        .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                    "application/json");
    auto& f = access_log_context().fields;
    f["error"] = message.size() > 200 ? message.substr(0, 200) : message;
}

namespace {

// The methods a route answers, as a bit set (GET and DELETE share /v1/responses/{id}).
enum Method : unsigned { Get = 1u, Post = 2u, Delete = 4u };
struct Route {
    const char* path;
    unsigned methods;
    bool public_route;  // reachable without an API key (liveness/readiness probes, version)
    bool probe;         // polled by monitors: no access-log line unless log_probe_requests
    bool prefix = false;  // matches every path that starts with `path` ("/v1/models/" + id)
    // Anthropic routes answer errors in Anthropic's shape and take the key from x-api-key as well.
    ErrorShape shape = ErrorShape::OpenAI;
};
constexpr Route kRoutes[] = {
    {"/v1/chat/completions", Post, false, false},
    {"/v1/completions", Post, false, false},
    {"/v1/responses", Post, false, false},
    {"/v1/responses/", Get | Delete, false, false, true},
    {"/v1/messages", Post, false, false, false, ErrorShape::Anthropic},
    {"/v1/messages/count_tokens", Post, false, false, false, ErrorShape::Anthropic},
    {"/v1/models", Get, false, false},
    {"/v1/models/", Get, false, false, true},
    {"/tokenize", Post, false, false},
    {"/detokenize", Post, false, false},
    {"/metrics", Get, false, true},  // public unless metrics_require_auth (see pre-routing)
    {"/health", Get, true, true},
    {"/ready", Get, true, true},
    {"/version", Get, true, true},
};

const Route* find_route(const std::string& path) {
    for (const auto& r : kRoutes)
        if (r.prefix ? path.size() > std::strlen(r.path) && path.rfind(r.path, 0) == 0 : path == r.path) return &r;
    return nullptr;
}

// "GET, DELETE": the Allow header of a 405 and the methods a CORS preflight is told.
std::string method_list(unsigned methods) {
    std::string out;
    for (auto [bit, name] : {std::pair{Get, "GET"}, std::pair{Post, "POST"}, std::pair{Delete, "DELETE"}})
        if (methods & bit) out += (out.empty() ? "" : ", ") + std::string(name);
    return out;
}

unsigned method_bit(const std::string& method) {
    return method == "GET" ? Get : method == "POST" ? Post : method == "DELETE" ? Delete : 0u;
}

// --allow-path: a pattern that reaches none of the routes is a typo; refused at startup, naming it.
bool reaches(const PathPattern& p, const Route& r) {
    const std::string_view route = r.path;
    if (!p.prefix) return find_route(p.path) == &r;
    // "/v1/*" reaches every route under /v1/; "/v1/models/d*" reaches the ids of /v1/models/.
    return route.substr(0, p.path.size()) == p.path || (r.prefix && p.path.rfind(r.path, 0) == 0);
}

void check_allow_paths(const PathAllowlist& paths) {
    for (const auto& p : paths.patterns()) {
        bool any = false;
        for (const auto& r : kRoutes) any = any || reaches(p, r);
        ONECARD_CHECK(any, "serve: --allow-path '{}' reaches none of the routes onecard serves", p.text);
    }
}

// POST bodies are JSON: a Content-Type naming another media type is refused (415), with parameters
// (charset) allowed and case ignored, as in HTTP's own rules. No Content-Type is taken as JSON.
bool is_json_content_type(const std::string& value) {
    std::string media = value.substr(0, value.find(';'));
    const size_t b = media.find_first_not_of(" \t");
    const size_t e = media.find_last_not_of(" \t");
    media = b == std::string::npos ? "" : media.substr(b, e - b + 1);
    for (char& c : media) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return media == "application/json";
}

// The Access-Control-Allow-Origin value for a request's Origin under --allowed-origins ("" = none).
std::string cors_origin(const ServerOptions& o, const std::string& origin) {
    if (o.allowed_origins.empty() || origin.empty()) return {};
    for (const auto& a : o.allowed_origins) {
        if (a == "*") return "*";
        if (a == origin) return origin;
    }
    return {};
}

// UTC wall-clock time with milliseconds, ISO 8601 ("2026-11-29T15:32:01.123Z"): requests finish
// many per second, so whole seconds cannot order them.
std::string log_timestamp() {
    const auto now = std::chrono::system_clock::now();
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
    const std::time_t secs = static_cast<std::time_t>(ms / 1000);
    std::tm utc{};
    ::gmtime_r(&secs, &utc);
    return fmt::format("{:04d}-{:02d}-{:02d}T{:02d}:{:02d}:{:02d}.{:03d}Z", utc.tm_year + 1900, utc.tm_mon + 1,
                       utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, static_cast<int>(ms % 1000));
}

// Rejections happen before the body is read: close the connection so an unread body is never parsed
// as the next request.
httplib::Server::HandlerResponse reject(httplib::Response& res, int status, const std::string& message,
                                        const std::string& code, ErrorShape shape = ErrorShape::OpenAI) {
    send_error(res, shape, status, message, {}, code);
    res.set_header("Connection", "close");
    return httplib::Server::HandlerResponse::Handled;
}

// A limit given as -1 reaches us through an unsigned parse as 2^64 - 1, i.e. as no limit at all; every
// limit is refused outside its range instead, with the flag named.
void check_limits(const ServerOptions& o) {
    ONECARD_CHECK(o.max_body_bytes >= 1 && o.max_body_bytes <= kMaxBodyBytesCeiling,
                  "serve: --max-body-bytes must be between 1 and {} (1 GiB), got {}{}", kMaxBodyBytesCeiling,
                  o.max_body_bytes,
                  o.max_body_bytes > (std::numeric_limits<size_t>::max() >> 1) ? " (a negative number?)" : "");
    ONECARD_CHECK(o.http_threads >= 0, "serve: --http-threads must be >= 0 (0 = automatic), got {}", o.http_threads);
    ONECARD_CHECK(o.max_queued_requests >= 0, "serve: --max-queued-requests must be >= 0, got {}",
                  o.max_queued_requests);
    ONECARD_CHECK(o.max_num_seqs >= 1, "serve: --max-num-seqs must be >= 1, got {}", o.max_num_seqs);
}

// httplib leaves OpenSSL's defaults (TLS 1.1 and up, CBC and SHA-1 suites included). Ours: TLS 1.2
// or 1.3, forward-secret key exchange (ECDHE) and AEAD ciphers only (AES-GCM, ChaCha20-Poly1305),
// the server's preference order, no renegotiation. TLS 1.3's suites are all AEAD; they are listed
// anyway so a changed OpenSSL default cannot widen them.
constexpr const char* kTls12Ciphers =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"
    "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";
constexpr const char* kTls13Suites = "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256";

void apply_tls_profile(SSL_CTX* ctx) {
    ONECARD_CHECK(ctx != nullptr, "serve: no TLS context");
    ONECARD_CHECK(SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) == 1, "serve: cannot require TLS 1.2");
    ONECARD_CHECK(SSL_CTX_set_cipher_list(ctx, kTls12Ciphers) == 1, "serve: OpenSSL refused the TLS 1.2 cipher list");
    ONECARD_CHECK(SSL_CTX_set_ciphersuites(ctx, kTls13Suites) == 1, "serve: OpenSSL refused the TLS 1.3 suites");
    SSL_CTX_set_options(ctx, SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_NO_RENEGOTIATION);
}

}  // namespace

OpenAIServer::OpenAIServer(ServerOptions options, Engine& engine, const Tokenizer& tokenizer, ModelInfo info)
    : OpenAIServer(std::move(options), tokenizer, std::move(info)) {
    attach_engine(engine);
}

OpenAIServer::OpenAIServer(ServerOptions options, const Tokenizer& tokenizer, ModelInfo info)
    : state_(std::make_unique<State>(std::move(options), tokenizer, std::move(info))) {
    State& s = *state_;
    s.id_salt = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
    // Cert and key checked one by one first (httplib's own load says neither which file nor why).
    check_tls_files(s.opts.tls_cert, s.opts.tls_key);
    check_limits(s.opts);
    check_allow_paths(s.paths);
    if (!s.opts.tls_cert.empty()) {
        s.tls.reset(SSL_CTX_new(TLS_server_method()));
        ONECARD_CHECK(s.tls != nullptr, "serve: cannot create a TLS context");
        SSL_CTX_set_options(s.tls.get(), SSL_OP_NO_COMPRESSION | SSL_OP_NO_SESSION_RESUMPTION_ON_RENEGOTIATION);
        ONECARD_CHECK(SSL_CTX_use_certificate_chain_file(s.tls.get(), s.opts.tls_cert.c_str()) == 1 &&
                          SSL_CTX_use_PrivateKey_file(s.tls.get(), s.opts.tls_key.c_str(), SSL_FILETYPE_PEM) == 1 &&
                          SSL_CTX_check_private_key(s.tls.get()) == 1,
                      "serve: cannot load the TLS certificate '{}' / key '{}' (PEM expected)", s.opts.tls_cert,
                      s.opts.tls_key);
        apply_tls_profile(s.tls.get());
    }
    RouteServer& http = s.http;
    http.set_payload_max_length(s.opts.max_body_bytes);
    // httplib writes these into its Keep-Alive header; the front end enforces them.
    const auto idle_s = std::chrono::duration_cast<std::chrono::seconds>(s.opts.idle_timeout).count();
    http.set_keep_alive_timeout(std::max<time_t>(1, idle_s));
    http.set_keep_alive_max_count(kKeepAliveMaxRequests);

    FrontOptions fo;
    fo.host = s.opts.host;
    fo.port = s.opts.port;
    fo.limits.max_header_bytes = s.opts.max_header_bytes;
    fo.limits.max_body_bytes = s.opts.max_body_bytes;
    fo.max_buffered_bytes = s.opts.max_buffered_body_bytes;
    fo.idle_timeout = s.opts.idle_timeout;
    fo.header_timeout = s.opts.header_timeout;
    fo.body_timeout = s.opts.body_timeout;
    fo.write_timeout = s.opts.write_timeout;
    fo.n_workers = http_worker_count(s.opts);
    fo.tls = s.tls.get();
    s.front = std::make_unique<HttpFront>(
        fo, [&s](const std::string& addr) { return s.allow.allows(addr); },
        [&s](int status, const std::string& message) {
            // Refused while reading (before routing): counted like httplib's own errors, not access-logged.
            s.metrics.record_http("other", status);
            return error_body(ErrorShape::OpenAI, status, message)
                .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        },
        [&s](httplib::Stream& stream) { return s.http.serve(stream); });

    http.set_pre_routing_handler([&s](const httplib::Request& req, httplib::Response& res) {
        AccessLogContext& ctx = access_log_context();
        ctx.start = std::chrono::steady_clock::now();
        ctx.fields = nlohmann::json::object();
        const Route* route = find_route(req.path);
        const ErrorShape shape = route ? route->shape : ErrorShape::OpenAI;
        // The address allowlist is not here: the front end closes a refused address's connection at
        // accept, before reading a byte (http_front.h).
        // --allow-path: a path outside it is answered exactly as a path onecard has no route for, so
        // a hidden route does not show that it exists; before CORS and the API key.
        if (!s.paths.allows(req.path)) return reject(res, 404, fmt::format("no route for {}", req.path), "not_found");
        const std::string origin = cors_origin(s.opts, req.get_header_value("Origin"));
        if (!origin.empty()) {
            res.set_header("Access-Control-Allow-Origin", origin);
            if (origin != "*") res.set_header("Vary", "Origin");
        }
        // A CORS preflight carries no credentials: answered before the API key is asked for.
        if (req.method == "OPTIONS" && !origin.empty() && route != nullptr &&
            req.has_header("Access-Control-Request-Method")) {
            res.status = 204;
            res.set_header("Access-Control-Allow-Methods", method_list(route->methods) + ", OPTIONS");
            const std::string asked = req.get_header_value("Access-Control-Request-Headers");
            res.set_header("Access-Control-Allow-Headers", asked.empty() ? "Authorization, Content-Type" : asked);
            res.set_header("Access-Control-Max-Age", "600");
            return httplib::Server::HandlerResponse::Handled;
        }
        if (route == nullptr) return reject(res, 404, fmt::format("no route for {}", req.path), "not_found");
        if ((route->methods & method_bit(req.method)) == 0) {
            const std::string want = method_list(route->methods);
            res.set_header("Allow", want);
            return reject(res, 405, fmt::format("{} {} is not allowed; use {}", req.method, req.path, want),
                          "method_not_allowed", shape);
        }
        const bool open = route->public_route || (std::strcmp(route->path, "/metrics") == 0 && !s.opts.metrics_require_auth);
        // The Anthropic clients send the key as x-api-key; Bearer is accepted there too (DeepSeek's
        // and vLLM's Anthropic endpoints take both).
        const bool anthropic = shape == ErrorShape::Anthropic;
        if (!open && s.keys.enabled() && !s.keys.check_bearer(req.get_header_value("Authorization")) &&
            !(anthropic && req.has_header("x-api-key") && s.keys.check_key(req.get_header_value("x-api-key")))) {
            res.set_header("WWW-Authenticate", "Bearer");
            const bool sent = req.has_header("Authorization") || (anthropic && req.has_header("x-api-key"));
            return reject(res, 401,
                          sent        ? "incorrect API key provided"
                          : anthropic ? "missing API key: send 'x-api-key: <key>' or 'Authorization: Bearer <key>'"
                                      : "missing API key: send 'Authorization: Bearer <key>'",
                          "invalid_api_key", shape);
        }
        if (req.method == "POST" && req.has_header("Content-Type") &&
            !is_json_content_type(req.get_header_value("Content-Type")))
            return reject(res, 415,
                          fmt::format("Content-Type '{}' is not supported: send 'Content-Type: application/json'",
                                      req.get_header_value("Content-Type")),
                          "unsupported_media_type", shape);
        // While the model loads only the probes answer (they say so themselves); nothing else has an
        // engine or the final ModelInfo to work with.
        if (!route->probe && s.engine.load(std::memory_order_acquire) == nullptr) {
            res.set_header("Retry-After", "5");
            return reject(res, 503, "the model is still loading", "service_unavailable", shape);
        }
        return httplib::Server::HandlerResponse::Unhandled;
    });

    auto wrap = [&s](void (*fn)(State&, const httplib::Request&, httplib::Response&),
                     ErrorShape shape = ErrorShape::OpenAI) {
        return [&s, fn, shape](const httplib::Request& req, httplib::Response& res) {
            try {
                fn(s, req, res);
            } catch (const ApiError& e) {
                send_error(res, shape, e.status(), e.what(), e.param(), e.code(), e.retry_after_s());
            } catch (const nlohmann::json::exception& e) {
                send_error(res, shape, 400, fmt::format("invalid request: {}", e.what()));
            } catch (const Error& e) {
                // onecard::Error from the tokenizer, chat encoder or engine validation: the input was refused.
                send_error(res, shape, 400, e.what());
            }
        };
    };
    http.Post("/v1/chat/completions", wrap(handle_chat_completions));
    http.Post("/v1/completions", wrap(handle_completions));
    http.Post("/v1/responses", wrap(handle_responses));
    http.Post("/v1/messages", wrap(handle_messages, ErrorShape::Anthropic));
    http.Post("/v1/messages/count_tokens", wrap(handle_messages_count_tokens, ErrorShape::Anthropic));
    http.Post("/tokenize", wrap(handle_tokenize));
    http.Post("/detokenize", wrap(handle_detokenize));
    http.Get("/v1/models", wrap(handle_models));
    http.Get(R"(/v1/models/(.+))", wrap(handle_model));
    http.Get(R"(/v1/responses/(.+))", wrap(handle_response_get));
    http.Delete(R"(/v1/responses/(.+))", wrap(handle_response_delete));
    http.Get("/version", wrap(handle_version));
    // Liveness as vLLM answers it: 200 once the engine is up (and still while draining), 503 before.
    http.Get("/health", [&s](const httplib::Request&, httplib::Response& res) {
        if (s.engine.load(std::memory_order_acquire) != nullptr)
            res.set_content("{}", "application/json");
        else
            send_error(res, 503, "the model is still loading", {}, "service_unavailable", 5);
    });
    http.Get("/ready", [&s](const httplib::Request&, httplib::Response& res) {
        if (s.ready && !s.draining && s.engine.load(std::memory_order_acquire) != nullptr) {
            res.set_content(R"({"status":"ready"})", "application/json");
        } else {
            send_error(res, 503, s.draining ? "shutting down" : "loading", {}, "service_unavailable", 5);
        }
    });
    http.Get("/metrics", [&s](const httplib::Request&, httplib::Response& res) {
        Engine* engine = s.engine.load(std::memory_order_acquire);
        res.set_content(s.metrics.render(engine ? engine->stats() : EngineStats{}, s.inflight.load()),
                        "text/plain; version=0.0.4; charset=utf-8");
    });

    // Whatever httplib answers by itself (413 body too large, 400 unparsable request line, ...) gets
    // an OpenAI error body too; responses that already have one are left alone.
    http.set_error_handler(httplib::Server::HandlerWithResponse([&s](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        std::string msg = fmt::format("HTTP error {}", res.status);
        if (res.status == 413) msg = fmt::format("request body exceeds the limit of {} bytes", s.opts.max_body_bytes);
        const Route* route = find_route(req.path);
        send_error(res, route ? route->shape : ErrorShape::OpenAI, res.status, msg);
        return httplib::Server::HandlerResponse::Handled;
    }));
    http.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "internal error";
        try {
            std::rethrow_exception(ep);
        } catch (const std::exception& e) {
            what = e.what();
        } catch (...) {
        }
        const Route* route = find_route(req.path);
        send_error(res, route ? route->shape : ErrorShape::OpenAI, 500, "internal error: " + what);
    });
    http.set_logger([&s](const httplib::Request& req, const httplib::Response& res) {
        AccessLogContext& ctx = access_log_context();
        const Route* route = find_route(req.path);
        s.metrics.record_http(route ? route->path : "other", res.status);
        if (!s.opts.access_log) return;
        // Monitors poll these every few seconds: their lines would drown the requests' ones.
        if (route && route->probe && !s.opts.log_probe_requests && res.status < 400) return;
        nlohmann::json line = {
            {"ts", log_timestamp()},
            {"remote", req.remote_addr},
            {"method", req.method},
            {"path", route ? route->path : "(other)"},
            {"status", res.status},
            {"duration_ms",
             std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - ctx.start).count()},
            {"bytes_in", req.body.size()}};
        for (auto& [k, v] : ctx.fields.items()) line[k] = v;
        const std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
        std::fwrite(text.data(), 1, text.size(), stderr);
    });
}

OpenAIServer::~OpenAIServer() {
    if (state_->front && state_->front->running()) state_->front->stop();
}

int OpenAIServer::bind() {
    State& s = *state_;
    errno = 0;
    const int port = s.front->bind();
    const int err = errno;
    ONECARD_CHECK(port > 0, "serve: cannot listen on {}:{}: {}", s.opts.host, s.opts.port,
                  err == EADDRINUSE ? "the address is already in use (another server on this port?)"
                  : err != 0        ? std::strerror(err)
                                    : "not a local address?");
    s.bound_port = port;
    return s.bound_port;
}

void OpenAIServer::run() {
    state_->front->run();
}

void OpenAIServer::attach_engine(Engine& engine, int64_t max_model_len) {
    State& s = *state_;
    ONECARD_CHECK(s.engine.load() == nullptr, "server: attach_engine called twice");
    if (max_model_len > 0) s.info.max_model_len = max_model_len;
    s.engine.store(&engine, std::memory_order_release);
}

void OpenAIServer::set_ready(bool ready) {
    state_->ready = ready;
}

int64_t OpenAIServer::n_inflight() const {
    return state_->inflight.load();
}

bool OpenAIServer::is_tls() const {
    return !state_->opts.tls_cert.empty();
}

void OpenAIServer::check_integrity() const {
    State& s = *state_;
    std::lock_guard lk(s.live_mu);
    const int64_t n = s.inflight.load();
    ONECARD_CHECK(n >= 0, "server: in-flight count is negative ({})", n);
    ONECARD_CHECK(static_cast<int64_t>(s.live.size()) <= n,
                  "server: {} live engine streams but only {} admitted requests", s.live.size(), n);
    s.responses.check_integrity();
    if (s.front) s.front->check_integrity();
}

void OpenAIServer::cut_drain() {
    state_->drain_cut = true;
}

int64_t OpenAIServer::shutdown(std::chrono::milliseconds drain) {
    State& s = *state_;
    s.draining = true;
    const auto deadline = std::chrono::steady_clock::now() + drain;
    while (s.inflight.load() > 0 && !s.drain_cut.load() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    int64_t n_cancelled = 0;
    {
        std::lock_guard lk(s.live_mu);
        for (auto& [serial, weak] : s.live)
            if (auto stream = weak.lock()) {
                stream->cancel();
                ++n_cancelled;
            }
    }
    // Cancelled streams end within an engine step; give their handlers a moment to write the end.
    const auto grace = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (s.inflight.load() > 0 && std::chrono::steady_clock::now() < grace)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    // The front end's stop() holds even before run() starts: run() then returns at once.
    s.front->stop();
    return n_cancelled;
}

}  // namespace onecard::server
