// The DSML tool-call grammar keeps every block it accepts well-formed for the server's DsmlParser:
// values that carry DSML markup or end-of-sentence text (the closing tag, "｜DSML｜", U+FF5C itself)
// are accepted only in forms that parse back into the same arguments (JSON escapes), and refused at
// the first byte that would break the markup otherwise. Also: additionalProperties on a tool's
// parameters, and names that cannot be written in a tag.
#include "grammar/dsml_grammar.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "tokenizer/dsml_parser.h"

#include <gtest/gtest.h>

#include <random>

namespace onecard::grammar {
namespace {

using ojson = nlohmann::ordered_json;
using json = nlohmann::json;

const std::string kOpen = "\n\n<｜DSML｜tool_calls>\n";
const std::string kClose = "\n</｜DSML｜tool_calls>";
const std::string kEosText = "<｜end▁of▁sentence｜>";

std::shared_ptr<const TokenMasks> masks_of(const std::vector<DsmlTool>& tools) {
    std::vector<std::string> bytes;
    for (int b = 0; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b));
    return std::make_shared<const TokenMasks>(compile_dsml_tool_calls(tools, false),
                                              std::make_shared<const TokenTrie>(std::move(bytes)));
}

// The index of the first byte the grammar refuses, or text.size(); `complete`: whether the block
// ended there.
size_t first_bad(const std::shared_ptr<const TokenMasks>& m, std::string_view text, bool* complete = nullptr) {
    GrammarMatcher g(m);
    for (size_t i = 0; i < text.size(); ++i)
        if (!g.accept_byte(static_cast<uint8_t>(text[i]))) return i;
    if (complete) *complete = g.is_complete();
    return text.size();
}

bool complete(const std::shared_ptr<const TokenMasks>& m, std::string_view text) {
    bool done = false;
    return first_bad(m, text, &done) == text.size() && done;
}

struct Parsed {
    std::vector<ParsedToolCall> calls;
    std::vector<std::string> warnings;
    std::string content;
};

Parsed parse(const std::string& block) {
    DsmlParser p;
    ParsedCompletion pc;
    for (const auto& ev : p.push(block + kEosText)) apply_event(pc, ev);
    for (const auto& ev : p.finish()) apply_event(pc, ev);
    return {pc.tool_calls, p.warnings(), pc.content};
}

std::string param(const std::string& name, bool raw, const std::string& value) {
    return "<｜DSML｜parameter name=\"" + name + "\" string=\"" + (raw ? "true" : "false") + "\">" + value +
           "</｜DSML｜parameter>";
}

std::string invoke(const std::string& name, const std::vector<std::string>& params) {
    std::string s = "<｜DSML｜invoke name=\"" + name + "\">\n";
    for (size_t i = 0; i < params.size(); ++i) s += (i ? "\n" : "") + params[i];
    return s + "\n</｜DSML｜invoke>";
}

std::string block(const std::string& invokes) {
    return kOpen + invokes + kClose;
}

// ---- the round-trip property ---------------------------------------------------------------------

const char* const kNoteSchema = R"({"type":"object","properties":{
    "text":{"type":"string"},
    "short":{"type":"string","maxLength":6},
    "pick":{"enum":["a｜b","</｜DSML｜parameter>","plain"]},
    "fixed":{"const":{"k｜":"<｜end▁of▁sentence｜>"}},
    "obj":{"type":"object","properties":{"s":{"type":"string"}},"additionalProperties":{"type":"string"}},
    "list":{"type":"array","items":{"type":"string"},"maxItems":3},
    "any":{}},
  "required":["text"],"additionalProperties":{"type":"string"}})";

// Random arguments for kNoteSchema, heavy on text that spells DSML markup, and the DSML text of a call
// with them, each string written in one of the forms the grammar allows (raw where it may be, JSON
// with U+FF5C as \uff5c or \uFF5C, other escapes at random).
class CallGen {
public:
    explicit CallGen(uint64_t seed) : rng_(seed) {}

