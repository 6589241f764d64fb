#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>

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

std::vector<double> buckets_1_2_5(int64_t max_value) {
    std::vector<double> out;
    for (int64_t exp = 1;; exp *= 10)
        for (int64_t m : {1, 2, 5}) {
            if (m * exp > max_value) return out;
            out.push_back(static_cast<double>(m * exp));
        }
}

namespace {
// vLLM's bucket edges (seconds, vllm/v1/metrics/loggers.py), so dashboards built for it read ours unchanged.
std::vector<double> ttft_buckets() {
    return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
            1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}
std::vector<double> itl_buckets() {
    return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
}
// vLLM uses these for e2e, queue, prefill, decode and inference time alike.
std::vector<double> request_latency_buckets() {
    return {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
            30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}
}  // namespace

ServerMetrics::ServerMetrics(std::string model_name, int64_t max_model_len)
    : model_name_(std::move(model_name)),
      labels_("model_name=\"" + prom_escape(model_name_) + "\""),
      ttft_(ttft_buckets()),
      itl_(itl_buckets()),
      tpot_(itl_buckets()),
      e2e_(request_latency_buckets()),
      queue_(request_latency_buckets()),
      prefill_(request_latency_buckets()),
      decode_(request_latency_buckets()),
      inference_(request_latency_buckets()),
      req_prompt_(buckets_1_2_5(max_model_len)),
      req_gen_(buckets_1_2_5(max_model_len)) {}

void ServerMetrics::record_http(const std::string& route, int status) {
    std::lock_guard lk(mu_);
    ++http_[{route, status}];
}

void ServerMetrics::record_prompt_tokens(int64_t n) {
    std::lock_guard lk(mu_);
    prompt_tokens_ += static_cast<uint64_t>(std::max<int64_t>(n, 0));
}

void ServerMetrics::record_generation_tokens(int64_t n) {
    std::lock_guard lk(mu_);
    generation_tokens_ += static_cast<uint64_t>(std::max<int64_t>(n, 0));
}

void ServerMetrics::record_finished(const std::string& finish_reason, int64_t prompt_tokens, int64_t generation_tokens,
                                    int64_t cached_tokens, const RequestTiming& t) {
    {
        std::lock_guard lk(mu_);
        ++finished_[finish_reason];
        cached_tokens_ += static_cast<uint64_t>(std::max<int64_t>(cached_tokens, 0));
    }
    e2e_.observe(t.e2e_s);
    req_prompt_.observe(static_cast<double>(prompt_tokens));
    req_gen_.observe(static_cast<double>(generation_tokens));
    if (t.queue_s >= 0) queue_.observe(t.queue_s);
    if (t.prefill_s >= 0) {
        prefill_.observe(t.prefill_s);
        decode_.observe(t.decode_s);
        inference_.observe(t.prefill_s + t.decode_s);
        if (generation_tokens > 1) tpot_.observe(t.decode_s / static_cast<double>(generation_tokens - 1));
    }
}

void ServerMetrics::record_nonfinite_logits() {
    std::lock_guard lk(mu_);
    ++nonfinite_logits_;
}

std::string ServerMetrics::render(const EngineStats& es, int64_t n_http_inflight) const {
    std::string o;
    const std::string& L = labels_;
    auto line = [&](const char* prefix, const char* type, const char* name, const char* help, double v) {
        o +=
            fmt::format("# HELP {0}:{1} {2}\n# TYPE {0}:{1} {3}\n{0}:{1}{{{4}}} {5}\n", prefix, name, help, type, L, v);
    };
    auto vllm_gauge = [&](const char* name, const char* help, double v) { line("vllm", "gauge", name, help, v); };
    auto vllm_counter = [&](const char* name, const char* help, double v) { line("vllm", "counter", name, help, v); };
    auto gauge = [&](const char* name, const char* help, double v) { line("onecard", "gauge", name, help, v); };
    auto counter = [&](const char* name, const char* help, double v) { line("onecard", "counter", name, help, v); };

    vllm_gauge("num_requests_running", "Number of requests in model execution batches.",
               static_cast<double>(es.n_running));
    vllm_gauge("num_requests_waiting", "Number of requests waiting to be processed.",
               static_cast<double>(es.n_waiting));
    const double usage = es.n_total_kv_blocks > 0 ? 1.0 - static_cast<double>(es.n_free_kv_blocks) /
                                                              static_cast<double>(es.n_total_kv_blocks)
                                                  : 0.0;
    vllm_gauge("kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", usage);
    vllm_counter("num_preemptions_total", "Cumulative number of preemptions from the engine.",
                 static_cast<double>(es.n_preemptions));
    // vLLM's prefix-cache counters (prompt tokens of new requests looked up, and found cached); 0
    // while prefix caching is off, as in vLLM.
    vllm_counter("prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.",
                 static_cast<double>(es.prefix_cache_queries));
    vllm_counter("prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.",
                 static_cast<double>(es.prefix_cache_hits));
    // vLLM counts hits served by a KV connector's offload tier as "external"; here the host/disk tier.
    vllm_counter("external_prefix_cache_queries_total",
                 "External prefix cache queries, in terms of number of queried tokens.",
                 static_cast<double>(es.prefix_cache_queries));
    vllm_counter("external_prefix_cache_hits_total", "External prefix cache hits, in terms of number of cached tokens.",
                 static_cast<double>(es.prefix_cache_hits_offloaded));
    gauge("kv_host_tier_blocks", "KV blocks held in the host-RAM tier.", static_cast<double>(es.n_host_kv_blocks));
    gauge("kv_host_tier_capacity_blocks", "KV blocks the host-RAM tier can hold.",
          static_cast<double>(es.n_total_host_kv_blocks));
    gauge("kv_host_tier_usage_perc", "Host-RAM KV tier usage. 1 means 100 percent usage.",
          es.n_total_host_kv_blocks > 0
              ? static_cast<double>(es.n_host_kv_blocks) / static_cast<double>(es.n_total_host_kv_blocks)
              : 0.0);
    gauge("prefix_snapshots", "Prefix-cache state snapshots held in host RAM.",
          static_cast<double>(es.n_prefix_snapshots));
    gauge("prefix_snapshots_capacity", "Prefix-cache state snapshots host RAM can hold.",
          static_cast<double>(es.n_total_prefix_snapshots));
    gauge("kv_disk_tier_entries", "Entries (blocks and snapshots) in the disk KV tier.",
          static_cast<double>(es.n_disk_kv_entries));
    gauge("kv_disk_tier_bytes", "Bytes of the disk KV tier's entry files.", static_cast<double>(es.disk_kv_bytes));
    // vLLM's speculative-decoding counters, present (as in vLLM) only when speculation is configured.
    if (!es.spec_num_accepted_tokens_per_pos.empty()) {
        vllm_counter("spec_decode_num_drafts_total", "Number of spec decoding drafts.",
                     static_cast<double>(es.spec_num_drafts));
        vllm_counter("spec_decode_num_draft_tokens_total", "Number of draft tokens.",
                     static_cast<double>(es.spec_num_draft_tokens));
        vllm_counter("spec_decode_num_accepted_tokens_total", "Number of accepted tokens.",
                     static_cast<double>(es.spec_num_accepted_tokens));
        o += "# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.\n"
             "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter\n";
        for (size_t j = 0; j < es.spec_num_accepted_tokens_per_pos.size(); ++j)
            o += fmt::format("vllm:spec_decode_num_accepted_tokens_per_pos_total{{{}{}position=\"{}\"}} {}\n", L,
                             L.empty() ? "" : ",", j, static_cast<double>(es.spec_num_accepted_tokens_per_pos[j]));
        gauge("spec_decode_draft_length", "Drafts per decode row the last step chose (0: speculation paused).",
              static_cast<double>(es.spec_draft_length));
    }
    gauge("kv_cache_free_blocks", "Free KV-cache blocks.", static_cast<double>(es.n_free_kv_blocks));
    gauge("kv_cache_total_blocks", "KV-cache blocks in the pool.", static_cast<double>(es.n_total_kv_blocks));
    gauge("kv_cache_free_slots", "Free per-sequence KV slots.", static_cast<double>(es.n_free_kv_slots));
    gauge("num_http_requests_inflight", "Generation requests the HTTP side holds (queued or running).",
          static_cast<double>(n_http_inflight));
    counter("engine_steps_total", "Engine steps so far.", static_cast<double>(es.n_steps));
    {
        std::lock_guard lk(mu_);
        vllm_counter("prompt_tokens_total", "Number of prefill tokens processed.", static_cast<double>(prompt_tokens_));
        vllm_counter("generation_tokens_total", "Number of generation tokens processed.",
                     static_cast<double>(generation_tokens_));
        counter("prompt_tokens_cached_total", "Prompt tokens served from the prefix cache.",
                static_cast<double>(cached_tokens_));
        counter("nonfinite_logits_total", "Requests stopped because the model gave them NaN or Inf logits.",
                static_cast<double>(nonfinite_logits_));
        o += "# HELP vllm:request_success_total Count of successfully processed requests.\n"
             "# TYPE vllm:request_success_total counter\n";
        for (const char* r : {"stop", "length", "abort", "error"}) {
            auto it = finished_.find(r);
            o += fmt::format("vllm:request_success_total{{{},finished_reason=\"{}\"}} {}\n", L, r,
                             it == finished_.end() ? 0 : it->second);
        }
        o += "# HELP onecard:http_requests_total HTTP responses by route and status code.\n"
             "# TYPE onecard:http_requests_total counter\n";
        for (const auto& [key, n] : http_)
            o += fmt::format("onecard:http_requests_total{{{},route=\"{}\",status=\"{}\"}} {}\n", L,
                             prom_escape(key.first), key.second, n);
    }
    ttft_.render(o, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", L);
    itl_.render(o, "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", L);
    tpot_.render(o, "vllm:request_time_per_output_token_seconds",
                 "Histogram of time_per_output_token_seconds per request.", L);
    e2e_.render(o, "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", L);
    queue_.render(o, "vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", L);
    prefill_.render(o, "vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", L);
    decode_.render(o, "vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", L);
    inference_.render(o, "vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.",
                      L);
    req_prompt_.render(o, "vllm:request_prompt_tokens", "Number of prefill tokens processed.", L);
    req_gen_.render(o, "vllm:request_generation_tokens", "Number of generation tokens processed.", L);
    return o;
}

}  // namespace onecard::server
