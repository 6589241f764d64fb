// JSON Schema compiler and matcher: hand-written cases with the exact byte where a bad document dies,
// refusals naming the keyword, rollback, the bounded grammar cache.
#include "grammar/grammar_cache.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar_test_util.h"

#include <gtest/gtest.h>

namespace onecard::grammar {
namespace {

std::shared_ptr<const TokenTrie> small_trie() {
    return std::make_shared<const TokenTrie>(test::synthetic_vocab(2000, 7));
}

GrammarMatcher matcher_for(const std::string& schema) {
    return GrammarMatcher(std::make_shared<const TokenMasks>(compile_json_schema_text(schema), small_trie()));
}

// The index of the first byte the matcher rejects, or text.size() when it takes every byte.
size_t first_bad(GrammarMatcher& m, std::string_view text) {
    for (size_t i = 0; i < text.size(); ++i) {
        m.check_integrity();
        if (!m.accept_byte(static_cast<uint8_t>(text[i]))) return i;
    }
    return text.size();
}

struct Case {
    std::string doc;
    size_t bad;     // first rejected byte; doc.size(): all taken
    bool complete;  // can_terminate() after all bytes (when all are taken)
};

void expect_cases(const std::string& schema, const std::vector<Case>& cases) {
    for (const auto& c : cases) {
        auto m = matcher_for(schema);
        EXPECT_EQ(first_bad(m, c.doc), c.bad) << schema << "\n  doc: " << c.doc;
        if (c.bad == c.doc.size()) {
            EXPECT_EQ(m.can_terminate(), c.complete) << c.doc;
        }
    }
}

// A bound of many digits compiles to a small grammar: a 0..0-9..9 span of digits is one chain, not
// 2^n nodes (json_schema_fuzz: a 17-digit "minimum" built millions of nodes and took seconds).
TEST(GrammarSchema, LongIntegerBoundsStaySmall) {
    // (A double holds the bound exactly: bounds past 2^53 are rounded today, a limit left as it is.)
    const std::string s = R"({"type":"integer","minimum":55555555555555552})";
    EXPECT_LT(compile_json_schema_text(s)->n_nodes(), 4000u);
    expect_cases(s, {{"55555555555555552", 17, true},
                     {"99999999999999999", 17, true},
                     {"123456789012345678", 18, true},
                     {"55555555555555551", 17, false},  // too small with 17 digits; an 18th would do
                     {"-1", 0, false}});
    const std::string r = R"({"type":"integer","minimum":1000000000000000,"maximum":8999999999999999})";
    EXPECT_LT(compile_json_schema_text(r)->n_nodes(), 4000u);
    expect_cases(r, {{"1000000000000000", 16, true}, {"8999999999999999", 16, true}, {"9000000000000000", 0, false}});
}

TEST(GrammarSchema, ObjectPropertyOrderRequiredAndCompactness) {
    const std::string s = R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"boolean"},
        "c":{"type":"string"}},"required":["b"]})";
    expect_cases(s, {
                        {R"({"b":true})", 10, true},
                        {R"({"a":1,"b":false,"c":"x"})", 25, true},
                        {R"({"b":true,"a":1})", 11, false},  // order: a after b dies at 'a'
                        {R"({"a":1})", 6, false},            // b is required: '}' dies
                        {R"({ "b":true})", 1, false},        // no whitespace
                        {R"({"b":true,"d":1})", 11, false},  // no extra keys (additionalProperties absent)
                        {R"({"b":tru)", 8, false},
                    });
}

TEST(GrammarSchema, StringsEscapesUtf8AndLengths) {
    expect_cases(R"({"type":"string","minLength":2,"maxLength":3})",
                 {
                     {R"("ab")", 4, true},
                     {R"("a")", 2, false},
                     {R"("abcd")", 4, false},
                     {"\"\xc3\xa9\\n\xf0\x9f\x98\x80\"", 10, true},  // three characters, one escaped
                     {R"("\uD83D\uDE00x")", 15, true},               // a surrogate pair is one character
                     {R"("\uDE00x")", 4, false},                     // lone low surrogate
                     {R"("\uD83Dxx")", 7, false},                    // high surrogate without its pair
                     {"\"a\x01\"", 2, false},                        // raw control character
                     {"\"\xc0\xaf\"", 1, false},                     // overlong encoding
                     {"\"\xed\xa0\x80\"", 2, false},                 // UTF-8 surrogate
                     {R"("\q")", 2, false},
                 });
}