    std::string text(size_t max_pieces = 5) {
        static const std::vector<std::string> pieces = {"</｜DSML｜parameter>",
                                                        "｜DSML｜",
                                                        kEosText,
                                                        "｜",
                                                        "<",
                                                        ">",
                                                        "\"",
                                                        "\\",
                                                        "a",
                                                        "é",
                                                        "中",
                                                        "\n",
                                                        "/",
                                                        "DSML",
                                                        "</",
                                                        "<｜DSML｜invoke name=\"x\">",
                                                        "\\uff5c",
                                                        " ",
                                                        "</｜DSML｜tool_calls>"};
        std::string s;
        for (size_t i = 0, n = pick(max_pieces + 1); i < n; ++i) s += pieces[pick(pieces.size())];
        return s;
    }

    // Up to 6 code points (for maxLength 6: an escape counts as one).
    std::string short_text() {
        static const std::vector<std::string> chars = {"｜", "<", "a", "é", "\"", "\\", "\n", "/"};
        std::string s;
        for (size_t i = 0, n = pick(7); i < n; ++i) s += chars[pick(chars.size())];
        return s;
    }

    std::string json_string(const std::string& v) {
        std::string o = "\"";
        for (size_t i = 0; i < v.size();) {
            const auto c = static_cast<unsigned char>(v[i]);
            const size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
            const std::string ch = v.substr(i, len);
            i += len;
            if (ch == "｜")
                o += coin() ? "\\uff5c" : "\\uFF5C";
            else if (ch == "\"")
                o += "\\\"";
            else if (ch == "\\")
                o += "\\\\";
            else if (ch == "\n")
                o += coin() ? "\\n" : "\\u000a";
            else if (ch == "<" && coin())
                o += "\\u003c";
            else if (ch == "/" && coin())
                o += "\\/";
            else
                o += ch;
        }
        return o + "\"";
    }

    // A separator as the encoder (json.dumps: ", " and ": ") or compact JSON writes it.
    std::string sep(char c) { return coin() ? std::string(1, c) : std::string(1, c) + " "; }

    // A literal as the grammar writes it: compact JSON, U+FF5C as \uff5c.
    static std::string literal(const ojson& v) {
        std::string s = v.dump();
        for (size_t at = s.find("｜"); at != std::string::npos; at = s.find("｜", at)) s.replace(at, 3, "\\uff5c");
        return s;
    }

    // Any JSON value: its text in `out`, its value returned.
    json any(std::string& out, int depth = 0) {
        switch (pick(depth > 1 ? 4 : 6)) {
            case 0:
                out += "null";
                return nullptr;
            case 1:
                out += "true";
                return true;
            case 2: {
                const int v = static_cast<int>(pick(2001)) - 1000;
                out += std::to_string(v);
                return v;
            }
            case 3: {
                const std::string s = text(3);
                out += json_string(s);
                return s;
            }
            case 4: {
                json a = json::array();
                out += "[";
                for (size_t i = 0, n = pick(3); i < n; ++i) {
                    if (i) out += sep(',');
                    a.push_back(any(out, depth + 1));
                }
                out += "]";
                return a;
            }
            default: {
                json o = json::object();
                out += "{";
                for (size_t i = 0, n = pick(3); i < n; ++i) {
                    const std::string k = text(2) + std::to_string(i);  // distinct keys
                    out += (i ? sep(',') : "") + json_string(k) + sep(':');
                    o[k] = any(out, depth + 1);
                }
                out += "}";
                return o;
            }
        }
    }

    // A string parameter: raw when the grammar allows it there and a coin says so, else JSON.
    std::string string_param(const std::string& name, const std::string& v, bool raw_allowed) {
        const bool raw =
            raw_allowed && v.find("｜DSML｜") == std::string::npos && v.find(kEosText) == std::string::npos && coin();
        return param(name, raw, raw ? v : json_string(v));
    }

