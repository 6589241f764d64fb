#include "server/metrics.h"

#include <fmt/format.h>

namespace onecard::server {

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
    size_t i = 0;
    while (i < bounds_.size() && v > bounds_[i]) ++i;
    std::lock_guard lk(mu_);
    ++counts_[i];
    sum_ += v;
    ++n_;
}

uint64_t Histogram::count() const {
    std::lock_guard lk(mu_);
    return n_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help,
                       const std::string& labels) const {
    std::lock_guard lk(mu_);
    out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
    const std::string sep = labels.empty() ? "" : ",";
    uint64_t cum = 0;
    for (size_t i = 0; i < bounds_.size(); ++i) {
        cum += counts_[i];
        out += fmt::format("{}_bucket{{{}{}le=\"{}\"}} {}\n", name, labels, sep, bounds_[i], cum);
    }
    cum += counts_.back();
    out += fmt::format("{}_bucket{{{}{}le=\"+Inf\"}} {}\n", name, labels, sep, cum);
    out += fmt::format("{}_sum{{{}}} {}\n{}_count{{{}}} {}\n", name, labels, sum_, name, labels, n_);
}

std::string prom_escape(const std::string& s) {
    std::string o;
    for (char c : s) {
        if (c == '\\')
            o += "\\\\";
        else if (c == '"')
            o += "\\\"";
        else if (c == '\n')
            o += "\\n";
        else
            o += c;
    }
    return o;
}

namespace {
// vLLM's bucket edges (seconds), so dashboards built for it read ours unchanged.
std::vector<double> ttft_buckets() {
    return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
            1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}
std::vector<double> itl_buckets() {
    return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
}
std::vector<double> e2e_buckets() {
    return {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
            30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}
}  // namespace

ServerMetrics::ServerMetrics(std::string model_name)
    : model_name_(std::move(model_name)),
      labels_("model_name=\"" + prom_escape(model_name_) + "\""),
      ttft_(ttft_buckets()),
      itl_(itl_buckets()),
      e2e_(e2e_buckets()) {}

void ServerMetrics::record_http(const std::string& route, int status) {
    std::lock_guard lk(mu_);
    ++http_[{route, status}];
}

void ServerMetrics::record_finished(const std::string& finish_reason, int64_t prompt_tokens, int64_t generation_tokens,
                                    int64_t cached_tokens, double e2e_s) {
    {
        std::lock_guard lk(mu_);
        ++finished_[finish_reason];
        prompt_tokens_ += static_cast<uint64_t>(prompt_tokens);
        generation_tokens_ += static_cast<uint64_t>(generation_tokens);
        cached_tokens_ += static_cast<uint64_t>(cached_tokens);
    }
    e2e_.observe(e2e_s);
}

void ServerMetrics::record_nonfinite_logits() {
    std::lock_guard lk(mu_);
    ++nonfinite_logits_;
}

std::string ServerMetrics::render(const EngineStats& es, int64_t n_http_inflight) const {
    std::string o;
    const std::string& L = labels_;
    auto gauge = [&](const char* name, const char* help, double v) {
        o += fmt::format("# HELP onecard:{} {}\n# TYPE onecard:{} gauge\nonecard:{}{{{}}} {}\n", name, help, name, name,
                         L, v);
    };
    gauge("num_requests_running", "Requests in the running batch.", static_cast<double>(es.n_running));
    gauge("num_requests_waiting", "Requests waiting to be scheduled.", static_cast<double>(es.n_waiting));
    const double usage = es.n_total_kv_blocks > 0 ? 1.0 - static_cast<double>(es.n_free_kv_blocks) /
                                                              static_cast<double>(es.n_total_kv_blocks)
                                                  : 0.0;
    gauge("kv_cache_usage_perc", "KV-cache block usage, 1 = full.", usage);
    gauge("kv_cache_free_blocks", "Free KV-cache blocks.", static_cast<double>(es.n_free_kv_blocks));
    gauge("kv_cache_total_blocks", "KV-cache blocks in the pool.", static_cast<double>(es.n_total_kv_blocks));
    gauge("kv_cache_free_slots", "Free per-sequence KV slots.", static_cast<double>(es.n_free_kv_slots));
    gauge("num_http_requests_inflight", "Generation requests the HTTP side holds (queued or running).",
          static_cast<double>(n_http_inflight));
    auto counter = [&](const char* name, const char* help, double v) {
        o += fmt::format("# HELP onecard:{} {}\n# TYPE onecard:{} counter\nonecard:{}{{{}}} {}\n", name, help, name,
                         name, L, v);
    };
    counter("num_preemptions_total", "Preemptions (recompute) so far.", static_cast<double>(es.n_preemptions));
    counter("engine_steps_total", "Engine steps so far.", static_cast<double>(es.n_steps));
    {
        std::lock_guard lk(mu_);
        counter("prompt_tokens_total", "Prefill tokens processed.", static_cast<double>(prompt_tokens_));
        counter("generation_tokens_total", "Generation tokens processed.", static_cast<double>(generation_tokens_));
        counter("prompt_tokens_cached_total", "Prompt tokens served from the prefix cache.",
                static_cast<double>(cached_tokens_));
        counter("nonfinite_logits_total", "Requests stopped because the model gave them NaN or Inf logits.",
                static_cast<double>(nonfinite_logits_));
        o += "# HELP onecard:request_success_total Finished generation requests by finish reason.\n"
             "# TYPE onecard:request_success_total counter\n";
        for (const char* r : {"stop", "length", "abort", "error"}) {
            auto it = finished_.find(r);
            o += fmt::format("onecard:request_success_total{{{},finished_reason=\"{}\"}} {}\n", L, r,
                             it == finished_.end() ? 0 : it->second);
        }
        o += "# HELP onecard:http_requests_total HTTP responses by route and status code.\n"
             "# TYPE onecard:http_requests_total counter\n";
        for (const auto& [key, n] : http_)
            o += fmt::format("onecard:http_requests_total{{{},route=\"{}\",status=\"{}\"}} {}\n", L,
                             prom_escape(key.first), key.second, n);
    }
    ttft_.render(o, "onecard:time_to_first_token_seconds", "Time to first token.", L);
    itl_.render(o, "onecard:inter_token_latency_seconds", "Time between streamed tokens.", L);
    e2e_.render(o, "onecard:e2e_request_latency_seconds", "End-to-end request latency.", L);
    return o;
}

}  // namespace onecard::server
