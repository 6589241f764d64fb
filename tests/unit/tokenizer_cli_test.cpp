// `onecard tokenize`: encode stdin to a JSON id array, --decode back to the exact bytes, and
// clear errors. Runs the built binary; skips when it (or the tokenizer data) is missing.
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include <unistd.h>

namespace onecard {
namespace {

using Result = test::CommandResult;

Result run_cli(const std::string& args, const std::string& stdin_text) {
    const auto dir = std::filesystem::path(ONECARD_BINARY_DIR) / "tokenizer_cli_test";
    std::filesystem::create_directories(dir);
    // One file per process: ctest runs the cases of this file in parallel processes.
    const auto in = dir / ("stdin." + std::to_string(::getpid()) + ".txt");
    std::ofstream(in, std::ios::binary) << stdin_text;
    Result r =
        test::run_command(test::onecard_binary().string() + " tokenize " + args + " < '" + in.string() + "' 2>&1");
    std::filesystem::remove(in);
    return r;
}

class TokenizerCli : public ::testing::Test {
protected:
    void SetUp() override {
        if (!std::filesystem::exists(std::filesystem::path(ONECARD_BINARY_DIR) / "onecard"))
            GTEST_SKIP() << "onecard binary not built";
        if (test::v3_tokenizer_path().empty()) GTEST_SKIP() << "tokenizer.json not installed: run scripts/setup.sh";
    }
    std::string tok_arg() const { return "--tokenizer '" + test::v3_tokenizer_path().string() + "'"; }
};

TEST_F(TokenizerCli, EncodeThenDecodeRoundTrips) {
    const std::string text = "Hello! 毕老师！1 + 1 = 2\n  👍🏽 <｜User｜>x\r\n";
    const Result enc = run_cli(tok_arg(), text);
    ASSERT_EQ(enc.rc, 0) << enc.out;
    const auto ids = nlohmann::json::parse(enc.out).get<std::vector<int32_t>>();
    EXPECT_EQ(ids, Tokenizer::from_file(test::v3_tokenizer_path()).encode(text));
    EXPECT_NE(std::find(ids.begin(), ids.end(), 128803), ids.end());
    const Result dec = run_cli(tok_arg() + " --decode", nlohmann::json(ids).dump());
    ASSERT_EQ(dec.rc, 0) << dec.out;
    EXPECT_EQ(dec.out, text);
    // --no-special: the marker is plain text.
    const Result plain = run_cli(tok_arg() + " --no-special", "<｜User｜>");
    const auto plain_ids = nlohmann::json::parse(plain.out).get<std::vector<int32_t>>();
    EXPECT_EQ(std::find(plain_ids.begin(), plain_ids.end(), 128803), plain_ids.end());
}

// --jsonl: each line a JSON string, each output line the ids encode() gives that string (special tokens,
// escaped newlines and non-ASCII included); a line that is not a JSON string names its number.
TEST_F(TokenizerCli, JsonlEncodesOneTextPerLine) {
    const std::vector<std::string> texts = {"Hello! 毕老师！", "", "<｜User｜>x\r\n  y", "plain"};
    std::string lines;
    for (const auto& t : texts) lines += nlohmann::json(t).dump() + "\n";
    const Result r = run_cli(tok_arg() + " --jsonl", lines);
    ASSERT_EQ(r.rc, 0) << r.out;
    const auto tok = Tokenizer::from_file(test::v3_tokenizer_path());
    std::istringstream out(r.out);
    std::string line;
    size_t n = 0;
    for (; std::getline(out, line); ++n) {
        ASSERT_LT(n, texts.size()) << r.out;
        EXPECT_EQ(nlohmann::json::parse(line).get<std::vector<int32_t>>(), tok.encode(texts[n])) << texts[n];
    }
    EXPECT_EQ(n, texts.size());
    const Result bad = run_cli(tok_arg() + " --jsonl", "\"ok\"\n[1, 2]\n");
    EXPECT_NE(bad.rc, 0);
    EXPECT_NE(bad.out.find("line 2 must be a JSON string"), std::string::npos) << bad.out;
    const Result both = run_cli(tok_arg() + " --jsonl --decode", "[1]");
    EXPECT_NE(both.rc, 0);
}

TEST_F(TokenizerCli, BadInputIsAClearError) {
    Result r = run_cli(tok_arg() + " --decode", "[1, \"x\"]");
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.out.find("not an integer id"), std::string::npos) << r.out;
    r = run_cli(tok_arg() + " --decode", "[5, 99999999]");
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.out.find("outside the vocabulary"), std::string::npos) << r.out;
    r = run_cli("--tokenizer /nonexistent/tokenizer.json", "hi");
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.out.find("/nonexistent/tokenizer.json"), std::string::npos) << r.out;
}

// encode/decode are const and may run from many threads at once (shared BPE word cache).
TEST(TokenizerThreads, ConcurrentEncodesAgree) {
    const auto tok = Tokenizer::from_json(
        test::synthetic_tokenizer_json({{"t", "h"}, {"th", "e"}, {" ", "the"}, {"e", "r"}, {"1", "2"}}));
    std::vector<std::string> texts;
    for (int i = 0; i < 200; ++i)
        texts.push_back("the other " + std::to_string(i * 7919) + " there\n" + std::string(i % 5, ' '));
    std::vector<std::vector<int32_t>> expect;
    for (const auto& t : texts) expect.push_back(tok.encode(t));
    std::vector<int> mismatches(4, 0);
    std::vector<std::thread> threads;
    for (int w = 0; w < 4; ++w) {
        threads.emplace_back([&, w] {
            for (int round = 0; round < 20; ++round)
                for (size_t i = 0; i < texts.size(); ++i)
                    if (tok.encode(texts[(i + w * 31) % texts.size()]) != expect[(i + w * 31) % texts.size()])
                        ++mismatches[w];
        });
    }
    for (auto& t : threads) t.join();
    for (int w = 0; w < 4; ++w) EXPECT_EQ(mismatches[w], 0) << "thread " << w;
}

}  // namespace
}  // namespace onecard
