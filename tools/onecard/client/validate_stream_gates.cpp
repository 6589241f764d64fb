// Gates reasoning (reasoning and content never leak into each other), capacity (N concurrent streams
// all complete) and mixed_load (a long cold prefill arriving among running streams, then a late
// short request: its TTFT and the running streams' longest inter-token gap).
#include "validate_gates.h"

#include "bench_dataset.h"

#include <fmt/format.h>
#include "stats.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace onecard::client {

namespace {

using Secs = std::chrono::duration<double>;

Json user(const std::string& text) {
    return Json::array({Json{{"role", "user"}, {"content", text}}});
}

uint64_t run_nonce(const ValidateOptions& o) {
    return o.seed ? o.seed : static_cast<uint64_t>(Clock::now().time_since_epoch().count());
}

}  // namespace

GateResult gate_reasoning(const ValidateOptions& o) {
    struct Case {
        std::string prompt;
        bool thinking;
    };
    const std::vector<Case> cases = {
        {"What is 17 + 25? Think it through, then answer with the number only.", true},
        {"Name the capital of France. Reason briefly first, then give the answer in one word.", true},
        {"Name the capital of Italy in one word.", false}};
    std::vector<Json> bodies;
    for (const auto& c : cases) bodies.push_back(base_body(o, user(c.prompt), o.reasoning_max_tokens, c.thinking));
    const auto results = run_concurrent(o.ep, bodies, static_cast<int64_t>(bodies.size()), o.progress);
    Json per = Json::array();
    int64_t n_bad = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
        const StreamResult& r = results[i];
        std::vector<std::string> problems;
        if (!r.ok) problems.push_back("request failed: " + r.error);
        for (const char* m : {"<think>", "</think>"}) {
            if (r.content.find(m) != std::string::npos) problems.push_back(std::string("content holds ") + m);
            if (r.reasoning.find(m) != std::string::npos) problems.push_back(std::string("reasoning holds ") + m);
        }
        for (const auto& m : leaked_markers(r.reasoning)) problems.push_back("reasoning holds " + m);
        for (const auto& m : leaked_markers(r.content)) problems.push_back("content holds " + m);
        if (cases[i].thinking && r.reasoning.empty()) problems.push_back("thinking on, but no reasoning_content");
        if (!cases[i].thinking && !r.reasoning.empty()) problems.push_back("thinking off, but reasoning_content came");
        if (r.content.empty() && r.tool_calls.empty()) problems.push_back("no content (answer missing)");
        n_bad += !problems.empty();
        per.push_back({{"thinking", cases[i].thinking},
                       {"reasoning_chars", r.reasoning.size()},
                       {"content_chars", r.content.size()},
                       {"finish_reason", r.finish_reason},
                       {"problems", problems},
                       {"content", utf8_prefix(r.content, 160)}});
    }
    GateResult g;
    g.passed = n_bad == 0;
    g.figures = {{"requests", cases.size()}, {"failed", n_bad}, {"cases", per}};
    g.summary = fmt::format("{}/{} requests split cleanly", cases.size() - n_bad, cases.size());
    return g;
}

GateResult gate_capacity(const ValidateOptions& o) {
    const uint64_t nonce = run_nonce(o);
    std::vector<Json> bodies;
    for (int64_t i = 0; i < o.capacity_streams; ++i) {
        Json b = base_body(o, user(fmt::format("[{}-{}] Write a long story about a lighthouse keeper.", nonce, i)),
                           o.capacity_max_tokens, false);
        b["ignore_eos"] = true;  // servers without it stop at EOS; short streams are reported, not failed
        bodies.push_back(std::move(b));
    }
    const auto t0 = Clock::now();
    const auto results = run_concurrent(o.ep, bodies, o.capacity_streams, o.progress);
    const double wall = Secs(Clock::now() - t0).count();
    int64_t n_ok = 0, n_short = 0, n_tokens = 0;
    std::vector<double> ttft;
    Json errors = Json::array();
    for (const auto& r : results) {
        if (!r.ok) {
            if (errors.size() < 5) errors.push_back(r.error);
            continue;
        }
        ++n_ok;
        n_tokens += std::max<int64_t>(0, r.completion_tokens);
        n_short += r.completion_tokens >= 0 && r.completion_tokens < o.capacity_max_tokens;
        if (r.ttft_s() >= 0) ttft.push_back(r.ttft_s());
    }
    const Summary t = summarize(ttft);
    GateResult g;
    g.passed = n_ok == o.capacity_streams;
    g.figures = {{"streams", o.capacity_streams},
                 {"completed", n_ok},
                 {"errors", o.capacity_streams - n_ok},
                 {"shorter_than_max_tokens", n_short},
                 {"completion_tokens", n_tokens},
                 {"wall_s", wall},
                 {"ttft_s", to_json(t)},
                 {"error_samples", errors}};
    g.summary =
        fmt::format("{}/{} streams completed in {:.2f} s, TTFT p99 {:.3f} s", n_ok, o.capacity_streams, wall, t.p99);
    return g;
}