    // One call of "note": its DSML text in `out`, its arguments returned.
    json note_call(std::string& out) {
        const ojson schema = ojson::parse(kNoteSchema);
        json args = json::object();
        std::vector<std::string> ps;
        const std::string t = text();
        args["text"] = t;
        ps.push_back(string_param("text", t, true));
        if (coin()) {
            const std::string s = short_text();
            args["short"] = s;
            ps.push_back(param("short", false, json_string(s)));
        }
        if (coin()) {
            // A string value may be written raw unless it holds markup ("</｜DSML｜parameter>").
            const ojson& v = schema["properties"]["pick"]["enum"][pick(3)];
            args["pick"] = json::parse(v.dump());
            const std::string s = v.get<std::string>();
            const bool raw = s.find("｜DSML｜") == std::string::npos && coin();
            ps.push_back(param("pick", raw, raw ? s : literal(v)));
        }
        if (coin()) {
            const ojson& v = schema["properties"]["fixed"]["const"];
            args["fixed"] = json::parse(v.dump());
            ps.push_back(param("fixed", false, literal(v)));
        }
        if (coin()) {
            // Extra keys carry no escapes: none of '"', '\\', controls or U+FF5C; "s" is declared.
            static const std::vector<std::string> keys = {"x", "k<y>", "é中", "a b", "/DSML", "s2"};
            json o = json::object();
            std::string v = "{";
            if (coin()) {
                const std::string s = text(3);
                o["s"] = s;
                v += "\"s\"" + sep(':') + json_string(s);
            }
            for (size_t i = pick(keys.size()), n = pick(3); n > 0 && i < keys.size(); ++i, --n) {
                const std::string s = text(2);
                o[keys[i]] = s;
                v += (v.size() > 1 ? sep(',') : "") + json(keys[i]).dump() + sep(':') + json_string(s);
            }
            args["obj"] = o;
            ps.push_back(param("obj", false, v + "}"));
        }
        if (coin()) {
            json a = json::array();
            std::string v = "[";
            for (size_t i = 0, n = pick(4); i < n; ++i) {
                const std::string s = text(2);
                a.push_back(s);
                v += (i ? sep(',') : "") + json_string(s);
            }
            args["list"] = a;
            ps.push_back(param("list", false, v + "]"));
        }
        if (coin()) {
            std::string v;
            args["any"] = any(v);
            ps.push_back(param("any", false, v));
        }
        // Extra parameters (additionalProperties: string): names are attribute text, not JSON.
        static const std::vector<std::string> extra = {"extra", "x<y>", "é中", "a b", "/DSML", "text2", "k.n"};
        for (size_t i = pick(extra.size()), n = pick(3); n > 0 && i < extra.size(); ++i, --n) {
            const std::string v = text(3);
            args[extra[i]] = v;
            ps.push_back(string_param(extra[i], v, true));
        }
        out += invoke("note", ps);
        return args;
    }

    uint64_t pick(uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng_); }
    bool coin() { return pick(2) == 0; }

private:
    std::mt19937_64 rng_;
};

std::vector<DsmlTool> note_tools() {
    return {{"note", ojson::parse(kNoteSchema)}};
}

TEST(GrammarDsmlMarkup, EveryGeneratedBlockIsAcceptedAndParsesBackIntoItsArguments) {
    const auto m = masks_of(note_tools());
    CallGen gen(20250611);
    for (int iter = 0; iter < 400; ++iter) {
        std::string invokes;
        std::vector<json> expected;
        for (size_t i = 0, n = 1 + gen.pick(2); i < n; ++i) {
            if (i) invokes += "\n";
            expected.push_back(gen.note_call(invokes));
        }
        const std::string text = block(invokes);
        bool done = false;
        const size_t bad = first_bad(m, text, &done);
        ASSERT_EQ(bad, text.size()) << "refused at " << bad << ": " << text.substr(0, bad) << "\n  in: " << text;
        ASSERT_TRUE(done) << text;
        const Parsed p = parse(text);
        EXPECT_TRUE(p.warnings.empty()) << p.warnings.front() << "\n  in: " << text;
        EXPECT_TRUE(p.content.empty()) << p.content;
        ASSERT_EQ(p.calls.size(), expected.size()) << text;
        for (size_t i = 0; i < expected.size(); ++i) {
            EXPECT_EQ(p.calls[i].name, "note");
            EXPECT_EQ(json::parse(p.calls[i].arguments), expected[i]) << text;
        }
    }
}

