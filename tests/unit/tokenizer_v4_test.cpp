// DeepSeek-V4 vocabulary: make_v4_tokenizer_json, the demo tokenizer files, and encoding of the
// V4 chat / DSML markers.
#include "core/error.h"
#include "tokenizer/deepseek_v4_vocab.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

namespace onecard {
namespace {

TEST(TokenizerV4, AddedTokenTableIsConsistent) {
    const auto added = deepseek_v4_added_tokens();
    EXPECT_EQ(added.size(), 465u);  // 818 V3 added tokens -> 1,283 in V4
    std::set<int32_t> ids;
    std::set<std::string> contents;
    for (const auto& t : added) {
        ids.insert(t.id);
        contents.insert(t.content);
        EXPECT_TRUE(t.id >= 128815 && t.id <= 129279) << t.content;
    }
    EXPECT_EQ(ids.size(), 465u);
    EXPECT_EQ(contents.size(), 465u);
    // Together with V3 (0..127999 BPE, 128000..128814 added) every id below 129280 is defined.
    EXPECT_EQ(*ids.begin(), 128815);
    EXPECT_EQ(*ids.rbegin(), 129279);
}

TEST(TokenizerV4, ConflictsAreErrors) {
    auto base =
        test::synthetic_tokenizer_json({}, false, nlohmann::json::array({test::added_token(128821, "<thonk>", false)}));
    EXPECT_THROW(make_v4_tokenizer_json(base), Error);  // id taken by something else
    base =
        test::synthetic_tokenizer_json({}, false, nlohmann::json::array({test::added_token(5000, "｜DSML｜", false)}));
    EXPECT_THROW(make_v4_tokenizer_json(base), Error);  // content already has another id
    base = test::synthetic_tokenizer_json({});
    const auto v4 = make_v4_tokenizer_json(base);
    EXPECT_EQ(v4.at("added_tokens").size(), 465u);
    // Idempotent: applying it to a V4 file changes nothing.
    EXPECT_EQ(make_v4_tokenizer_json(v4), v4);
    const auto tok = Tokenizer::from_json(v4);
    EXPECT_EQ(tok.token_to_id("｜DSML｜"), 128825);
    EXPECT_EQ(tok.token_to_id("<|place_holder_mm_span_0021|>"), 128847);
    EXPECT_EQ(tok.token_to_id("<|place_holder_mm_span_0435|>"), 129261);
    EXPECT_TRUE(tok.is_special(128847));
    EXPECT_FALSE(tok.is_special(128821));
}

class TokenizerV4Real : public ::testing::Test {
protected:
    void SetUp() override {
        if (test::v3_tokenizer_path().empty())
            GTEST_SKIP() << "DeepSeek tokenizer.json not installed: run scripts/setup.sh";
    }
};

TEST_F(TokenizerV4Real, DemoTokenizerFilesLoadAndEncodeMarkers) {
    const auto dir = std::filesystem::path(ONECARD_BINARY_DIR) / "tokenizer_v4_demo";
    std::filesystem::remove_all(dir);
    write_demo_tokenizer(dir);
    ASSERT_TRUE(std::filesystem::is_regular_file(dir / "tokenizer_config.json"));
    std::ifstream cfg_in(dir / "tokenizer_config.json");
    const auto cfg = nlohmann::json::parse(cfg_in);
    EXPECT_EQ(cfg.at("add_bos_token"), false);
    EXPECT_EQ(cfg.at("model_max_length"), 1048576);

    const auto tok = Tokenizer::from_file(dir / "tokenizer.json");
    tok.check_integrity();
    EXPECT_EQ(tok.vocab_size(), 129280u);
    EXPECT_EQ(tok.added_tokens().size(), 1283u);
    EXPECT_EQ(tok.token_to_id("<｜begin▁of▁sentence｜>"), 0);
    EXPECT_EQ(tok.token_to_id("<｜end▁of▁sentence｜>"), 1);
    EXPECT_EQ(tok.token_to_id("<｜User｜>"), 128803);
    EXPECT_EQ(tok.token_to_id("<｜Assistant｜>"), 128804);
    EXPECT_EQ(tok.token_to_id("<think>"), 128821);
    EXPECT_EQ(tok.token_to_id("</think>"), 128822);
    EXPECT_EQ(tok.token_to_id("｜DSML｜"), 128825);
    EXPECT_EQ(tok.token_to_id("<｜latest_reminder｜>"), 128828);
    EXPECT_EQ(tok.token_to_id("<｜action｜>"), 128829);
    EXPECT_EQ(tok.token_to_id("<｜query｜>"), 128830);
    EXPECT_EQ(tok.token_to_id("<｜authority｜>"), 128831);
    EXPECT_EQ(tok.token_to_id("<｜domain｜>"), 128832);
    EXPECT_EQ(tok.token_to_id("<｜title｜>"), 128836);
    EXPECT_EQ(tok.token_to_id("<｜read_url｜>"), 128845);

    const auto ids = tok.encode("<｜User｜>hi<｜Assistant｜>");
    ASSERT_EQ(ids.size(), 3u);
    EXPECT_EQ(ids.front(), 128803);
    EXPECT_EQ(ids.back(), 128804);
    EXPECT_EQ(tok.decode(ids), "<｜User｜>hi<｜Assistant｜>");

    // A DSML tool call: ｜DSML｜ is one token, the '<' '/' '>' around it are ordinary text.
    const std::string call =
        "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" "
        "string=\"true\">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls><｜end▁of▁sentence｜>";
    const auto call_ids = tok.encode(call);
    EXPECT_EQ(std::count(call_ids.begin(), call_ids.end(), 128825), 6);
    EXPECT_EQ(call_ids.back(), 1);
    EXPECT_EQ(tok.decode(call_ids), call);

    // User content never becomes a control token when special tokens are not allowed.
    const auto plain = tok.encode("<｜User｜><think>", false);
    for (const int32_t id : plain) EXPECT_LT(id, 128000) << "control token leaked from plain text";
    EXPECT_EQ(tok.decode(plain), "<｜User｜><think>");

    // skip_special drops BOS/EOS (special in V3) but keeps the V4 markers the parsers need.
    const std::vector<int32_t> seq = {0, 128821, 1};
    EXPECT_EQ(tok.decode(seq), "<｜begin▁of▁sentence｜><think><｜end▁of▁sentence｜>");
    EXPECT_EQ(tok.decode(seq, true), "<think>");
}

TEST_F(TokenizerV4Real, FindV3TokenizerHonoursTheEnvironment) {
    const auto found = find_v3_tokenizer_json();
    EXPECT_TRUE(std::filesystem::is_regular_file(found));
    const char* old = std::getenv("ONECARD_TOKENIZER_JSON");
    const std::string saved = old ? old : "";
    ::setenv("ONECARD_TOKENIZER_JSON", "/nonexistent/tokenizer.json", 1);
    EXPECT_THROW(find_v3_tokenizer_json(), Error);
    if (old) {
        ::setenv("ONECARD_TOKENIZER_JSON", saved.c_str(), 1);
    } else {
        ::unsetenv("ONECARD_TOKENIZER_JSON");
    }
}

}  // namespace
}  // namespace onecard
