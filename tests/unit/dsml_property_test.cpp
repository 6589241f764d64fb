// Property tests for the output parsers: any split of a completion parses exactly like the whole text;
// random byte soup never crashes or breaks invariants; encoder -> completion text -> parser round-trips the
// tool calls of every fixture conversation.
#include "core/error.h"
#include "tokenizer/chat_encoding.h"
#include "tokenizer/reasoning_parser.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

namespace onecard {
namespace {

namespace fs = std::filesystem;

OrderedJson read_json(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return OrderedJson::parse(ss.str());
}

struct Completion {
    std::string text;
    bool thinking;
};

// Event-stream invariants a client relies on: args only for a begun, unfinished call; ends once.
void check_event_order(const std::vector<ParseEvent>& evs, std::vector<int>& call_state) {
    for (const auto& ev : evs) {
        if (ev.kind == ParseEventKind::ToolCallBegin) {
            ASSERT_EQ(ev.index, static_cast<int>(call_state.size()));
            call_state.push_back(1);
        } else if (ev.kind == ParseEventKind::ToolCallArgs || ev.kind == ParseEventKind::ToolCallEnd) {
            ASSERT_GE(ev.index, 0);
            ASSERT_LT(ev.index, static_cast<int>(call_state.size()));
            ASSERT_EQ(call_state[static_cast<size_t>(ev.index)], 1) << "event after the call ended";
            if (ev.kind == ParseEventKind::ToolCallEnd) call_state[static_cast<size_t>(ev.index)] = 2;
        }
    }
}

// Parses `text` fed in the given pieces; checks invariants after every push.
ParsedCompletion parse_split(const std::string& text, bool thinking, const std::vector<size_t>& cuts) {
    ReasoningParser parser({thinking, {}});
    ParsedCompletion out;
    std::vector<int> call_state;
    size_t prev = 0;
    for (size_t cut : cuts) {
        auto evs = parser.push(std::string_view(text).substr(prev, cut - prev));
        check_event_order(evs, call_state);
        for (const auto& ev : evs) apply_event(out, ev);
        parser.check_integrity();
        prev = cut;
    }
    auto evs = parser.push(std::string_view(text).substr(prev));
    check_event_order(evs, call_state);
    for (const auto& ev : evs) apply_event(out, ev);
    evs = parser.finish();
    check_event_order(evs, call_state);
    for (const auto& ev : evs) apply_event(out, ev);
    parser.check_integrity();
    for (int s : call_state) EXPECT_EQ(s, 2) << "tool call never ended";
    out.warnings = parser.warnings();
    return out;
}

std::vector<size_t> random_cuts(size_t n, std::mt19937& rng, size_t max_piece) {
    std::vector<size_t> cuts;
    std::uniform_int_distribution<size_t> piece(1, max_piece);
    for (size_t pos = piece(rng); pos < n; pos += piece(rng)) cuts.push_back(pos);
    return cuts;
}

std::vector<Completion> corpus() {
    std::vector<Completion> out;
    const OrderedJson fx = read_json(fs::path(ONECARD_SOURCE_DIR) / "tests/data/chat/completions.json");
    for (const auto& c : fx.at("completions"))
        out.push_back({c.at("text").get<std::string>(), c.at("thinking_mode") == "thinking"});
    const std::string eos = "<｜end▁of▁sentence｜>";
    const std::vector<std::string> edge = {
        "Hi\n\n<｜DSML｜tool_calls>\nnot an invoke" + eos,
        "x<｜DSML｜bogus attr=\"1\">y",
        "<｜DSML｜invoke name=\"a\">\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"b\">\n</｜DSML｜invoke>tail",
        "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"s\" "
        "string=\"true\">partial</｜DSML｜pa",
        "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"n\" string=\"false\">4 2"
        "</｜DSML｜parameter>\n<｜DSML｜parameter name=\"n\" string=\"true\">x</｜DSML｜parameter>\n</｜DSML｜invoke>",
        "think\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>" + eos,
        "a</think>b\n\n\n\n<｜DSML｜invoke name=\"f\">\n</｜DSML｜invoke>\n\n after" + eos + "junk",
        "<think><think></think></think>",
        "\n\n\n</｜DSML｜tool_calls>\n\n<｜DSML｜tool_calls><｜DSML｜tool_calls>",
        "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"v\" string=\"true\">a<b>c<｜x"
        "</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
        "",
        "<｜end▁of▁sentence",
    };
    for (const auto& e : edge) {
        out.push_back({e, true});
        out.push_back({e, false});
    }
    return out;
}

TEST(DsmlProperty, RandomSplitsEqualWholeText) {
    const auto texts = corpus();
    ASSERT_GE(texts.size(), 100u);
    std::mt19937 rng(1234);
    size_t n_runs = 0;
    for (const auto& c : texts) {
        const ParsedCompletion whole = parse_completion(c.text, {c.thinking, {}});
        // Byte by byte (splits inside UTF-8 sequences and markers), then random piece sizes.
        std::vector<size_t> every;
        for (size_t i = 1; i < c.text.size(); ++i) every.push_back(i);
        ASSERT_EQ(parse_split(c.text, c.thinking, every), whole) << c.text;
        for (int seed = 0; seed < 40; ++seed) {
            const auto cuts = random_cuts(c.text.size(), rng, seed < 20 ? 4 : 40);
            ASSERT_EQ(parse_split(c.text, c.thinking, cuts), whole) << c.text;
            ++n_runs;
        }
    }
    EXPECT_GT(n_runs, 4000u);
}

TEST(DsmlProperty, ValidCompletionsNeverLeakMarkup) {
    const OrderedJson fx = read_json(fs::path(ONECARD_SOURCE_DIR) / "tests/data/chat/completions.json");
    for (const auto& c : fx.at("completions")) {
        const auto p = parse_completion(c.at("text").get<std::string>(), {c.at("thinking_mode") == "thinking", {}});
        EXPECT_EQ(p.content.find("｜DSML｜"), std::string::npos);
        EXPECT_EQ(p.reasoning.find("｜DSML｜"), std::string::npos);
        EXPECT_EQ(p.content.find("<｜end▁of▁sentence｜>"), std::string::npos);
        for (const auto& call : p.tool_calls) {
            EXPECT_EQ(call.arguments.find("｜DSML｜"), std::string::npos) << call.arguments;
            EXPECT_TRUE(OrderedJson::accept(call.arguments)) << call.arguments;
        }
    }
}

// A well-formed completion with random structure (reasoning, content, wrapper or not, 1-3 invokes with 0-3
// typed parameters); the fuzzer then damages it so the parser sees near-valid markup, not only noise.
std::string structured_completion(std::mt19937& rng, const std::vector<std::string>& alphabet) {
    auto coin = [&](int pct) { return std::uniform_int_distribution<int>(0, 99)(rng) < pct; };
    auto num = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    auto noise = [&]() {
        std::string t;
        for (int n = num(0, 4); n > 0; --n)
            t += alphabet[static_cast<size_t>(num(0, static_cast<int>(alphabet.size()) - 1))];
        return t;
    };
    const std::vector<std::string> json_values = {"1", "-2.5e3", "true", "null", "[1, \"a\"]", "{\"k\": {}}", "\"s\""};
    std::string t;
    if (coin(50)) t += "reason " + noise() + "</think>";
    t += "content " + noise();
    const bool wrap = coin(70);
    t += "\n\n";
    if (wrap) t += "<｜DSML｜tool_calls>\n";
    for (int k = num(1, 3); k > 0; --k) {
        t += "<｜DSML｜invoke name=\"f" + std::to_string(k) + "\">\n";
        for (int j = num(0, 3); j > 0; --j) {
            const bool is_str = coin(50);
            t += "<｜DSML｜parameter name=\"p" + std::to_string(j) + "\" string=\"" + (is_str ? "true" : "false") +
                 "\">";
            t += is_str ? noise() : json_values[static_cast<size_t>(num(0, static_cast<int>(json_values.size()) - 1))];
            t += "</｜DSML｜parameter>\n";
        }
        t += "</｜DSML｜invoke>\n";
    }
    if (wrap) t += "</｜DSML｜tool_calls>";
    if (coin(80)) t += "<｜end▁of▁sentence｜>";
    return t;
}

void mutate(std::string& t, std::mt19937& rng, const std::vector<std::string>& alphabet) {
    auto num = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    for (int n = num(0, 3); n > 0 && !t.empty(); --n) {
        const size_t pos = static_cast<size_t>(num(0, static_cast<int>(t.size()) - 1));
        switch (num(0, 2)) {
            case 0:
                t.erase(pos, static_cast<size_t>(num(1, 8)));
                break;
            case 1:
                t.insert(pos, alphabet[static_cast<size_t>(num(0, static_cast<int>(alphabet.size()) - 1))]);
                break;
            default:
                t[pos] = static_cast<char>(num(0, 255));
                break;
        }
    }
}

TEST(DsmlProperty, FuzzNeverCrashesAndStaysSplitInvariant) {
    // Pieces biased towards markup so the fuzzer reaches deep parser states, plus arbitrary bytes.
    const std::vector<std::string> alphabet = {
        "<｜DSML｜",
        "</｜DSML｜",
        "tool_calls",
        "invoke",
        "parameter",
        " name=\"",
        "\"",
        " string=\"",
        "true",
        "false",
        ">",
        "<",
        "/",
        "\n",
        "\n\n",
        " ",
        "</think>",
        "<think>",
        "<｜end▁of▁sentence｜>",
        "x",
        "{",
        "}",
        "1",
        "[",
        "]",
        "｜",
        "DSML",
        "=",
        "function_calls",
        "\\",
    };
    std::mt19937 rng(42);
    std::uniform_int_distribution<size_t> pick(0, alphabet.size() + 3);
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_int_distribution<int> len(0, 40);
    const int n_iters = 300000;
    const auto t0 = std::chrono::steady_clock::now();
    int n_with_calls = 0, n_with_args = 0, n_with_warnings = 0;
    for (int it = 0; it < n_iters; ++it) {
        std::string text;
        if (it % 3 == 0) {
            for (int n = len(rng); n > 0; --n) {
                const size_t k = pick(rng);
                if (k < alphabet.size())
                    text += alphabet[k];
                else
                    text.push_back(static_cast<char>(byte(rng)));
            }
        } else {
            text = structured_completion(rng, alphabet);
            mutate(text, rng, alphabet);
        }
        const bool thinking = (it & 1) != 0;
        const ParsedCompletion whole = parse_completion(text, {thinking, {}});
        for (const auto& call : whole.tool_calls) {
            ASSERT_EQ(call.arguments.find("｜DSML｜"), std::string::npos) << text << "\n=> " << call.arguments;
            n_with_args += call.arguments.size() > 2;
        }
        n_with_calls += !whole.tool_calls.empty();
        n_with_warnings += !whole.warnings.empty();
        if (it % 4 == 0) {
            const auto cuts = random_cuts(text.size(), rng, 6);
            ASSERT_EQ(parse_split(text, thinking, cuts), whole) << "iteration " << it;
        }
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    RecordProperty("fuzz_seconds", std::to_string(secs));
    // The generator must reach the interesting states, or the fuzz proves little.
    EXPECT_GT(n_with_calls, 1000) << "fuzz rarely produced a tool call";
    EXPECT_GT(n_with_args, 100) << "fuzz rarely produced a parameter";
    EXPECT_GT(n_with_warnings, 10000);
}

// Tool calls and text of every assistant turn in the request fixtures (and the random conversations)
// survive encode -> parse.
size_t round_trip_assistant(const OrderedJson& m, const std::string& label) {
    size_t n_calls = 0;
    for (const bool thinking : {true, false}) {
        OrderedJson assistant = m;
        if (!assistant.contains("reasoning_content") && assistant.contains("reasoning"))
            assistant["reasoning_content"] = assistant["reasoning"];
        assistant.erase("reasoning");
        if (assistant.contains("tool_calls"))
            for (auto& tc : assistant["tool_calls"])
                if (!tc["function"]["arguments"].is_string())
                    tc["function"]["arguments"] = py_json_dumps(tc["function"]["arguments"]);
        const OrderedJson user = {{"role", "user"}, {"content", "q"}};
        EncodeOptions opts;
        opts.thinking_mode = thinking ? ThinkingMode::Thinking : ThinkingMode::Chat;
        const std::string prefix = encode_messages(OrderedJson::array({user}), opts);
        const std::string full = encode_messages(OrderedJson::array({user, assistant}), opts);
        EXPECT_TRUE(full.starts_with(prefix));
        const auto p = parse_completion(std::string_view(full).substr(prefix.size()), {thinking, {}});
        const std::string content = assistant.value("content", OrderedJson("")).is_string()
                                        ? assistant.value("content", std::string())
                                        : std::string();
        const std::string reasoning = assistant.value("reasoning_content", OrderedJson("")).is_string()
                                          ? assistant.value("reasoning_content", std::string())
                                          : std::string();
        // Text that itself contains chat markup cannot round-trip; the official parser rejects it too.
        const bool markup_in_text =
            content.find("<think>") != std::string::npos || reasoning.find("<think>") != std::string::npos;
        if (markup_in_text) continue;
        EXPECT_TRUE(p.warnings.empty()) << label << ": " << p.warnings[0];
        EXPECT_EQ(p.content, content) << label;
        if (thinking) {
            EXPECT_EQ(p.reasoning, reasoning) << label;
        }
        const OrderedJson calls = assistant.value("tool_calls", OrderedJson::array());
        EXPECT_EQ(p.tool_calls.size(), calls.size()) << label;
        for (size_t i = 0; i < calls.size() && i < p.tool_calls.size(); ++i) {
            const auto& fn = calls[i]["function"];
            EXPECT_EQ(p.tool_calls[i].name, fn["name"].get<std::string>());
            const std::string raw = fn["arguments"].get<std::string>();
            OrderedJson want = OrderedJson::parse(raw, nullptr, false);
            if (want.is_discarded()) want = OrderedJson{{"arguments", raw}};  // the encoder's fallback
            EXPECT_EQ(OrderedJson::parse(p.tool_calls[i].arguments), want) << label;
            ++n_calls;
        }
    }
    return n_calls;
}

TEST(DsmlProperty, EncoderParserRoundTrip) {
    size_t n_calls = 0;
    for (const auto& e : fs::directory_iterator(fs::path(ONECARD_SOURCE_DIR) / "tests/data/chat")) {
        if (e.path().filename().string().rfind("req_", 0) != 0) continue;
        const OrderedJson fx = read_json(e.path());
        for (const auto& m : fx.at("request").at("messages"))
            if (m.at("role") == "assistant") n_calls += round_trip_assistant(m, e.path().filename().string());
    }
    EXPECT_GE(n_calls, 40u);
    const OrderedJson rnd = read_json(fs::path(ONECARD_SOURCE_DIR) / "tests/data/chat/random_requests.json");
    size_t n_random_calls = 0;
    for (size_t i = 0; i < rnd.at("cases").size(); ++i)
        for (const auto& m : rnd.at("cases")[i].at("request").at("messages"))
            if (m.at("role") == "assistant") n_random_calls += round_trip_assistant(m, "random " + std::to_string(i));
    EXPECT_GE(n_random_calls, 100u);
}

}  // namespace
}  // namespace onecard
