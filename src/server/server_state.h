// Internal: what every handler of OpenAIServer shares. Not part of the module's API.
#pragma once

#include "grammar/grammar_cache.h"
#include "server/access_control.h"
#include "server/api_error.h"
#include "server/http_front.h"
#include "server/metrics.h"
#include "server/openai_server.h"
#include "server/request_params.h"
#include "server/response_store.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace onecard {
class TriggerTokens;  // engine/triggered_constraint.h
}

namespace onecard::server {

// httplib's router and route handlers, over requests the front end (http_front.h) has read whole and
// checked: process_request() (protected in httplib::Server) parses one request from the stream, runs
// pre-routing, the route and the logger, and writes the response. httplib's own listener is never used.
class RouteServer : public httplib::Server {
public:
    // httplib ends a streamed (content-provider) response as soon as its listening socket is
    // INVALID_SOCKET, its sign of shutting down; this server has no listener of its own, so the socket
    // is set to a value that is no descriptor (never closed or polled: httplib only does that from
    // listen() and stop(), which are not used).
    RouteServer() { svr_sock_ = std::numeric_limits<socket_t>::max(); }
    // Returns false when the connection must end (a failed write, or the client asked for a close).
    bool serve(httplib::Stream& stream) {
        bool closed = false;
        return process_request(stream, false, closed, nullptr) && !closed;
    }
};

struct SslCtxFree {
    void operator()(SSL_CTX* ctx) const { SSL_CTX_free(ctx); }
};

struct OpenAIServer::State {
    State(ServerOptions o, const Tokenizer& t, ModelInfo i)
        : opts(std::move(o)),
          tokenizer(t),
          info(std::move(i)),
          allow(opts.allow_cidrs),
          paths(opts.allow_paths),
          keys(opts.api_keys),
          metrics(info.served_model_name, info.max_model_len > 0 ? info.max_model_len : 8192) {}

    ServerOptions opts;
    // Null while the model loads. Set once (attach_engine) after `info` is final: a handler that saw
    // it non-null (acquire) reads the final `info`.
    std::atomic<Engine*> engine{nullptr};
    const Tokenizer& tokenizer;
    ModelInfo info;
    CidrAllowlist allow;
    PathAllowlist paths;
    ApiKeys keys;
    ServerMetrics metrics;
    RouteServer http;                          // routes; runs on the front end's worker threads
    std::unique_ptr<SSL_CTX, SslCtxFree> tls;  // set -> HTTPS
    std::unique_ptr<HttpFront> front;          // accept, TLS, reading, keep-alive (http_front.h)
    int bound_port = -1;

    std::atomic<bool> ready{false};
    std::atomic<bool> draining{false};
    std::atomic<bool> drain_cut{false};  // cut_drain(): shutdown() stops waiting for in-flight requests
    std::atomic<int64_t> inflight{0};    // admitted generation requests not yet released
    std::atomic<uint64_t> next_serial{1};
    std::atomic<uint64_t> seed_serial{0};  // requests given a seed derived from --seed
    uint64_t id_salt = 0;                  // random per process: response ids are not guessable sequences

    // Finished /v1/responses for previous_response_id (bounded LRU, response_store.h).
    ResponseStore responses;

    // Structured output (structured_output.h): compiled grammars over the tokenizer's vocabulary
    // tries, built on first use (a trie of 129,280 tokens is not worth building for a server that
    // never sees a response_format). json: the BPE tokens only; dsml: plus the ｜DSML｜ marker.
    std::once_flag grammars_once;
    std::unique_ptr<grammar::GrammarCache> json_grammars, dsml_grammars;
    std::shared_ptr<const TriggerTokens> dsml_trigger;  // "<｜DSML｜" over the dsml trie (strict tools, "auto")

    // Live engine streams, so shutdown can cancel what did not drain in time.
    std::mutex live_mu;
    std::map<uint64_t, std::weak_ptr<RequestStream>> live;

    std::string new_response_id(const char* prefix);
};

// Per-request context for the access log; lives on the HTTP thread that serves the request (httplib
// runs pre-routing, handler, content provider and logger on one thread).
struct AccessLogContext {
    std::chrono::steady_clock::time_point start;
    nlohmann::json fields = nlohmann::json::object();
};
AccessLogContext& access_log_context();

// Writes an OpenAI error object as the response.
void send_error(httplib::Response& res, int status, const std::string& message, const std::string& param = {},
                const std::string& code = {}, int retry_after_s = 0);
// Writes the error in the given shape (the Anthropic routes answer with Anthropic's error object).
void send_error(httplib::Response& res, ErrorShape shape, int status, const std::string& message,
                const std::string& param = {}, const std::string& code = {}, int retry_after_s = 0);

// 404 model_not_found when the body's "model" names another model (absent "model" is accepted).
void check_model_field(const OpenAIServer::State& s, const Json& body);

// Route handlers (chat_api.cpp, completions_api.cpp, info_api.cpp).
void handle_chat_completions(OpenAIServer::State& s, const httplib::Request& req, httplib::Response& res);
void handle_completions(OpenAIServer::State& s, const httplib::Request& req, httplib::Response& res);
// responses_api.cpp (OpenAI Responses), messages_api.cpp (Anthropic Messages).
void handle_responses(OpenAIServer::State& s, const httplib::Request& req, httplib::Response& res);
void handle_messages(OpenAIServer::State& s, const httplib::Request& req, httplib::Response& res);
void handle_messages_count_tokens(OpenAIServer::State& s, const httplib::Request& req, httplib::Response& res);
void handle_models(OpenAIServer::State& s, const httplib::Request& req, httplib::Response& res);
void handle_tokenize(OpenAIServer::State& s, const httplib::Request& req, httplib::Response& res);
void handle_detokenize(OpenAIServer::State& s, const httplib::Request& req, httplib::Response& res);
void handle_model(OpenAIServer::State& s, const httplib::Request& req, httplib::Response& res);  // /v1/models/{id}
// GET and DELETE /v1/responses/{id} (responses_api.cpp).
void handle_response_get(OpenAIServer::State& s, const httplib::Request& req, httplib::Response& res);
void handle_response_delete(OpenAIServer::State& s, const httplib::Request& req, httplib::Response& res);
void handle_version(OpenAIServer::State& s, const httplib::Request& req, httplib::Response& res);

}  // namespace onecard::server
