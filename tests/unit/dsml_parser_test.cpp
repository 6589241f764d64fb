// DSML tool-call and reasoning parsers: agreement with DeepSeek's official (strict) parser on completions
// rendered by the official encoder (tests/data/chat/completions.json), and the lenient behaviours the
// official parser lacks (recovery, malformed blocks, truncation), each checked on concrete texts.
#include "core/error.h"
#include "tokenizer/chat_json.h"
#include "tokenizer/reasoning_parser.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace onecard {
namespace {

const std::string kEosText = "<｜end▁of▁sentence｜>";

ParsedCompletion parse_chat(std::string_view text) {
    return parse_completion(text, {false, {}});
}
ParsedCompletion parse_think(std::string_view text) {
    return parse_completion(text, {true, {}});
}

bool has_warning(const ParsedCompletion& p, std::string_view needle) {
    for (const auto& w : p.warnings)
        if (w.find(needle) != std::string::npos) return true;
    return false;
}

TEST(DsmlParser, AgreesWithOfficialParserOnEncoderCompletions) {
    std::ifstream f(std::filesystem::path(ONECARD_SOURCE_DIR) / "tests/data/chat/completions.json");
    std::stringstream ss;
    ss << f.rdbuf();
    const OrderedJson fx = OrderedJson::parse(ss.str());
    const auto& cases = fx.at("completions");
    ASSERT_GE(cases.size(), 40u);
    size_t n_calls = 0;
    for (const auto& c : cases) {
        const bool thinking = c.at("thinking_mode") == "thinking";
        const std::string text = c.at("text").get<std::string>();
        const ParsedCompletion got = parse_completion(text, {thinking, {}});
        const std::string label = c.at("name").get<std::string>() + "/" + c.at("thinking_mode").get<std::string>();
        EXPECT_EQ(got.content, c.at("content").get<std::string>()) << label;
        EXPECT_EQ(got.reasoning, c.at("reasoning_content").get<std::string>()) << label;
        EXPECT_TRUE(got.warnings.empty()) << label << ": " << (got.warnings.empty() ? "" : got.warnings[0]);
        const auto& calls = c.at("tool_calls");
        ASSERT_EQ(got.tool_calls.size(), calls.size()) << label;
        for (size_t i = 0; i < calls.size(); ++i) {
            EXPECT_EQ(got.tool_calls[i].name, calls[i].at("name").get<std::string>()) << label;
            // Byte-identical argument text: same key order, separators and escapes as the official decoder.
            EXPECT_EQ(got.tool_calls[i].arguments, calls[i].at("arguments").get<std::string>()) << label;
            EXPECT_EQ(got.tool_calls[i].id, "call_" + std::to_string(i));
        }
        n_calls += calls.size();
    }
    EXPECT_GE(n_calls, 20u);
}

TEST(DsmlParser, ThinkingSplitsAtThinkEnd) {
    const auto p = parse_think("Let me think.\nOK.</think>The answer is 4." + kEosText);
    EXPECT_EQ(p.reasoning, "Let me think.\nOK.");
    EXPECT_EQ(p.content, "The answer is 4.");
    EXPECT_TRUE(p.tool_calls.empty());
    EXPECT_TRUE(p.warnings.empty());
}

TEST(DsmlParser, LeadingThinkIsDroppedAndUnclosedReasoningWarns) {
    const auto p = parse_think("<think>abc</think>d");
    EXPECT_EQ(p.reasoning, "abc");
    EXPECT_EQ(p.content, "d");
    const auto q = parse_think("still thinking when max_tokens hit");
    EXPECT_EQ(q.reasoning, "still thinking when max_tokens hit");
    EXPECT_EQ(q.content, "");
    EXPECT_TRUE(has_warning(q, "before </think>"));
}

TEST(DsmlParser, ChatModePassesThinkTagsThrough) {
    const auto p = parse_chat("Use </think> and <think> literally." + kEosText);
    EXPECT_EQ(p.content, "Use </think> and <think> literally.");
    EXPECT_EQ(p.reasoning, "");
}

// Found by parsers_fuzz (issue 22's long run): nlohmann's accept() stops at a NUL byte, so "0\0x" passed
// as JSON and the arguments' text ended early, not JSON. A non-string value with a NUL is passed as a
// string instead, and the arguments are one JSON object.
TEST(DsmlParser, NulInNonStringParameterKeepsArgumentsJson) {
    const std::string text = std::string("<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n") +
                             "<｜DSML｜parameter name=\"n\" string=\"false\">0" + std::string(1, '\0') +
                             "x</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>" + kEosText;
    const auto p = parse_chat(text);
    ASSERT_EQ(p.tool_calls.size(), 1u);
    const OrderedJson args = OrderedJson::parse(p.tool_calls[0].arguments);  // throws if not one JSON value
    ASSERT_TRUE(args.is_object());
    EXPECT_EQ(args["n"], std::string("0") + std::string(1, '\0') + "x");
    EXPECT_TRUE(has_warning(p, "is not JSON"));
}

TEST(DsmlParser, ParsesSeveralInvokesWithTypedParameters) {
    const std::string text =
        "Checking.\n\n<｜DSML｜tool_calls>\n"
        "<｜DSML｜invoke name=\"get_weather\">\n"
        "<｜DSML｜parameter name=\"city\" string=\"true\">Zürich \"HB\"\n2</｜DSML｜parameter>\n"
        "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n"
        "<｜DSML｜parameter name=\"opts\" string=\"false\">{\"a\": [1, true, null]}</｜DSML｜parameter>\n"
        "</｜DSML｜invoke>\n"
        "<｜DSML｜invoke name=\"now\">\n\n</｜DSML｜invoke>\n"
        "</｜DSML｜tool_calls>" +
        kEosText;
    const auto p = parse_chat(text);
    EXPECT_EQ(p.content, "Checking.");
    ASSERT_EQ(p.tool_calls.size(), 2u);
    EXPECT_EQ(p.tool_calls[0].name, "get_weather");
    EXPECT_EQ(p.tool_calls[0].arguments, R"({"city": "Zürich \"HB\"\n2", "days": 3, "opts": {"a": [1, true, null]}})");
    EXPECT_EQ(p.tool_calls[1].name, "now");
    EXPECT_EQ(p.tool_calls[1].arguments, "{}");
    EXPECT_TRUE(p.warnings.empty()) << p.warnings[0];
    const OrderedJson args = OrderedJson::parse(p.tool_calls[0].arguments);
    EXPECT_EQ(args["days"], 3);
    EXPECT_EQ(args["city"], "Zürich \"HB\"\n2");
}

