// The DSML tool-call grammar (grammar/dsml_grammar.h): accepts exactly the chat encoder's layout with
// the allowed tools and parameters that match their schemas; what it accepts parses back (DsmlParser)
// into calls whose arguments are the values written; refusals name the keyword.
#include "grammar/dsml_grammar.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "tokenizer/chat_json.h"
#include "tokenizer/dsml_parser.h"

#include <gtest/gtest.h>

namespace onecard::grammar {
namespace {

using ojson = nlohmann::ordered_json;

std::shared_ptr<const TokenMasks> masks_of(std::shared_ptr<const Grammar> g) {
    std::vector<std::string> bytes;
    for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
    return std::make_shared<const TokenMasks>(std::move(g), std::make_shared<const TokenTrie>(std::move(bytes)));
}

std::vector<DsmlTool> tools() {
    return {{"get_weather", ojson::parse(R"({"type":"object","properties":{"city":{"type":"string","maxLength":8},
              "days":{"type":"integer","minimum":1,"maximum":7},"units":{"enum":["C","F"]}},"required":["city","days"]})")},
            {"ping", nullptr},
            {"tree", ojson::parse(R"({"type":"object","$defs":{"n":{"type":"object","properties":{"k":{"type":"array",
              "items":{"$ref":"#/$defs/n"},"maxItems":2}}}},"properties":{"root":{"$ref":"#/$defs/n"}},"required":["root"]})")}};
}

const std::string kOpen = "\n\n<｜DSML｜tool_calls>\n";
const std::string kClose = "\n</｜DSML｜tool_calls>";
std::string invoke(const std::string& name, const std::vector<std::pair<std::string, std::string>>& params) {
    std::string s = "<｜DSML｜invoke name=\"" + name + "\">\n";
    for (size_t i = 0; i < params.size(); ++i) {
        if (i) s += "\n";
        s += "<｜DSML｜parameter name=\"" + params[i].first + "\" string=\"false\">" + params[i].second +
             "</｜DSML｜parameter>";
    }
    return s + "\n</｜DSML｜invoke>";
}

bool complete(const std::shared_ptr<const TokenMasks>& m, const std::string& text) {
    GrammarMatcher g(m);
    return g.accept_bytes(text) && g.is_complete();
}

TEST(GrammarDsml, AcceptsTheEncoderLayoutWithValidParameters) {
    const auto one = masks_of(compile_dsml_tool_calls(tools(), true));
    const auto many = masks_of(compile_dsml_tool_calls(tools(), false));
    const std::string w = invoke("get_weather", {{"city", "\"Paris\""}, {"days", "3"}});
    const std::string w2 = invoke("get_weather", {{"city", "\"Oslo\""}, {"days", "7"}, {"units", "\"F\""}});
    const std::string p = invoke("ping", {});
    const std::string t = invoke("tree", {{"root", R"({"k":[{},{"k":[]}]})"}});
    for (const auto& text : {kOpen + w + kClose, kOpen + w2 + kClose, kOpen + p + kClose, kOpen + t + kClose}) {
        EXPECT_TRUE(complete(one, text)) << text;
        EXPECT_TRUE(complete(many, text)) << text;
    }
    EXPECT_FALSE(complete(one, kOpen + w + "\n" + p + kClose));  // parallel_tool_calls false: one invoke
    EXPECT_TRUE(complete(many, kOpen + w + "\n" + p + "\n" + t + kClose));
    // What it accepts parses back into the calls.
    DsmlParser parser;
    ParsedCompletion pc;
    for (const auto& ev : parser.push(kOpen + w2 + "\n" + p + kClose + "<｜end▁of▁sentence｜>")) apply_event(pc, ev);
    for (const auto& ev : parser.finish()) apply_event(pc, ev);
    ASSERT_EQ(pc.tool_calls.size(), 2u) << pc.content;
    EXPECT_EQ(pc.tool_calls[0].name, "get_weather");
    EXPECT_EQ(nlohmann::json::parse(pc.tool_calls[0].arguments),
              nlohmann::json::parse(R"({"city":"Oslo","days":7,"units":"F"})"));
    EXPECT_EQ(pc.tool_calls[1].name, "ping");
    EXPECT_EQ(nlohmann::json::parse(pc.tool_calls[1].arguments), nlohmann::json::object());
    EXPECT_TRUE(pc.content.empty()) << pc.content;
}

