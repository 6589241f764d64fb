// DeepSeek-V4 CPU forward pass on a synthesised tiny checkpoint (every layer kind, hash layers,
// window 32, index_topk 8): execution paths agree, state is consistent, numerics modes are close,
// and the long-range machinery (HCA entries, indexer choice) is actually exercised.
#include "core/error.h"
#include "loader/checkpoint.h"
#include "model/config.h"
#include "model/deepseek_v4.h"
#include "model/synth.h"
#include "model/weights.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <random>

using namespace onecard;

namespace {

constexpr uint64_t kSeed = 20261129;
constexpr int64_t kSeqLen = 300;  // > 256: two HCA entries; 75 CSA entries >> index_topk = 8; > 9 windows

struct TinyModel {
    std::filesystem::path dir;
    ModelConfig cfg;
    std::unique_ptr<Checkpoint> ckpt;
    ModelWeights weights;
    std::unique_ptr<DeepSeekV4> exact;
    std::vector<int32_t> tokens;
    std::vector<float> full_logits;  // exact, one plain prefill of all tokens
};

TinyModel* g_model = nullptr;

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(vocab - 1));
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = dist(rng);
    return t;
}

// Largest per-row relative L2 difference between two [n_rows, width] arrays.
double max_row_rel_l2(const std::vector<float>& a, const std::vector<float>& b, int64_t width) {
    double worst = 0.0;
    for (size_t r = 0; r < a.size() / width; ++r) {
        double diff = 0.0, norm = 0.0;
        for (int64_t j = 0; j < width; ++j) {
            const double d = double(a[r * width + j]) - b[r * width + j];
            diff += d * d;
            norm += double(b[r * width + j]) * b[r * width + j];
        }
        worst = std::max(worst, std::sqrt(diff / std::max(norm, 1e-30)));
    }
    return worst;
}

std::vector<float> run_chunked(const DeepSeekV4& model, const std::vector<int32_t>& tokens, int64_t chunk,
                               SequenceState* out_state = nullptr) {
    SequenceState st = model.new_sequence();
    std::vector<float> logits;
    for (size_t i = 0; i < tokens.size(); i += static_cast<size_t>(chunk)) {
        const size_t n = std::min(tokens.size() - i, static_cast<size_t>(chunk));
        auto l = model.forward(st, std::span<const int32_t>(tokens.data() + i, n));
        logits.insert(logits.end(), l.begin(), l.end());
        st.check_integrity();
    }
    if (out_state) *out_state = std::move(st);
    return logits;
}

class ForwardEnv : public ::testing::Environment {
public:
    void SetUp() override {
        g_model = new TinyModel;
        g_model->dir = std::filesystem::temp_directory_path() / ("onecard_forward_" + std::to_string(::getpid()));
        SynthOptions opt;
        opt.preset = SynthPreset::Tiny;
        opt.seed = kSeed;
        ModelConfig cfg = synth_config(opt);
        synth_write(cfg, kSeed, g_model->dir, synth_default_shard_bytes(SynthPreset::Tiny), false);
        g_model->cfg = load_config(g_model->dir / "config.json");
        g_model->ckpt = std::make_unique<Checkpoint>(Checkpoint::open(g_model->dir));
        g_model->weights = bind_weights(g_model->cfg, *g_model->ckpt);
        g_model->exact = std::make_unique<DeepSeekV4>(g_model->cfg, g_model->weights, Numerics::Exact);
        g_model->tokens = random_tokens(kSeqLen, g_model->cfg.vocab_size, 7);
        SequenceState st = g_model->exact->new_sequence();
        g_model->full_logits = g_model->exact->forward(st, g_model->tokens);
    }
    void TearDown() override {
        std::filesystem::remove_all(g_model->dir);
        delete g_model;
        g_model = nullptr;
    }
};

[[maybe_unused]] auto* const g_env = ::testing::AddGlobalTestEnvironment(new ForwardEnv);

}  // namespace

TEST(Forward, TinyConfigCoversEveryLayerKind) {
    const ModelConfig& c = g_model->cfg;
    bool swa = false, csa = false, hca = false;
    for (int64_t il = 0; il < c.num_hidden_layers; ++il) {
        swa |= c.layer_kind(il) == LayerKind::SWA;
        csa |= c.layer_kind(il) == LayerKind::CSA;
        hca |= c.layer_kind(il) == LayerKind::HCA;
    }
    EXPECT_TRUE(swa && csa && hca);
    EXPECT_GT(c.num_hash_layers, 0);
    EXPECT_GT(kSeqLen, 2 * 128);
    EXPECT_GT(kSeqLen, 3 * c.sliding_window);
    EXPECT_GT(kSeqLen / 4, 4 * c.index_topk);
}

