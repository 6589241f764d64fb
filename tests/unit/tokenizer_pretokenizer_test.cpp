// Pre-tokenizers (Split behaviours, invert, regex translation, ByteLevel) and added-token
// matching flags, on synthetic inputs.
#include "tokenizer/tokenizer.h"
#include "core/error.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer_test_util.h"

#include <gtest/gtest.h>

namespace onecard {
namespace {

using tok::PreTokenized;
using tok::PreTokenizer;
using tok::SplitBehavior;

std::vector<std::string> run(const PreTokenizer& pt, std::string_view text) {
    PreTokenized p(text);
    pt.apply(p);
    std::vector<std::string> out;
    for (size_t i = 0; i < p.size(); ++i) out.emplace_back(p.piece(i));
    return out;
}

PreTokenizer split(std::string_view regex, SplitBehavior behavior, bool invert = false) {
    PreTokenizer pt;
    pt.add_step(PreTokenizer::make_split(regex, behavior, invert));
    return pt;
}

using V = std::vector<std::string>;

TEST(TokenizerSplit, EveryDelimiterBehavior) {
    // The example of the Hugging Face SplitDelimiterBehavior documentation.
    const std::string text = "the-final--countdown";
    EXPECT_EQ(run(split("-", SplitBehavior::Removed), text), (V{"the", "final", "countdown"}));
    EXPECT_EQ(run(split("-", SplitBehavior::Isolated), text), (V{"the", "-", "final", "-", "-", "countdown"}));
    EXPECT_EQ(run(split("-", SplitBehavior::MergedWithPrevious), text), (V{"the-", "final-", "-", "countdown"}));
    EXPECT_EQ(run(split("-", SplitBehavior::MergedWithNext), text), (V{"the", "-final", "-", "-countdown"}));
    EXPECT_EQ(run(split("-", SplitBehavior::Contiguous), text), (V{"the", "-", "final", "--", "countdown"}));
    // Leading / trailing delimiters.
    EXPECT_EQ(run(split("-", SplitBehavior::MergedWithPrevious), "-a-"), (V{"-", "a-"}));
    EXPECT_EQ(run(split("-", SplitBehavior::MergedWithNext), "-a-"), (V{"-a", "-"}));
}

TEST(TokenizerSplit, InvertKeepsTheMatchesAsWords) {
    // invert: the pattern describes the words, not the delimiters.
    EXPECT_EQ(run(split("\\p{L}+", SplitBehavior::Removed, true), "ab, cd!ef"), (V{"ab", "cd", "ef"}));
    EXPECT_EQ(run(split("\\p{L}+", SplitBehavior::Isolated, true), "ab, cd"), (V{"ab", ", ", "cd"}));
    EXPECT_EQ(run(split("\\s+", SplitBehavior::MergedWithPrevious, true), "a b"), (V{"a", " b"}));
}

TEST(TokenizerSplit, EmptyMatchesAdvanceByOneCharacter) {
    tok::Regex re("x*");
    std::vector<std::pair<uint32_t, uint32_t>> spans;
    re.find_all("axxé", spans);  // é is two bytes: the empty match after it must not split it
    const std::vector<std::pair<uint32_t, uint32_t>> expect = {{0, 0}, {1, 3}, {5, 5}};
    EXPECT_EQ(spans, expect);
    // Empty matches never produce pieces.
    EXPECT_EQ(run(split("x*", SplitBehavior::Isolated), "axxé"), (V{"a", "xx", "é"}));
}

TEST(TokenizerSplit, WhiteSpaceClassFollowsHuggingFace) {
    // \s is Unicode White_Space as in Oniguruma: NEL is whitespace, the BOM is not.
    const auto pt = split("\\s+", SplitBehavior::Removed);
    EXPECT_EQ(run(pt, "a\u0085b\u3000c\u00a0d\u2029e"), (V{"a", "b", "c", "d", "e"}));
    EXPECT_EQ(run(pt, "a\ufeffb"), (V{"a\ufeffb"}));
    EXPECT_EQ(run(split("\\S+", SplitBehavior::Removed, true), "x\u2003y"), (V{"x", "y"}));
    EXPECT_EQ(tok::translate_hf_regex("a\\\\s"), "a\\\\s");  // an escaped backslash, not \s
    EXPECT_NE(tok::translate_hf_regex("[^\\s\\p{L}]").find("x{85}"), std::string::npos);
    EXPECT_THROW(tok::Regex("(unclosed"), Error);
}

TEST(TokenizerSplit, DeepSeekRegexesOnTrickyText) {
    PreTokenizer pt;
    pt.add_step(PreTokenizer::make_split("\\p{N}{1,3}", SplitBehavior::Isolated, false));
    pt.add_step(PreTokenizer::make_split("[一-龥\u3040-ゟ゠-ヿ]+", SplitBehavior::Isolated, false));
    pt.add_step(PreTokenizer::make_split(
        "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
        "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
        SplitBehavior::Isolated, false));
    EXPECT_EQ(run(pt, "1234567"), (V{"123", "456", "7"}));
    EXPECT_EQ(run(pt, "a12b"), (V{"a", "12", "b"}));
    EXPECT_EQ(run(pt, "hello  world"), (V{"hello", " ", " world"}));
    EXPECT_EQ(run(pt, "我是abc"), (V{"我是", "abc"}));
    EXPECT_EQ(run(pt, "x.foo"), (V{"x", ".foo"}));
    EXPECT_EQ(run(pt, "end.\r\n\r\nnext"), (V{"end", ".\r\n\r\n", "next"}));
    EXPECT_EQ(run(pt, "  \n\n  x"), (V{"  \n\n", " ", " x"}));
    EXPECT_EQ(run(pt, "e\u0301t\u00e9"), (V{"e\u0301t\u00e9"}));  // marks stay in the word
}

TEST(TokenizerByteLevelPre, PrefixSpaceAndGpt2Regex) {
    PreTokenizer pt;
    pt.add_step(PreTokenizer::make_byte_level(true, true));
    EXPECT_TRUE(pt.byte_level());
    // "Ġ" is the byte-level space.
    EXPECT_EQ(run(pt, "Hello world's"), (V{"ĠHello", "Ġworld", "'s"}));
    EXPECT_EQ(run(pt, " x"), (V{"Ġx"}));  // no second prefix space
    PreTokenizer raw;
    raw.add_step(PreTokenizer::make_byte_level(false, false));
    EXPECT_EQ(run(raw, "a b\n"), (V{"aĠbĊ"}));
    const auto j = nlohmann::json::parse(R"({"type":"Sequence","pretokenizers":[
        {"type":"Split","pattern":{"String":"|"},"behavior":"MergedWithNext","invert":false},
        {"type":"ByteLevel","add_prefix_space":false,"use_regex":false}]})");
    EXPECT_EQ(run(PreTokenizer::from_json(j), "a|b c"), (V{"a", "|bĠc"}));
    EXPECT_THROW(PreTokenizer::from_json(nlohmann::json::parse(R"({"type":"Split","pattern":{"Regex":"a"},
        "behavior":"Sideways"})")),
                 Error);
}