// A plain string property may also be written raw (string="true"), as the model was trained to; a
// bounded or shaped string only in its JSON form, where the grammar checks it.
TEST(GrammarDsml, PlainStringsMayBeWrittenRaw) {
    const std::vector<DsmlTool> t = {{"note", ojson::parse(R"({"type":"object","properties":{"text":{"type":"string"},
          "tag":{"type":"string","maxLength":4}},"required":["text"]})")}};
    const auto m = masks_of(compile_dsml_tool_calls(t, true));
    auto raw = [](const std::string& name, const std::string& v) {
        return "<｜DSML｜parameter name=\"" + name + "\" string=\"true\">" + v + "</｜DSML｜parameter>";
    };
    const std::string head = kOpen + "<｜DSML｜invoke name=\"note\">\n", tail = "\n</｜DSML｜invoke>" + kClose;
    const std::string ok = head + raw("text", "Paris, \"France\" \\ 巴黎") + tail;
    EXPECT_TRUE(complete(m, ok));
    EXPECT_TRUE(complete(m, head + raw("text", "") + tail));
    EXPECT_TRUE(complete(m, head + raw("text", "a<b>") + tail)) << "'<' is text; only DSML markup is refused";
    EXPECT_FALSE(complete(m, head + raw("text", "a｜DSML｜b") + tail)) << "(grammar_dsml_markup_test.cpp has more)";
    EXPECT_FALSE(complete(m, head + raw("text", "x") + "\n" + raw("tag", "abc") + tail))
        << "a bounded string only as JSON";
    EXPECT_TRUE(complete(m, head + raw("text", "x") +
                                "\n<｜DSML｜parameter name=\"tag\" string=\"false\">\"abc\"</｜DSML｜parameter>" +
                                tail));
    DsmlParser parser;
    ParsedCompletion pc;
    for (const auto& ev : parser.push(ok + "<｜end▁of▁sentence｜>")) apply_event(pc, ev);
    for (const auto& ev : parser.finish()) apply_event(pc, ev);
    ASSERT_EQ(pc.tool_calls.size(), 1u) << pc.content;
    EXPECT_EQ(nlohmann::json::parse(pc.tool_calls[0].arguments),
              nlohmann::json({{"text", "Paris, \"France\" \\ 巴黎"}}));
}

std::string raw_param(const std::string& name, const std::string& v) {
    return "<｜DSML｜parameter name=\"" + name + "\" string=\"true\">" + v + "</｜DSML｜parameter>";
}

ojson arguments_of(const std::string& text) {
    DsmlParser parser;
    ParsedCompletion pc;
    for (const auto& ev : parser.push(text + "<｜end▁of▁sentence｜>")) apply_event(pc, ev);
    for (const auto& ev : parser.finish()) apply_event(pc, ev);
    EXPECT_TRUE(parser.warnings().empty()) << text;
    return pc.tool_calls.size() == 1 ? ojson::parse(pc.tool_calls[0].arguments) : ojson();
}

