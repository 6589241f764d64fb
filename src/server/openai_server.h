// The OpenAI-compatible HTTP server: /v1/chat/completions, /v1/completions, /v1/responses (and GET /
// DELETE /v1/responses/{id}), the Anthropic /v1/messages[/count_tokens], /v1/models[/{id}], /tokenize,
// /detokenize, /health, /ready, /metrics, /version, over one Engine (one engine thread) and a pool of HTTP
// threads. Every connection passes the CIDR allowlist at accept (a refused address is closed before a
// byte is read); every request is read under limits and deadlines by the event-driven front end
// (http_front.h: 431 / 414 / 413 at once, 408 past a deadline), and on its head alone, before
// "100 Continue" and before its body is read, passes (request_gate.h), in order: --allow-path (404,
// as for a path with no route), the route table (404/405), the API key (401; /health, /ready,
// /version and, unless metrics_require_auth, /metrics are open), the JSON Content-Type of POST bodies
// (415); then its body is read and its handler runs; admission is bounded (429 when the queue is
// full, 503 while starting or draining, both with Retry-After).
//
//   OpenAIServer server(options, tokenizer, model_info);   // no engine yet: "loading"
//   int port = server.bind();      // port 0 -> an ephemeral port; fails at once when the port is taken
//   std::thread t([&] { server.run(); });
//   ... load the model, build the Engine ...
//   server.attach_engine(engine, max_model_len);
//   server.set_ready(true);
//   ... server.shutdown(std::chrono::seconds(30));  t.join();
//
// While loading (no engine attached) the port already answers: /health and /ready give 503 (vLLM's
// /health is 200 only once its engine is up), /version and /metrics answer, every other route gives
// 503 "the model is still loading" with Retry-After.
#pragma once

