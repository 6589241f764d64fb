#include "bench_run.h"

#include <fmt/format.h>

#include <atomic>
#include <cmath>
#include <mutex>
#include <thread>

namespace onecard::client {

namespace {

using Secs = std::chrono::duration<double>;

struct Sample {
    StreamResult r;
    int64_t expected_prompt_tokens = -1;
};

// vLLM's counters on /metrics (absent on other servers: the deltas are then left out).
Json scrape_counters(HttpClient& http) {
    const HttpReply m = http.get("/metrics");
    Json out = Json::object();
    if (!m.ok()) return out;
    for (const char* name : {"vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:prefix_cache_hits_total",
                             "vllm:prefix_cache_queries_total", "vllm:spec_decode_num_drafts_total",
                             "vllm:spec_decode_num_draft_tokens_total", "vllm:spec_decode_num_accepted_tokens_total"}) {
        const double v = prometheus_value(m.body, name);
        if (v >= 0) out[name] = v;
    }
    // Accepted tokens per draft position: one labelled line per position, kept as "<name>{position=j}".
    const std::string per_pos = "vllm:spec_decode_num_accepted_tokens_per_pos_total{";
    for (size_t p = m.body.find(per_pos); p != std::string::npos; p = m.body.find(per_pos, p + 1)) {
        if (p > 0 && m.body[p - 1] != '\n') continue;
        const size_t close = m.body.find('}', p), at = m.body.find("position=\"", p);
        if (close == std::string::npos || at == std::string::npos || at > close) continue;
        try {
            const int64_t j = std::stoll(m.body.substr(at + 10));
            out[fmt::format("vllm:spec_decode_num_accepted_tokens_per_pos_total{{position={}}}", j)] =
                std::stod(m.body.substr(close + 1));
        } catch (const std::exception&) {
        }
    }
    return out;
}

}  // namespace

// vLLM's speculative-decoding summary from the counter deltas over a point: acceptance rate = accepted
// / draft tokens, mean acceptance length = 1 + accepted / drafts, per-position acceptance = accepted at
// position j / drafts. Empty when the server drafted nothing.
Json spec_summary(const Json& deltas) {
    auto delta = [&](const std::string& name) {
        const std::string key = name + ":delta";
        return deltas.contains(key) ? deltas[key].get<double>() : 0.0;
    };
    const double drafts = delta("vllm:spec_decode_num_drafts_total");
    if (drafts <= 0) return Json::object();
    const double tokens = delta("vllm:spec_decode_num_draft_tokens_total");
    const double accepted = delta("vllm:spec_decode_num_accepted_tokens_total");
    Json per_pos = Json::array();
    for (int64_t j = 0;; ++j) {
        const std::string key =
            fmt::format("vllm:spec_decode_num_accepted_tokens_per_pos_total{{position={}}}:delta", j);
        if (!deltas.contains(key)) break;
        per_pos.push_back(deltas[key].get<double>() / drafts);
    }
    return {{"drafts", drafts},
            {"draft_tokens", tokens},
            {"accepted_tokens", accepted},
            {"acceptance_rate", tokens > 0 ? accepted / tokens : 0.0},
            {"mean_acceptance_length", 1.0 + accepted / drafts},
            {"per_position_acceptance_rate", per_pos}};
}

PointResult run_point(const Endpoint& ep, const PointSpec& spec, const std::vector<Session>& sessions,
                      Progress* progress) {
    PointResult res;
    if (progress)
        for (const Session& s : sessions) progress->add_total(static_cast<int64_t>(s.user_turns.size()));
    res.spec = spec;
    const ApiKind kind = api_kind_of(spec.endpoint);
    HttpClient probe(ep);
    const Json before = scrape_counters(probe);

    // Poisson arrivals: exponential gaps, fixed by the seed so runs are repeatable.
    std::vector<double> arrival(sessions.size(), 0.0);
    if (spec.request_rate > 0 && std::isfinite(spec.request_rate)) {
        std::mt19937_64 rng(spec.seed ^ 0x9e3779b97f4a7c15ULL);
        std::exponential_distribution<double> gap(spec.request_rate);
        double t = 0;
        for (double& a : arrival) {
            a = t;
            t += gap(rng);
        }
    }
    std::vector<std::vector<Sample>> per_session(sessions.size());
    std::atomic<size_t> next{0};
    const auto t0 = Clock::now();
    const auto n_workers =
        static_cast<size_t>(std::max<int64_t>(1, std::min<int64_t>(spec.concurrency, sessions.size())));
    std::vector<std::thread> workers;
    for (size_t w = 0; w < n_workers; ++w)
        workers.emplace_back([&] {
            HttpClient http(ep);
            for (size_t i; (i = next.fetch_add(1)) < sessions.size();) {
                std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(Secs(arrival[i])));
                const Session& s = sessions[i];
                std::vector<std::string> replies;
                for (size_t it = 0; it < s.user_turns.size(); ++it) {
                    Json body = session_body(s, it, replies, kind, spec.model);
                    for (const auto& [k, v] : spec.extra.items()) body[k] = v;
                    Sample smp{run_stream(http, spec.endpoint, std::move(body)),
                               it == 0 ? s.expected_prompt_tokens : -1};
                    replies.push_back(smp.r.output());
                    const bool ok = smp.r.ok;
                    // A failed turn ends its conversation: its later turns count as done.
                    if (progress)
                        progress->advance(ok ? 1 : static_cast<int64_t>(s.user_turns.size() - it),
                                          std::max<int64_t>(0, smp.r.completion_tokens));
                    per_session[i].push_back(std::move(smp));
                    if (!ok) break;  // the rest of a conversation needs this reply
                }
            }
        });
    for (auto& t : workers) t.join();
    res.duration_s = Secs(Clock::now() - t0).count();

