// onecard public engine API: submit generation requests, read each request's event stream, cancel.
// No tensors and no CUDA types here. One engine thread owns every piece of KV state; callers talk to it
// only through bounded, thread-safe queues (submission queue in, one event queue per request out).
//
//   Engine engine(config, std::move(runner));
//   auto stream = engine.submit({.prompt_token_ids = ids, .sampling = {.temperature = 0}});
//   while (auto ev = stream->next()) { ... ev->token_ids ... if (ev->finished()) break; }
//
// Back-pressure: submit() blocks while the submission queue is full; a request whose event queue is
// full is paused by the engine (it keeps its KV and is not scheduled) until its reader catches up, so
// one slow reader never stalls the other streams.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace onecard {

class ModelRunner;      // src/engine/model_runner.h: what executes a scheduled batch (CPU model, fake, ...)
class TokenConstraint;  // src/engine/token_constraint.h: which token may come next (a grammar)

using RequestId = uint64_t;

// Added to one token's logit before sampling (OpenAI's logit_bias: -100 bans, +100 forces in practice).
struct LogitBias {
    int32_t token = 0;
    float bias = 0.0f;  // [-100, 100]
};

// The default max_tokens, vLLM's max_tokens=None: no bound of the request's own, so it may generate up
// to the room max_model_len leaves after its prompt (the engine's max_total_tokens, engine/request.h).
// What the OpenAI server sends when a body has no max_tokens is resolve_max_tokens's
// (server/request_params.h): this same room, except /v1/completions' legacy 16.
inline constexpr int64_t kMaxTokensRemainingRoom = std::numeric_limits<int64_t>::max();

struct SamplingParams {
    float temperature = 1.0f;                      // 0 -> greedy (argmax, lowest id on ties)
    int32_t top_k = 0;                             // 0 -> off
    float top_p = 1.0f;                            // 1 -> off
    float min_p = 0.0f;                            // 0 -> off; keeps tokens with p >= min_p * p_max
    float presence_penalty = 0.0f;                 // subtracted once from every token already generated
    float frequency_penalty = 0.0f;                // subtracted per occurrence in the generated tokens
    float repetition_penalty = 1.0f;               // tokens seen in prompt or output: logit/r if > 0 else logit*r
    std::optional<uint64_t> seed;                  // per-request reproducibility; the engine picks one if empty
    int32_t logprobs = -1;                         // -1 -> none; n >= 0 -> sampled token's logprob plus top-n
    int64_t max_tokens = kMaxTokensRemainingRoom;  // output tokens at most (the stop token counts)
    std::vector<int32_t> stop_token_ids;           // finish when generated (not emitted as a token)
    std::vector<std::string> stop;                 // stop strings; need the engine's text decoder
    bool include_stop_str_in_output = false;
    bool ignore_eos = false;
    // EOS and stop_token_ids cannot be sampled before this many output tokens (vLLM's min_tokens:
    // their logits are masked on the host sampler's path); stop strings still end generation.
    int64_t min_tokens = 0;
    // Added to the raw logits before penalties and temperature (vLLM's order); logprobs stay those of
    // the raw distribution. Rows with a bias are sampled on the host (the GPU sampler takes none).
    std::vector<LogitBias> logit_bias;
    // Constrained decoding (vLLM's SamplingParams.structured_outputs): when set, the engine calls it
    // once as it admits the request and masks every sampled token by the constraint it returns (EOS
    // only when the constraint can terminate; such rows are sampled on the host). A factory, not an
    // object, so copies of these params (n > 1 choices) each get their own matcher. A throw fails
    // the request with FinishReason::Error.
    std::function<std::unique_ptr<TokenConstraint>()> make_constraint;
};

struct GenerateRequest {
    std::vector<int32_t> prompt_token_ids;
    SamplingParams sampling;
};

enum class FinishReason { None, Stop, Length, Cancelled, Error };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "cancelled", "error", ""

struct TokenLogprob {
    int32_t token = 0;
    float logprob = 0.0f;
};

// Logprobs of one generated token, from the model's raw distribution (before penalties,
// temperature and truncation, as vLLM reports them by default).
struct TokenLogprobs {
    TokenLogprob sampled;
    std::vector<TokenLogprob> top;  // highest first
};

