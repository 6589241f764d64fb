// OpenAIServer: routing, error objects, the access log's hooks and lifecycle. The API handlers live in
// chat_api.cpp, completions_api.cpp and info_api.cpp; the checks on a request's head in request_gate.cpp.
#include "server/openai_server.h"

#include "core/error.h"
#include "server/access_log.h"
#include "server/api_error.h"
#include "server/request_gate.h"
#include "server/route_table.h"
#include "server/server_state.h"
#include "server/startup_checks.h"

#include <fmt/format.h>
#include <openssl/ssl.h>

#include <sys/socket.h>

#include <cerrno>
#include <cstring>
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
    res.set_content(
        error_body(shape, status, message, param, code).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
        "application/json");
    auto& f = access_log_context().fields;
    f["error"] = message.size() > 200 ? message.substr(0, 200) : message;
}

namespace {

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
    ONECARD_CHECK(o.max_header_bytes >= kMinHeaderBytes && o.max_header_bytes <= kMaxHeaderBytesCeiling,
                  "serve: --max-header-bytes must be between {} and {} (1 MiB), got {}", kMinHeaderBytes,
                  kMaxHeaderBytesCeiling, o.max_header_bytes);
    ONECARD_CHECK(o.max_buffered_body_bytes >= o.max_body_bytes,
                  "serve: --max-buffered-body-bytes ({}) must be at least --max-body-bytes ({}): a body of the "
                  "largest size allowed could never be read",
                  o.max_buffered_body_bytes, o.max_body_bytes);
    const std::pair<const char*, std::chrono::milliseconds> deadlines[] = {
        {"--tls-handshake-timeout", o.handshake_timeout},
        {"--keep-alive-timeout", o.idle_timeout},
        {"--header-timeout", o.header_timeout},
        {"--body-timeout", o.body_timeout},
        {"--write-timeout", o.write_timeout}};
    for (const auto& [flag, d] : deadlines)
        ONECARD_CHECK(d.count() > 0, "serve: {} must be more than 0 seconds, got {} ms", flag, d.count());
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
    fo.handshake_timeout = s.opts.handshake_timeout;
    fo.idle_timeout = s.opts.idle_timeout;
    fo.header_timeout = s.opts.header_timeout;
    fo.body_timeout = s.opts.body_timeout;
    fo.write_timeout = s.opts.write_timeout;
    fo.n_workers = http_worker_count(s.opts);
    fo.tls = s.tls.get();
    FrontHooks hooks;
    hooks.admit = [&s](const std::string& addr) { return s.allow.allows(addr); };
    // The head's verdict, as pre-routing below will give it: a refusal is answered by the front end
    // before the body is read (and logged here, as the router would have).
    hooks.screen = [&s](const RequestHead& head) {
        const std::string path = request_path_of(head.target);
        const HeadVerdict v = screen_head(s, head.method, path, request_headers_of(head.fields));
        FrontAnswer a;
        if (!v.refused()) return a;
        a.status = v.status;
        a.headers = v.headers;
        a.body = error_body(v.shape, v.status, v.message, {}, v.code)
                     .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        const Route* route = find_route(path);
        s.metrics.record_http(route ? route->path : "other", v.status);
        if (s.opts.access_log) {
            nlohmann::json line = access_line(head.remote_addr, head.method, path, v.status, head.started, 0);
            line["reason"] = v.code;  // not the message: it may quote the path or a header
            write_access_line(line);
        }
        return a;
    };
    // Refused while reading (limits, malformed, deadlines): before routing, so the route may be unknown.
    hooks.refused = [&s](const FrontRefusal& r) {
        const std::string path = request_path_of(r.target);
        const Route* route = find_route(path);
        s.metrics.record_http(route ? route->path : "other", r.status);
        if (s.opts.access_log) {
            nlohmann::json line = access_line(r.remote_addr, r.method, path, r.status, r.started, r.bytes_in);
            line["reason"] = r.reason;
            write_access_line(line);
        }
        FrontAnswer a;
        if (r.answered)
            a.body = error_body(ErrorShape::OpenAI, r.status, r.message)
                         .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        return a;
    };
    hooks.serve = [&s](httplib::Stream& stream) { return s.http.serve(stream); };
    s.front = std::make_unique<HttpFront>(fo, std::move(hooks));

    // Rejections happen before the body is read (the front end answered those already; these are the
    // same rules on the same head): the connection closes so an unread body is never parsed as the next
    // request.
    http.set_pre_routing_handler([&s](const httplib::Request& req, httplib::Response& res) {
        AccessLogContext& ctx = access_log_context();
        ctx.start = std::chrono::steady_clock::now();
        ctx.fields = nlohmann::json::object();
        const HeadVerdict v = screen_head(s, req.method, req.path, req.headers);
        for (const auto& [name, value] : v.headers) res.set_header(name, value);
        if (v.status == 0) return httplib::Server::HandlerResponse::Unhandled;
        if (v.refused()) {
            send_error(res, v.shape, v.status, v.message, {}, v.code);
            res.set_header("Connection", "close");
        } else {
            res.status = v.status;  // a CORS preflight's 204
        }
        return httplib::Server::HandlerResponse::Handled;
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
    http.set_error_handler(
        httplib::Server::HandlerWithResponse([&s](const httplib::Request& req, httplib::Response& res) {
            if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
            std::string msg = fmt::format("HTTP error {}", res.status);
            if (res.status == 413)
                msg = fmt::format("request body exceeds the limit of {} bytes", s.opts.max_body_bytes);
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
        nlohmann::json line =
            access_line(req.remote_addr, req.method, req.path, res.status, ctx.start, req.body.size());
        for (auto& [k, v] : ctx.fields.items()) line[k] = v;
        write_access_line(line);
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