    std::vector<double> ttft, tpot, itl, e2e, rate;
    for (const auto& samples : per_session)
        for (const Sample& smp : samples) {
            const StreamResult& r = smp.r;
            ++res.n_requests;
            if (!r.ok) {
                ++res.n_errors;
                if (res.error_samples.size() < 5) res.error_samples.push_back(r.error);
                continue;
            }
            ++res.n_ok;
            res.prompt_tokens += std::max<int64_t>(r.prompt_tokens, 0);
            res.completion_tokens += std::max<int64_t>(r.completion_tokens, 0);
            res.cached_tokens += std::max<int64_t>(r.cached_tokens, 0);
            if (smp.expected_prompt_tokens >= 0 && r.prompt_tokens != smp.expected_prompt_tokens)
                ++res.n_prompt_len_mismatch;
            if (r.ttft_s() >= 0) ttft.push_back(r.ttft_s() * 1e3);
            e2e.push_back(r.e2e_s() * 1e3);
            for (size_t k = 1; k < r.token_times.size(); ++k)
                itl.push_back(Secs(r.token_times[k] - r.token_times[k - 1]).count() * 1e3);
            // TPOT and decode rate as vLLM defines them: time after the first token over the
            // tokens after it (the server's completion_tokens, chunks may carry several).
            const int64_t n_out =
                r.completion_tokens > 0 ? r.completion_tokens : static_cast<int64_t>(r.token_times.size());
            if (n_out > 1 && r.ttft_s() >= 0) {
                const double decode_s = r.e2e_s() - r.ttft_s();
                tpot.push_back(decode_s * 1e3 / static_cast<double>(n_out - 1));
                if (decode_s > 0) rate.push_back(static_cast<double>(n_out - 1) / decode_s);
            }
        }
    res.ttft_ms = summarize(ttft);
    res.tpot_ms = summarize(tpot);
    res.itl_ms = summarize(itl);
    res.e2e_ms = summarize(e2e);
    res.decode_tok_s = summarize(rate);
    if (res.duration_s > 0) {
        res.request_throughput = static_cast<double>(res.n_ok) / res.duration_s;
        res.output_throughput = static_cast<double>(res.completion_tokens) / res.duration_s;
        res.total_token_throughput = static_cast<double>(res.prompt_tokens + res.completion_tokens) / res.duration_s;
    }
    if (res.prompt_tokens > 0)
        res.cached_share = static_cast<double>(res.cached_tokens) / static_cast<double>(res.prompt_tokens);
    const Json after = scrape_counters(probe);
    res.server_metrics = Json::object();
    for (const auto& [k, v] : after.items())
        if (before.contains(k)) res.server_metrics[k + ":delta"] = v.get<double>() - before[k].get<double>();
    return res;
}

Json to_json(const PointResult& r) {
    const bool paced = r.spec.request_rate > 0 && std::isfinite(r.spec.request_rate);
    return {{"max_concurrency", r.spec.concurrency},
            {"request_rate", paced ? Json(r.spec.request_rate) : Json("inf")},
            {"endpoint", r.spec.endpoint},
            {"num_requests", r.n_requests},
            {"completed", r.n_ok},
            {"errors", r.n_errors},
            {"error_samples", r.error_samples},
            {"duration_s", r.duration_s},
            {"total_input_tokens", r.prompt_tokens},
            {"total_output_tokens", r.completion_tokens},
            {"cached_prompt_tokens", r.cached_tokens},
            {"cached_share", r.cached_share},
            {"prompt_len_mismatches", r.n_prompt_len_mismatch},
            {"request_throughput", r.request_throughput},
            {"output_throughput", r.output_throughput},
            {"total_token_throughput", r.total_token_throughput},
            {"ttft_ms", to_json(r.ttft_ms)},
            {"tpot_ms", to_json(r.tpot_ms)},
            {"itl_ms", to_json(r.itl_ms)},
            {"e2e_latency_ms", to_json(r.e2e_ms)},
            {"per_stream_decode_tok_s", to_json(r.decode_tok_s)},
            {"server_metrics", r.server_metrics},
            {"spec_decode", spec_summary(r.server_metrics)}};
}

}  // namespace onecard::client
