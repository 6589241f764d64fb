// `onecard render-chat`: the CLI reproduces fixture prompts byte for byte (variant from config.json or
// --variant) and --ids tokenises the control tokens as single special ids.
#include "core/error.h"
#include "model/config.h"
#include "model/synth.h"
#include "tokenizer/chat_json.h"
#include "tokenizer/deepseek_v4_vocab.h"
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace onecard {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

void spit(const fs::path& p, const std::string& s) {
    std::ofstream f(p, std::ios::binary);
    f << s;
}

class RenderChatCli : public ::testing::Test {
protected:
    void SetUp() override {
        binary_ = fs::path(ONECARD_BINARY_DIR) / "onecard";
        if (!fs::exists(binary_)) GTEST_SKIP() << "onecard binary not built at " << binary_;
        dir_ = fs::temp_directory_path() / ("onecard_render_chat_" + std::to_string(::getpid()));
        fs::create_directories(dir_);
        // A checkpoint directory needs only config.json for rendering: the tiny synthetic V4-Flash config.
        spit(dir_ / "config.json", to_official_json(synth_config(SynthOptions{})).dump(2));
    }
    void TearDown() override {
        if (!dir_.empty()) fs::remove_all(dir_);
    }

    // Runs render-chat on the request of fixture `name`; returns stdout. `extra` are more CLI arguments.
    std::string run(const std::string& fixture, const std::string& extra, std::string* expected = nullptr) {
        const OrderedJson fx = OrderedJson::parse(slurp(fs::path(ONECARD_SOURCE_DIR) / "tests/data/chat" / fixture));
        if (expected) *expected = fx.at("expected").get<std::string>();
        spit(dir_ / "req.json", fx.at("request").dump());
        const std::string cmd = "'" + binary_.string() + "' render-chat " + extra + " < '" +
                                (dir_ / "req.json").string() + "' > '" + (dir_ / "out.txt").string() + "' 2> '" +
                                (dir_ / "err.txt").string() + "'";
        const int rc = std::system(cmd.c_str());
        EXPECT_EQ(rc, 0) << cmd << "\n" << slurp(dir_ / "err.txt");
        return slurp(dir_ / "out.txt");
    }

    fs::path binary_;
    fs::path dir_;
};

TEST_F(RenderChatCli, VariantFromConfigMatchesFixture) {
    std::string expected;
    const std::string got =
        run("req_parallel_calls_results_reordered.json", "--model '" + dir_.string() + "'", &expected);
    EXPECT_EQ(got, expected);
    // A V4 checkpoint renders "max" effort with the V4 prompt.
    const std::string max = run("req_effort_max_v4.json", "--model '" + dir_.string() + "'", &expected);
    EXPECT_EQ(max, expected);
}

TEST_F(RenderChatCli, VariantOverride0731) {
    std::string expected;
    const std::string got = run("req_effort_max_0731.json", "--variant 0731", &expected);
    EXPECT_EQ(got, expected);
    EXPECT_NE(got.find("Beyond maximum"), std::string::npos);
}

TEST_F(RenderChatCli, IdsUseSpecialTokens) {
    try {
        write_demo_tokenizer(dir_);
    } catch (const Error& e) {
        GTEST_SKIP() << "DeepSeek tokenizer not installed (scripts/setup.sh): " << e.what();
    }
    std::string expected;
    const std::string out = run("req_chat_system_user.json", "--ids --model '" + dir_.string() + "'", &expected);
    const auto ids = nlohmann::json::parse(out).get<std::vector<int32_t>>();
    const Tokenizer tok = Tokenizer::from_file(dir_ / "tokenizer.json");
    EXPECT_EQ(ids, tok.encode(expected, true));
    ASSERT_GE(ids.size(), 4u);
    EXPECT_EQ(ids.front(), 0);  // BOS
    // "...<｜User｜>2+2?<｜Assistant｜></think>": the control tokens are single ids (dsv4-model.md §9.1).
    EXPECT_EQ(ids[ids.size() - 1], 128822);
    EXPECT_EQ(ids[ids.size() - 2], 128804);
    EXPECT_NE(std::find(ids.begin(), ids.end(), 128803), ids.end());
    EXPECT_EQ(tok.decode(ids), expected);
}

}  // namespace
}  // namespace onecard