// ---- added tokens ------------------------------------------------------------------------------

Tokenizer with_added(nlohmann::json added) {
    return Tokenizer::from_json(test::synthetic_tokenizer_json({}, false, std::move(added)));
}

TEST(TokenizerAddedTokens, LeftmostLongestAndAllowSpecial) {
    const auto t = with_added({test::added_token(300, "<a>", true), test::added_token(301, "<a><b>", true),
                               test::added_token(302, "b>", false)});
    EXPECT_EQ(t.encode("x<a><b>y"), (std::vector<int32_t>{'x', 301, 'y'}));
    EXPECT_EQ(t.encode("<a>b>"), (std::vector<int32_t>{300, 302}));
    const auto plain = t.encode("<a>", false);
    EXPECT_EQ(plain, (std::vector<int32_t>{'<', 'a', '>'}));
    EXPECT_EQ(t.decode(t.encode("q<a><b>r b>")), "q<a><b>r b>");
}

TEST(TokenizerAddedTokens, StripAndSingleWordFlags) {
    const auto t = with_added({test::added_token(300, "[L]", true, /*lstrip=*/true),
                               test::added_token(301, "[R]", true, false, /*rstrip=*/true),
                               test::added_token(302, "cat", false, false, false, /*single_word=*/true)});
    EXPECT_EQ(t.encode("a  [L]b"), (std::vector<int32_t>{'a', 300, 'b'}));
    EXPECT_EQ(t.encode("a[R] \n b"), (std::vector<int32_t>{'a', 301, 'b'}));
    EXPECT_EQ(t.encode("cat"), (std::vector<int32_t>{302}));
    EXPECT_EQ(t.encode("a cat."), (std::vector<int32_t>{'a', ' ', 302, '.'}));
    EXPECT_EQ(t.encode("concat"), (std::vector<int32_t>{'c', 'o', 'n', 'c', 'a', 't'}));
    EXPECT_EQ(t.encode("cats"), (std::vector<int32_t>{'c', 'a', 't', 's'}));
    // Unicode word characters (a CJK letter, a digit) block the match; punctuation and emoji do not.
    EXPECT_EQ(t.encode("中cat").back(), 't');
    EXPECT_EQ(t.encode("cat٣").front(), 'c');
    EXPECT_EQ(t.encode("。cat").back(), 302);
    EXPECT_EQ(t.encode("cat👍").front(), 302);
}

TEST(TokenizerAddedTokens, RawTokensAreMatchedBeforeNormalizedOnes) {
    // "a<x" (normalized) and "<x>!" (raw) overlap in "a<x>!". A single leftmost-longest pass
    // would take "a<x"; Hugging Face matches raw tokens first, so "<x>!" wins.
    const auto t = with_added({test::added_token(300, "<x>!", true), test::added_token(301, "a<x", false)});
    EXPECT_EQ(t.encode("a<x>!"), (std::vector<int32_t>{'a', 300}));
    EXPECT_EQ(t.encode("a<x>"), (std::vector<int32_t>{301, '>'}));
}

TEST(TokenizerEncode, InvalidUtf8IsReplacedNotRejected) {
    const auto t = with_added(nlohmann::json::array());
    const auto ids = t.encode(
        "a\xFF"
        "b");
    EXPECT_EQ(t.decode(ids),
              "a\xEF\xBF\xBD"
              "b");
}

}  // namespace
}  // namespace onecard