TEST(GrammarSchema, IntegerRangesAndNumbers) {
    expect_cases(R"({"type":"integer","minimum":-15,"maximum":120})", {
                                                                          {"-15", 3, true},
                                                                          {"-16", 2, false},
                                                                          {"120", 3, true},
                                                                          {"121", 2, false},
                                                                          {"0", 1, true},
                                                                          {"-0", 1, false},
                                                                          {"007", 1, false},
                                                                          {"1.5", 1, false},
                                                                          {"99", 2, true},
                                                                          {"1200", 3, false},
                                                                      });
    expect_cases(R"({"type":"integer","exclusiveMinimum":9})",
                 {{"9", 1, false}, {"10", 2, true}, {"12345678901", 11, true}});
    expect_cases(R"({"type":"number"})", {{"-0.5e+10", 8, true},
                                          {"1.", 2, false},
                                          {"01", 1, false},
                                          {".5", 0, false},
                                          {"2E3", 3, true},
                                          {"-", 1, false}});
    expect_cases(R"({"type":"number","minimum":0})", {{"-1", 0, false}, {"3.25", 4, true}});
}

TEST(GrammarSchema, EnumConstAnyOfRefAndFormats) {
    expect_cases(R"({"type":"string","enum":["x",1]})", {{R"("x")", 3, true}, {"1", 0, false}});
    expect_cases(R"({"enum":["red","green",3,null]})",
                 {{R"("red")", 5, true}, {R"("gre")", 4, false}, {"3", 1, true}, {"null", 4, true}, {"4", 0, false}});
    expect_cases(R"({"const":{"k":[1,"x"]}})", {{R"({"k":[1,"x"]})", 13, true}, {R"({"k":[2)", 6, false}});
    expect_cases(R"({"anyOf":[{"type":"integer"},{"type":"array","items":{"type":"null"},"maxItems":2}]})",
                 {{"[null,null]", 11, true}, {"[null,null,", 10, false}, {"42", 2, true}, {"[1", 1, false}});
    const std::string tree = R"({"$defs":{"t":{"type":"array","items":{"$ref":"#/$defs/t"}}},"$ref":"#/$defs/t"})";
    expect_cases(tree, {{"[[[],[[]]],[]]", 14, true}, {"[[]]]", 4, false}});
    expect_cases(R"({"type":"string","format":"date-time"})", {{R"("2024-02-29T23:59:60Z")", 18, false},
                                                               {R"("2024-13-01T00:00:00Z")", 7, false},
                                                               {R"("2024-12-31T00:00:00.123+05:30")", 31, true}});
    expect_cases(R"({"type":"string","format":"uuid"})",
                 {{R"("123e4567-e89b-12d3-a456-426614174000")", 38, true}, {R"("123e4567e)", 9, false}});
    expect_cases(R"({"type":["boolean","null"]})", {{"true", 4, true}, {"null", 4, true}, {"1", 0, false}});
}

// An enum or const number is the schema's own literal, emitted as written (the grammar's digit limits
// bound only the numbers it generates itself); the test validator holds it to that text
// (json_schema_fuzz: an enum of a 106-digit integer, emitted as 3.133333333333323e+105).
TEST(GrammarSchema, EnumNumbersOutsideTheDigitLimitsAreEmittedAsWritten) {
    const std::string schema =
        R"({"type":"object","properties":{"k":{"enum":[1e+100,31333333333333333333333333,"a"]},"c":{"const":-2.5e-300}},)"
        R"("required":["k","c"]})";
    const std::string big = nlohmann::json::parse("31333333333333333333333333").dump();
    for (const std::string& k : {std::string("1e+100"), big}) {
        const std::string doc = R"({"k":)" + k + R"(,"c":-2.5e-300})";
        auto m = matcher_for(schema);
        EXPECT_EQ(first_bad(m, doc), doc.size()) << doc;
        EXPECT_TRUE(m.can_terminate()) << doc;
        EXPECT_TRUE(test::PolicyValidator(nlohmann::ordered_json::parse(schema)).validate_text(doc)) << doc;
    }
    // A generated number is still held to the limits: a three-digit exponent is refused.
    auto m = matcher_for(R"({"type":"number"})");
    EXPECT_EQ(first_bad(m, "1e+100"), 5u);
    EXPECT_FALSE(test::PolicyValidator(nlohmann::ordered_json::parse(R"({"type":"number"})")).validate_text("1e+100"));
}

TEST(GrammarSchema, ArraysBoundsAndPrefixItems) {
    expect_cases(
        R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":3})",
        {{"[1]", 2, false}, {"[1,2]", 5, true}, {"[1,2,3]", 7, true}, {"[1,2,3,", 6, false}, {"[]", 1, false}});
    expect_cases(R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false})",
                 {{R"(["a",1])", 7, true}, {R"(["a",1,2])", 6, false}, {R"(["a"])", 5, true}});
}