TEST(DsmlParser, RecoversInvokesWithoutWrapper) {
    const std::string text =
        "Sure.\n\n<｜DSML｜invoke name=\"a\">\n<｜DSML｜parameter name=\"x\" string=\"true\">1</｜DSML｜parameter>\n"
        "</｜DSML｜invoke>\n<｜DSML｜invoke name=\"b\">\n</｜DSML｜invoke>" +
        kEosText;
    const auto p = parse_chat(text);
    EXPECT_EQ(p.content, "Sure.");
    ASSERT_EQ(p.tool_calls.size(), 2u);
    EXPECT_EQ(p.tool_calls[0].arguments, R"({"x": "1"})");
    EXPECT_EQ(p.tool_calls[1].name, "b");
    EXPECT_TRUE(has_warning(p, "without the tool_calls wrapper"));
}

TEST(DsmlParser, ToolCallInsideReasoningGoesToToolParser) {
    const std::string text =
        "I will call it.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
        "<｜DSML｜parameter name=\"q\" string=\"true\">v</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
        "</｜DSML｜tool_calls>" +
        kEosText;
    const auto p = parse_think(text);
    EXPECT_EQ(p.reasoning, "I will call it.");
    EXPECT_EQ(p.content, "");
    ASSERT_EQ(p.tool_calls.size(), 1u);
    EXPECT_EQ(p.tool_calls[0].arguments, R"({"q": "v"})");
    EXPECT_TRUE(has_warning(p, "inside reasoning"));
}

