// TriggeredConstraint (engine/triggered_constraint.h): strict tools under tool_choice "auto". Free
// text passes untouched; once the output's bytes spell the DSML marker, however tokens split it, the
// rest must be the DSML tool-call block, a strict tool's arguments held to its schema (refused at the
// first bad byte), a non-strict tool's free; a token that would complete the marker into bytes the
// grammar refuses is masked already in the free phase. With a guard (the marker without its '<', as
// the server builds it), free text may write "｜DSML｜" only as the marker's end.
#include "core/error.h"
#include "engine/triggered_constraint.h"
#include "grammar/dsml_grammar.h"
#include "tokenizer/dsml_parser.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace onecard {
namespace {

using ojson = nlohmann::ordered_json;

const std::string kMarker = "<｜DSML｜";
constexpr int32_t kDsmlTok = 256, kTextLt = 257, kMarkerBlock = 258, kMarkerBogus = 259, kSpecial = 260,
                  kTextGuard = 261;
constexpr int64_t kVocab = 264;  // 262..263: padding ids past the trie

std::shared_ptr<const grammar::TokenTrie> trie() {
    std::vector<std::string> v;
    for (int b = 0; b < 256; ++b) v.emplace_back(1, static_cast<char>(b));
    v.push_back("｜DSML｜");               // 256: the marker token the model writes after '<'
    v.push_back("text<");                  // 257: ends free text with the marker's first byte
    v.push_back("｜DSML｜tool_calls>\n");  // 258: completes the marker and goes on into the block
    v.push_back("｜DSML｜bogus");          // 259: completes the marker into bytes no block has
    v.push_back("");                       // 260: a special token (no bytes)
    v.push_back("a｜DSML｜");              // 261: the guard after text, never the marker's end
    return std::make_shared<const grammar::TokenTrie>(std::move(v));
}

std::vector<grammar::DsmlTool> tools() {
    return {{"get_weather", ojson::parse(R"({"type":"object","properties":{"city":{"type":"string","maxLength":8},
                 "days":{"type":"integer","minimum":1,"maximum":7}},"required":["city","days"]})"),
             true},
            {"anything", ojson::parse(R"({"type":"object","properties":{"q":{"type":"integer"}}})"), false}};
}

struct Fixture {
    std::shared_ptr<const grammar::TokenTrie> t = trie();
    std::shared_ptr<const TriggerTokens> trigger = std::make_shared<const TriggerTokens>(t, kMarker);
    std::shared_ptr<const grammar::TokenMasks> masks =
        std::make_shared<const grammar::TokenMasks>(grammar::compile_dsml_tool_calls(tools(), false, false), t);
    std::shared_ptr<const TriggerTokens> guarded = std::make_shared<const TriggerTokens>(t, kMarker, "｜DSML｜");
    TriggeredConstraint make() const { return TriggeredConstraint(trigger, masks, kVocab); }
    TriggeredConstraint make_guarded() const { return TriggeredConstraint(guarded, masks, kVocab); }
};

bool allowed(TriggeredConstraint& c, int32_t token) {
    std::vector<uint32_t> mask(static_cast<size_t>(token_mask_words(kVocab)), 0u);
    c.fill_mask(mask);
    return (mask[static_cast<size_t>(token) / 32] >> (token % 32)) & 1u;
}

// Feeds `text` byte by byte, each byte checked against the mask first. Returns how many were accepted.
size_t feed_bytes(TriggeredConstraint& c, std::string_view text) {
    for (size_t i = 0; i < text.size(); ++i) {
        const auto b = static_cast<int32_t>(static_cast<uint8_t>(text[i]));
        const bool in_mask = allowed(c, b);
        const bool ok = c.accept(b);
        EXPECT_EQ(in_mask, ok) << "byte " << i << " of " << text;
        if (!ok) return i;
        c.check_integrity();
    }
    return text.size();
}

std::string call(const std::string& name, const std::vector<std::pair<std::string, std::string>>& params) {
    std::string s = "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"" + name + "\">\n";
    for (size_t i = 0; i < params.size(); ++i) {
        if (i) s += "\n";
        s += "<｜DSML｜parameter name=\"" + params[i].first + "\" string=\"false\">" + params[i].second +
             "</｜DSML｜parameter>";
    }
    return s + "\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
}

TEST(TriggeredConstraint, FreeTextWithoutACallPasses) {
    Fixture f;
    auto c = f.make();
    const std::string text = "Paris is sunny; no tool needed. a < b, <｜ and ｜DSML｜ alone are text.";
    EXPECT_EQ(feed_bytes(c, text), text.size());
    EXPECT_FALSE(c.triggered());
    EXPECT_TRUE(c.can_terminate());  // a text answer may end anywhere
    EXPECT_TRUE(allowed(c, kSpecial));
    EXPECT_TRUE(allowed(c, 262));  // padding ids past the trie: the free phase allows the model's vocabulary
}