TEST(Forward, PrefillLogitsAreFiniteAndStateConsistent) {
    const ModelConfig& c = g_model->cfg;
    ASSERT_EQ(g_model->full_logits.size(), static_cast<size_t>(kSeqLen * c.vocab_size));
    for (float v : g_model->full_logits) ASSERT_TRUE(std::isfinite(v));
    SequenceState st;
    auto again = run_chunked(*g_model->exact, g_model->tokens, kSeqLen, &st);
    EXPECT_EQ(again, g_model->full_logits);  // deterministic, bit for bit
    EXPECT_EQ(st.n_tokens(), kSeqLen);
    for (const LayerState& l : st.layers()) {
        if (l.ratio == 128) {
            EXPECT_EQ(l.n_compressed(), 2);
        }
        if (l.ratio == 4) {
            EXPECT_EQ(l.n_compressed(), kSeqLen / 4);
        }
    }
    // Logits vary across positions (the model is not degenerate).
    EXPECT_NE(std::vector<float>(again.begin(), again.begin() + c.vocab_size),
              std::vector<float>(again.end() - c.vocab_size, again.end()));
}

TEST(Forward, ChunkedPrefillMatchesPlainPrefill) {
    for (int64_t chunk : {1, 7, 64}) {
        auto l = run_chunked(*g_model->exact, g_model->tokens, chunk);
        ASSERT_EQ(l.size(), g_model->full_logits.size());
        EXPECT_LE(max_row_rel_l2(l, g_model->full_logits, g_model->cfg.vocab_size), 1e-5) << "chunk " << chunk;
        // Stronger than required: the row-stable GEMM makes every path bit-identical.
        EXPECT_EQ(l, g_model->full_logits) << "chunk " << chunk;
    }
}

TEST(Forward, DecodeFromMatchesPlainPrefill) {
    const DeepSeekV4& m = *g_model->exact;
    SequenceState st = m.new_sequence();
    const int64_t k = 131;  // not a multiple of 4 or 128: windows complete during decode
    auto logits = m.forward(st, std::span<const int32_t>(g_model->tokens.data(), k));
    for (int64_t i = k; i < kSeqLen; ++i) {
        auto l = m.forward(st, std::span<const int32_t>(g_model->tokens.data() + i, 1));
        logits.insert(logits.end(), l.begin(), l.end());
    }
    st.check_integrity();
    EXPECT_LE(max_row_rel_l2(logits, g_model->full_logits, g_model->cfg.vocab_size), 1e-5);
    EXPECT_EQ(logits, g_model->full_logits);
}

TEST(Forward, SequencesAreIndependent) {
    const DeepSeekV4& m = *g_model->exact;
    auto other = random_tokens(40, g_model->cfg.vocab_size, 99);
    SequenceState a = m.new_sequence(), b = m.new_sequence();
    auto la = m.forward(a, std::span<const int32_t>(g_model->tokens.data(), 20));
    m.forward(b, other);  // interleave another sequence
    auto la2 = m.forward(a, std::span<const int32_t>(g_model->tokens.data() + 20, 20));
    la.insert(la.end(), la2.begin(), la2.end());
    auto ref = run_chunked(m, std::vector<int32_t>(g_model->tokens.begin(), g_model->tokens.begin() + 40), 20);
    EXPECT_EQ(la, ref);
}

TEST(Forward, IndexerSelectionMatters) {
    // With top-k larger than every CSA entry count the indexer selects everything; logits at late
    // positions must then differ from the top-8 model, i.e. the tiny sequence exercises the choice.
    ModelConfig wide = g_model->cfg;
    wide.index_topk = 4096;
    DeepSeekV4 m(wide, g_model->weights, Numerics::Exact);
    SequenceState st = m.new_sequence();
    auto l = m.forward(st, g_model->tokens);
    const int64_t V = wide.vocab_size;
    // Early positions (< 4·8 + 3 tokens: at most 8 entries visible) agree; late ones differ.
    std::vector<float> early(l.begin(), l.begin() + 30 * V),
        early_ref(g_model->full_logits.begin(), g_model->full_logits.begin() + 30 * V);
    EXPECT_LE(max_row_rel_l2(early, early_ref, V), 1e-5);
    std::vector<float> late(l.end() - V, l.end()), late_ref(g_model->full_logits.end() - V, g_model->full_logits.end());
    EXPECT_GT(max_row_rel_l2(late, late_ref, V), 1e-4);
}

struct ModeGap {
    double median = 0.0;
    double max = 0.0;
    int64_t argmax_agree = 0;
};

