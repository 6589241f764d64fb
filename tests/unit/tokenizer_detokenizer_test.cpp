// Streaming detokenizer: random id sequences (split multi-byte characters, emoji, invalid byte
// runs, special tokens) pushed one id at a time must concatenate to the whole decode, and no push
// may ever return a partial / invalid UTF-8 sequence.
#include "tokenizer/tokenizer.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer_test_util.h"

#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>

namespace onecard {
namespace {

// Streams `ids` and checks the invariants; returns the streamed text.
std::string stream_and_check(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special) {
    IncrementalDetokenizer detok(tok, skip_special);
    std::string streamed;
    for (const int32_t id : ids) {
        const std::string piece = detok.push(id);
        EXPECT_TRUE(tok::is_valid_utf8(piece)) << "push(" << id << ") returned invalid UTF-8";
        EXPECT_LE(detok.n_pending_bytes(), 3u);
        EXPECT_NO_THROW(detok.check_integrity());
        streamed += piece;
    }
    const std::string tail = detok.flush();
    EXPECT_TRUE(tok::is_valid_utf8(tail));
    EXPECT_EQ(detok.n_pending_bytes(), 0u);
    streamed += tail;
    EXPECT_EQ(streamed, tok.decode(ids, skip_special));
    return streamed;
}

TEST(TokenizerDetokenizer, SplitCharactersAreHeldBackUntilComplete) {
    // Synthetic tokenizer: ids 0..255 are single bytes.
    const auto tok = Tokenizer::from_json(test::synthetic_tokenizer_json({}));
    IncrementalDetokenizer d(tok);
    const std::string emoji = "\xF0\x9F\x91\x8D";  // 👍, four byte tokens
    EXPECT_EQ(d.push(static_cast<uint8_t>(emoji[0])), "");
    EXPECT_EQ(d.push(static_cast<uint8_t>(emoji[1])), "");
    EXPECT_EQ(d.push(static_cast<uint8_t>(emoji[2])), "");
    EXPECT_EQ(d.n_pending_bytes(), 3u);
    EXPECT_EQ(d.push(static_cast<uint8_t>(emoji[3])), emoji);
    // A leading space is an ordinary byte: emitted at once, never dropped.
    EXPECT_EQ(d.push(' '), " ");
    // An impossible continuation is replaced as soon as it is known to be invalid.
    EXPECT_EQ(d.push(0xE2), "");
    EXPECT_EQ(d.push('A'),
              "\xEF\xBF\xBD"
              "A");
    // An unfinished character at the end of the stream becomes one U+FFFD on flush.
    EXPECT_EQ(d.push(0xE2), "");
    EXPECT_EQ(d.push(0x82), "");
    EXPECT_EQ(d.flush(), "\xEF\xBF\xBD");
    EXPECT_EQ(d.flush(), "");
}

TEST(TokenizerDetokenizer, RandomByteStreamsMatchWholeDecode) {
    const auto tok = Tokenizer::from_json(test::synthetic_tokenizer_json(
        {{"\xF0", "\x9F"}, {"\x91", "\x8D"}, {"\xF0\x9F", "\x91\x8D"}, {"\xE4", "\xB8"}, {"\xE4\xB8", "\xAD"}}, false,
        nlohmann::json::array({test::added_token(300, "<s>", true), test::added_token(301, "<t>", false)})));
    std::mt19937 rng(7);
    // Mostly valid text (multi-byte chars split into byte tokens), sometimes random bytes.
    const std::vector<std::string> pieces = {"a",    " ",    "é", "中",      "👍", "👨‍👩‍👧",
                                             "🏽", "\r\n", "ü", "\xF0\x9F"};
    for (int trial = 0; trial < 400; ++trial) {
        std::vector<int32_t> ids;
        const int n = 1 + static_cast<int>(rng() % 40);
        for (int i = 0; i < n; ++i) {
            const unsigned r = rng() % 10;
            if (r < 6) {
                for (const int32_t id : tok.encode(pieces[rng() % pieces.size()], false)) ids.push_back(id);
            } else if (r < 8) {
                ids.push_back(static_cast<int32_t>(rng() % 256));  // any byte, valid or not
            } else if (r < 9) {
                ids.push_back(300 + static_cast<int32_t>(rng() % 2));
            } else {
                ids.push_back(256 + static_cast<int32_t>(rng() % 5));  // merged (partial) multi-byte tokens
            }
        }
        stream_and_check(tok, ids, false);
        stream_and_check(tok, ids, true);
    }
}

TEST(TokenizerDetokenizer, RealVocabularyRandomSequences) {
    if (test::v3_tokenizer_path().empty())
        GTEST_SKIP() << "DeepSeek tokenizer.json not installed: run scripts/setup.sh";
    const auto tok = Tokenizer::from_file(test::v3_tokenizer_path());
    std::mt19937 rng(99);
    // Text with many multi-byte characters: ids of whole strings streamed, and random id soup.
    const std::string text =
        " Hello 世界! 👨‍👩‍👧‍👦 naïve café 🇯🇵 Ｆｕｌｌ 한국어 "
        "مرحبا\r\n<｜User｜> "
        "x";
    const auto ids = tok.encode(text);
    EXPECT_EQ(stream_and_check(tok, ids, false), text);
    for (int trial = 0; trial < 200; ++trial) {
        std::vector<int32_t> soup;
        for (int i = 0, n = 1 + static_cast<int>(rng() % 30); i < n; ++i)
            soup.push_back(static_cast<int32_t>(rng() % tok.vocab_size()));
        stream_and_check(tok, soup, trial % 2 == 0);
    }
}

}  // namespace
}  // namespace onecard