TEST(DsmlParser, MalformedBlockBecomesContentWithWarning) {
    // A wrapper followed by prose: nothing was a call, so the raw text comes back as content.
    const auto p = parse_chat("Hi\n\n<｜DSML｜tool_calls>\nnot an invoke" + kEosText);
    EXPECT_EQ(p.content, "Hi\n\n<｜DSML｜tool_calls>\nnot an invoke");
    EXPECT_TRUE(p.tool_calls.empty());
    EXPECT_FALSE(p.warnings.empty());
    // An unknown element name.
    const auto q = parse_chat("x<｜DSML｜bogus attr=\"1\">y");
    EXPECT_EQ(q.content, "x<｜DSML｜bogus attr=\"1\">y");
    EXPECT_FALSE(q.warnings.empty());
}

TEST(DsmlParser, GarbageInsideInvokeClosesTheCall) {
    const std::string text =
        "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
        "<｜DSML｜parameter name=\"a\" string=\"false\">1</｜DSML｜parameter>\noops</｜DSML｜invoke>";
    const auto p = parse_chat(text);
    ASSERT_EQ(p.tool_calls.size(), 1u);
    EXPECT_EQ(p.tool_calls[0].arguments, R"({"a": 1})");
    EXPECT_TRUE(p.content.starts_with("oops"));
    EXPECT_FALSE(p.warnings.empty());
}

TEST(DsmlParser, InvalidJsonValueBecomesStringAndDuplicatesAreDropped) {
    const std::string text =
        "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
        "<｜DSML｜parameter name=\"n\" string=\"false\">forty two</｜DSML｜parameter>\n"
        "<｜DSML｜parameter name=\"n\" string=\"true\">again</｜DSML｜parameter>\n"
        "<｜DSML｜parameter name=\"m\" string=\"false\"> [1, 2] </｜DSML｜parameter>\n"
        "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
    const auto p = parse_chat(text);
    ASSERT_EQ(p.tool_calls.size(), 1u);
    EXPECT_EQ(p.tool_calls[0].arguments, R"({"n": "forty two", "m":  [1, 2] })");
    EXPECT_TRUE(OrderedJson::accept(p.tool_calls[0].arguments));
    EXPECT_TRUE(has_warning(p, "not JSON"));
    EXPECT_TRUE(has_warning(p, "duplicate parameter"));
}

TEST(DsmlParser, TruncatedOutputClosesCallWithoutLeakingMarkup) {
    const std::string text =
        "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
        "<｜DSML｜parameter name=\"s\" string=\"true\">partial value</｜DSML｜para";
    const auto p = parse_chat(text);
    ASSERT_EQ(p.tool_calls.size(), 1u);
    EXPECT_EQ(p.tool_calls[0].arguments, R"({"s": "partial value"})");
    EXPECT_EQ(p.content, "");
    EXPECT_TRUE(has_warning(p, "not closed"));
}

TEST(DsmlParser, UnclosedParameterIsClosedByTheNextTag) {
    const std::string text =
        "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
        "<｜DSML｜parameter name=\"s\" string=\"true\">abc\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
    const auto p = parse_chat(text);
    ASSERT_EQ(p.tool_calls.size(), 1u);
    EXPECT_EQ(p.tool_calls[0].arguments, "{\"s\": \"abc\\n\"}");
    EXPECT_EQ(p.content, "");
}

TEST(DsmlParser, TextAfterEosIsIgnored) {
    const auto p = parse_chat("done" + kEosText + "garbage");
    EXPECT_EQ(p.content, "done");
    EXPECT_TRUE(has_warning(p, "after the end-of-sentence"));
}