// Per-row relative L2 gap and argmax agreement between reference and exact numerics.
ModeGap reference_vs_exact(const ModelConfig& cfg) {
    DeepSeekV4 ref(cfg, g_model->weights, Numerics::Reference), exact(cfg, g_model->weights, Numerics::Exact);
    SequenceState sr = ref.new_sequence(), se = exact.new_sequence();
    auto lr = ref.forward(sr, g_model->tokens), le = exact.forward(se, g_model->tokens);
    const int64_t V = cfg.vocab_size;
    std::vector<double> errs;
    ModeGap gap;
    for (int64_t r = 0; r < kSeqLen; ++r) {
        std::vector<float> a(lr.begin() + r * V, lr.begin() + (r + 1) * V);
        std::vector<float> b(le.begin() + r * V, le.begin() + (r + 1) * V);
        errs.push_back(max_row_rel_l2(a, b, V));
        gap.argmax_agree +=
            std::max_element(a.begin(), a.end()) - a.begin() == std::max_element(b.begin(), b.end()) - b.begin();
    }
    std::sort(errs.begin(), errs.end());
    gap.median = errs[errs.size() / 2];
    gap.max = errs.back();
    std::printf("reference vs exact (index_topk %lld): median row rel L2 %.4g, max %.4g, argmax agreement %lld/%lld\n",
                static_cast<long long>(cfg.index_topk), gap.median, gap.max, static_cast<long long>(gap.argmax_agree),
                static_cast<long long>(kSeqLen));
    return gap;
}

TEST(Forward, ReferenceNumericsCloseToExact) {
    ModelConfig all = g_model->cfg;
    all.index_topk = 4096;
    ModeGap dense = reference_vs_exact(all);
    ModeGap sparse = reference_vs_exact(g_model->cfg);
    // The modes differ by quantisation simulations only. Measured on this random tiny model (seed
    // kSeed): median 0.094 / argmax 238 of 300 with every entry selected, 0.119 / 214 with top-8.
    // Almost all of it is the FP8 1x128 activation quantisation (3 mantissa bits, ~3% per linear,
    // compounding over ~10 linears per layer in a model never trained for it); KV FP8 alone gives
    // ~0.02; with every simulation disabled the modes agree to 6e-7. FP4 indexer rounding adds
    // re-ranked top-k picks on top. Bounds keep a 2x margin.
    for (const ModeGap& g : {dense, sparse}) {
        EXPECT_GT(g.median, 1e-3);  // the simulations are really on
        EXPECT_LT(g.median, 0.25);
        EXPECT_GE(g.argmax_agree, kSeqLen * 6 / 10);
    }
    EXPECT_LT(dense.median, sparse.median);  // the indexer's FP4 keys and queries move picks too
}

// Why no independent implementation of reference numerics can match this CPU to ~1e-2 (issue 7's
// GPU parity bar): the FP8 1x128 activation quantisation is a step function. A small relative change
// eps of a quantised linear's input flips ~8·eps of its 3-mantissa-bit rounding decisions, each worth
// 2^-3 of the element, so the change leaving the linear is ~sqrt(eps/8), not eps; a few quantised
// linears in sequence take even fp32 summation-order differences to the percent level. Measured here
// with the same perturbation in both modes: every quantised linear's input rounded to bf16
// (eps <= 2^-9; DeepSeekV4::set_bf16_linear_inputs). Exact numerics (no quantisation) carry it
// through; reference numerics amplify it by well over an order of magnitude.
TEST(Forward, ReferenceNumericsAmplifySmallDifferences) {
    std::vector<int32_t> toks(g_model->tokens.begin(), g_model->tokens.begin() + 120);
    auto gap = [&](Numerics num) {
        DeepSeekV4 m(g_model->cfg, g_model->weights, num);
        SequenceState a = m.new_sequence();
        const auto base = m.forward(a, toks);
        m.set_bf16_linear_inputs(true);
        SequenceState b = m.new_sequence();
        const auto pert = m.forward(b, toks);
        const int64_t V = g_model->cfg.vocab_size;
        std::vector<double> errs;
        for (size_t r = 0; r < toks.size(); ++r) {
            std::vector<float> x(pert.begin() + r * V, pert.begin() + (r + 1) * V);
            std::vector<float> y(base.begin() + r * V, base.begin() + (r + 1) * V);
            errs.push_back(max_row_rel_l2(x, y, V));
        }
        std::sort(errs.begin(), errs.end());
        return errs[errs.size() / 2];
    };
    const double exact = gap(Numerics::Exact), reference = gap(Numerics::Reference);
    std::printf("bf16 linear inputs vs fp32: median row rel L2 exact %.3g, reference %.3g (x%.0f)\n", exact, reference,
                reference / exact);
    EXPECT_LT(exact, 1e-2);
    EXPECT_GT(reference, 10 * exact);
}