struct Usage {
    int64_t prompt_tokens = 0;
    int64_t completion_tokens = 0;  // includes a final stop/EOS token
    int64_t cached_tokens = 0;      // prompt tokens served from the prefix cache (at the request's first admission)
    int64_t n_preemptions = 0;      // times the request was preempted and recomputed
};

// When the engine took a request in and when it first scheduled it (steady_clock, vLLM's queued and
// scheduled timestamps; their difference is vllm:request_queue_time_seconds). first_scheduled stays
// empty for a request that never ran (cancelled or refused while waiting); a preemption does not move it.
struct RequestTimes {
    std::chrono::steady_clock::time_point queued;
    std::optional<std::chrono::steady_clock::time_point> first_scheduled;
};

struct EngineEvent {
    RequestId request_id = 0;
    std::vector<int32_t> token_ids;       // tokens generated since the previous event
    std::string text_delta;               // their text (held back while it may start a stop string)
    std::vector<TokenLogprobs> logprobs;  // one per token_ids entry, when requested
    FinishReason finish_reason = FinishReason::None;
    std::optional<int32_t> stop_token;  // the EOS/stop token that finished the request
    std::string stop_string;            // the stop string that finished it
    std::string error;                  // FinishReason::Error
    Usage usage;                        // filled on the final event
    RequestTimes times;                 // filled on the final event

    bool finished() const { return finish_reason != FinishReason::None; }
};

// Incremental detokenizer: push one token, get the text it completes (UTF-8 safe). One per request.
class TextDecoder {
public:
    virtual ~TextDecoder() = default;
    virtual std::string push(int32_t token) = 0;
    virtual std::string flush() = 0;  // whatever is still buffered at the end
};

// Speculative decoding, shaped like vLLM's --speculative-config '{"method": "mtp",
// "num_speculative_tokens": k}'. Off unless method is set and k > 0. The engine refuses a method
// its runner does not support (ModelRunner::supports_speculation).
struct SpeculativeConfig {
    std::string method;                  // "mtp" (the checkpoint's mtp.0 block); "" -> off
    int64_t num_speculative_tokens = 0;  // drafts per decode row and step: the most (adaptive) or exactly (fixed)
    // false (default): the engine chooses each step's draft length from the measured acceptance and
    // step cost, down to none where verification costs more than it yields (engine/spec_policy.h);
    // true: always num_speculative_tokens, as vLLM does.
    bool fixed_draft_length = false;
    int64_t disable_by_batch_size = 0;  // > 0: no drafts while more requests than this are live (vLLM's key)
    // "dspark" only: a draft stops before the first slot whose confidence head gives sigmoid(c) below
    // this (DeepSpec's early stop; the first slot is always kept). 0: every slot the step allows.
    double confidence_threshold = 0.0;
    bool enabled() const { return !method.empty() && num_speculative_tokens > 0; }
};

struct EngineConfig {
    int64_t max_num_batched_tokens = 2048;        // tokens computed per step, all requests together
    int64_t long_prefill_token_threshold = 1024;  // the most one request's prompt may take per step
    // Waiting requests are admitted before running prompts get their next chunk, so a short request
    // is not held behind a long prefill (SchedulerConfig::new_requests_first).
    bool new_requests_first = true;
    int64_t max_num_seqs = 16;           // running requests at most
    int64_t kv_cache_bytes = 1LL << 30;  // memory budget for the KV pool
    int64_t kv_block_size = 128;         // tokens per paged block (multiple of every compress ratio)
    int64_t max_model_len = 0;           // prompt + output limit; 0 -> the runner's maximum
    int32_t eos_token_id = -1;           // -1 -> none
    // Automatic prefix caching (vLLM's --enable-prefix-caching): used only where the runner supports
    // it (the CPU runner in reference numerics, the CUDA runner), else ignored.
    bool enable_prefix_caching = true;
    // Host RAM for per-sequence state snapshots the prefix cache may keep (besides the KV pool);
    // -1: a quarter of kv_cache_bytes.
    int64_t prefix_snapshot_bytes = -1;
    // Host RAM for the host KV tier (vLLM's --kv-offload-bytes idea): cached blocks evicted from the
    // KV pool move there and come back on a hit. 0: off.
    int64_t kv_offload_bytes = 0;
    // The disk tier below the host tier (needs kv_offload_bytes > 0): a directory (empty: off), its
    // byte bound, and what identifies the model whose KV it holds (an entry written for another model,
    // or another runner's byte format, is never read back).
    std::string kv_disk_dir;
    int64_t kv_disk_bytes = 0;
    uint64_t kv_disk_model_id = 0;
    // Speculative decoding (off by default). With it on, prefix caching is off: the runner's
    // boundary snapshots do not carry the draft model's state.
    SpeculativeConfig speculative;
    size_t submit_queue_capacity = 256;
    size_t event_queue_capacity = 64;
    std::function<std::unique_ptr<TextDecoder>()> make_text_decoder;  // empty -> no text, no stop strings
};