// The chat encoder writes a non-string argument with json.dumps (", " and ": "); the model learnt that
// layout, so the grammar must allow it (and the compact one), but no other whitespace.
TEST(GrammarDsml, JsonValuesMayUseTheEncodersSeparators) {
    const std::vector<DsmlTool> t = {{"f", ojson::parse(R"({"type":"object","properties":{
          "tags":{"type":"array","items":{"type":"string"}},
          "box":{"type":"object","properties":{"w":{"type":"integer"},"h":{"type":"number"}},"required":["w"]},
          "any":{},
          "mode":{"enum":[{"a":[1,2]},"fast"]}},"required":["tags"]})")}};
    const auto m = masks_of(compile_dsml_tool_calls(t, true));
    const std::vector<ojson> args = {
        ojson::parse(R"({"tags":["Boston","New York"]})"),
        ojson::parse(R"({"tags":[],"box":{"w":3,"h":1.5}})"),
        ojson::parse(R"({"tags":["x"],"any":{"k":[1,{"z":null}],"s":"a, b: c"}})"),
        ojson::parse(R"({"tags":["x"],"mode":{"a":[1,2]}})"),
    };
    for (const auto& a : args) {
        std::vector<std::pair<std::string, std::string>> spaced, compact;
        for (const auto& [k, v] : a.items()) {
            spaced.emplace_back(k, py_json_dumps(v));  // what the encoder writes
            compact.emplace_back(k, v.dump());
        }
        for (const auto& params : {spaced, compact}) {
            const std::string text = kOpen + invoke("f", params) + kClose;
            EXPECT_TRUE(complete(m, text)) << text;
            EXPECT_EQ(arguments_of(text), a) << text;
        }
    }
    for (const char* bad : {R"(["a",  "b"])", R"(["a" ,"b"])", R"([ "a"])", "[\"a\",\n\"b\"]", "[\"a\",\t\"b\"]"})
        EXPECT_FALSE(complete(m, kOpen + invoke("f", {{"tags", bad}}) + kClose)) << bad;
    EXPECT_FALSE(complete(m, kOpen + invoke("f", {{"tags", "[]"}, {"box", R"({"w" : 1})"}}) + kClose));
    EXPECT_FALSE(complete(m, kOpen + invoke("f", {{"tags", "[]"}, {"box", R"({"w": 1, })"}}) + kClose));
    // response_format's JSON (json_schema.h) stays compact.
    const auto plain = masks_of(compile_json_schema(ojson::parse(R"({"type":"array","items":{"type":"integer"}})")));
    EXPECT_TRUE(complete(plain, "[1,2]"));
    EXPECT_FALSE(complete(plain, "[1, 2]"));
}

// The string values of an enum or const may be written raw too (string="true"), but only those; the
// JSON form stays allowed, and values that hold markup only in it.
TEST(GrammarDsml, EnumAndConstStringsMayBeWrittenRaw) {
    const std::vector<DsmlTool> t = {{"f", ojson::parse(R"({"type":"object","properties":{
          "kind":{"type":"string","enum":["blackened","mutilated","black"]},
          "mixed":{"enum":[7,"seven","a｜DSML｜b",null]},
          "fixed":{"const":"v1"},
          "num":{"type":"integer","enum":[1,2]}}})")}};
    const auto m = masks_of(compile_dsml_tool_calls(t, true));
    const std::string head = kOpen + "<｜DSML｜invoke name=\"f\">\n", tail = "\n</｜DSML｜invoke>" + kClose;
    for (const char* v : {"blackened", "mutilated", "black"}) {
        const std::string text = head + raw_param("kind", v) + tail;
        EXPECT_TRUE(complete(m, text)) << v;
        EXPECT_EQ(arguments_of(text), ojson({{"kind", v}}));
        EXPECT_TRUE(complete(m, kOpen + invoke("f", {{"kind", std::string("\"") + v + "\""}}) + kClose)) << v;
    }
    for (const char* v : {"blacken", "Black", "blackenedx", "", " black"})
        EXPECT_FALSE(complete(m, head + raw_param("kind", v) + tail)) << v;
    EXPECT_TRUE(complete(m, head + raw_param("mixed", "seven") + tail));
    EXPECT_TRUE(complete(m, kOpen + invoke("f", {{"mixed", "7"}}) + kClose));
    EXPECT_FALSE(complete(m, head + raw_param("mixed", "7") + tail)) << "7 is a number: JSON only";
    EXPECT_FALSE(complete(m, head + raw_param("mixed", "a｜DSML｜b") + tail)) << "markup: JSON only";
    EXPECT_TRUE(complete(m, kOpen + invoke("f", {{"mixed", R"("a\uff5cDSML\uff5cb")"}}) + kClose));
    EXPECT_TRUE(complete(m, head + raw_param("fixed", "v1") + tail));
    EXPECT_FALSE(complete(m, head + raw_param("fixed", "v2") + tail));
    EXPECT_FALSE(complete(m, head + raw_param("num", "1") + tail)) << "an integer enum has no raw form";
}