TEST(DsmlParser, ContentAfterBlockIsKeptWithWarning) {
    const std::string text =
        "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>\n\nP.S. hi" +
        kEosText;
    const auto p = parse_chat(text);
    ASSERT_EQ(p.tool_calls.size(), 1u);
    EXPECT_EQ(p.content, "P.S. hi");
    EXPECT_TRUE(has_warning(p, "after a tool_calls block"));
}

TEST(DsmlParser, StreamingHoldsBackPartialMarkers) {
    ReasoningParser parser({false, {}});
    std::string content;
    for (const auto& ev : parser.push("Hello\n\n<｜DS")) {
        ASSERT_EQ(ev.kind, ParseEventKind::Content);
        content += ev.text;
    }
    EXPECT_EQ(content, "Hello");  // the blank line and the marker prefix wait
    parser.check_integrity();
    std::vector<ParseEvent> evs = parser.push("ML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n");
    ASSERT_EQ(evs.size(), 1u);
    EXPECT_EQ(evs[0].kind, ParseEventKind::ToolCallBegin);
    EXPECT_EQ(evs[0].name, "f");
    EXPECT_EQ(evs[0].id, "call_0");
    parser.check_integrity();
    evs = parser.push("<｜DSML｜parameter name=\"q\" string=\"true\">ab</｜DSML｜par");
    ASSERT_EQ(evs.size(), 1u);
    EXPECT_EQ(evs[0].kind, ParseEventKind::ToolCallArgs);
    EXPECT_EQ(evs[0].text, "{\"q\": \"ab");  // streamed before the parameter closes; "</" held back
    evs = parser.push("ameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>" + kEosText);
    ASSERT_EQ(evs.size(), 2u);
    EXPECT_EQ(evs[0].text, "\"}");
    EXPECT_EQ(evs[1].kind, ParseEventKind::ToolCallEnd);
    EXPECT_TRUE(parser.saw_eos());
    EXPECT_TRUE(parser.finish().empty());
    parser.check_integrity();
}

TEST(DsmlParser, DsmlTextWithoutTagIsPlainContent) {
    // "｜DSML｜" alone (no '<') is not a tag start; a lone '<' is not either.
    const auto p = parse_chat("a ｜DSML｜ b < c <｜");
    EXPECT_EQ(p.content, "a ｜DSML｜ b < c <｜");
}

TEST(DsmlParser, LargeCompletionWithManyInvokes) {
    // 2,000 calls in one block, parsed whole and in 7-byte pieces: same calls, bounded held-back input.
    std::string text = "Plan:\n\n<｜DSML｜tool_calls>\n";
    for (int i = 0; i < 2000; ++i) {
        text += "<｜DSML｜invoke name=\"step\">\n<｜DSML｜parameter name=\"i\" string=\"false\">" + std::to_string(i) +
                "</｜DSML｜parameter>\n<｜DSML｜parameter name=\"note\" string=\"true\">" +
                std::string(100, 'a' + i % 26) + "</｜DSML｜parameter>\n</｜DSML｜invoke>\n";
    }
    text += "</｜DSML｜tool_calls>" + kEosText;
    const auto whole = parse_chat(text);
    ASSERT_EQ(whole.tool_calls.size(), 2000u);
    EXPECT_EQ(whole.content, "Plan:");
    EXPECT_EQ(whole.tool_calls[1999].arguments,
              "{\"i\": 1999, \"note\": \"" + std::string(100, 'a' + 1999 % 26) + "\"}");
    ReasoningParser parser({false, {}});
    ParsedCompletion streamed;
    for (size_t pos = 0; pos < text.size(); pos += 7) {
        for (const auto& ev : parser.push(std::string_view(text).substr(pos, 7))) apply_event(streamed, ev);
        parser.check_integrity();
    }
    for (const auto& ev : parser.finish()) apply_event(streamed, ev);
    streamed.warnings = parser.warnings();
    EXPECT_EQ(streamed, whole);
}

}  // namespace
}  // namespace onecard
