// Weight binding: every official name binds with the right dtype and shape; a checkpoint that
// disagrees with its config (missing, unexpected, wrong dtype, wrong shape) is refused with ONE
// error that names every problem; the 0731 DSpark drafter layout binds.
#include "model/weights.h"
#include "core/error.h"
#include "loader/checkpoint.h"
#include "loader/safetensors_writer.h"
#include "model/synth.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <functional>

#include <unistd.h>

namespace onecard {
namespace {

namespace fs = std::filesystem;

ModelConfig tiny_config() {
    SynthOptions o;
    o.preset = SynthPreset::Tiny;
    o.experts = 4;  // keep the files small: the binder does not care about the count
    return synth_config(o);
}

// Writes `specs` (zero-filled) as a single model.safetensors plus `cfg` as config.json.
fs::path write_checkpoint(const std::string& tag, const ModelConfig& cfg, const std::vector<TensorSpec>& specs) {
    const fs::path dir = fs::temp_directory_path() / fmt::format("onecard_weights_test_{}_{}", ::getpid(), tag);
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(dir / "config.json") << to_official_json(cfg).dump(2);
    SafetensorsWriter w(dir / "model.safetensors", specs);
    std::vector<std::byte> zeros(1 << 16);
    for (const TensorSpec& s : specs) {
        for (size_t left = s.nbytes(); left > 0;) {
            const size_t n = std::min(left, zeros.size());
            w.write(s.name, std::span<const std::byte>(zeros.data(), n));
            left -= n;
        }
    }
    w.close();
    return dir;
}

std::string bind_error(const ModelConfig& cfg, const fs::path& dir) {
    const Checkpoint ckpt = Checkpoint::open(dir);
    try {
        bind_weights(cfg, ckpt);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

std::vector<TensorSpec> edited(const ModelConfig& cfg, const std::function<void(std::vector<TensorSpec>&)>& edit) {
    std::vector<TensorSpec> specs = checkpoint_layout(cfg);
    edit(specs);
    return specs;
}

TensorSpec& spec_named(std::vector<TensorSpec>& specs, const std::string& name) {
    for (auto& s : specs)
        if (s.name == name) return s;
    throw Error("no spec " + name);
}

TEST(Weights, CompleteCheckpointBinds) {
    const ModelConfig cfg = tiny_config();
    const fs::path dir = write_checkpoint("ok", cfg, checkpoint_layout(cfg));
    const Checkpoint ckpt = Checkpoint::open(dir);
    const ModelWeights w = bind_weights(cfg, ckpt);
    ASSERT_EQ(w.layers.size(), 6u);
    EXPECT_EQ(w.layers[2].attn.wq_b.weight.name, "layers.2.attn.wq_b.weight");
    EXPECT_EQ(w.layers[2].attn.wq_b.out_features(), cfg.num_attention_heads * cfg.head_dim);
    EXPECT_EQ(w.layers[2].attn.wq_b.in_features(), cfg.q_lora_rank);
    EXPECT_EQ(w.layers[2].attn.indexer->compressor.ape.name, "layers.2.attn.indexer.compressor.ape");
    EXPECT_EQ(w.layers[1].ffn.tid2eid->dtype, DType::I64);
    EXPECT_EQ(w.layers[3].ffn.experts[3].w1.scale.name, "layers.3.ffn.experts.3.w1.scale");
    EXPECT_EQ(w.layers[3].ffn.experts[3].w1.in_features(), cfg.hidden_size);
    EXPECT_EQ(w.mtp[0].e_proj.weight.name, "mtp.0.e_proj.weight");
    EXPECT_EQ(w.mtp[0].hc_head.fn.shape, (std::vector<int64_t>{4, 4 * cfg.hidden_size}));
    EXPECT_EQ(w.hc_head.scale.shape, (std::vector<int64_t>{1}));
    EXPECT_EQ(w.head.shape, (std::vector<int64_t>{cfg.vocab_size, cfg.hidden_size}));
    for (const auto* v : {&w.embed, &w.head, &w.norm, &w.layers[5].attn.attn_sink}) EXPECT_NE(v->data, nullptr);
    fs::remove_all(dir);
}

TEST(Weights, AlternativeDtypesAccepted) {
    // tid2eid as int32 (DeepSeek's reference declares int32) and packed FP4 as U8.
    const ModelConfig cfg = tiny_config();
    const auto specs = edited(cfg, [](std::vector<TensorSpec>& s) {
        spec_named(s, "layers.0.ffn.gate.tid2eid").dtype = DType::I32;
        spec_named(s, "layers.4.ffn.experts.1.w2.weight").dtype = DType::U8;
    });
    const fs::path dir = write_checkpoint("alt", cfg, specs);
    EXPECT_EQ(bind_error(cfg, dir), "");
    fs::remove_all(dir);
}

TEST(Weights, OneErrorNamesEveryProblem) {
    const ModelConfig cfg = tiny_config();
    const auto specs = edited(cfg, [](std::vector<TensorSpec>& s) {
        std::erase_if(s, [](const TensorSpec& t) { return t.name == "layers.2.attn.indexer.wq_b.scale"; });
        std::erase_if(s, [](const TensorSpec& t) { return t.name == "mtp.0.hnorm.weight"; });
        s.push_back({"layers.0.attn.bogus.weight", DType::BF16, {8}});
        spec_named(s, "layers.1.attn_norm.weight").dtype = DType::F32;  // wrong dtype
        spec_named(s, "layers.4.attn.wo_a.weight").shape = {256, 128};  // wrong shape
    });
    const fs::path dir = write_checkpoint("bad", cfg, specs);
    const std::string msg = bind_error(cfg, dir);
    const std::string dir_name = dir.string();
    ASSERT_FALSE(msg.empty());
    for (const char* needle :
         {"5 problem(s)", "2 missing", "1 unexpected", "2 mismatched",
          "missing    layers.2.attn.indexer.wq_b.scale (F8_E8M0 [4, 1])", "missing    mtp.0.hnorm.weight",
          "unexpected layers.0.attn.bogus.weight",
          "layers.1.attn_norm.weight: checkpoint has F32 [256], config expects BF16 [256]",
          "layers.4.attn.wo_a.weight: checkpoint has F8_E4M3 [256, 128], config expects F8_E4M3 [256, 256]",
          dir_name.c_str()})
        EXPECT_NE(msg.find(needle), std::string::npos) << "missing '" << needle << "' in:\n" << msg;
    fs::remove_all(dir);
}

TEST(Weights, ShapeMismatchAgainstConfig) {
    // The files are right for one config and read with another: q_lora_rank 128 vs 256 touches
    // wq_a, q_norm, wq_b and the indexer's wq_b in every block.
    const ModelConfig cfg = tiny_config();
    const fs::path dir = write_checkpoint("qlora", cfg, checkpoint_layout(cfg));
    ModelConfig other = cfg;
    other.q_lora_rank = 256;
    const std::string msg = bind_error(other, dir);
    EXPECT_NE(
        msg.find("layers.0.attn.wq_a.weight: checkpoint has F8_E4M3 [128, 256], config expects F8_E4M3 [256, 256]"),
        std::string::npos)
        << msg;
    EXPECT_NE(msg.find("layers.0.attn.q_norm.weight"), std::string::npos) << msg;
    // 7 blocks x (wq_a w+s, q_norm, wq_b w+s) + 2 indexer wq_b (w+s) = 7*5 + 4 = 39 mismatches:
    // more than the 20 lines shown, so the rest is counted.
    EXPECT_NE(msg.find("39 problem(s)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("... and 19 more"), std::string::npos) << msg;
    fs::remove_all(dir);
}

TEST(Weights, MissingExpertsAndWrongExpertCount) {
    // A checkpoint with 4 experts read by a config that expects 6: the gate, the bias and the
    // experts 4..5 of every block are reported; nothing is bound silently.
    const ModelConfig cfg = tiny_config();
    const fs::path dir = write_checkpoint("experts", cfg, checkpoint_layout(cfg));
    ModelConfig other = cfg;
    other.n_routed_experts = 6;
    const std::string msg = bind_error(other, dir);
    EXPECT_NE(msg.find("missing    layers.0.ffn.experts.4.w1.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("layers.0.ffn.gate.weight: checkpoint has BF16 [4, 256], config expects BF16 [6, 256]"),
              std::string::npos)
        << msg;
    // 7 blocks x (gate + 2 experts x 6 tensors) + 5 non-hash blocks x bias = 7*13 + 5 = 96
    EXPECT_NE(msg.find("96 problem(s)"), std::string::npos) << msg;
    fs::remove_all(dir);
}

ModelConfig tiny_0731() {
    ModelConfig c = tiny_config();
    c.dspark = DSparkConfig{5, 16, 1000, {3, 4, 5}};
    c.compress_ratios.push_back(0);
    c.compress_ratios.push_back(0);  // 6 layers + 3 DSpark stages
    return parse_config(to_official_json(c));
}

TEST(Weights, DSparkDrafterLayoutBinds) {
    const ModelConfig cfg = tiny_0731();
    ASSERT_EQ(cfg.variant, ModelVariant::V4Flash0731);
    const auto specs = checkpoint_layout(cfg);
    const fs::path dir = write_checkpoint("dspark", cfg, specs);
    const Checkpoint ckpt = Checkpoint::open(dir);
    const ModelWeights w = bind_weights(cfg, ckpt);
    EXPECT_TRUE(w.mtp.empty());
    ASSERT_TRUE(w.dspark.has_value());
    const DSparkWeights& d = *w.dspark;
    ASSERT_EQ(d.stages.size(), 3u);
    EXPECT_EQ(d.main_proj.weight.shape, (std::vector<int64_t>{256, 3 * 256}));
    EXPECT_EQ(d.main_proj.scale.shape, (std::vector<int64_t>{2, 6}));
    EXPECT_EQ(d.markov_w1.shape, (std::vector<int64_t>{1024, 16}));
    EXPECT_EQ(d.confidence_proj.shape, (std::vector<int64_t>{1, 256 + 16}));
    EXPECT_EQ(d.hc_head.fn.name, "mtp.2.hc_head_fn");
    EXPECT_TRUE(d.stages[1].ffn.gate_bias.has_value());  // drafter MoE is not hash-routed
    EXPECT_FALSE(d.stages[1].attn.compressor.has_value());
    // Only stage 0 carries main_proj/main_norm, only the last stage the heads; no MTP glue.
    for (const auto& s : specs) {
        EXPECT_EQ(s.name.find("enorm"), std::string::npos);
        if (s.name.find("main_") != std::string::npos) {
            EXPECT_EQ(s.name.rfind("mtp.0.", 0), 0u) << s.name;
        }
        if (s.name.find("markov") != std::string::npos || s.name.find("confidence") != std::string::npos) {
            EXPECT_EQ(s.name.rfind("mtp.2.", 0), 0u) << s.name;
        }
    }
    fs::remove_all(dir);

    // A 0731 checkpoint stripped of its Markov head is refused.
    const auto stripped = edited(cfg, [](std::vector<TensorSpec>& s) {
        std::erase_if(s, [](const TensorSpec& t) { return t.name.find("markov_head") != std::string::npos; });
    });
    const fs::path dir2 = write_checkpoint("dspark_stripped", cfg, stripped);
    const std::string msg = bind_error(cfg, dir2);
    EXPECT_NE(msg.find("missing    mtp.2.markov_head.markov_w1.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("missing    mtp.2.markov_head.markov_w2.weight"), std::string::npos) << msg;
    fs::remove_all(dir2);

    // A plain V4-Flash checkpoint read with the 0731 config: the MTP glue is unexpected.
    const ModelConfig flash = tiny_config();
    const fs::path dir3 = write_checkpoint("flash_as_0731", flash, checkpoint_layout(flash));
    const std::string msg3 = bind_error(cfg, dir3);
    EXPECT_NE(msg3.find("unexpected mtp.0.e_proj.weight"), std::string::npos) << msg3;
    fs::remove_all(dir3);
}

TEST(Weights, SynthesizedDSparkCheckpointRoundTrips) {
    const ModelConfig cfg = tiny_0731();
    const fs::path dir = fs::temp_directory_path() / fmt::format("onecard_weights_test_{}_synth0731", ::getpid());
    fs::remove_all(dir);
    synth_write(cfg, 5, dir, 4u << 20, false);
    const Checkpoint ckpt = Checkpoint::open(dir);
    const ModelWeights w = bind_weights(load_config(dir / "config.json"), ckpt);
    ASSERT_TRUE(w.dspark.has_value());
    EXPECT_EQ(w.dspark->stages.size(), 3u);
    fs::remove_all(dir);
}

}  // namespace
}  // namespace onecard
