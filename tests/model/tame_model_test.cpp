// The tame synthetic model (SynthOptions::tame, the rule in src/model/synth.cpp) on the CPU: its
// oracle noise floor is tight enough for GPU parity bars that a bug cannot hide in, and it is not
// degenerate (every op does real work).
//
// Noise floor, measured as tests/ops/gpu_model_test.cpp measures it on the default model: the oracle
// in reference numerics with bf16 storage (DeepSeekV4::set_bf16_storage, what the GPU test compares
// against) against itself with every hyper-connection bias one fp32 ulp up (test::nudge_hc_bases):
// the smallest possible difference, the size of a summation-order change. Issue 23's target: median
// per-position relative L2 <= 1e-3, held here. The default rule on the same config, seed and prompt
// sits far above it (its sub-blocks write their whole output into the streams).
//
// Dimensions: the tiny preset (hidden 256, 6 layers SWA, SWA, CSA, HCA, CSA, HCA, 2 hash-routed,
// 8 experts top-3, window 32, index_topk 8) with a 192-token prompt: 48 CSA entries >> index_topk,
// one HCA entry, six windows. The real per-layer Flash dimensions take minutes per forward pass on
// one core here; their floor is measured (and held to the same bar) by tests/ops/gpu_tame_test.cpp,
// which computes the same oracle on the GPU machine's CPU anyway.
#include "backend/cpu/linear.h"
#include "model/deepseek_v4.h"
#include "model/expert_profile.h"
#include "model/synth.h"
#include "model/weights.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <set>

namespace onecard {
namespace {

constexpr uint64_t kSeed = 20261202;
constexpr int64_t kPrompt = 192;
constexpr double kFloorTarget = 1e-3;  // issue 23: the tame model's one-ulp floor, median per-position rel. L2

// One synthesised tiny checkpoint (tame or default rule), its weights and the oracle's logits.
struct Model {
    test::TempDir dir;
    ModelConfig cfg;
    std::unique_ptr<Checkpoint> ckpt;
    ModelWeights weights;

