// `onecard profile-experts` (the built binary) on tiny synthetic checkpoints: every routing pick of
// the main layers is counted (layers x tokens x top-k in all), the counts are exactly the model's
// picks (the counting model's logits are unchanged and its own sink agrees), text prompts are
// tokenised, and bad inputs are clear errors. Also `onecard plan` with the offload flags.
#include "core/error.h"
#include "loader/checkpoint.h"
#include "model/deepseek_v4.h"
#include "model/expert_profile.h"
#include "model/synth.h"
#include "model/weights.h"
#include "tokenizer/deepseek_v4_vocab.h"
#include "tokenizer/tokenizer.h"

#include "support/test_support.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

using namespace onecard;

namespace {

namespace fs = std::filesystem;

test::CommandResult run(const std::string& args) {
    return test::run_command(test::onecard_binary().string() + " " + args + " 2>&1");
}

// The last line of `out` that starts with '{', parsed.
nlohmann::json last_json(const std::string& out) {
    const auto at = out.rfind("\n{");
    return nlohmann::json::parse(at == std::string::npos ? out : out.substr(at + 1));
}

class CliProfileExperts : public ::testing::Test {
protected:
    void SetUp() override {
        if (!fs::exists(test::onecard_binary())) GTEST_SKIP() << "onecard binary not built";
        dir_ = fs::temp_directory_path() / ("onecard_cli_profile_experts_" + std::to_string(::getpid()));
        fs::remove_all(dir_);
        SynthOptions opt;
        opt.preset = SynthPreset::Tiny;
        cfg_ = synth_config(opt);
        synth_write(cfg_, 4242, dir_ / "model", synth_default_shard_bytes(SynthPreset::Tiny), false);
    }
    void TearDown() override {
        if (!dir_.empty()) fs::remove_all(dir_);
    }
    fs::path write(const std::string& name, const std::string& text) {
        const fs::path p = dir_ / name;
        std::ofstream(p) << text;
        return p;
    }
    std::string model() const { return "'" + (dir_ / "model").string() + "'"; }
    fs::path dir_;
    ModelConfig cfg_;
};

TEST_F(CliProfileExperts, CountsEveryPickOfTheMainLayers) {
    const std::vector<std::vector<int32_t>> prompts = {{0, 17, 5, 900, 33, 33, 2},
                                                       {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}};
    const fs::path file = write("prompts.jsonl",
                                "{\"prompt_tokens\": [0, 17, 5, 900, 33, 33, 2]}\n\n"
                                "{\"prompt_tokens\": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]}\n");
    const fs::path out = dir_ / "profile.json";
    // --chunk 5: several forward calls per prompt; the counts must not depend on it.
    const auto r = run("profile-experts --model " + model() + " --prompts '" + file.string() + "' --out '" +
                       out.string() + "' --chunk 5");
    ASSERT_EQ(r.rc, 0) << r.out;
    const nlohmann::json j = last_json(r.out);
    EXPECT_EQ(j.at("tokens").get<int64_t>(), 19);
    EXPECT_EQ(j.at("prompts").get<int64_t>(), 2);
    const ExpertUseProfile p = ExpertUseProfile::load_for(out, cfg_.num_hidden_layers, cfg_.n_routed_experts);
    EXPECT_EQ(p.total(), static_cast<uint64_t>(cfg_.num_hidden_layers * 19 * cfg_.num_experts_per_tok));
    EXPECT_EQ(j.at("picks").get<uint64_t>(), p.total());
    for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
        uint64_t per_layer = 0;
        for (int64_t e = 0; e < cfg_.n_routed_experts; ++e) per_layer += p.count(l, e);
        EXPECT_EQ(per_layer, static_cast<uint64_t>(19 * cfg_.num_experts_per_tok)) << "layer " << l;
    }

    // The same counts from the model API directly, and counting leaves the logits alone.
    const Checkpoint ckpt = Checkpoint::open(dir_ / "model");
    const ModelWeights w = bind_weights(cfg_, ckpt);
    DeepSeekV4 counting(cfg_, w, Numerics::Reference);
    const DeepSeekV4 plain(cfg_, w, Numerics::Reference);
    ExpertUseProfile sink(cfg_.num_hidden_layers, cfg_.n_routed_experts);
    counting.set_expert_use_sink(&sink);
    for (const auto& ids : prompts) {
        SequenceState a = counting.new_sequence(), b = plain.new_sequence();
        EXPECT_EQ(counting.forward(a, ids), plain.forward(b, ids));
    }
    for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l)
        for (int64_t e = 0; e < cfg_.n_routed_experts; ++e) EXPECT_EQ(sink.count(l, e), p.count(l, e));
    ExpertUseProfile wrong(1, 1);
    EXPECT_THROW(counting.set_expert_use_sink(&wrong), Error);

    // --max-tokens-per-prompt caps what each prompt contributes.
    const auto capped = run("profile-experts --model " + model() + " --prompts '" + file.string() + "' --out '" +
                            out.string() + "' --max-tokens-per-prompt 4");
    ASSERT_EQ(capped.rc, 0) << capped.out;
    EXPECT_EQ(last_json(capped.out).at("tokens").get<int64_t>(), 8);
    EXPECT_EQ(ExpertUseProfile::load(out).total(),
              static_cast<uint64_t>(cfg_.num_hidden_layers * 8 * cfg_.num_experts_per_tok));
}

