// Prometheus metrics as vLLM names them: what a vLLM dashboard reads (vllm:num_requests_running,
// vllm:prompt_tokens_total, vllm:time_to_first_token_seconds, ...) under the `vllm:` prefix with
// vLLM's `model_name` label and bucket edges; what only onecard has (HTTP responses by route, KV
// blocks and slots, engine steps, NaN/Inf stops) under `onecard:`. Thread-safe: HTTP threads record,
// /metrics renders. Gauges that live in the engine (running, waiting, KV) are passed in at render time.
//
// Token counters move as tokens are produced (each engine event), not when a request finishes, so a
// rate() over a long generation is smooth. Request phases as vLLM splits them, from the engine's
// timestamps on the final event (onecard/engine.h RequestTimes): queue = taken in -> first scheduled,
// prefill = first scheduled -> first token, decode = first -> last token, inference = first scheduled
// -> last token.
#pragma once

#include "onecard/engine.h"

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace onecard::server {

// A cumulative histogram with fixed upper bounds.
class Histogram {
public:
    explicit Histogram(std::vector<double> bounds);
    void observe(double v);
    // Appends `# HELP`, `# TYPE` and the _bucket/_sum/_count lines; `labels` is "k=\"v\"" text (may be empty).
    void render(std::string& out, const std::string& name, const std::string& help, const std::string& labels) const;
    uint64_t count() const;

private:
    std::vector<double> bounds_;
    mutable std::mutex mu_;
    std::vector<uint64_t> counts_;  // per bucket, not cumulative; last = +Inf
    double sum_ = 0;
    uint64_t n_ = 0;
};

// vLLM's build_1_2_5_buckets: 1, 2, 5, 10, 20, 50, ... up to `max_value` (token-count histograms).
std::vector<double> buckets_1_2_5(int64_t max_value);

// How one generation request went, for its request-level histograms.
struct RequestTiming {
    double e2e_s = 0;
    double prefill_s = -1;  // first scheduled -> first token; < 0 when no token came
    double decode_s = 0;    // first token -> last token
    double queue_s = -1;    // taken in by the engine -> first scheduled; < 0 when never scheduled
};

class ServerMetrics {
public:
    // `max_model_len` sets the top bucket of the per-request token histograms.
    explicit ServerMetrics(std::string model_name, int64_t max_model_len = 8192);

    // One HTTP response, by route and status ("/v1/chat/completions", 200).
    void record_http(const std::string& route, int status);
    // Tokens as the engine produces them: a request's prompt once its prefill is done, generated
    // tokens with every event.
    void record_prompt_tokens(int64_t n);
    void record_generation_tokens(int64_t n);
    // One generation request that ended (finish_reason "stop" / "length" / "abort" / "error").
    void record_finished(const std::string& finish_reason, int64_t prompt_tokens, int64_t generation_tokens,
                         int64_t cached_tokens, const RequestTiming& timing);
    // One generation request the engine stopped because the model gave it NaN/Inf logits.
    void record_nonfinite_logits();
    void record_ttft(double s) { ttft_.observe(s); }
    void record_inter_token(double s) { itl_.observe(s); }

    // The whole exposition text (Prometheus text format 0.0.4).
    std::string render(const EngineStats& engine, int64_t n_http_inflight) const;

private:
    std::string model_name_;
    std::string labels_;  // model_name="..."
    mutable std::mutex mu_;
    std::map<std::pair<std::string, int>, uint64_t> http_;  // (route, status) -> count
    std::map<std::string, uint64_t> finished_;              // finish reason -> count
    uint64_t prompt_tokens_ = 0, generation_tokens_ = 0, cached_tokens_ = 0;
    uint64_t nonfinite_logits_ = 0;
    Histogram ttft_, itl_, tpot_, e2e_, queue_, prefill_, decode_, inference_, req_prompt_, req_gen_;
};

// Escapes a Prometheus label value (backslash, quote, newline).
std::string prom_escape(const std::string& s);

}  // namespace onecard::server