TEST(GrammarSchema, AdditionalPropertiesExcludeDeclaredNames) {
    const std::string s =
        R"({"type":"object","properties":{"id":{"type":"integer"}},"additionalProperties":{"type":"string"}})";
    expect_cases(s, {{R"({"id":1,"x":"y"})", 16, true},
                     {R"({"x":"y","id":1})", 12, false},  // declared key after an extra one: "id" is excluded
                     {R"({"idx":"y"})", 11, true},        // a longer name is a different key
                     {R"({"\u0041":"y"})", 2, false},     // extra keys carry no escapes
                     {R"({"x":1})", 5, false}});
}

// additionalProperties per JSON Schema, in the forms clients send: false and absent allow the declared
// keys only (absent read as false: such output validates either way); true, any extra key with any
// value after them; a schema on an object without properties, a map. Nothing can need an extra key:
// minProperties, and required names outside properties, are refused by name.
TEST(GrammarSchema, AdditionalPropertiesForms) {
    const std::string decl = R"({"type":"object","properties":{"a":{"type":"integer"}})";
    for (const std::string ap : {"", R"(,"additionalProperties":false)"})
        expect_cases(decl + ap + "}",
                     {{R"({"a":1})", 7, true}, {R"({"a":1,"b":2})", 6, false}, {R"({"b":2})", 2, false}});
    const std::string any_extra = R"({"a":1,"b":[{"c":null}],"été":"x"})";
    expect_cases(decl + R"(,"additionalProperties":true})",
                 {{any_extra, any_extra.size(), true}, {R"({"b":"x"})", 9, true}, {R"({"b":1,"a":1})", 9, false}});
    const std::string map = R"({"type":"object","additionalProperties":{"type":"string"}})";
    expect_cases(map, {{"{}", 2, true}, {R"({"k":"v","k 2":"w"})", 19, true}, {R"({"k":1})", 5, false}});
    for (const auto& [schema, keyword] : std::vector<std::pair<std::string, std::string>>{
             {R"({"type":"object","additionalProperties":{"type":"string"},"minProperties":1})", "minProperties"},
             {R"({"type":"object","additionalProperties":{"type":"string"},"required":["k"]})", "required"},
             {R"({"type":"object","additionalProperties":1})", "additionalProperties"}}) {
        try {
            compile_json_schema_text(schema);
            ADD_FAILURE() << "accepted: " << schema;
        } catch (const SchemaError& e) {
            EXPECT_EQ(e.keyword(), keyword) << e.what();
        }
    }
}

TEST(GrammarSchema, JsonObjectGrammar) {
    GrammarMatcher m(std::make_shared<const TokenMasks>(json_object_grammar(), small_trie()));
    EXPECT_EQ(first_bad(m, R"({"a":[1,{"b":null}],"c":"\u00e9"})"), 33u);
    EXPECT_TRUE(m.is_complete());
    GrammarMatcher top_array(std::make_shared<const TokenMasks>(json_object_grammar(), small_trie()));
    EXPECT_FALSE(top_array.accept_byte('['));  // json_object: the top level is an object
}