// Whatever a block turns into after an insertion of markup text, if the grammar still accepts it
// whole, DsmlParser reads it as the same number of well-formed calls: no warning, no content.
TEST(GrammarDsmlMarkup, AcceptedMutantsStayWellFormed) {
    const auto m = masks_of(note_tools());
    CallGen gen(77);
    static const std::vector<std::string> inserts = {
        "｜DSML｜", "</｜DSML｜parameter>", kEosText, "｜", "<", "</", "<｜DSML｜", "\\uff5c", "\"", "\n"};
    size_t accepted = 0;
    for (int iter = 0; iter < 8000; ++iter) {
        std::string invokes;
        gen.note_call(invokes);
        std::string text = block(invokes);
        text.insert(gen.pick(text.size() + 1), inserts[gen.pick(inserts.size())]);
        if (!complete(m, text)) continue;
        ++accepted;
        const Parsed p = parse(text);
        EXPECT_TRUE(p.warnings.empty()) << p.warnings.front() << "\n  in: " << text;
        EXPECT_TRUE(p.content.empty()) << p.content;
        ASSERT_EQ(p.calls.size(), 1u) << text;
        EXPECT_TRUE(json::accept(p.calls[0].arguments)) << p.calls[0].arguments << "\n  in: " << text;
    }
    EXPECT_GT(accepted, 150u) << "too few mutants accepted to say anything";
}

// ---- the unescaped forms, refused at the first bad byte ------------------------------------------

TEST(GrammarDsmlMarkup, MarkupInValuesIsRefusedAtTheByteThatWouldBreakIt) {
    const auto m = masks_of(note_tools());
    const std::string head = kOpen + "<｜DSML｜invoke name=\"note\">\n";
    struct Case {
        std::string text;
        size_t bad;  // offset of the first refused byte within `text`
    };
    const std::string json_text = param("text", false, "").substr(0, param("text", false, "").find('>') + 1);
    const std::string raw_text = param("text", true, "").substr(0, param("text", true, "").find('>') + 1);
    const std::vector<Case> cases = {
        // A raw U+FF5C in a JSON string dies at its last byte (EF BD 9C): it must be \uff5c.
        {json_text + "\"a｜", json_text.size() + 2 + 2},
        {json_text + "\"</｜DSML｜parameter>\"", json_text.size() + 3 + 2},
        {json_text + "\"" + kEosText, json_text.size() + 2 + 2},
        // An enum or const value holding U+FF5C only in its escaped spelling.
        {param("text", false, "\"\"") + "\n" + param("pick", false, "\"a｜b\""),
         param("text", false, "\"\"").size() + 1 + json_text.size() + 2},  // 'a' then '\\' expected
        // Raw values: "｜DSML｜" or end-of-sentence text dies at the byte that completes it; a lone '｜'
        // or '<' is fine. The closing tag ends the value, so text after it is refused.
        {raw_text + "a｜b｜DSML｜", raw_text.size() + std::string("a｜b｜DSML｜").size() - 1},
        {raw_text + "a<b<｜DSML｜", raw_text.size() + std::string("a<b<｜DSML｜").size() - 1},
        {raw_text + "a" + kEosText, raw_text.size() + 1 + kEosText.size() - 1},
        {raw_text + "a</｜DSML｜parameter>b", raw_text.size() + std::string("a</｜DSML｜parameter>").size()},
        // Raw text is valid UTF-8 (DsmlParser copies it into a JSON string): a cut character dies.
        {raw_text + "a\xEF\xBD\"", raw_text.size() + 3},
        // Extra object keys have no escapes, so no U+FF5C at all.
        {param("text", false, "\"\"") + "\n" + param("obj", false, "{\"k｜\":\"v\"}"),
         param("text", false, "\"\"").size() + 1 + json_text.size() - 1 + 5},  // "obj" is one byte shorter
    };
    for (const auto& c : cases) EXPECT_EQ(first_bad(m, head + c.text), head.size() + c.bad) << c.text;
    // The same values through escapes are accepted and parse back.
    const std::string ok = head + param("text", false, "\"</\\uff5cDSML\\uFF5Cparameter>\\u003c\\uff5cend\"") + "\n" +
                           param("pick", false, "\"a\\uff5cb\"") + "\n" +
                           param("extra", true, "a｜b｜DSM｜DSML <i>x</i> <｜end") + "\n</｜DSML｜invoke>" + kClose;
    ASSERT_TRUE(complete(m, ok)) << ok;
    const Parsed p = parse(ok);
    ASSERT_EQ(p.calls.size(), 1u);
    EXPECT_TRUE(p.warnings.empty());
    EXPECT_EQ(
        json::parse(p.calls[0].arguments),
        json({{"text", "</｜DSML｜parameter><｜end"}, {"pick", "a｜b"}, {"extra", "a｜b｜DSM｜DSML <i>x</i> <｜end"}}));
}

