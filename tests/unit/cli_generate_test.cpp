// `onecard generate` (the built binary) against the model API: its greedy continuation through the
// engine equals a plain argmax loop over DeepSeekV4::forward, and bad prompt flags are clear errors.
#include "loader/checkpoint.h"
#include "model/deepseek_v4.h"
#include "model/synth.h"
#include "model/weights.h"

#include "support/test_support.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>

using namespace onecard;

namespace {

test::CommandResult run(const std::string& args) {
    return test::run_command(test::onecard_binary().string() + " " + args + " 2>&1");
}

class CliGenerate : public ::testing::Test {
protected:
    void SetUp() override {
        if (!std::filesystem::exists(test::onecard_binary())) GTEST_SKIP() << "onecard binary not built";
        dir_ = std::filesystem::temp_directory_path() / ("onecard_cli_generate_" + std::to_string(::getpid()));
        SynthOptions opt;
        opt.preset = SynthPreset::Tiny;
        cfg_ = synth_config(opt);
        synth_write(cfg_, 4242, dir_, synth_default_shard_bytes(SynthPreset::Tiny), false);
    }
    void TearDown() override {
        if (!dir_.empty()) std::filesystem::remove_all(dir_);
    }
    std::filesystem::path dir_;
    ModelConfig cfg_;
};

TEST_F(CliGenerate, GreedyMatchesArgmaxLoopOverTheModel) {
    const std::vector<int32_t> prompt = {0, 17, 5, 900, 33, 33, 2};
    constexpr int n_new = 6;
    const test::CommandResult r =
        run("generate --model '" + dir_.string() +
            "' --prompt-tokens 0,17,5,900,33,33,2 --max-tokens 6 --numerics exact --ignore-eos");
    ASSERT_EQ(r.rc, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out);
    const auto got = j.at("tokens").get<std::vector<int32_t>>();
    EXPECT_EQ(j.at("finish_reason"), "length");

    const Checkpoint ckpt = Checkpoint::open(dir_);
    const ModelWeights w = bind_weights(cfg_, ckpt);
    const DeepSeekV4 model(cfg_, w, Numerics::Exact);
    SequenceState st = model.new_sequence();
    std::vector<int32_t> want;
    std::vector<float> logits = model.forward(st, prompt);
    const auto V = static_cast<size_t>(cfg_.vocab_size);
    for (int i = 0; i < n_new; ++i) {
        const float* last = logits.data() + logits.size() - V;
        const auto next = static_cast<int32_t>(std::max_element(last, last + V) - last);  // lowest id on ties
        want.push_back(next);
        logits = model.forward(st, std::span<const int32_t>(&want.back(), 1));
    }
    EXPECT_EQ(got, want);
}

TEST_F(CliGenerate, PromptFlagsAreClearErrors) {
    test::CommandResult r = run("generate --model '" + dir_.string() + "' --max-tokens 2");
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.out.find("exactly one of --prompt, --prompt-tokens"), std::string::npos) << r.out;
    // The tiny checkpoint ships no tokenizer: a text prompt names the missing file.
    r = run("generate --model '" + dir_.string() + "' --prompt hi --max-tokens 2");
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.out.find("tokenizer.json"), std::string::npos) << r.out;
}

}  // namespace