TEST_F(CliProfileExperts, TextPromptsAreTokenised) {
    // The real V4 tokenizer's ids exceed the tiny vocabulary: a tiny model with its vocabulary
    // widened to hold them (the embedding is all the change), so the text path runs end to end.
    SynthOptions opt;
    opt.preset = SynthPreset::Tiny;
    ModelConfig cfg = synth_config(opt);
    cfg.vocab_size = 129280;
    const fs::path mdir = dir_ / "wide";
    synth_write(cfg, 7, mdir, 64u << 20, false);
    write_demo_tokenizer(mdir);
    const Tokenizer tok = Tokenizer::from_file(mdir / "tokenizer.json");
    const std::string a = "Hello, how are you?", b = "The quick brown fox";
    const fs::path file = write("prompts.txt", a + "\n{\"prompt\": \"" + b + "\"}\n");
    const fs::path out = dir_ / "text.json";
    const auto r = run("profile-experts --model '" + mdir.string() + "' --prompts '" + file.string() + "' --out '" +
                       out.string() + "'");
    ASSERT_EQ(r.rc, 0) << r.out;
    const int64_t n_tok = 2 + static_cast<int64_t>(tok.encode(a).size() + tok.encode(b).size());  // + BOS each
    EXPECT_EQ(last_json(r.out).at("tokens").get<int64_t>(), n_tok);
    EXPECT_EQ(ExpertUseProfile::load(out).total(),
              static_cast<uint64_t>(cfg.num_hidden_layers * n_tok * cfg.num_experts_per_tok));
}

TEST_F(CliProfileExperts, BadInputsAreClearErrors) {
    const fs::path out = dir_ / "p.json";
    // Text, but the tiny checkpoint ships no tokenizer.
    auto r = run("profile-experts --model " + model() + " --prompts '" + write("t.txt", "hello\n").string() +
                 "' --out '" + out.string() + "'");
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.out.find("tokenizer.json"), std::string::npos) << r.out;
    r = run("profile-experts --model " + model() + " --prompts '" +
            write("b.jsonl", "{\"prompt_tokens\": [1, 2\n").string() + "' --out '" + out.string() + "'");
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.out.find("line 1: not valid JSON"), std::string::npos) << r.out;
    r = run("profile-experts --model " + model() + " --prompts '" +
            write("v.jsonl", "{\"prompt_tokens\": [1]}\n{\"prompt_tokens\": [1, 5000]}\n").string() + "' --out '" +
            out.string() + "'");
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.out.find("line 2: token id 5000 outside"), std::string::npos) << r.out;
    r = run("profile-experts --model " + model() + " --prompts '" + write("e.txt", "\n\n").string() + "' --out '" +
            out.string() + "'");
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.out.find("holds no prompt"), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(out));
}

TEST_F(CliProfileExperts, PlanTakesTheProfileAndOffloadFlags) {
    // The flash shape on a GPU too small for it, with a skewed profile: offloaded, and the host
    // share of picks reported. --host-ram-gib pins the host side (no dependence on this machine).
    const fs::path prof = dir_ / "flash.json";
    const ModelConfig flash = parse_config(test::flash_official_config_json());
    synthetic_skewed_profile(flash.num_hidden_layers, flash.n_routed_experts, 1).save(prof);
    auto r = run("plan --synth flash --device-gib 131.29 --host-ram-gib 64 --expert-profile '" + prof.string() + "'");
    ASSERT_EQ(r.rc, 0) << r.out;
    nlohmann::json j = last_json(r.out);
    EXPECT_TRUE(j.at("fits").get<bool>());
    EXPECT_GT(j.at("expert_placement").at("host_pairs").get<int64_t>(), 0);
    EXPECT_TRUE(j.at("expert_placement").contains("host_pick_share"));
    EXPECT_NE(r.out.find("host share of picks"), std::string::npos) << r.out;
    // Too little host RAM, or offload forbidden: refused with the numbers.
    r = run("plan --synth flash --device-gib 131.29 --host-ram-gib 2");
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.out.find("GPU + host RAM"), std::string::npos) << r.out;
    r = run("plan --synth flash --device-gib 131.29 --no-host-experts");
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.out.find("--experts"), std::string::npos) << r.out;
    // A profile of another shape is refused naming both.
    ExpertUseProfile(3, 8).save(prof);
    r = run("plan --synth flash --device-gib 131.29 --host-ram-gib 64 --expert-profile '" + prof.string() + "'");
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.out.find("3 layers x 8 experts"), std::string::npos) << r.out;
    // --gpu-memory-utilization is a fraction of the total (here the --device-gib figure).
    r = run("plan --synth flash --device-gib 100 --gpu-memory-utilization 0.5 --host-ram-gib 500");
    ASSERT_EQ(r.rc, 0) << r.out;
    j = last_json(r.out);
    EXPECT_EQ(j.at("device_bytes").get<uint64_t>(), 50ull << 30);
}

}  // namespace