struct EngineStats {
    int64_t n_waiting = 0;
    int64_t n_running = 0;
    int64_t n_steps = 0;
    int64_t n_free_kv_blocks = 0;
    int64_t n_total_kv_blocks = 0;
    int64_t n_free_kv_slots = 0;
    int64_t n_preemptions = 0;
    // Prefix caching (vLLM's vllm:prefix_cache_queries / _hits: prompt tokens looked up / found).
    bool prefix_caching = false;  // on in this engine (asked for and supported by the runner)
    int64_t prefix_cache_queries = 0;
    int64_t prefix_cache_hits = 0;
    int64_t prefix_cache_hits_offloaded = 0;  // of the hits: tokens whose KV came from the host/disk tier
    // KV usage per tier: host-tier blocks held / capacity, snapshots held / capacity, disk entries and bytes.
    int64_t n_host_kv_blocks = 0, n_total_host_kv_blocks = 0;
    int64_t n_prefix_snapshots = 0, n_total_prefix_snapshots = 0;
    int64_t n_disk_kv_entries = 0, disk_kv_bytes = 0;
    // What opening the disk tier found: entries reused from an earlier run, and what a crashed or
    // foreign writer left that was removed (torn temp files, other models' or corrupt entries, excess).
    int64_t disk_reused_entries = 0, disk_reused_bytes = 0;
    int64_t disk_removed_torn = 0, disk_removed_foreign = 0, disk_removed_corrupt = 0, disk_removed_excess = 0;
    // Speculative decoding (vLLM's vllm:spec_decode_num_drafts, _num_draft_tokens,
    // _num_accepted_tokens, _num_accepted_tokens_per_pos).
    int64_t spec_num_drafts = 0;
    int64_t spec_num_draft_tokens = 0;
    int64_t spec_num_accepted_tokens = 0;
    std::vector<int64_t> spec_num_accepted_tokens_per_pos;  // [num_speculative_tokens]
    int64_t spec_draft_length = 0;  // drafts per decode row the last step chose (engine/spec_policy.h)
};

class RequestStream;

class Engine {
public:
    // Starts the engine thread. Throws onecard::Error if the KV budget cannot hold max_num_seqs
    // sequences or the config is inconsistent.
    Engine(EngineConfig config, std::unique_ptr<ModelRunner> runner);
    ~Engine();  // cancels whatever is still running and joins the engine thread
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    // Validates the request (throws onecard::Error naming the bad field) and queues it; blocks while
    // the submission queue is full. Thread-safe.
    std::shared_ptr<RequestStream> submit(GenerateRequest request);
    // Cancels a request; its stream ends with FinishReason::Cancelled. Unknown/finished ids are ignored.
    void cancel(RequestId id);
    // Snapshot taken by the engine thread after its last step. Thread-safe.
    EngineStats stats() const;
    // Blocks until the engine has no waiting or running request (for tools and tests).
    void wait_idle() const;

    struct Impl;

private:
    std::unique_ptr<Impl> impl_;
};

// The reading end of one request. Thread-safe; normally one reader.
class RequestStream {
public:
    struct State;
    explicit RequestStream(std::shared_ptr<State> state);
    ~RequestStream();

    RequestId id() const;
    // Blocks for the next event; std::nullopt once the final event has been taken.
    std::optional<EngineEvent> next();
    // Non-blocking: std::nullopt if nothing is ready now.
    std::optional<EngineEvent> try_next();
    // Waits at most `timeout`: std::nullopt if nothing arrived (or the final event was already taken).
    // Lets a server notice a vanished client while a request is still queued or prefilling.
    std::optional<EngineEvent> next_for(std::chrono::milliseconds timeout);
    void cancel();

private:
    std::shared_ptr<State> state_;
};

}  // namespace onecard
