// One benchmark point of `onecard bench-serve`: sessions sent by `concurrency` workers (each its own
// connection), arrivals paced by a Poisson process at `request_rate` (inf: all at once), every
// request streamed and timed on steady_clock; then the figures vLLM's `bench serve` reports.
#pragma once

#include "bench_dataset.h"
#include "progress.h"
#include "stats.h"

#include <string>
#include <vector>

namespace onecard::client {

struct PointSpec {
    int64_t concurrency = 1;
    double request_rate = 0;  // requests/s; <= 0 or inf: no pacing
    std::string endpoint = "/v1/completions";
    std::string model;
    Json extra;  // merged into every body (temperature, top_p, seed, ignore_eos, ...)
    uint64_t seed = 0;
};

struct PointResult {
    PointSpec spec;
    int64_t n_requests = 0, n_ok = 0, n_errors = 0;
    double duration_s = 0;
    int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
    int64_t n_prompt_len_mismatch = 0;  // requests whose prompt_tokens differ from the length built
    Summary ttft_ms, tpot_ms, itl_ms, e2e_ms, decode_tok_s;
    double request_throughput = 0, output_throughput = 0, total_token_throughput = 0;
    double cached_share = 0;                 // cached prompt tokens / prompt tokens
    std::vector<std::string> error_samples;  // the first few errors
    Json server_metrics;                     // /metrics counter deltas over the point, when the server has them
};

// `progress` (when set) counts the point's requests and output tokens (the caller begins the phase).
// vLLM's speculative-decoding figures of a point from its /metrics deltas (PointResult::server_metrics):
// drafts, draft_tokens, accepted_tokens, acceptance_rate, mean_acceptance_length,
// per_position_acceptance_rate; an empty object when the server drafted nothing.
Json spec_summary(const Json& server_metrics);
PointResult run_point(const Endpoint& ep, const PointSpec& spec, const std::vector<Session>& sessions,
                      Progress* progress = nullptr);

Json to_json(const PointResult& r);

}  // namespace onecard::client