// A tool not held to a schema (under tool_choice "auto"): any value text, but never "｜DSML｜" nor
// end-of-sentence text; parameter names without "｜DSML｜".
TEST(GrammarDsmlMarkup, FreeToolValuesCannotSpellMarkers) {
    const auto m = masks_of({{"free", nullptr, false}});
    const std::string head = kOpen + "<｜DSML｜invoke name=\"free\">\n<｜DSML｜parameter name=\"";
    const std::string value_head = head + "q\" string=\"false\">";
    EXPECT_EQ(first_bad(m, value_head + "{\"a\":\"｜DSML｜"),
              value_head.size() + std::string("{\"a\":\"｜DSML｜").size() - 1);
    EXPECT_EQ(first_bad(m, value_head + "x" + kEosText), value_head.size() + 1 + kEosText.size() - 1);
    EXPECT_EQ(first_bad(m, head + "a｜DSML｜"), head.size() + std::string("a｜DSML｜").size() - 1);
    const std::string ok = value_head + "<a>｜b</｜DSML｜parameter>\n</｜DSML｜invoke>" + kClose;
    ASSERT_TRUE(complete(m, ok));
    const Parsed p = parse(ok);
    ASSERT_EQ(p.calls.size(), 1u);
    EXPECT_EQ(json::parse(p.calls[0].arguments), json::parse(R"({"q":"<a>｜b"})"));  // not JSON: a string
}