    explicit Model(bool tame) : dir(tame ? "tame_model" : "default_model") {
        SynthOptions opt;
        opt.preset = SynthPreset::Tiny;
        opt.seed = kSeed;
        opt.tame = tame;
        cfg = synth_config(opt);
        synth_write(cfg, kSeed, dir.path(), synth_default_shard_bytes(SynthPreset::Tiny), false, 0, tame);
        ckpt = std::make_unique<Checkpoint>(Checkpoint::open(dir.path()));
        weights = bind_weights(cfg, *ckpt);
    }
};

std::vector<int32_t> prompt(int64_t vocab) {
    std::mt19937 rng(7);
    std::uniform_int_distribution<int32_t> tok(2, static_cast<int32_t>(vocab) - 1);
    std::vector<int32_t> t(static_cast<size_t>(kPrompt));
    for (auto& x : t) x = tok(rng);
    return t;
}

// The bf16-storage reference oracle's logits [kPrompt, vocab]; picks counted into `picks` when given.
// bf16_storage off: the plain reference oracle.
std::vector<float> oracle(const ModelConfig& cfg, const ModelWeights& w, const std::vector<int32_t>& tokens,
                          ExpertUseProfile* picks = nullptr, bool bf16_storage = true) {
    DeepSeekV4 m(cfg, w, Numerics::Reference);
    m.set_bf16_storage(bf16_storage);
    if (picks) m.set_expert_use_sink(picks);
    SequenceState st = m.new_sequence();
    return m.forward(st, tokens);
}

// The oracle against itself with every hc bias one fp32 ulp up (file comment).
test::LogitsAgreement one_ulp_floor(const Model& m, const std::vector<int32_t>& tokens, bool bf16_storage = true) {
    std::vector<std::vector<float>> storage;
    const ModelWeights nudged = test::nudge_hc_bases(m.weights, storage);
    return test::compare_logits(oracle(m.cfg, nudged, tokens, nullptr, bf16_storage),
                                oracle(m.cfg, m.weights, tokens, nullptr, bf16_storage), 0, kPrompt, m.cfg.vocab_size);
}

void print_floor(const char* what, const test::LogitsAgreement& a) {
    std::printf("[tame model] one-ulp floor, %-36s median %.3g worst %.3g argmax %lld/%lld\n", what, a.median, a.worst,
                static_cast<long long>(a.argmax_same), static_cast<long long>(a.n));
}

Model& tame() {
    static Model* m = new Model(true);
    return *m;
}

TEST(TameModel, OneUlpFloorIsFarBelowTheDefaultRule) {
    const std::vector<int32_t> tokens = prompt(tame().cfg.vocab_size);
    const test::LogitsAgreement t = one_ulp_floor(tame(), tokens), t_plain = one_ulp_floor(tame(), tokens, false);
    const Model plain(false);
    const test::LogitsAgreement d = one_ulp_floor(plain, tokens);
    print_floor("tame rule, bf16-storage oracle:", t);
    print_floor("tame rule, plain reference oracle:", t_plain);
    print_floor("default rule, bf16-storage oracle:", d);
    EXPECT_GT(t.worst, 0.0) << "the nudge must reach the logits";
    EXPECT_LE(t_plain.median, kFloorTarget);
    EXPECT_LE(t.median, kFloorTarget);
    EXPECT_GE(t.argmax_share(), 0.99);
    // The default rule on the same config, seed and prompt: the rule is what lowers the floor.
    EXPECT_GT(d.median, 3.0 * t.median);
}

TEST(TameModel, EveryExpertIsPickedAndRoutingSurvivesTheNudge) {
    const Model& m = tame();
    const std::vector<int32_t> tokens = prompt(m.cfg.vocab_size);
    const int64_t L = m.cfg.num_hidden_layers, E = m.cfg.n_routed_experts;
    ExpertUseProfile base(L, E), nudged_picks(L, E);
    oracle(m.cfg, m.weights, tokens, &base);
    std::vector<std::vector<float>> storage;
    oracle(m.cfg, test::nudge_hc_bases(m.weights, storage), tokens, &nudged_picks);
    EXPECT_EQ(base.total(), static_cast<uint64_t>(L * kPrompt * m.cfg.num_experts_per_tok));
    uint64_t moved = 0;
    for (int64_t l = 0; l < L; ++l) {
        for (int64_t e = 0; e < E; ++e) {
            EXPECT_GT(base.count(l, e), 0u) << "layer " << l << " expert " << e << " never picked";
            const uint64_t a = base.count(l, e), b = nudged_picks.count(l, e);
            moved += a > b ? a - b : b - a;
        }
    }
    // Router margins: the smallest difference moves hardly any pick between experts (a moved pick
    // counts twice: once where it left, once where it went). Measured: 0.6% of picks.
    const double share = static_cast<double>(moved) / (2.0 * static_cast<double>(base.total()));
    std::printf("[tame model] routing picks moved by the one-ulp nudge: %.2f%%\n", 100 * share);
    EXPECT_LE(share, 0.02);
}

TEST(TameModel, LogitsVaryWithPositionAndContext) {
    const Model& m = tame();
    const int64_t V = m.cfg.vocab_size;
    std::vector<int32_t> tokens = prompt(V);
    const std::vector<float> base = oracle(m.cfg, m.weights, tokens);
    // Not constant: every row has spread, and the greedy tokens are many different ones.
    std::set<int64_t> argmaxes;
    for (int64_t r = 0; r < kPrompt; ++r) {
        const float* row = base.data() + r * V;
        const auto [lo, hi] = std::minmax_element(row, row + V);
        EXPECT_GT(*hi - *lo, 1.0f) << "row " << r;
        argmaxes.insert(std::max_element(row, row + V) - row);
    }
    EXPECT_GE(argmaxes.size(), static_cast<size_t>(kPrompt / 4));
    // The sub-blocks do real work: the same token at a different position, and a different token
    // earlier in the context, move the logits far above the floor. Token 20 changes; rows >= 100 see
    // it only through CSA/HCA compressed entries and the indexer (the window is 32). Measured against
    // the floor of the oracle the GPU is held to (bf16 storage), since that is the noise a fault must
    // rise above there.
    const test::LogitsAgreement floor = one_ulp_floor(m, tokens);
    tokens[20] = tokens[20] == 2 ? 3 : 2;
    const std::vector<float> changed = oracle(m.cfg, m.weights, tokens);
    const std::vector<float> far_base(base.begin() + 100 * V, base.end());
    const test::LogitsAgreement far = test::compare_logits(std::vector<float>(changed.begin() + 100 * V, changed.end()),
                                                           far_base, 0, kPrompt - 100, V);
    std::printf("[tame model] token 20 changed: rows 100.. move by median %.3g (one-ulp floor median %.3g)\n",
                far.median, floor.median);
    EXPECT_GT(far.median, 10.0 * floor.median);
}

// The experts reach the SwiGLU clamp (swiglu_limit): on layer 0's shared expert, with the normalised
// embeddings of the prompt as input (layer 0's FFN input is the embedding plus 0.5% of the attention
// output), 10–20% of the gate and up values lie beyond the limit (rule: gain 8 on w1 and w3).
TEST(TameModel, ExpertsReachTheSwigluClamp) {
    const Model& m = tame();
    const int64_t D = m.cfg.hidden_size;
    const ExpertWeights& sh = m.weights.layers.at(0).ffn.shared;
    const std::vector<float> w1 = cpu::dequant_linear(sh.w1.weight, sh.w1.scale);  // [I, D]
    const std::vector<float> w3 = cpu::dequant_linear(sh.w3.weight, sh.w3.scale);  // [I, D]
    const std::vector<float> embed = cpu::to_f32(m.weights.embed);                 // [V, D]
    const int64_t I = sh.w1.out_features();
    const float limit = static_cast<float>(m.cfg.swiglu_limit);
    int64_t beyond = 0, total = 0;
    std::vector<float> x(static_cast<size_t>(D));
    for (int32_t t : prompt(m.cfg.vocab_size)) {
        const float* e = embed.data() + static_cast<int64_t>(t) * D;
        double ss = 0.0;
        for (int64_t d = 0; d < D; ++d) ss += static_cast<double>(e[d]) * e[d];
        const double inv = 1.0 / std::sqrt(ss / static_cast<double>(D));
        for (int64_t d = 0; d < D; ++d) x[static_cast<size_t>(d)] = static_cast<float>(e[d] * inv);
        for (int64_t i = 0; i < I; ++i) {
            double g = 0.0, u = 0.0;
            for (int64_t d = 0; d < D; ++d) {
                g += static_cast<double>(w1[static_cast<size_t>(i * D + d)]) * x[static_cast<size_t>(d)];
                u += static_cast<double>(w3[static_cast<size_t>(i * D + d)]) * x[static_cast<size_t>(d)];
            }
            beyond += (g > limit) + (std::fabs(u) > limit);
            total += 2;
        }
    }
    const double share = static_cast<double>(beyond) / static_cast<double>(total);
    std::printf("[tame model] layer 0 shared expert: %.3g%% of gate/up values beyond the SwiGLU limit %.0f\n",
                100 * share, static_cast<double>(limit));
    EXPECT_GT(share, 0.05);
    EXPECT_LT(share, 0.3);
}

// The rule rescales only what its comment names, by exact powers of two where it scales: the same
// draws as the default rule, so the tame model differs from the default one only there.
TEST(TameModel, RuleRescalesOnlyTheNamedTensors) {
    const ModelConfig& cfg = tame().cfg;
    const int64_t hc = cfg.hc_mult;
    auto rows = [&](const TensorSpec& spec, bool tame_rule) {
        const int64_t cols = spec.dtype == DType::I8 || spec.dtype == DType::U8 ? 2 * spec.shape.at(1)
                             : spec.shape.size() == 1                           ? spec.shape.at(0)
                                                                                : spec.shape.at(1);
        std::vector<float> v(static_cast<size_t>(2 * cols));
        synth_master_rows(cfg, kSeed, spec, 0, spec.shape.size() == 1 ? 1 : 2, v.data(), tame_rule);
        if (spec.shape.size() == 1) v.resize(static_cast<size_t>(cols));
        return v;
    };
    int64_t scaled = 0, same = 0, post = 0;
    for (const TensorSpec& spec : checkpoint_layout(cfg)) {
        if (spec.dtype == DType::I64 || spec.dtype == DType::I32 || spec.dtype == DType::F8_E8M0) continue;
        if (spec.shape.size() > 2) continue;
        const std::vector<float> d = rows(spec, false), t = rows(spec, true);
        const std::string& n = spec.name;
        const bool is_hc_block_base = n.find("hc_") != std::string::npos && n.find("hc_head") == std::string::npos &&
                                      n.size() > 5 && n.compare(n.size() - 5, 5, "_base") == 0;
        auto ends = [&](const char* s) {
            const std::string x(s);
            return n.size() >= x.size() && n.compare(n.size() - x.size(), x.size(), x) == 0;
        };
        float gain = 1.0f;
        if (ends(".w1.weight") || ends(".w3.weight")) gain = 8.0f;
        if (ends(".w2.weight")) gain = 1.0f / 64.0f;
        if (ends(".gate.bias")) gain = 4.0f;
        if (ends(".attn.wo_b.weight")) gain = 4.0f;
        for (size_t i = 0; i < d.size(); ++i) {
            const int64_t j = static_cast<int64_t>(i);
            if (is_hc_block_base && j >= hc && j < 2 * hc) {
                // post bias: 2·sigmoid(b) is the tame post weight (0.005) up to the 0.02 jitter (< 10%)
                const double w = 2.0 / (1.0 + std::exp(-static_cast<double>(t[i])));
                ASSERT_NEAR(w, 0.005, 0.0005) << n << "[" << j << "]";
                ++post;
            } else {
                ASSERT_EQ(t[i], gain * d[i]) << n << "[" << j << "]";
            }
        }
        (gain == 1.0f ? same : scaled) += 1;
    }
    EXPECT_GT(scaled, 0);
    EXPECT_GT(same, 0);
    EXPECT_EQ(post, 2 * hc * (cfg.num_hidden_layers + cfg.num_nextn_predict_layers));
}

}  // namespace
}  // namespace onecard