TEST(GrammarSchema, UnsupportedKeywordsAreNamed) {
    const std::vector<std::pair<std::string, std::string>> bad = {
        {R"({"type":"string","pattern":"^a"})", "pattern"},
        {R"({"not":{"type":"null"}})", "not"},
        {R"({"type":"array","uniqueItems":true})", "uniqueItems"},
        {R"({"type":"number","maximum":3})", "maximum"},
        {R"({"type":"integer","multipleOf":2})", "multipleOf"},
        {R"({"allOf":[{"type":"string"},{"maxLength":3}]})", "allOf"},
        {R"({"$ref":"#/$defs/missing"})", "$ref"},
        {R"({"$ref":"http://x/y.json"})", "$ref"},
        {R"({"type":"string","maxLength":100000})", "maxLength"},
        {R"({"type":"object","required":["q"],"properties":{}})", "required"},
        {R"({"type":"wat"})", "type"},
        {R"({"enum":[]})", "enum"},
        {R"({"type":"object","patternProperties":{"a":{}}})", "patternProperties"},
        {R"({"if":{},"then":{}})", "if"},
        {"false", "false"},
    };
    for (const auto& [schema, keyword] : bad) {
        try {
            compile_json_schema_text(schema);
            ADD_FAILURE() << "accepted: " << schema;
        } catch (const SchemaError& e) {
            EXPECT_EQ(e.keyword(), keyword) << schema;
            EXPECT_NE(std::string(e.what()).find(keyword), std::string::npos) << e.what();
        }
    }
    // Left recursion is refused rather than looping, as a schema error naming $ref.
    for (const char* cyclic : {R"({"$ref":"#"})", R"({"anyOf":[{"$ref":"#/anyOf/1"},{"$ref":"#/anyOf/0"}]})"}) {
        try {
            compile_json_schema_text(cyclic);
            ADD_FAILURE() << "accepted " << cyclic;
        } catch (const SchemaError& e) {
            EXPECT_EQ(e.keyword(), "$ref") << e.what();
        }
    }
    EXPECT_THROW(compile_json_schema_text(R"({"type":"string","enum":[1,2]})"), SchemaError);
    EXPECT_THROW(compile_json_schema_text("{not json"), SchemaError);
    // Annotations and unknown keywords are ignored.
    EXPECT_NO_THROW(compile_json_schema_text(R"({"type":"string","description":"d","x-vendor":1,"format":"email"})"));
}

// Found by json_schema_fuzz: a 50,000-level schema overflowed the stack inside the compiler. Depth is
// bounded where it is nested JSON (the document) and where it is a chain of sub-schemas a flat document
// can hold ($ref a0 -> a1 -> ...); both are a SchemaError naming the limit, at any depth, no crash.
TEST(GrammarSchema, NestingDeeperThanTheLimitsIsRefused) {
    auto nested_items = [](int levels) {
        std::string s;
        for (int i = 0; i < levels; ++i) s += R"({"type":"array","items":)";
        s += "{}";
        for (int i = 0; i < levels; ++i) s += "}";
        return s;
    };
    auto expect_limit = [](const std::string& schema, int limit) {
        try {
            compile_json_schema_text(schema);
            ADD_FAILURE() << "accepted a schema of " << schema.size() << " bytes";
        } catch (const SchemaError& e) {
            EXPECT_NE(std::string(e.what()).find("limit of " + std::to_string(limit)), std::string::npos) << e.what();
        }
    };
    // Each array level is two JSON containers ({...} and the items value's own object is the next level).
    EXPECT_NO_THROW(compile_json_schema_text(nested_items(kMaxSchemaJsonDepth - 1)));
    expect_limit(nested_items(kMaxSchemaJsonDepth + 1), kMaxSchemaJsonDepth);
    expect_limit(nested_items(50'000), kMaxSchemaJsonDepth);
    // A deep const value (dumped by the compiler) is the same limit.
    expect_limit(R"({"const":)" + std::string(200'000, '[') + std::string(200'000, ']') + "}", kMaxSchemaJsonDepth);

    // A flat chain of $defs, each referring to the next: the JSON is 3 levels deep, the compilation is not.
    auto ref_chain = [](int n) {
        std::string defs;
        for (int i = 0; i < n; ++i)
            defs +=
                fmt::format(R"({}"a{}":{{"type":"array","items":{{"$ref":"#/$defs/a{}"}}}})", i ? "," : "", i, i + 1);
        defs += fmt::format(R"(,"a{}":{{"type":"integer"}})", n);
        return R"({"$defs":{)" + defs + R"(},"$ref":"#/$defs/a0"})";
    };
    const auto g = compile_json_schema_text(ref_chain(100));
    auto m = GrammarMatcher(std::make_shared<const TokenMasks>(g, small_trie()));
    const std::string doc = std::string(100, '[') + "7" + std::string(100, ']');
    EXPECT_EQ(first_bad(m, doc), doc.size());
    EXPECT_TRUE(m.can_terminate());
    expect_limit(ref_chain(kMaxSchemaRuleDepth + 10), kMaxSchemaRuleDepth);
    expect_limit(ref_chain(20'000), kMaxSchemaRuleDepth);

    // The cache dumps a schema for its key before compiling: the depth check comes first there too.
    GrammarCache cache(small_trie(), 2);
    EXPECT_THROW(cache.json_schema_text(nested_items(50'000)), SchemaError);
    EXPECT_THROW(check_schema_depth(nlohmann::ordered_json::parse(nested_items(kMaxSchemaJsonDepth + 1))), SchemaError);
}

TEST(GrammarMatcher, RollbackRestoresEveryState) {
    auto m = matcher_for(test::grammar_test_schemas()[0].text);
    const std::string doc = R"({"name":"Bo\n\u00e9","age":42,"tags":["x"]})";
    std::vector<StackSet> states{m.state()};
    for (const char c : doc) {
        ASSERT_TRUE(m.accept_byte(static_cast<uint8_t>(c)));
        states.push_back(m.state());
    }
    EXPECT_TRUE(m.is_complete());
    for (size_t back : {1u, 7u, 3u, 20u}) {
        m.rollback_bytes(back);
        EXPECT_TRUE(m.state() == states[m.n_bytes()]);
        m.check_integrity();
        ASSERT_TRUE(m.accept_bytes(std::string_view(doc).substr(m.n_bytes(), back)));
        EXPECT_TRUE(m.state() == states.back());
    }
    EXPECT_THROW(m.rollback_bytes(doc.size() + 1), Error);

    // Token-level rollback over the vocabulary's byte strings.
    GrammarMatcher t(std::make_shared<const TokenMasks>(
        compile_json_schema_text(R"({"type":"array","items":{"type":"integer"}})"),
        std::make_shared<const TokenTrie>(std::vector<std::string>{"[", "1", "12", ",", "]", ""})));
    EXPECT_TRUE(t.accept_token(0));
    EXPECT_TRUE(t.accept_token(2));
    EXPECT_TRUE(t.accept_token(3));
    EXPECT_FALSE(t.accept_token(4));  // "[12," then "]" dies
    EXPECT_FALSE(t.accept_token(5));  // no bytes: never accepted as text
    EXPECT_EQ(t.n_tokens(), 3u);
    t.rollback_tokens(2);
    EXPECT_EQ(t.n_bytes(), 1u);
    EXPECT_TRUE(t.accept_token(1));
    EXPECT_TRUE(t.accept_token(4));
    EXPECT_TRUE(t.is_complete());
    t.check_integrity();
    // Bounded history: older states are gone.
    GrammarMatcher b(std::make_shared<const TokenMasks>(compile_json_schema_text(R"({"type":"array"})"), small_trie()),
                     4);
    ASSERT_TRUE(b.accept_bytes("[1,2,3,4"));
    EXPECT_NO_THROW(b.rollback_bytes(4));
    EXPECT_THROW(b.rollback_bytes(1), Error);
    b.check_integrity();
}

TEST(GrammarCache, HitsMissesAndEviction) {
    GrammarCache cache(small_trie(), 2);
    const auto a1 = cache.json_schema_text(R"({"type":"string"})");
    const auto a2 = cache.json_schema_text("{ \"type\" : \"string\" }");  // same canonical text
    EXPECT_EQ(a1, a2);
    EXPECT_EQ(cache.n_hits(), 1u);
    cache.json_schema_text(R"({"type":"integer"})");
    cache.json_object();
    EXPECT_EQ(cache.size(), 2u);
    EXPECT_NE(cache.json_schema_text(R"({"type":"string"})"), a1);  // evicted, compiled again
    EXPECT_EQ(cache.n_misses(), 4u);
    EXPECT_THROW(cache.json_schema_text(R"({"pattern":"x"})"), SchemaError);
    // Property order is part of the key: it is the output order.
    EXPECT_NE(cache.json_schema_text(R"({"properties":{"a":{},"b":{}}})"),
              cache.json_schema_text(R"({"properties":{"b":{},"a":{}}})"));
    cache.check_integrity();
}

}  // namespace
}  // namespace onecard::grammar
