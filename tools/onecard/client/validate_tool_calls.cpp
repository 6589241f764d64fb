// Gates tool_calls (BFCL-style fixtures scored as exact calls) and no_dsml (no DSML or control token
// in any streamed content, reasoning or arguments chunk), plus the helpers every gate shares.
#include "validate_gates.h"

#include "core/error.h"
#include "embedded_data.h"

#include <atomic>
#include <fstream>
#include <sstream>
#include <thread>

namespace onecard::client {

const std::vector<std::string>& gate_names() {
    static const std::vector<std::string> names = {"tool_calls", "no_dsml", "reasoning", "capacity",
                                                   "replay",     "mixed_load", "needle"};
    return names;
}

GateResult run_gate(const std::string& name, const ValidateOptions& o) {
    const auto t0 = Clock::now();
    GateResult r;
    if (name == "tool_calls") r = gate_tool_calls(o);
    else if (name == "no_dsml") r = gate_no_dsml(o);
    else if (name == "reasoning") r = gate_reasoning(o);
    else if (name == "capacity") r = gate_capacity(o);
    else if (name == "replay") r = gate_replay(o);
    else if (name == "mixed_load") r = gate_mixed_load(o);
    else if (name == "needle") r = gate_needle(o);
    else throw Error(fmt::format("validate: no gate '{}' (gates: tool_calls, no_dsml, reasoning, capacity, replay, "
                                 "mixed_load, needle)", name));
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

std::vector<StreamResult> run_concurrent(const Endpoint& ep, const std::vector<Json>& bodies, int64_t concurrency) {
    std::vector<StreamResult> out(bodies.size());
    std::atomic<size_t> next{0};
    std::vector<std::thread> workers;
    const auto n = static_cast<size_t>(std::clamp<int64_t>(concurrency, 1, std::max<int64_t>(1, bodies.size())));
    for (size_t w = 0; w < n; ++w)
        workers.emplace_back([&] {
            HttpClient http(ep);
            for (size_t i; (i = next.fetch_add(1)) < bodies.size();) out[i] = run_stream(http, "/v1/chat/completions", bodies[i]);
        });
    for (auto& t : workers) t.join();
    return out;
}

namespace {

struct FixtureTurn {
    std::string fixture_id;
    size_t i_turn = 0;
    Json body;
    Json expected;  // [{"name", "arguments"}]
};

Json load_fixtures(const ValidateOptions& o) {
    std::string text = builtin_tool_fixtures();
    if (!o.fixtures_path.empty()) {
        std::ifstream in(o.fixtures_path);
        ONECARD_CHECK(in.good(), "validate: cannot open --fixtures '{}'", o.fixtures_path);
        std::stringstream ss;
        ss << in.rdbuf();
        text = ss.str();
    }
    try {
        return Json::parse(text);
    } catch (const std::exception& e) {
        throw Error(fmt::format("validate: fixtures are not JSON: {}", e.what()));
    }
}

// Every turn of every fixture as its own request: a later turn carries the earlier turns' expected
// calls and tool results, so turns are scored independently.
std::vector<FixtureTurn> fixture_turns(const ValidateOptions& o) {
    const Json fx = load_fixtures(o);
    std::vector<FixtureTurn> out;
    for (const auto& f : fx.at("fixtures")) {
        Json tools = Json::array();
        for (const auto& name : f.at("tools")) {
            const Json& def = fx.at("tools").at(name.get<std::string>());
            tools.push_back({{"type", "function"},
                             {"function", {{"name", name}, {"description", def.value("description", "")},
                                           {"parameters", def.at("parameters")}}}});
        }
        Json messages = Json::array();
        const auto& turns = f.at("turns");
        for (size_t it = 0; it < turns.size(); ++it) {
            const Json& t = turns[it];
            messages.push_back({{"role", "user"}, {"content", t.at("user")}});
            FixtureTurn ft{f.at("id").get<std::string>(), it, base_body(o, messages, o.tool_max_tokens, o.tool_thinking),
                           t.at("expected")};
            ft.body["tools"] = tools;
            out.push_back(std::move(ft));
            // History for the next turn: the expected calls and their results.
            Json calls = Json::array();
            for (size_t k = 0; k < t["expected"].size(); ++k)
                calls.push_back({{"id", "call_" + std::to_string(it) + "_" + std::to_string(k)},
                                 {"type", "function"},
                                 {"function", {{"name", t["expected"][k]["name"]},
                                               {"arguments", t["expected"][k]["arguments"].dump()}}}});
            messages.push_back({{"role", "assistant"}, {"content", ""}, {"tool_calls", calls}});
            for (size_t k = 0; k < t["expected"].size(); ++k) {
                const std::string res = t.contains("tool_results") && k < t["tool_results"].size()
                                            ? t["tool_results"][k].get<std::string>()
                                            : "{}";
                messages.push_back({{"role", "tool"},
                                    {"tool_call_id", "call_" + std::to_string(it) + "_" + std::to_string(k)},
                                    {"content", res}});
            }
        }
    }
    return out;
}

// Exact: same number of calls, in order, each with the same name and JSON-equal arguments.
bool calls_match(const StreamResult& r, const Json& expected, std::string* why) {
    if (!r.ok) return *why = r.error, false;
    if (r.tool_calls.size() != expected.size())
        return *why = fmt::format("{} calls, expected {}", r.tool_calls.size(), expected.size()), false;
    for (size_t k = 0; k < expected.size(); ++k) {
        const auto& got = r.tool_calls[k];
        if (got.name != expected[k]["name"].get<std::string>())
            return *why = fmt::format("call {}: name '{}'", k, got.name), false;
        Json args;
        try {
            args = Json::parse(got.arguments);
        } catch (const std::exception&) {
            return *why = fmt::format("call {}: arguments not JSON: {}", k, got.arguments.substr(0, 200)), false;
        }
        if (args != expected[k]["arguments"])
            return *why = fmt::format("call {}: arguments {}", k, args.dump().substr(0, 200)), false;
    }
    return true;
}

}  // namespace

GateResult gate_tool_calls(const ValidateOptions& o) {
    const auto turns = fixture_turns(o);
    std::vector<Json> bodies;
    for (const auto& t : turns) bodies.push_back(t.body);
    const auto results = run_concurrent(o.ep, bodies, o.tool_concurrency);
    GateResult g;
    int64_t n_exact = 0, n_errors = 0, n_two_turn = 0, n_two_turn_exact = 0, n_parallel = 0, n_parallel_exact = 0;
    Json failures = Json::array();
    for (size_t i = 0; i < turns.size(); ++i) {
        std::string why;
        const bool ok = calls_match(results[i], turns[i].expected, &why);
        n_exact += ok;
        n_errors += !results[i].ok;
        if (turns[i].i_turn > 0) n_two_turn += 1, n_two_turn_exact += ok;
        if (turns[i].expected.size() > 1) n_parallel += 1, n_parallel_exact += ok;
        if (!ok && failures.size() < 10)
            failures.push_back({{"fixture", turns[i].fixture_id}, {"turn", turns[i].i_turn + 1}, {"why", why},
                                {"content", results[i].content.substr(0, 200)}});
    }
    const auto n = static_cast<int64_t>(turns.size());
    const double acc = n ? static_cast<double>(n_exact) / static_cast<double>(n) : 0;
    g.passed = n > 0 && acc >= o.tool_min_accuracy;
    g.figures = {{"turns", n},
                 {"exact", n_exact},
                 {"accuracy", acc},
                 {"min_accuracy", o.tool_min_accuracy},
                 {"second_turns", n_two_turn},
                 {"second_turns_exact", n_two_turn_exact},
                 {"parallel_call_turns", n_parallel},
                 {"parallel_call_turns_exact", n_parallel_exact},
                 {"request_errors", n_errors},
                 {"concurrency", o.tool_concurrency},
                 {"failures", failures}};
    g.summary = fmt::format("{}/{} exact ({:.0f}%, need {:.0f}%), {} errors", n_exact, n, 100 * acc,
                            100 * o.tool_min_accuracy, n_errors);
    return g;
}

GateResult gate_no_dsml(const ValidateOptions& o) {
    // The fixture requests (tool calls are where DSML lives) with thinking off and on.
    std::vector<Json> bodies;
    for (bool thinking : {false, true})
        for (auto t : fixture_turns(o)) {
            t.body["chat_template_kwargs"]["thinking"] = thinking;
            bodies.push_back(std::move(t.body));
        }
    const auto results = run_concurrent(o.ep, bodies, o.tool_concurrency);
    int64_t n_chunks = 0, n_leaks = 0, n_errors = 0;
    Json samples = Json::array();
    for (const auto& r : results) {
        n_errors += !r.ok;
        auto scan = [&](const std::vector<std::string>& chunks, const char* where) {
            for (const auto& c : chunks) {
                ++n_chunks;
                if (auto m = leaked_markers(c); !m.empty()) {
                    ++n_leaks;
                    if (samples.size() < 10) samples.push_back({{"in", where}, {"markers", m}, {"chunk", c.substr(0, 200)}});
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
    g.figures = {{"streams", results.size()}, {"chunks", n_chunks}, {"leaks", n_leaks},
                 {"request_errors", n_errors}, {"samples", samples}};
    g.summary = fmt::format("{} leaks in {} chunks of {} streams, {} errors", n_leaks, n_chunks, results.size(), n_errors);
    return g;
}

}  // namespace onecard::client
