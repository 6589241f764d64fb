// Internal: one admitted generation request as the HTTP side sees it. Admission is bounded (429 when
// max_num_seqs + max_queued_requests are already held, 503 while not ready or draining); the
// destructor cancels the engine request if it has not finished (client gone, handler error), so its KV
// is freed at once, and records the request's metrics exactly once.
#pragma once

#include "server/client_connection.h"
#include "server/server_state.h"

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace onecard::server {

class ActiveRequest {
public:
    // Throws ApiError (503/429 with Retry-After; 400 for what the engine's validation refuses).
    ActiveRequest(OpenAIServer::State& s, GenerateRequest request);
    ~ActiveRequest();
    ActiveRequest(const ActiveRequest&) = delete;
    ActiveRequest& operator=(const ActiveRequest&) = delete;

    // Blocks for the next event; nullopt after the final one. Records TTFT / inter-token latency.
    // With a watched client (watch_client) it looks at the connection every kClientCheckInterval
    // meanwhile and cancels the request once the client is gone (the final event then says Cancelled).
    std::optional<EngineEvent> next();
    // Waits at most `timeout`; nullopt on timeout (check finished() to tell the end from a timeout).
    std::optional<EngineEvent> next_for(std::chrono::milliseconds timeout);
    // The client went away or the handler failed: cancel now (KV freed by the engine thread).
    void cancel();
    // A non-streaming request: next() cancels it when this connection's client hangs up.
    void watch_client(ClientConnection c) { client_ = c; }
    // next() found the watched client gone and cancelled the request.
    bool client_gone() const { return client_gone_; }

    int64_t n_prompt_tokens() const { return n_prompt_; }
    bool finished() const { return finished_; }

private:
    std::optional<EngineEvent> account(EngineEvent ev);  // metrics and finish bookkeeping of one event
    // `times`: the final event's (nullptr when the request ended without one).
    void record_end(const std::string& reason, int64_t prompt, int64_t completion, int64_t cached,
                    const RequestTimes* times);

    OpenAIServer::State& s_;
    std::shared_ptr<RequestStream> stream_;
    uint64_t serial_ = 0;
    int64_t n_prompt_ = 0;
    int64_t n_generated_ = 0;
    bool finished_ = false;
    bool recorded_ = false;
    bool prompt_counted_ = false;
    std::chrono::steady_clock::time_point t_start_, t_last_, t_first_;
    bool got_first_ = false;
    ClientConnection client_;
    bool client_gone_ = false;
};

// Admits one engine request per choice of an API request: `n` choices of each prompt, in order
// (index = prompt * n + choice, as vLLM numbers them). Each is an independent sequence that prefills
// its prompt itself: the choices are admitted together, before the prefix cache (CPU backend) has
// registered the prompt's blocks, so they do not share the prompt's KV yet. A seeded request gives choice j the seed +
// j (vLLM's parallel sampling does the same), so the choices differ and still replay alike. Throws ApiError 400 (param
// `n`) when the choices exceed --max-num-seqs (they could not run together), and whatever admission throws; the
// requests admitted so far are cancelled then.
std::vector<std::shared_ptr<ActiveRequest>> admit_choices(OpenAIServer::State& s,
                                                          const std::vector<std::vector<int32_t>>& prompts,
                                                          const SamplingParams& sampling, int64_t n);

// Reads the events of several requests as they come (the choices of one streamed request), calling
// `on_event(i, event)` for request i's events in order; returns false when it does. Without an event
// from any request for kSsePingInterval it calls `ping` (false: client gone). Returns true once every
// request has ended. `on_event` sees each final event; a request whose stream ended without one
// ends silently (its ActiveRequest reports it).
bool interleave_events(std::vector<std::shared_ptr<ActiveRequest>>& ars,
                       const std::function<bool(size_t, const EngineEvent&)>& on_event,
                       const std::function<bool()>& ping);

// Token logprobs in the two OpenAI layouts.
nlohmann::json chat_logprobs_json(const Tokenizer& tok, const std::vector<int32_t>& ids,
                                  const std::vector<TokenLogprobs>& lps);
// Appends one event's tokens to a completions-style logprobs object {tokens, token_logprobs,
// top_logprobs, text_offset}; `text_offset` is the running character offset.
void append_completion_logprobs(nlohmann::json& out, const Tokenizer& tok, const std::vector<int32_t>& ids,
                                const std::vector<TokenLogprobs>& lps, size_t& text_offset);

// Puts how a generation request ended into its access-log line: a stream the client abandoned, or
// one that failed after its 200 status line went out, is otherwise logged as a plain 200.
void log_finish_reason(const std::string& reason);

// "stop" / "length" / "abort" / "error" for the API (tool calls are decided by the chat handler).
const char* api_finish_reason(FinishReason r);

// Usage object {prompt_tokens, completion_tokens, total_tokens, prompt_tokens_details{cached_tokens}},
// plus completion_tokens_details{reasoning_tokens} when `reasoning_tokens` is given (chat).
nlohmann::json usage_json(const Usage& u, std::optional<int64_t> reasoning_tokens = std::nullopt);

// Counts a chat completion's reasoning tokens as its events pass through the reasoning parser: an
// event's tokens are reasoning when the parser was inside the reasoning as the event began (so the
// token that closes it counts too, as in vLLM's count of the tokens up to </think>).
class ReasoningTokenCount {
public:
    void before_event(bool parser_in_reasoning) { in_ = parser_in_reasoning; }
    void after_event(const EngineEvent& ev) {
        if (in_) n_ += static_cast<int64_t>(ev.token_ids.size());
    }
    int64_t count() const { return n_; }

private:
    bool in_ = false;
    int64_t n_ = 0;
};

}  // namespace onecard::server