TEST(Forward, ReferenceChunkedMatchesPrefill) {
    DeepSeekV4 ref(g_model->cfg, g_model->weights, Numerics::Reference);
    std::vector<int32_t> toks(g_model->tokens.begin(), g_model->tokens.begin() + 150);
    auto full = run_chunked(ref, toks, 150);
    auto chunked = run_chunked(ref, toks, 7);
    EXPECT_LE(max_row_rel_l2(chunked, full, g_model->cfg.vocab_size), 1e-5);
}

// Median per-row relative L2 gap of a against b ([rows, V] each) and their argmax agreement.
ModeGap logits_gap(const std::vector<float>& a, const std::vector<float>& b, int64_t V) {
    std::vector<double> errs;
    ModeGap gap;
    for (size_t r = 0; r < a.size() / V; ++r) {
        std::vector<float> x(a.begin() + r * V, a.begin() + (r + 1) * V);
        std::vector<float> y(b.begin() + r * V, b.begin() + (r + 1) * V);
        errs.push_back(max_row_rel_l2(x, y, V));
        gap.argmax_agree +=
            std::max_element(x.begin(), x.end()) - x.begin() == std::max_element(y.begin(), y.end()) - y.begin();
    }
    std::sort(errs.begin(), errs.end());
    gap.median = errs[errs.size() / 2];
    gap.max = errs.back();
    return gap;
}

// set_bf16_storage rounds activations to bf16 where the GPU stores them: a bf16-sized perturbation of
// the oracle, which exact numerics carry through and reference numerics amplify (as the bf16 linear
// inputs above), but not a different model.
TEST(Forward, Bf16StorageIsABf16SizedPerturbation) {
    const std::vector<int32_t> toks(g_model->tokens.begin(), g_model->tokens.begin() + 120);
    const int64_t V = g_model->cfg.vocab_size;
    auto gap = [&](Numerics num) {
        DeepSeekV4 m(g_model->cfg, g_model->weights, num);
        SequenceState a = m.new_sequence();
        const auto base = m.forward(a, toks);
        m.set_bf16_storage(true);
        SequenceState b = m.new_sequence();
        const ModeGap g = logits_gap(m.forward(b, toks), base, V);
        std::printf("bf16 storage vs fp32, %s numerics: median row rel L2 %.3g, max %.3g, argmax %lld/%zu\n",
                    numerics_name(num), g.median, g.max, static_cast<long long>(g.argmax_agree), toks.size());
        return g;
    };
    // Measured on this tiny model (120 tokens): exact median 0.012 (max 0.21: a rounding can flip a
    // router or indexer pick), reference 0.14 with argmax 91 of 120. Bounds keep a 2x margin.
    const ModeGap exact = gap(Numerics::Exact), reference = gap(Numerics::Reference);
    EXPECT_GT(exact.median, 1e-5);  // the rounding is really on
    EXPECT_LT(exact.median, 3e-2);
    EXPECT_GT(reference.median, exact.median);
    EXPECT_LT(reference.median, 0.3);
    EXPECT_GE(reference.argmax_agree, static_cast<int64_t>(toks.size()) / 2);
}

