// Prometheus metrics with the names a vLLM dashboard uses, under the `onecard:` prefix
// (vllm:num_requests_running -> onecard:num_requests_running, ...). Thread-safe: HTTP threads record,
// /metrics renders. Gauges that live in the engine (running, waiting, KV) are passed in at render time.
#pragma once

#include "onecard/engine.h"

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace onecard::server {

// A cumulative histogram with fixed upper bounds (seconds).
class Histogram {
public:
    explicit Histogram(std::vector<double> bounds);
    void observe(double v);
    // Appends `# TYPE` and the _bucket/_sum/_count lines; `labels` is "k=\"v\"" text (may be empty).
    void render(std::string& out, const std::string& name, const std::string& help, const std::string& labels) const;
    uint64_t count() const;

private:
    std::vector<double> bounds_;
    mutable std::mutex mu_;
    std::vector<uint64_t> counts_;  // per bucket, not cumulative; last = +Inf
    double sum_ = 0;
    uint64_t n_ = 0;
};

class ServerMetrics {
public:
    explicit ServerMetrics(std::string model_name);

    // One HTTP response, by route and status ("/v1/chat/completions", 200).
    void record_http(const std::string& route, int status);
    // One generation request that ended (finish_reason "stop" / "length" / "abort" / "error").
    void record_finished(const std::string& finish_reason, int64_t prompt_tokens, int64_t generation_tokens,
                         int64_t cached_tokens, double e2e_s);
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
    Histogram ttft_, itl_, e2e_;
};

// Escapes a Prometheus label value (backslash, quote, newline).
std::string prom_escape(const std::string& s);

}  // namespace onecard::server