TEST(GrammarDsmlMarkup, NamesThatCannotBeWrittenInATagAreRefused) {
    auto keyword = [](const DsmlTool& t) -> std::string {
        try {
            compile_dsml_tool_calls({t}, true);
        } catch (const SchemaError& e) {
            return e.keyword();
        }
        return "(accepted)";
    };
    EXPECT_EQ(keyword({"a\"b", nullptr}), "name");
    EXPECT_EQ(keyword({"x｜DSML｜y", nullptr, false}), "name");
    EXPECT_EQ(keyword({std::string(2000, 'f'), nullptr}), "name");
    EXPECT_EQ(keyword({"f", ojson::parse(R"({"type":"object","properties":{"a\"b":{}}})")}), "properties");
    EXPECT_EQ(keyword({"f", ojson::parse(R"({"type":"object","properties":{"｜DSML｜":{}}})")}), "properties");
    EXPECT_EQ(keyword({"f｜g", ojson::parse(R"({"type":"object","properties":{"a<b>｜":{}}})")}), "(accepted)");
}

// ---- additionalProperties on a tool's parameters -------------------------------------------------

TEST(GrammarDsmlMarkup, AdditionalPropertiesFalseOrAbsentAllowsOnlyDeclaredParameters) {
    for (const char* ap : {"", R"(,"additionalProperties":false)"}) {
        const auto m = masks_of(
            {{"f", ojson::parse(std::string(R"({"type":"object","properties":{"a":{"type":"integer"}})") + ap + "}")}});
        EXPECT_TRUE(complete(m, block(invoke("f", {param("a", false, "1")}))));
        const std::string extra = block(invoke("f", {param("a", false, "1"), param("b", false, "2")}));
        // After the last declared parameter only "\n</｜DSML｜invoke>" may follow: the '｜' after "\n<" dies.
        const size_t at = extra.find("<｜DSML｜parameter name=\"b\"") + 1;
        EXPECT_EQ(first_bad(m, extra), at) << ap;
    }
}

TEST(GrammarDsmlMarkup, AdditionalPropertiesTrueAllowsAnyExtraParameterAfterTheDeclared) {
    const auto m = masks_of({{"f", ojson::parse(R"({"type":"object","properties":{"a":{"type":"integer"}},
                                                   "additionalProperties":true})")}});
    const std::string ok = block(invoke(
        "f", {param("a", false, "1"), param("b", false, R"({"x":[1,"\uff5c"]})"), param("c", true, "free ｜ text")}));
    ASSERT_TRUE(complete(m, ok));
    const Parsed p = parse(ok);
    ASSERT_EQ(p.calls.size(), 1u);
    EXPECT_EQ(json::parse(p.calls[0].arguments), json::parse(R"({"a":1,"b":{"x":[1,"｜"]},"c":"free ｜ text"})"));
    EXPECT_TRUE(complete(m, block(invoke("f", {param("b", false, "null")}))));
    // A declared name is not an extra one: "a" after an extra parameter is refused at its closing quote.
    const std::string again = block(invoke("f", {param("b", false, "1"), param("a", false, "2")}));
    EXPECT_EQ(first_bad(m, again), again.find("name=\"a\"") + 7);
    const std::string bad_a = block(invoke("f", {param("a", false, "\"s\"")}));  // declared: integer
    EXPECT_FALSE(complete(m, bad_a));
}

TEST(GrammarDsmlMarkup, AdditionalPropertiesSchemaWithoutPropertiesIsAMap) {
    const auto m = masks_of({{"env", ojson::parse(R"({"type":"object","additionalProperties":{"type":"integer"}})")}});
    const std::string ok = block(invoke("env", {param("HOME", false, "1"), param("a b<c>", false, "-2")}));
    ASSERT_TRUE(complete(m, ok));
    EXPECT_EQ(json::parse(parse(ok).calls.at(0).arguments), json::parse(R"({"HOME":1,"a b<c>":-2})"));
    EXPECT_TRUE(complete(m, block(invoke("env", {}))));
    const std::string not_int = block(invoke("env", {param("HOME", false, "\"x\"")}));
    EXPECT_EQ(first_bad(m, not_int), not_int.find("\"x\""));
    const std::string raw = block(invoke("env", {param("HOME", true, "1")}));  // an integer only as JSON
    EXPECT_EQ(first_bad(m, raw), raw.find("true"));
    const std::string bar = block(invoke("env", {param("a｜b", false, "1")}));  // names hold no U+FF5C
    EXPECT_EQ(first_bad(m, bar), bar.find("｜b") + 2);
    // A string map may also be written raw.
    const auto s = masks_of({{"env", ojson::parse(R"({"type":"object","additionalProperties":{"type":"string"}})")}});
    EXPECT_TRUE(complete(s, block(invoke("env", {param("HOME", true, "/root"), param("X", false, "\"y\"")}))));
}

TEST(GrammarDsmlMarkup, ParameterSchemasThatNeedExtraKeysOrBadAdditionalPropertiesAreRefusedByName) {
    auto keyword = [](const char* params) -> std::string {
        try {
            compile_dsml_tool_calls({{"f", ojson::parse(params)}}, true);
        } catch (const SchemaError& e) {
            return e.keyword();
        }
        return "(accepted)";
    };
    EXPECT_EQ(keyword(R"({"type":"object","additionalProperties":{"type":"string"},"minProperties":1})"),
              "minProperties");
    EXPECT_EQ(keyword(R"({"type":"object","additionalProperties":{"type":"string"},"required":["k"]})"), "required");
    EXPECT_EQ(keyword(R"({"type":"object","additionalProperties":"yes"})"), "additionalProperties");
    EXPECT_EQ(keyword(R"({"type":"object","additionalProperties":{"type":"string","pattern":"x"}})"), "pattern");
    EXPECT_EQ(keyword(R"({"type":"object","additionalProperties":{"type":"string"}})"), "(accepted)");
}

}  // namespace
}  // namespace onecard::grammar