TEST(TriggeredConstraint, AValidStrictCallIsAcceptedAndParsesBack) {
    Fixture f;
    auto c = f.make();
    const std::string block = call("get_weather", {{"city", "\"Oslo\""}, {"days", "3"}});
    const std::string text = "Let me check.\n\n" + block;
    EXPECT_EQ(feed_bytes(c, text), text.size());
    EXPECT_TRUE(c.triggered());
    EXPECT_TRUE(c.can_terminate());
    EXPECT_TRUE(c.matcher().is_complete());
    DsmlParser parser;
    ParsedCompletion pc;
    for (const auto& ev : parser.push(text + "<｜end▁of▁sentence｜>")) apply_event(pc, ev);
    for (const auto& ev : parser.finish()) apply_event(pc, ev);
    ASSERT_EQ(pc.tool_calls.size(), 1u) << pc.content;
    EXPECT_EQ(nlohmann::json::parse(pc.tool_calls[0].arguments), nlohmann::json::parse(R"({"city":"Oslo","days":3})"));
}

TEST(TriggeredConstraint, InvalidArgumentsAreRefusedAtTheFirstBadByte) {
    Fixture f;
    for (const auto& [value, good] :
         std::vector<std::pair<std::string, std::string>>{{"\"Oslo\"", "8"},       // days above its maximum: the '8'
                                                          {"\"Stockholm\"", "3"},  // city past maxLength 8: the 'm'
                                                          {"Oslo", "3"}}) {        // not JSON
        auto c = f.make();
        const std::string text = "ok " + call("get_weather", {{"city", value}, {"days", good}});
        const size_t n = feed_bytes(c, text);
        ASSERT_LT(n, text.size()) << text;
        EXPECT_TRUE(c.triggered());
        const std::string prefix = text.substr(0, n);
        // Refused at: the '8' (days above 7), the 'O' (not JSON), the 'm' (city past maxLength 8).
        const std::string want_tail = value == "\"Oslo\"" ? "\"days\" string=\"false\">"
                                      : value == "Oslo"   ? "string=\"false\">"
                                                          : "\"Stockhol";
        EXPECT_EQ(prefix.substr(prefix.size() - want_tail.size()), want_tail) << prefix;
        EXPECT_FALSE(c.can_terminate());  // inside the block: EOS waits for its end
    }
    // An unknown tool name and a missing required parameter are refused too.
    auto c = f.make();
    EXPECT_LT(feed_bytes(c, call("get_time", {})), call("get_time", {}).size());
    auto d = f.make();
    const std::string missing = call("get_weather", {{"city", "\"Oslo\""}});
    EXPECT_LT(feed_bytes(d, missing), missing.size());
}

TEST(TriggeredConstraint, ANonStrictToolsArgumentsAreFree) {
    Fixture f;
    auto c = f.make();
    // q is declared an integer, but "anything" is not strict: any names and values, in the layout.
    const std::string text =
        "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"anything\">\n<｜DSML｜parameter name=\"q\" "
        "string=\"true\">not < an </int></｜DSML｜parameter>\n<｜DSML｜parameter name=\"extra\" "
        "string=\"false\">[1,</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
    EXPECT_EQ(feed_bytes(c, text), text.size());
    EXPECT_TRUE(c.matcher().is_complete());
}

TEST(TriggeredConstraint, TheMarkerIsFoundHoweverTokensSplitIt) {
    Fixture f;
    {  // "text<" then ｜DSML｜: the marker spans two tokens
        auto c = f.make();
        ASSERT_TRUE(c.accept(kTextLt));
        EXPECT_FALSE(c.triggered());
        EXPECT_TRUE(allowed(c, kDsmlTok));
        EXPECT_TRUE(allowed(c, kMarkerBlock));
        EXPECT_FALSE(allowed(c, kMarkerBogus));  // would complete the marker into "<｜DSML｜bogus"
        ASSERT_TRUE(c.accept(kDsmlTok));
        EXPECT_TRUE(c.triggered());
        EXPECT_FALSE(c.can_terminate());
        EXPECT_EQ(feed_bytes(c, "tool_calls>\n"), 12u);
    }
    {  // one token ends the marker and begins the block
        auto c = f.make();
        ASSERT_TRUE(c.accept('<'));
        ASSERT_TRUE(c.accept(kMarkerBlock));
        EXPECT_TRUE(c.triggered());
        const std::string rest = call("get_weather", {{"city", "\"Rome\""}, {"days", "1"}}).substr(kMarker.size() + 12);
        EXPECT_EQ(feed_bytes(c, rest), rest.size());
        EXPECT_TRUE(c.matcher().is_complete());
    }
    {  // without a partial marker, ｜DSML｜bogus is plain text
        auto c = f.make();
        EXPECT_TRUE(allowed(c, kMarkerBogus));
        ASSERT_TRUE(c.accept(kMarkerBogus));
        EXPECT_FALSE(c.triggered());
    }
    {  // a special token between '<' and ｜DSML｜ breaks the match: its text is not the marker's
        auto c = f.make();
        ASSERT_TRUE(c.accept('<'));
        ASSERT_TRUE(c.accept(kSpecial));
        ASSERT_TRUE(c.accept(kDsmlTok));
        EXPECT_FALSE(c.triggered());
    }
    {  // refused: bogus after the marker, byte by byte as well
        auto c = f.make();
        ASSERT_TRUE(c.accept('<'));
        EXPECT_FALSE(c.accept(kMarkerBogus));
    }
}

