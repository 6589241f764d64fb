// onecard inspect: component classification of official names, and the report on a synthetic
// checkpoint (totals add up, the schedule and binding result are right, broken checkpoints are
// reported instead of crashing).
#include "model/inspect.h"
#include "core/error.h"
#include "loader/checkpoint.h"
#include "model/synth.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include <unistd.h>

namespace onecard {
namespace {

namespace fs = std::filesystem;

TEST(Inspect, ComponentOfOfficialNames) {
    EXPECT_STREQ(tensor_component("embed.weight"), "embeddings/head");
    EXPECT_STREQ(tensor_component("head.weight"), "embeddings/head");
    EXPECT_STREQ(tensor_component("layers.3.attn.wq_b.scale"), "attention");
    EXPECT_STREQ(tensor_component("layers.3.attn.q_norm.weight"), "attention");
    EXPECT_STREQ(tensor_component("layers.3.attn.attn_sink"), "attention");
    EXPECT_STREQ(tensor_component("layers.3.attn.compressor.ape"), "compressor");
    EXPECT_STREQ(tensor_component("layers.2.attn.indexer.compressor.wkv.weight"), "indexer");
    EXPECT_STREQ(tensor_component("layers.2.attn.indexer.weights_proj.weight"), "indexer");
    EXPECT_STREQ(tensor_component("layers.0.ffn.gate.tid2eid"), "router");
    EXPECT_STREQ(tensor_component("layers.9.ffn.gate.bias"), "router");
    EXPECT_STREQ(tensor_component("layers.9.ffn.experts.255.w2.scale"), "routed experts");
    EXPECT_STREQ(tensor_component("layers.9.ffn.shared_experts.w1.weight"), "shared expert");
    EXPECT_STREQ(tensor_component("layers.9.hc_ffn_fn"), "HC");
    EXPECT_STREQ(tensor_component("hc_head_scale"), "HC");
    EXPECT_STREQ(tensor_component("layers.9.attn_norm.weight"), "norms");
    EXPECT_STREQ(tensor_component("norm.weight"), "norms");
    EXPECT_STREQ(tensor_component("mtp.0.e_proj.weight"), "MTP");
    EXPECT_STREQ(tensor_component("mtp.2.markov_head.markov_w1.weight"), "MTP");
    EXPECT_STREQ(tensor_component("vision.patch_embed.weight"), "other");
}

class InspectTiny : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / fmt::format("onecard_inspect_test_{}", ::getpid());
        fs::remove_all(dir_);
        SynthOptions o;
        o.preset = SynthPreset::Tiny;
        o.experts = 4;
        cfg_ = synth_config(o);
        synth_write(cfg_, 1, dir_, 1u << 20, false);
    }
    void TearDown() override { fs::remove_all(dir_); }
    fs::path dir_;
    ModelConfig cfg_;
};

TEST_F(InspectTiny, ReportAddsUp) {
    const InspectReport r = inspect_checkpoint(dir_);
    EXPECT_TRUE(r.weights_ok) << r.weights_error;
    const Checkpoint ckpt = Checkpoint::open(dir_);
    uint64_t bytes = 0;
    for (const auto& t : ckpt.tensors()) bytes += t.nbytes;
    EXPECT_EQ(r.n_tensors, static_cast<int64_t>(ckpt.tensors().size()));
    EXPECT_EQ(r.n_bytes, bytes);
    EXPECT_EQ(r.n_shards, ckpt.shard_paths().size());
    for (const auto* groups : {&r.by_dtype, &r.by_component}) {
        int64_t n = 0;
        uint64_t b = 0;
        for (const auto& g : *groups) {
            n += g.n_tensors;
            b += g.n_bytes;
        }
        EXPECT_EQ(n, r.n_tensors);
        EXPECT_EQ(b, r.n_bytes);
    }
    // Routed experts: 7 blocks incl. MTP, but MTP is its own component -> 6 layers x 4 x 6.
    for (const auto& g : r.by_component) {
        if (g.name == "routed experts") {
            EXPECT_EQ(g.n_tensors, 6 * 4 * 6);
        }
    }
    // KV estimate by hand for the tiny dims: entry = 64 nope + 2*64 rope + 1 scale + 1 pad = 194 B;
    // 2 CSA layers x (194 + 132) / 4 + 2 HCA layers x 194 / 128 = 163 + 3.03 -> 166.
    EXPECT_EQ(r.kv_bytes_per_token, 166u);

    const std::string text = inspect_text(r);
    for (const char* needle : {"DeepSeek-V4-Flash", "6 layers (2 SWA, 2 CSA, 2 HCA)", "hash-routed layers 0..1",
                               "mtp.0 SWA", "routed experts", "F8_E4M3", "all tensors bound"})
        EXPECT_NE(text.find(needle), std::string::npos) << needle << "\n" << text;

    const nlohmann::json j = inspect_json(r);
    EXPECT_EQ(j["schedule"].size(), 7u);
    EXPECT_EQ(j["schedule"][2]["kind"], "CSA");
    EXPECT_EQ(j["schedule"][1]["hash_routed"], true);
    EXPECT_EQ(j["schedule"][6]["block"], "mtp.0");
    EXPECT_EQ(j["n_bytes"].get<uint64_t>(), r.n_bytes);
    EXPECT_EQ(j["weights_ok"], true);
    EXPECT_EQ(j["config"]["hidden_size"], 256);
}

TEST_F(InspectTiny, MismatchIsReportedNotThrown) {
    // Claim more experts than the files hold: the report still comes, with the binder's message.
    nlohmann::json cfg = nlohmann::json::parse(std::ifstream(dir_ / "config.json"));
    cfg["n_routed_experts"] = 6;
    std::ofstream(dir_ / "config.json") << cfg.dump(2);
    const InspectReport r = inspect_checkpoint(dir_);
    EXPECT_FALSE(r.weights_ok);
    EXPECT_NE(r.weights_error.find("missing    layers.0.ffn.experts.4.w1.weight"), std::string::npos)
        << r.weights_error;
    EXPECT_NE(inspect_text(r).find("does not match its config"), std::string::npos);
    EXPECT_EQ(inspect_json(r)["weights_ok"], false);

    // An invalid config is an error naming the key.
    cfg["compress_ratios"][2] = 16;
    std::ofstream(dir_ / "config.json") << cfg.dump(2);
    try {
        inspect_checkpoint(dir_);
        ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("compress_ratios[2]"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace onecard