// The same through local $refs (pydantic writes enums as $defs): raw where the target allows it.
TEST(GrammarDsml, RawFormsFollowLocalRefs) {
    const std::vector<DsmlTool> t = {{"f", ojson::parse(R"({"type":"object",
          "$defs":{"Color":{"type":"string","enum":["red","green"]},"Name":{"type":"string"},
                   "Alias":{"$ref":"#/$defs/Color"},"Short":{"type":"string","maxLength":3}},
          "properties":{"color":{"$ref":"#/$defs/Color"},"name":{"$ref":"#/$defs/Name","description":"who"},
                        "alias":{"$ref":"#/$defs/Alias"},"short":{"$ref":"#/$defs/Short"}}})")}};
    const auto m = masks_of(compile_dsml_tool_calls(t, true));
    const std::string head = kOpen + "<｜DSML｜invoke name=\"f\">\n", tail = "\n</｜DSML｜invoke>" + kClose;
    EXPECT_TRUE(complete(m, head + raw_param("color", "green") + tail));
    EXPECT_FALSE(complete(m, head + raw_param("color", "blue") + tail));
    EXPECT_TRUE(complete(m, head + raw_param("name", "Ada Lovelace") + tail));
    EXPECT_TRUE(complete(m, head + raw_param("alias", "red") + tail)) << "a $ref to a $ref";
    EXPECT_FALSE(complete(m, head + raw_param("short", "abc") + tail)) << "a bounded string only as JSON";
    EXPECT_TRUE(complete(m, kOpen + invoke("f", {{"short", "\"abc\""}}) + kClose));
    EXPECT_EQ(arguments_of(head + raw_param("color", "green") + tail), ojson({{"color", "green"}}));
}

TEST(GrammarDsml, RejectsWhatBreaksTheToolsOrTheirSchemas) {
    const auto m = masks_of(compile_dsml_tool_calls(tools(), false));
    const std::vector<std::string> bad = {
        kOpen + invoke("get_weather", {{"city", "\"Paris\""}}) + kClose,                      // days required
        kOpen + invoke("get_weather", {{"days", "3"}, {"city", "\"Paris\""}}) + kClose,       // order
        kOpen + invoke("get_weather", {{"city", "\"Paris\""}, {"days", "9"}}) + kClose,       // maximum
        kOpen + invoke("get_weather", {{"city", "\"Copenhagen\""}, {"days", "1"}}) + kClose,  // maxLength
        kOpen + invoke("get_weather", {{"city", "\"P\""}, {"days", "1"}, {"units", "\"K\""}}) + kClose,  // enum
        kOpen + invoke("get_weather", {{"city", "\"P\""}, {"days", "1"}, {"x", "1"}}) + kClose,          // extra key
        kOpen + invoke("nope", {}) + kClose,                                                             // unknown tool
        kOpen + kClose,                                                                                  // no call
        "Sure!" + kOpen + invoke("ping", {}) + kClose,  // content first
    };
    for (const auto& text : bad) EXPECT_FALSE(complete(m, text)) << text;
    // Complete: nothing may follow the block.
    GrammarMatcher g(m);
    ASSERT_TRUE(g.accept_bytes(kOpen + invoke("ping", {}) + kClose));
    EXPECT_TRUE(g.is_complete());
    EXPECT_FALSE(g.accept_bytes("\n"));
}

TEST(GrammarDsml, RefusalsNameTheKeyword) {
    auto refused = [](const char* params) -> std::string {
        try {
            compile_dsml_tool_calls({{"f", ojson::parse(params)}}, true);
        } catch (const SchemaError& e) {
            return e.keyword();
        }
        return "(accepted)";
    };
    EXPECT_EQ(refused(R"({"type":"object","properties":{"s":{"type":"string","pattern":"a"}}})"), "pattern");
    EXPECT_EQ(refused(R"({"anyOf":[{"type":"object"}]})"), "anyOf");
    EXPECT_EQ(refused(R"({"type":"array"})"), "type");
    EXPECT_EQ(refused(R"({"type":"object","required":["q"]})"), "required");
    EXPECT_EQ(refused(R"({"type":"object","properties":{"a":{"type":"integer"}}})"), "(accepted)");
    EXPECT_THROW(compile_dsml_tool_calls({}, true), SchemaError);
}

}  // namespace
}  // namespace onecard::grammar