GateResult gate_mixed_load(const ValidateOptions& o) {
    const uint64_t nonce = run_nonce(o);
    GateResult g;
    HttpClient http(o.ep);
    PromptBuilder pb(http, ApiKind::Chat, o.model);
    std::mt19937_64 rng(nonce);
    bool exact = false;
    const std::string long_prompt =
        pb.build(rng, fmt::format("[mixed {}] Summarise these words: ", nonce), o.mixed_prefill_len, &exact);

    if (o.progress) o.progress->add_total(o.mixed_running + 2);
    auto count = [&](const StreamResult& r) {
        if (o.progress) o.progress->advance(1, std::max<int64_t>(0, r.completion_tokens));
    };
    // Running streams first; the long prefill goes in once they all decode.
    std::mutex mu;
    std::condition_variable cv;
    int64_t n_started = 0;
    std::vector<StreamResult> running(static_cast<size_t>(o.mixed_running));
    std::vector<std::thread> threads;
    for (int64_t i = 0; i < o.mixed_running; ++i)
        threads.emplace_back([&, i] {
            HttpClient h(o.ep);
            Json b = base_body(o, user(fmt::format("[mixed {}-{}] Count slowly from one upwards.", nonce, i)),
                               o.mixed_decode_tokens, false);
            b["ignore_eos"] = true;
            bool counted = false;
            running[static_cast<size_t>(i)] = run_stream(h, "/v1/chat/completions", b, [&](const StreamResult&) {
                if (counted) return;
                counted = true;
                std::lock_guard lk(mu);
                ++n_started;
                cv.notify_all();
            });
            count(running[static_cast<size_t>(i)]);
            std::lock_guard lk(mu);
            if (!counted) ++n_started;  // failed before its first token: do not wait for it
            cv.notify_all();
        });
    {
        std::unique_lock lk(mu);
        cv.wait_for(lk, std::chrono::seconds(120), [&] { return n_started >= o.mixed_running; });
    }
    StreamResult long_r, short_r;
    Clock::time_point t_long_sent = Clock::now();
    std::thread long_t([&] {
        HttpClient h(o.ep);
        long_r = run_stream(h, "/v1/chat/completions", base_body(o, user(long_prompt), 1, false));
        count(long_r);
    });
    std::this_thread::sleep_for(Secs(o.mixed_late_s));
    {
        HttpClient h(o.ep);
        short_r = run_stream(h, "/v1/chat/completions",
                             base_body(o, user(fmt::format("[mixed {}] Say hi.", nonce)), 4, false));
        count(short_r);
    }
    long_t.join();
    for (auto& t : threads) t.join();

    double max_gap = 0;
    bool outlived = !running.empty();
    int64_t n_running_ok = 0;
    for (const auto& r : running) {
        n_running_ok += r.ok;
        for (size_t k = 1; k < r.token_times.size(); ++k)
            max_gap = std::max(max_gap, Secs(r.token_times[k] - r.token_times[k - 1]).count());
        // The gap only says something if the stream was still decoding when the prefill ended.
        if (long_r.token_times.empty() || r.token_times.empty() || r.token_times.back() < long_r.token_times.front())
            outlived = false;
    }
    const double short_ttft = short_r.ttft_s();
    g.passed = long_r.ok && short_r.ok && n_running_ok == o.mixed_running && outlived && short_ttft >= 0 &&
               short_ttft <= o.mixed_max_ttft_s && max_gap <= o.mixed_max_gap_s;
    g.figures = {{"long_prompt_tokens", long_r.prompt_tokens},
                 {"long_prompt_exact", exact},
                 {"long_cached_tokens", long_r.cached_tokens},
                 {"long_ttft_s", long_r.ttft_s()},
                 {"long_error", long_r.error},
                 {"short_ttft_s", short_ttft},
                 {"short_error", short_r.error},
                 {"max_ttft_s", o.mixed_max_ttft_s},
                 {"running_streams", o.mixed_running},
                 {"running_ok", n_running_ok},
                 {"running_outlived_prefill", outlived},
                 {"longest_gap_s", max_gap},
                 {"max_gap_s", o.mixed_max_gap_s},
                 {"late_s", o.mixed_late_s},
                 {"since_long_sent_s", Secs(Clock::now() - t_long_sent).count()}};
    g.summary = fmt::format("short TTFT {:.3f} s (max {:.2f}), longest gap {:.3f} s (max {:.2f}){}", short_ttft,
                            o.mixed_max_ttft_s, max_gap, o.mixed_max_gap_s,
                            outlived ? "" : "; streams ended before the prefill (raise --mixed-decode-tokens)");
    if (!long_r.ok) g.summary += "; long request failed";
    return g;
}

}  // namespace onecard::client