#include "onecard/engine.h"
#include "server/generation_config.h"
#include "tokenizer/chat_encoding.h"
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace onecard::server {

// Requests one keep-alive connection may carry before the server closes it (httplib's default is 5).
inline constexpr size_t kKeepAliveMaxRequests = 100000;

// Largest --max-body-bytes accepted (bodies being read are held in memory; all of them together are
// bounded by ServerOptions::max_buffered_body_bytes).
inline constexpr size_t kMaxBodyBytesCeiling = size_t{1} << 30;

// --max-header-bytes range: the request line and headers of an ordinary request fit the floor; the
// ceiling bounds what one connection may make the server hold before its body.
inline constexpr size_t kMinHeaderBytes = 1024;
inline constexpr size_t kMaxHeaderBytesCeiling = size_t{1} << 20;

struct ServerOptions {
    std::string host = "127.0.0.1";
    int port = 8000;                                     // 0 -> ephemeral
    std::vector<std::string> api_keys;                   // empty -> no authentication
    std::vector<std::string> allow_cidrs;                // empty -> every address
    std::vector<std::string> allow_paths;                // --allow-path patterns ("/v1/*"); empty -> every route
    std::string tls_cert, tls_key;                       // both set -> HTTPS
    size_t max_body_bytes = 16u << 20;                   // larger bodies get 413, as soon as the size is known
    size_t max_header_bytes = 64u << 10;                 // request line + headers; larger get 431 (http_front.h)
    size_t max_buffered_body_bytes = size_t{512} << 20;  // bodies being uploaded, all together; past it 503
    // Per-connection deadlines (http_front.h), each > 0: a TLS handshake from accept, no request begun
    // (after accept or the handshake, between keep-alive requests), a request's first byte to the end
    // of its headers, then to the end of its body, and each write of a response.
    std::chrono::milliseconds handshake_timeout{10000};
    std::chrono::milliseconds idle_timeout{5000};
    std::chrono::milliseconds header_timeout{10000};
    std::chrono::milliseconds body_timeout{30000};
    std::chrono::milliseconds write_timeout{30000};
    int http_threads = 0;                      // requests served at once; 0 -> http_worker_count()
    int64_t max_num_seqs = 16;                 // the engine's, for sizing the thread pool
    int64_t max_queued_requests = 256;         // generation requests beyond max_num_seqs before 429
    bool log_requests_text = false;            // access log includes prompt and completion text
    bool access_log = true;                    // one JSON line per request on stderr
    bool log_probe_requests = false;           // access-log /health, /ready, /metrics and /version too
    bool metrics_require_auth = false;         // /metrics behind the API key (default: open, like /health)
    std::vector<std::string> allowed_origins;  // CORS: origins allowed ("*" = any); empty -> no CORS headers
    std::optional<uint64_t> seed;              // vLLM's --seed: seeds requests that bring no seed
    SamplingDefaults sampling_defaults;        // the model's generation_config.json (--generation-config)
    // tool_choice "auto": hold every tool's arguments to its schema when the grammar can (as if each
    // were strict: true), not only the strict ones (--strict-tools-all).
    bool strict_tools_all = false;
};

// Worker threads that serve complete requests (http_front.h): --http-threads, or by default one for
// every generation request admission lets in (max_num_seqs running + max_queued_requests queued, a
// stream holds its worker to the end) plus 16, so that with every admitted request holding one, probes
// still answer at once and the next generation request gets its 429 at once. Idle and slow connections
// need none.
inline size_t http_worker_count(const ServerOptions& o) {
    return o.http_threads > 0 ? static_cast<size_t>(o.http_threads)
                              : static_cast<size_t>(std::max<int64_t>(0, o.max_num_seqs + o.max_queued_requests)) + 16;
}

// What the server tells clients about the model it serves.
struct ModelInfo {
    std::string served_model_name;           // "id" in /v1/models and responses; requests may name it (or omit "model")
    std::vector<std::string> model_aliases;  // further names (vLLM's --served-model-name a b): listed, accepted
    std::string root;                        // checkpoint path
    int64_t max_model_len = 0;               // prompt + output tokens
    int32_t eos_token_id = 1;
    ChatVariant chat_variant = ChatVariant::V4;
};

class OpenAIServer {
public:
    // `engine` and `tokenizer` must outlive the server. Throws onecard::Error for bad options (CIDR
    // text, an --allow-path pattern that reaches no route, unreadable TLS files, a limit outside its range:
    // max_body_bytes not in [1, 1 GiB], max_header_bytes not in [1 KiB, 1 MiB], max_buffered_body_bytes
    // below max_body_bytes, a deadline of 0 or less, negative http_threads or max_queued_requests,
    // max_num_seqs < 1).
    OpenAIServer(ServerOptions options, Engine& engine, const Tokenizer& tokenizer, ModelInfo info);
    // A server that starts "loading": bind() and run() work, generation waits for attach_engine().
    OpenAIServer(ServerOptions options, const Tokenizer& tokenizer, ModelInfo info);
    ~OpenAIServer();
    OpenAIServer(const OpenAIServer&) = delete;
    OpenAIServer& operator=(const OpenAIServer&) = delete;

    // Binds the listening socket; returns the port. Throws onecard::Error when it cannot bind.
    int bind();
    // Serves until shutdown()/stop(); call from one thread after bind().
    void run();
    // The engine the server runs on, once the model is loaded; `max_model_len` > 0 replaces
    // ModelInfo::max_model_len (what the loaded engine really holds). Call once, before set_ready(true),
    // from any thread; `engine` must outlive the server. /health answers 200 from here on.
    void attach_engine(Engine& engine, int64_t max_model_len = 0);
    // Readiness: /ready answers 200 and generation requests are admitted only while ready.
    void set_ready(bool ready);
    // Graceful: new generation requests get 503, in-flight ones may finish for up to `drain`, the
    // rest are cancelled; then the listener stops and run() returns. Returns the number cancelled.
    int64_t shutdown(std::chrono::milliseconds drain);
    // Ends the drain of a shutdown() now (the operator's second SIGTERM/SIGINT): what is still in
    // flight is cancelled at once, as at the deadline, so streams end with finish_reason "abort" and
    // [DONE]. Callable from any thread, before or during shutdown().
    void cut_drain();
    // Generation requests the HTTP side holds now (queued, running or streaming).
    int64_t n_inflight() const;
    bool is_tls() const;
    // Throws onecard::Error when the admission bookkeeping is inconsistent (negative in-flight count,
    // more live engine streams than admitted requests).
    void check_integrity() const;

    struct State;

private:
    std::unique_ptr<State> state_;
};

}  // namespace onecard::server
