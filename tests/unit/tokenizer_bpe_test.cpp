// BPE model, byte-level alphabet and UTF-8 helpers, on synthetic tokenizers (no data needed).
#include "core/error.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

namespace onecard {
namespace {

using test::bl;

// An independent, deliberately naive BPE: repeatedly merge the lowest-rank adjacent pair,
// leftmost on ties. O(n^2) but obviously right.
std::vector<std::string> naive_bpe(const std::vector<std::string>& chars,
                                   const std::map<std::pair<std::string, std::string>, int>& ranks) {
    std::vector<std::string> sym = chars;
    while (sym.size() > 1) {
        int best = -1;
        size_t best_pos = 0;
        for (size_t i = 0; i + 1 < sym.size(); ++i) {
            const auto it = ranks.find({sym[i], sym[i + 1]});
            if (it != ranks.end() && (best < 0 || it->second < best)) {
                best = it->second;
                best_pos = i;
            }
        }
        if (best < 0) break;
        sym[best_pos] += sym[best_pos + 1];
        sym.erase(sym.begin() + static_cast<long>(best_pos) + 1);
    }
    return sym;
}

TEST(TokenizerByteLevel, AlphabetIsABijectionOverBytes) {
    const auto& a = tok::byte_level_alphabet();
    std::set<uint32_t> seen;
    for (int b = 0; b < 256; ++b) seen.insert(a.char_of(static_cast<uint8_t>(b)));
    EXPECT_EQ(seen.size(), 256u);
    EXPECT_EQ(a.char_of(' '), 0x120u);   // 'Ġ'
    EXPECT_EQ(a.char_of('\n'), 0x10Au);  // 'Ċ'
    EXPECT_EQ(a.char_of('A'), static_cast<uint32_t>('A'));
    std::string all;
    for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
    std::string mapped, back;
    a.encode(all, mapped);
    ASSERT_TRUE(a.decode(mapped, back));
    EXPECT_EQ(back, all);
    // A character outside the alphabet makes the whole token undecodable (it stands for itself).
    std::string out = "keep";
    EXPECT_FALSE(a.decode("ab｜", out));
    EXPECT_EQ(out, "keep");
}

TEST(TokenizerByteLevel, LossyUtf8FollowsTheMaximalSubpartRule) {
    auto lossy = [](std::string_view s) {
        std::string out;
        tok::append_utf8_lossy(s, out, true);
        return out;
    };
    const std::string r = "\xEF\xBF\xBD";
    EXPECT_EQ(lossy("abc"), "abc");
    EXPECT_EQ(lossy("\xE2\x82\xAC"), "\xE2\x82\xAC");  // €
    EXPECT_EQ(lossy("\xE2\x82"), r);                   // truncated: one U+FFFD
    EXPECT_EQ(lossy("\xE2\x82"
                    "A"),
              r + "A");
    EXPECT_EQ(lossy("\xF0\x80\x80"), r + r + r);  // F0 80 is not a valid prefix
    EXPECT_EQ(lossy("\xED\xA0\x80"), r + r + r);  // surrogate
    EXPECT_EQ(lossy("\xC0\xAF"), r + r);          // overlong
    EXPECT_EQ(lossy("\x80"
                    "x\xFF"),
              r + "x" + r);
    EXPECT_EQ(lossy("\xF4\x90\x80\x80"), r + r + r + r);  // > U+10FFFF
    // Streaming: an incomplete tail is held back, not replaced.
    std::string out;
    EXPECT_EQ(tok::append_utf8_lossy("ab\xF0\x9F\x98", out, false), 2u);
    EXPECT_EQ(out, "ab");
    EXPECT_TRUE(tok::is_valid_utf8("h\xC3\xA9llo \xF0\x9F\x98\x80"));
    EXPECT_FALSE(tok::is_valid_utf8("\xC3"));
    EXPECT_FALSE(tok::is_valid_utf8("\xED\xBF\xBF"));
}

TEST(TokenizerBpe, MergesByRankThenLeftmost) {
    // "a a" has the best rank, so "aaa" -> "aa" + "a" (leftmost first), never "a" + "aa".
    const auto j = test::synthetic_tokenizer_json({{"a", "a"}, {"b", "c"}, {"aa", "bc"}, {"a", "b"}});
    const auto m = tok::BpeModel::from_json(j.at("model"));
    std::vector<int32_t> ids;
    m.encode_word(bl("aaa"), ids);
    ASSERT_EQ(ids.size(), 2u);
    EXPECT_EQ(*m.id_to_token(ids[0]), "aa");
    EXPECT_EQ(*m.id_to_token(ids[1]), "a");
    ids.clear();
    // "aabc": a+a (rank 0) and b+c (rank 1) first, then aa+bc (rank 2); "a b" (rank 3) never fires.
    m.encode_word(bl("aabc"), ids);
    ASSERT_EQ(ids.size(), 1u);
    EXPECT_EQ(*m.id_to_token(ids[0]), "aabc");
    ids.clear();
    m.encode_word(bl("abc"), ids);  // b+c beats a+b
    ASSERT_EQ(ids.size(), 2u);
    EXPECT_EQ(*m.id_to_token(ids[0]), "a");
    EXPECT_EQ(*m.id_to_token(ids[1]), "bc");
}

TEST(TokenizerBpe, StringAndPairMergeFormsAgree) {
    const std::vector<std::pair<std::string, std::string>> merges = {{" ", "t"}, {"h", "e"}, {" t", "he"}, {"e", "r"}};
    const auto a = Tokenizer::from_json(test::synthetic_tokenizer_json(merges, false));
    const auto b = Tokenizer::from_json(test::synthetic_tokenizer_json(merges, true));
    for (const std::string text : {"the there other", " the\n\nthe", "hether"}) {
        EXPECT_EQ(a.encode(text), b.encode(text)) << text;
        EXPECT_EQ(a.decode(a.encode(text)), text);
    }
    EXPECT_EQ(a.encode(" the").size(), 1u);
}

TEST(TokenizerBpe, HeapMergeMatchesNaiveReferenceOnRandomWords) {
    std::mt19937 rng(1234);
    const std::string alphabet = "abcd";
    // Random merge table over a 4-letter alphabet, built so every merge result is new.
    std::vector<std::pair<std::string, std::string>> merges;
    std::vector<std::string> pool = {"a", "b", "c", "d"};
    std::set<std::string> made(pool.begin(), pool.end());
    while (merges.size() < 60) {
        const auto& x = pool[rng() % pool.size()];
        const auto& y = pool[rng() % pool.size()];
        if (x.size() + y.size() > 6 || made.contains(x + y)) continue;
        merges.push_back({x, y});
        made.insert(x + y);
        pool.push_back(x + y);
    }
    std::map<std::pair<std::string, std::string>, int> ranks;
    for (size_t r = 0; r < merges.size(); ++r) ranks[merges[r]] = static_cast<int>(r);
    const auto m = tok::BpeModel::from_json(test::synthetic_tokenizer_json(merges).at("model"));
    for (int trial = 0; trial < 500; ++trial) {
        const size_t n = 1 + rng() % (trial < 450 ? 24 : 400);
        std::string word;
        std::vector<std::string> chars;
        for (size_t i = 0; i < n; ++i) {
            chars.push_back(std::string(1, alphabet[rng() % alphabet.size()]));
            word += chars.back();
        }
        std::vector<int32_t> ids;
        m.encode_word(word, ids);
        std::vector<std::string> got;
        for (int32_t id : ids) got.push_back(*m.id_to_token(id));
        ASSERT_EQ(got, naive_bpe(chars, ranks)) << "word " << word;
    }
}

TEST(TokenizerBpe, RejectsBrokenModels) {
    auto j = test::synthetic_tokenizer_json({{"a", "b"}});
    auto bad = j;
    bad["model"]["merges"].push_back("zz qq");
    EXPECT_THROW(tok::BpeModel::from_json(bad.at("model")), Error);
    bad = j;
    bad["model"]["merges"].push_back("a b c");
    EXPECT_THROW(tok::BpeModel::from_json(bad.at("model")), Error);
    bad = j;
    bad["model"]["byte_fallback"] = true;
    EXPECT_THROW(tok::BpeModel::from_json(bad.at("model")), Error);
    bad = j;
    bad["model"]["type"] = "WordPiece";
    EXPECT_THROW(tok::BpeModel::from_json(bad.at("model")), Error);
    bad = j;
    bad["decoder"] = {{"type", "Metaspace"}};
    EXPECT_THROW(Tokenizer::from_json(bad), Error);
    bad = j;
    bad["normalizer"] = {{"type", "NFKC"}};
    EXPECT_THROW(Tokenizer::from_json(bad), Error);
    bad = j;
    bad["pre_tokenizer"] = {{"type", "Whitespace"}};
    EXPECT_THROW(Tokenizer::from_json(bad), Error);
    EXPECT_THROW(Tokenizer::from_file("/nonexistent/tokenizer.json"), Error);
}

TEST(TokenizerBpe, IgnoreMergesAndUnknownCharacters) {
    auto j = test::synthetic_tokenizer_json({{"a", "b"}, {"ab", "c"}});
    // A whole-word vocab entry that merges could not reach; ignore_merges takes it directly.
    j["model"]["vocab"][bl("ca")] = 1000;
    j["model"]["ignore_merges"] = true;
    auto m = tok::BpeModel::from_json(j.at("model"));
    std::vector<int32_t> ids;
    m.encode_word(bl("ca"), ids);
    EXPECT_EQ(ids, std::vector<int32_t>{1000});
    // A model without the byte alphabet: unknown characters become unk, fused when asked.
    nlohmann::json tiny = {{"type", "BPE"},
                           {"vocab", {{"x", 0}, {"y", 1}, {"<unk>", 2}, {"xy", 3}}},
                           {"merges", {"x y"}},
                           {"unk_token", "<unk>"},
                           {"fuse_unk", true}};
    m = tok::BpeModel::from_json(tiny);
    ids.clear();
    m.encode_word("xyqqxq", ids);
    EXPECT_EQ(ids, (std::vector<int32_t>{3, 2, 0, 2}));
    tiny["unk_token"] = nullptr;
    m = tok::BpeModel::from_json(tiny);
    ids.clear();
    // Without an unk token the character is dropped (as in Hugging Face), so x and y become
    // neighbours and merge.
    m.encode_word("xqy", ids);
    EXPECT_EQ(ids, (std::vector<int32_t>{3}));
    ids.clear();
    m.encode_word("qq", ids);
    EXPECT_TRUE(ids.empty());
}

TEST(TokenizerBpe, VocabSizeAndLookups) {
    const auto t = Tokenizer::from_json(test::synthetic_tokenizer_json(
        {{"h", "i"}}, false, nlohmann::json::array({test::added_token(300, "<s>", true)})));
    EXPECT_EQ(t.vocab_size(), 301u);
    EXPECT_EQ(t.token_to_id(bl("hi")), 256);
    EXPECT_EQ(t.token_to_id("<s>"), 300);
    EXPECT_FALSE(t.token_to_id("nope").has_value());
    EXPECT_EQ(t.id_to_token(256), bl("hi"));
    EXPECT_EQ(t.id_to_token(300), "<s>");
    EXPECT_THROW(t.id_to_token(299), Error);
    EXPECT_TRUE(t.is_special(300));
    EXPECT_FALSE(t.is_special(256));
    EXPECT_NO_THROW(t.check_integrity());
    // Undefined ids are skipped by decode, special ones only on request.
    const std::vector<int32_t> ids = {300, 256, 299, 100000, -5};
    EXPECT_EQ(t.decode(ids), "<s>hi");
    EXPECT_EQ(t.decode(ids, true), "hi");
}

}  // namespace
}  // namespace onecard