TEST(TriggeredConstraint, TheGuardRefusesMarkupOutsideTheMarker) {
    Fixture f;
    {  // "</" then ｜DSML｜ (a stray closing tag the parser would pass on as content): refused
        auto c = f.make_guarded();
        ASSERT_TRUE(c.accept('<'));
        ASSERT_TRUE(c.accept('/'));
        EXPECT_FALSE(allowed(c, kDsmlTok));
        EXPECT_FALSE(allowed(c, kMarkerBlock));
        EXPECT_FALSE(c.accept(kDsmlTok));
        c.check_integrity();
    }
    {  // the unguarded trigger lets it through, as before
        auto c = f.make();
        ASSERT_TRUE(c.accept('<'));
        ASSERT_TRUE(c.accept('/'));
        EXPECT_TRUE(allowed(c, kDsmlTok));
        EXPECT_TRUE(c.accept(kDsmlTok));
        EXPECT_FALSE(c.triggered());
    }
    {  // a token that holds the guard after text: free text unguarded, refused guarded
        auto plain = f.make(), guarded = f.make_guarded();
        EXPECT_TRUE(allowed(plain, kTextGuard));
        EXPECT_FALSE(allowed(guarded, kTextGuard));
        EXPECT_FALSE(guarded.accept(kTextGuard));
    }
    {  // at the start, and byte by byte: refused at the guard's last byte
        auto c = f.make_guarded();
        EXPECT_FALSE(allowed(c, kDsmlTok));
        EXPECT_FALSE(allowed(c, kMarkerBogus));  // plain text without the guard (previous test)
        const std::string text = "a ｜DSML｜";
        EXPECT_EQ(feed_bytes(c, text), text.size() - 1);
    }
    {  // as the marker's end it is the trigger: the block follows
        auto c = f.make_guarded();
        ASSERT_TRUE(c.accept(kTextLt));
        EXPECT_TRUE(allowed(c, kDsmlTok));
        ASSERT_TRUE(c.accept(kDsmlTok));
        EXPECT_TRUE(c.triggered());
        const std::string rest = call("get_weather", {{"city", "\"Rome\""}, {"days", "1"}}).substr(kMarker.size());
        EXPECT_EQ(feed_bytes(c, rest), rest.size());
        EXPECT_TRUE(c.matcher().is_complete());
    }
    {  // free text that only starts the guard passes, and a special token resets the partial match
        auto c = f.make_guarded();
        const std::string part = "｜DSML";
        EXPECT_EQ(feed_bytes(c, part), part.size());
        ASSERT_TRUE(c.accept(kSpecial));
        const std::string after = "｜ ok";
        EXPECT_EQ(feed_bytes(c, after), after.size());
        EXPECT_FALSE(c.triggered());
        EXPECT_TRUE(c.can_terminate());
    }
    // The guard must end the trigger: otherwise the trigger's end would not be told apart.
    EXPECT_THROW(TriggerTokens(f.t, kMarker, "DSML"), Error);
}

TEST(TriggeredConstraint, CandidatesAreTheTokensThatCanCompleteTheMarker) {
    Fixture f;
    const auto& cand = f.trigger->candidates();
    // '<'-less tokens complete it after a partial match; single bytes only the marker's last byte.
    for (int32_t t : {kDsmlTok, kMarkerBlock, kMarkerBogus, static_cast<int32_t>(static_cast<uint8_t>(kMarker.back()))})
        EXPECT_NE(std::find(cand.begin(), cand.end(), t), cand.end()) << t;
    EXPECT_EQ(std::find(cand.begin(), cand.end(), kTextLt), cand.end());
    EXPECT_EQ(std::find(cand.begin(), cand.end(), static_cast<int32_t>('<')), cand.end());
    EXPECT_LE(cand.size(), 4u);
    EXPECT_EQ(std::find(cand.begin(), cand.end(), kTextGuard), cand.end());  // never completes the marker
    // With the guard, the tokens that can complete "｜DSML｜" too: those four and the one that ends in it.
    std::vector<int32_t> guarded = f.guarded->candidates(), want = cand;
    want.push_back(kTextGuard);
    std::sort(guarded.begin(), guarded.end());
    std::sort(want.begin(), want.end());
    EXPECT_EQ(guarded, want);
}

}  // namespace
}  // namespace onecard
