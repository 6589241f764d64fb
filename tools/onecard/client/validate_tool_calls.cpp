// Gates tool_calls (BFCL-style fixtures scored as exact calls; the fixtures and the matching rules
// live in tool_fixtures.h) and no_dsml (no DSML or control token
// in any streamed content, reasoning or arguments chunk), plus the helpers every gate shares.
#include "validate_gates.h"

#include "stats.h"

#include "core/error.h"
#include "tool_fixtures.h"

#include <array>
#include <atomic>
#include <map>
#include <thread>

namespace onecard::client {

const std::vector<std::string>& gate_names() {
    static const std::vector<std::string> names = {"tool_calls", "no_dsml",    "reasoning", "capacity",
                                                   "replay",     "mixed_load", "needle"};
    return names;
}

GateResult run_gate(const std::string& name, const ValidateOptions& o) {
    const auto t0 = Clock::now();
    GateResult r;
    if (name == "tool_calls")
        r = gate_tool_calls(o);
    else if (name == "no_dsml")
        r = gate_no_dsml(o);
    else if (name == "reasoning")
        r = gate_reasoning(o);
    else if (name == "capacity")
        r = gate_capacity(o);
    else if (name == "replay")
        r = gate_replay(o);
    else if (name == "mixed_load")
        r = gate_mixed_load(o);
    else if (name == "needle")
        r = gate_needle(o);
    else
        throw Error(
            fmt::format("validate: no gate '{}' (gates: tool_calls, no_dsml, reasoning, capacity, replay, "
                        "mixed_load, needle)",
                        name));
    r.name = name;
    r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return r;
}

Json base_body(const ValidateOptions& o, Json messages, int64_t max_tokens, bool thinking) {
    Json b = {{"messages", std::move(messages)},
              {"max_tokens", max_tokens},
              {"temperature", 0},
              {"chat_template_kwargs", {{"thinking", thinking}}}};
    if (!o.model.empty()) b["model"] = o.model;
    return b;
}

std::vector<std::string> leaked_markers(const std::string& chunk) {
    std::vector<std::string> out;
    for (const char* m : {"｜DSML｜", "<｜", "｜>", "<｜end▁of▁sentence｜>"})
        if (chunk.find(m) != std::string::npos) out.push_back(m);
    return out;
}

std::vector<StreamResult> run_concurrent(const Endpoint& ep, const std::vector<Json>& bodies, int64_t concurrency,
                                         Progress* progress) {
    if (progress) progress->add_total(static_cast<int64_t>(bodies.size()));
    std::vector<StreamResult> out(bodies.size());
    std::atomic<size_t> next{0};
    std::vector<std::thread> workers;
    const auto n = static_cast<size_t>(std::clamp<int64_t>(concurrency, 1, std::max<int64_t>(1, bodies.size())));
    for (size_t w = 0; w < n; ++w)
        workers.emplace_back([&] {
            HttpClient http(ep);
            for (size_t i; (i = next.fetch_add(1)) < bodies.size();) {
                out[i] = run_stream(http, "/v1/chat/completions", bodies[i]);
                if (progress) progress->advance(1, std::max<int64_t>(0, out[i].completion_tokens));
            }
        });
    for (auto& t : workers) t.join();
    return out;
}

StreamResult run_counted(HttpClient& http, const Json& body, Progress* progress) {
    if (progress) progress->add_total(1);
    StreamResult r = run_stream(http, "/v1/chat/completions", body);
    if (progress) progress->advance(1, std::max<int64_t>(0, r.completion_tokens));
    return r;
}

namespace {

std::vector<FixtureTurn> turns_for(const ValidateOptions& o, bool thinking) {
    return fixture_turns(load_fixtures(o.fixtures_path), base_body(o, Json::array(), o.tool_max_tokens, thinking));
}

}  // namespace

GateResult gate_tool_calls(const ValidateOptions& o) {
    const auto turns = turns_for(o, o.tool_thinking);
    std::vector<Json> bodies;
    for (const auto& t : turns) bodies.push_back(t.body);
    const auto results = run_concurrent(o.ep, bodies, o.tool_concurrency, o.progress);
    GateResult g;
    // Per kind of turn: [turns, exact].
    std::map<std::string, std::array<int64_t, 2>> kinds;
    std::map<std::string, bool> fixture_exact;
    int64_t n_exact = 0, n_errors = 0;
    std::string first_error;
    Json failures = Json::array();
    for (size_t i = 0; i < turns.size(); ++i) {
        const FixtureTurn& t = turns[i];
        std::string why;
        const bool ok = turn_matches(results[i], t, &why);
        n_exact += ok;
        if (!results[i].ok) {
            if (first_error.empty()) first_error = utf8_prefix(results[i].error, 160);
            ++n_errors;
        }
        const size_t n_calls = t.expected.size();
        for (const char* kind : {n_calls == 0   ? "no_call"
                                 : n_calls == 1 ? "single_call"
                                                : "parallel_call",
                                 t.i_turn > 0 ? "second" : ""})
            if (*kind) kinds[kind][0] += 1, kinds[kind][1] += ok;
        auto [it, fresh] = fixture_exact.emplace(t.fixture_id, ok);
        if (!fresh) it->second = it->second && ok;
        if (!ok && failures.size() < 20)
            failures.push_back({{"fixture", t.fixture_id},
                                {"turn", t.i_turn + 1},
                                {"why", why},
                                {"content", utf8_prefix(results[i].content, 200)}});
    }
    const auto n = static_cast<int64_t>(turns.size());
    const double acc = n ? static_cast<double>(n_exact) / static_cast<double>(n) : 0;
    g.passed = n > 0 && acc >= o.tool_min_accuracy;
    const auto n_fixtures_exact =
        std::count_if(fixture_exact.begin(), fixture_exact.end(), [](const auto& e) { return e.second; });
    g.figures = {{"fixtures", fixture_exact.size()},
                 {"fixtures_exact", n_fixtures_exact},
                 {"turns", n},
                 {"exact", n_exact},
                 {"accuracy", acc},
                 {"min_accuracy", o.tool_min_accuracy},
                 {"request_errors", n_errors},
                 {"concurrency", o.tool_concurrency},
                 {"failures", failures}};
    for (const char* kind : {"single_call", "parallel_call", "no_call", "second"}) {
        g.figures[std::string(kind) + "_turns"] = kinds[kind][0];
        g.figures[std::string(kind) + "_turns_exact"] = kinds[kind][1];
    }
    g.summary = fmt::format("{}/{} turns exact ({:.0f}%, need {:.0f}%; {}/{} fixtures), {} errors", n_exact, n,
                            100 * acc, 100 * o.tool_min_accuracy, n_fixtures_exact, fixture_exact.size(), n_errors);
    if (!first_error.empty()) g.summary += ", first: " + first_error;
    return g;
}

GateResult gate_no_dsml(const ValidateOptions& o) {
    // The fixture requests (tool calls are where DSML lives) with thinking off and on.
    std::vector<Json> bodies;
    for (bool thinking : {false, true})
        for (auto& t : turns_for(o, thinking)) bodies.push_back(std::move(t.body));
    const auto results = run_concurrent(o.ep, bodies, o.tool_concurrency, o.progress);
    int64_t n_chunks = 0, n_leaks = 0, n_errors = 0;
    Json samples = Json::array();
    for (const auto& r : results) {
        n_errors += !r.ok;
        auto scan = [&](const std::vector<std::string>& chunks, const char* where) {
            for (const auto& c : chunks) {
                ++n_chunks;
                if (auto m = leaked_markers(c); !m.empty()) {
                    ++n_leaks;
                    if (samples.size() < 10)
                        samples.push_back({{"in", where}, {"markers", m}, {"chunk", utf8_prefix(c, 200)}});
                }
            }
        };
        scan(r.content_chunks, "content");
        scan(r.reasoning_chunks, "reasoning_content");
        scan(r.args_chunks, "arguments");
        std::vector<std::string> names;
        for (const auto& tc : r.tool_calls) names.push_back(tc.name);
        scan(names, "tool name");
    }
    GateResult g;
    g.passed = n_leaks == 0 && n_errors == 0 && !results.empty();
    g.figures = {{"streams", results.size()},
                 {"chunks", n_chunks},
                 {"leaks", n_leaks},
                 {"request_errors", n_errors},
                 {"samples", samples}};
    g.summary =
        fmt::format("{} leaks in {} chunks of {} streams, {} errors", n_leaks, n_chunks, results.size(), n_errors);
    return g;
}

}  // namespace onecard::client