// In bf16-storage mode the oracle is still deterministic and independent of how the tokens are
// split into steps (chunked prefill, 1-token decode), as the GPU tests compare it against every path.
// The smallest possible difference: every hyper-connection bias moved by one fp32 ulp (every
// sub-block input changes by ~1e-7 relative, the size of a summation-order difference). Exact numerics carry it as
// such; reference numerics (FP8 1x128 activation rounding, discrete router and indexer picks) turn it into a gap of the
// size a bf16 rounding gives, at every position. So no implementation that is not bit-identical to this oracle (any
// other summation order) can be held to much less than that gap; the GPU parity test measures it on its own model as
// its yardstick (tests/ops/gpu_model_test.cpp).
TEST(Forward, ReferenceNumericsAmplifyOneUlp) {
    const std::vector<int32_t> toks(g_model->tokens.begin(), g_model->tokens.begin() + 120);
    const int64_t V = g_model->cfg.vocab_size;
    std::vector<std::vector<float>> storage;
    const ModelWeights nudged = test::nudge_hc_bases(g_model->weights, storage);
    auto gap = [&](Numerics num, bool storage_bf16) {
        DeepSeekV4 a(g_model->cfg, g_model->weights, num), b(g_model->cfg, nudged, num);
        a.set_bf16_storage(storage_bf16);
        b.set_bf16_storage(storage_bf16);
        SequenceState sa = a.new_sequence(), sb = b.new_sequence();
        const ModeGap g = logits_gap(b.forward(sb, toks), a.forward(sa, toks), V);
        std::printf("one-ulp hc-bias nudge, %s numerics%s: median row rel L2 %.3g, max %.3g, argmax %lld/%zu\n",
                    numerics_name(num), storage_bf16 ? " (bf16 storage)" : "", g.median, g.max,
                    static_cast<long long>(g.argmax_agree), toks.size());
        return g;
    };
    // Measured here (120 tokens): exact 6.1e-7; reference 1.0e-2 (argmax 118/120), reference with bf16
    // storage 5.7e-2 (argmax 107/120): bf16 roundings give the flips more edges to cross.
    const ModeGap exact = gap(Numerics::Exact, false);
    const ModeGap reference = gap(Numerics::Reference, false), storage_ref = gap(Numerics::Reference, true);
    EXPECT_GT(exact.median, 0.0);  // the nudge is really there
    EXPECT_LT(exact.median, 1e-4);
    EXPECT_GT(reference.median, 100 * exact.median);
    EXPECT_GT(storage_ref.median, 100 * exact.median);
}

TEST(Forward, Bf16StorageDeterministicAndChunkInvariant) {
    DeepSeekV4 ref(g_model->cfg, g_model->weights, Numerics::Reference);
    ref.set_bf16_storage(true);
    const std::vector<int32_t> toks(g_model->tokens.begin(), g_model->tokens.begin() + 150);
    const int64_t V = g_model->cfg.vocab_size;
    const auto full = run_chunked(ref, toks, 150);
    EXPECT_EQ(run_chunked(ref, toks, 150), full);
    EXPECT_LE(max_row_rel_l2(run_chunked(ref, toks, 7), full, V), 1e-5);
    // Prefill then 1-token decode steps.
    SequenceState st = ref.new_sequence();
    auto logits = ref.forward(st, std::span<const int32_t>(toks.data(), 131));
    for (size_t i = 131; i < toks.size(); ++i) {
        auto l = ref.forward(st, std::span<const int32_t>(toks.data() + i, 1));
        logits.insert(logits.end(), l.begin(), l.end());
    }
    EXPECT_LE(max_row_rel_l2(logits, full, V), 1e-5);
}

TEST(Forward, MtpRunsAndIsDeterministic) {
    const DeepSeekV4& m = *g_model->exact;
    ASSERT_TRUE(m.has_mtp());
    const int64_t n = 40, V = g_model->cfg.vocab_size;
    std::vector<int32_t> toks(g_model->tokens.begin(), g_model->tokens.begin() + n + 1);
    auto run = [&](int64_t chunk) {
        SequenceState st = m.new_sequence();
        auto out = m.forward_with_streams(st, std::span<const int32_t>(toks.data(), n));
        std::vector<float> logits;
        const int64_t per = g_model->cfg.hc_mult * g_model->cfg.hidden_size;
        for (int64_t i = 0; i < n; i += chunk) {
            const int64_t c = std::min(chunk, n - i);
            auto l = m.forward_mtp(st, std::span<const float>(out.streams.data() + i * per, c * per),
                                   std::span<const int32_t>(toks.data() + i + 1, c));
            logits.insert(logits.end(), l.begin(), l.end());
        }
        st.check_integrity();
        EXPECT_EQ(st.n_mtp_tokens(), n);
        return logits;
    };
    auto a = run(n), b = run(n), c = run(1);
    ASSERT_EQ(a.size(), static_cast<size_t>(n * V));
    for (float v : a) ASSERT_TRUE(std::isfinite(v));
    EXPECT_EQ(a, b);
    EXPECT_LE(max_row_rel_l2(c, a, V), 1e-5);
    // MTP logits are not the main model's logits.
    EXPECT_GT(max_row_rel_l2(std::vector<float>(a.begin(), a.begin() + V),
                             std::vector<float>(g_model->full_logits.begin(), g_model->full_logits.begin() + V), V),
              1e-3);
}

TEST(Forward, RejectsBadInput) {
    const DeepSeekV4& m = *g_model->exact;
    SequenceState st = m.new_sequence();
    std::vector<int32_t> bad = {0, static_cast<int32_t>(g_model->cfg.vocab_size)};
    EXPECT_THROW(m.forward(st, bad), Error);
    EXPECT_THROW(m.forward(st, std::span<const int32_t>()), Error);
}
