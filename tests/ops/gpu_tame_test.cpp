// Whole-model GPU parity on the tame synthetic model (issue 23): the same model shape as
// gpu_model_test.cpp (real per-layer Flash dimensions, 4 layers SWA, SWA, CSA, HCA, 3 hash-routed,
// 16 experts top-6, moe_inter 1024, vocab 1024, index_topk 32), drawn with the tame rule
// (SynthOptions::tame, src/model/synth.cpp), so the oracle's own noise floor no longer hides bugs.
//
// Bars (issue 23, fixed numbers, not derived from a floor): per path, median per-position relative L2
// against the bf16-storage oracle (DeepSeekV4::set_bf16_storage; gpu_model_test.cpp's file comment
// says why that oracle) <= 2e-2 and argmax agreement >= 99% (with fewer than 100 rows: every row);
// greedy continuations identical for 32 tokens. On the default model these bars are out of reach
// (its one-ulp floor is 6.3e-2, gpu_model_test.cpp). TameFloorAtFlashDims measures this model's floor:
// it must sit below the parity bar (else the bars mean nothing); issue 23's target of 1e-3 is
// reported, and the test skips with the figure where it is not met — on the tiny preset the tame
// rule reaches 6.5e-3 (tests/model/tame_model_test.cpp; what is left is the bf16 storage rounding
// the oracle mirrors, src/model/synth.cpp). Not yet run on a GPU: the figures are for the first run.
//
// Planted faults (GpuFaultPlan, src/model_cuda/gpu_fault_plan.h): each runs a probe — chunked prefill
// 64 + 61 + 35 then 32 one-token decode steps through CUDA graphs, on a slot and KV blocks no other
// run used (so a stale ring slot or indexer key cannot hold the right value by accident) — and the
// same check must fail on the prefill rows or on the decode rows. Each prints its figures against the
// bars: the margin is how far past a bar the fault lands, next to how far inside it the clean probe
// stays. Paths of the serving stack above GpuModel (hybrid host experts, prefix-cache hits, MTP
// speculation) are not driven here.
#include "gpu_test_util.h"

#ifdef ONECARD_HAVE_CUDA

#include "backend/cuda/stream.h"
#include "engine/memory_plan.h"
#include "kvcache/kv_spec.h"
#include "loader/checkpoint.h"
#include "model/deepseek_v4.h"
#include "model/expert_profile.h"
#include "model/synth.h"
#include "model/weights.h"
#include "model_cuda/gpu_model.h"
#include "support/test_support.h"

#include <algorithm>
#include <cstdio>

namespace onecard {
namespace {

constexpr int64_t kPrompt = 192;
constexpr int64_t kGreedy = 32;
constexpr double kMedianBar = 2e-2;                // issue 23: median per-position relative L2
constexpr double kArgmaxBar = 0.99;                // issue 23: argmax agreement
constexpr double kFloorTarget = 1e-3;              // issue 23: the tame model's one-ulp floor
constexpr int64_t kSlots = 24, kBlocksPerSeq = 2;  // a fresh slot per run (18 runs); 512 tokens each

// The CPU side (no GPU needed): the tame checkpoint, the oracle's logits, its floor and greedy run.
struct Oracle {
    test::TempDir dir{"gpu_tame"};
    ModelConfig cfg;
    std::unique_ptr<Checkpoint> ckpt;
    ModelWeights w;
    std::vector<int32_t> tokens;  // [kPrompt]
    std::vector<float> logits;    // [kPrompt, vocab] bf16-storage reference oracle
    std::vector<float> nudged;    // the same with every hc bias one fp32 ulp up
    std::vector<int32_t> greedy;  // [kGreedy] the oracle's greedy continuation of the prompt
    ExpertUseProfile picks;       // routing picks over the prompt
};

const Oracle& oracle() {
    static const Oracle* o = [] {
        auto* x = new Oracle;
        x->cfg = test::write_flash_dims_checkpoint(x->dir.path(), 424242, 16, 32, /*tame=*/true);
        x->ckpt = std::make_unique<Checkpoint>(Checkpoint::open(x->dir.path()));
        x->w = bind_weights(x->cfg, *x->ckpt);
        std::mt19937 rng(7);
        std::uniform_int_distribution<int32_t> tok(2, static_cast<int32_t>(x->cfg.vocab_size) - 1);
        for (int64_t i = 0; i < kPrompt; ++i) x->tokens.push_back(tok(rng));
        x->picks = ExpertUseProfile(x->cfg.num_hidden_layers, x->cfg.n_routed_experts);
        DeepSeekV4 cpu(x->cfg, x->w, Numerics::Reference);
        cpu.set_bf16_storage(true);
        cpu.set_expert_use_sink(&x->picks);
        SequenceState st = cpu.new_sequence();
        x->logits = cpu.forward(st, x->tokens);
        cpu.set_expert_use_sink(nullptr);
        const int64_t V = x->cfg.vocab_size;
        auto argmax = [V](const float* row) { return static_cast<int32_t>(std::max_element(row, row + V) - row); };
        int32_t next = argmax(x->logits.data() + (kPrompt - 1) * V);
        for (int64_t i = 0; i < kGreedy; ++i) {
            x->greedy.push_back(next);
            const std::vector<float> l = cpu.forward(st, std::span<const int32_t>(&next, 1));
            next = argmax(l.data());
        }
        std::vector<std::vector<float>> storage;
        DeepSeekV4 nudged(x->cfg, test::nudge_hc_bases(x->w, storage), Numerics::Reference);
        nudged.set_bf16_storage(true);
        SequenceState sn = nudged.new_sequence();
        x->nudged = nudged.forward(sn, x->tokens);
        return x;
    }();
    return *o;
}

// The GPU side: the model over a pool with room for a fresh sequence per run.
struct Gpu {
    std::unique_ptr<cuda::DeviceArena> arena;
    GpuModelWeights w;
    std::unique_ptr<GpuKvPool> pool;
    std::unique_ptr<GpuModel> model;
    int32_t next_slot = 0;
};

Gpu& gpu() {
    static Gpu* g = [] {
        const Oracle& o = oracle();
        auto* x = new Gpu;
        x->arena = std::make_unique<cuda::DeviceArena>(size_t{24} << 30, "gpu tame test");
        x->w = upload_weights(o.cfg, o.w, *x->arena);
        const KvCacheSpec spec = make_kv_cache_spec(kv_model_shape_from_config(o.cfg), 256);
        KvPoolSize size;
        size.n_slots = kSlots;
        size.n_blocks = kSlots * kBlocksPerSeq;
        GpuModelOptions mo;
        mo.max_step_tokens = 512;
        mo.max_seqs = 4;
        mo.max_model_len = 1024;
        x->pool = std::make_unique<GpuKvPool>(spec, size, mo.max_step_tokens, *x->arena);
        x->model = std::make_unique<GpuModel>(o.cfg, x->w, *x->pool, mo, *x->arena);
        return x;
    }();
    return *g;
}

// A slot and KV blocks no earlier run wrote: nothing stale in them can equal what a run should read.
struct FreshSeq {
    int32_t slot = -1;
    std::vector<int32_t> blocks;
};
FreshSeq fresh_seq() {
    Gpu& g = gpu();
    if (g.next_slot >= kSlots) throw std::runtime_error("gpu tame test: out of fresh slots (raise kSlots)");
    FreshSeq f;
    f.slot = g.next_slot++;
    for (int32_t i = 0; i < kBlocksPerSeq; ++i) f.blocks.push_back(f.slot * kBlocksPerSeq + i);
    return f;
}

// One sequence on a fresh slot, the prompt in steps of `chunks` tokens; every row's logits.
std::vector<float> run_chunks(const std::vector<int64_t>& chunks) {
    Gpu& g = gpu();
    const Oracle& o = oracle();
    const int64_t V = o.cfg.vocab_size;
    const FreshSeq fs = fresh_seq();
    cuda::Stream s;
    std::vector<float> out;
    int64_t pos = 0;
    for (int64_t c : chunks) {
        GpuStepSeq q;
        q.slot = fs.slot;
        q.block_table = fs.blocks;
        q.start_pos = pos;
        q.tokens = std::span<const int32_t>(o.tokens).subspan(static_cast<size_t>(pos), static_cast<size_t>(c));
        q.want_logits = true;
        const float* d = g.model->step(std::span<const GpuStepSeq>(&q, 1), true, s.get());
        std::vector<float> rows(static_cast<size_t>(c * V));
        s.sync();
        cuda::copy_to_host(rows.data(), d, rows.size() * 4);
        out.insert(out.end(), rows.begin(), rows.end());
        pos += c;
    }
    return out;
}

// Issue 23's check on one path: GPU rows [0, n) against oracle rows [row0, row0 + n).
struct Verdict {
    test::LogitsAgreement a;
    bool pass = false;
};
Verdict check(const std::vector<float>& gpu_rows, int64_t row0, int64_t n) {
    Verdict v;
    v.a = test::compare_logits(gpu_rows, oracle().logits, row0, n, oracle().cfg.vocab_size);
    v.pass = v.a.median <= kMedianBar && v.a.argmax_share() >= kArgmaxBar;
    return v;
}

void print_verdict(const char* what, const char* path, const Verdict& v) {
    std::printf(
        "[gpu tame] %-8s %-40s rows %3lld: rel L2 median %.2e (bar %.0e, %5.2fx) worst %.2e  argmax %lld/%lld "
        "(bar %.0f%%)  -> %s\n",
        what, path, static_cast<long long>(v.a.n), v.a.median, kMedianBar, v.a.median / kMedianBar, v.a.worst,
        static_cast<long long>(v.a.argmax_same), static_cast<long long>(v.a.n), 100 * kArgmaxBar,
        v.pass ? "within the bars" : "FAILS the bars");
}

void expect_parity(const std::vector<float>& gpu_rows, int64_t row0, int64_t n, const char* path) {
    const Verdict v = check(gpu_rows, row0, n);
    print_verdict("path", path, v);
    EXPECT_LE(v.a.median, kMedianBar) << path;
    EXPECT_GE(v.a.argmax_share(), kArgmaxBar) << path << ": " << v.a.argmax_same << "/" << v.a.n;
}

std::vector<float> rows_from(const std::vector<float>& all, int64_t first_row) {
    return std::vector<float>(all.begin() + first_row * oracle().cfg.vocab_size, all.end());
}

TEST(GpuTame, TameFloorAtFlashDims) {
    const Oracle& o = oracle();
    const test::LogitsAgreement fl = test::compare_logits(o.nudged, o.logits, 0, kPrompt, o.cfg.vocab_size);
    std::printf(
        "[gpu tame] one-ulp floor at Flash dims: median %.3g worst %.3g argmax %lld/%lld (target: median <= "
        "%.0e; parity bar %.0e)\n",
        fl.median, fl.worst, static_cast<long long>(fl.argmax_same), static_cast<long long>(fl.n), kFloorTarget,
        kMedianBar);
    // Not degenerate: every expert of every layer is picked over the prompt.
    for (int64_t l = 0; l < o.cfg.num_hidden_layers; ++l)
        for (int64_t e = 0; e < o.cfg.n_routed_experts; ++e)
            EXPECT_GT(o.picks.count(l, e), 0u) << "layer " << l << " expert " << e;
    EXPECT_GT(fl.worst, 0.0) << "the nudge must reach the logits";
    EXPECT_LE(fl.median, kMedianBar / 2) << "the oracle's own floor leaves the parity bar no room";
    EXPECT_GE(fl.argmax_share(), kArgmaxBar);
    if (fl.median > kFloorTarget)
        GTEST_SKIP() << "issue 23's floor target (<= " << kFloorTarget << ") is not met at Flash dims: " << fl.median;
}

TEST(GpuTame, PlainAndChunkedPrefill) {
    ONECARD_REQUIRE_GPU();
    expect_parity(run_chunks({kPrompt}), 0, kPrompt, "plain prefill");
    expect_parity(run_chunks({64, 61, 67}), 0, kPrompt, "chunked prefill 64+61+67");
}

TEST(GpuTame, DecodeThroughGraphsAndVerifySteps) {
    ONECARD_REQUIRE_GPU();
    Gpu& g = gpu();
    std::vector<int64_t> decode(1, 160);
    decode.resize(1 + 32, 1);
    expect_parity(rows_from(run_chunks(decode), 160), 160, 32, "decode 1-token steps (graphs)");
    EXPECT_GT(g.model->n_graphs(), 0);
    g.model->set_cuda_graphs(false);
    std::vector<int64_t> verify(1, 150);
    for (int i = 0; i < 14; ++i) verify.push_back(3);
    const auto v = run_chunks(verify);
    g.model->set_cuda_graphs(true);
    expect_parity(rows_from(v, 150), 150, 42, "verify 3-token steps, no graphs");
}

TEST(GpuTame, DecodeThroughEveryKernelPath) {
    ONECARD_REQUIRE_GPU();
    Gpu& g = gpu();
    for (int mask = 0; mask < 4; ++mask) {
        const bool moe_gemv = mask & 1, lin_gemv = mask & 2;
        g.model->set_gemv_paths(moe_gemv, lin_gemv);
        std::vector<int64_t> steps(1, 176);
        steps.resize(1 + 16, 1);
        const std::string path = std::string("decode, experts ") + (moe_gemv ? "gemv" : "grouped") + ", linears " +
                                 (lin_gemv ? "gemv" : "gemm");
        expect_parity(rows_from(run_chunks(steps), 176), 176, 16, path.c_str());
    }
    g.model->set_gemv_paths(true, true);
    g.model->check_integrity();
    g.pool->check_integrity();
}

TEST(GpuTame, TwoSequencesInOneStep) {
    ONECARD_REQUIRE_GPU();
    Gpu& g = gpu();
    const Oracle& o = oracle();
    const int64_t V = o.cfg.vocab_size;
    const FreshSeq a = fresh_seq(), b = fresh_seq();
    cuda::Stream s;
    GpuStepSeq q[2];
    q[0].slot = a.slot;
    q[0].block_table = a.blocks;
    q[0].tokens = std::span<const int32_t>(o.tokens).first(150);
    q[1].slot = b.slot;
    q[1].block_table = b.blocks;
    q[1].tokens = std::span<const int32_t>(o.tokens).first(90);
    const float* d = g.model->step(q, true, s.get());
    std::vector<float> rows(static_cast<size_t>(240 * V));
    s.sync();
    cuda::copy_to_host(rows.data(), d, rows.size() * 4);
    expect_parity(std::vector<float>(rows.begin(), rows.begin() + 150 * V), 0, 150, "batched prefill A");
    expect_parity(rows_from(rows, 150), 0, 90, "batched prefill B");
    std::vector<float> a_rows, b_rows;
    for (int64_t t = 0; t < 10; ++t) {
        q[0].start_pos = 150 + t;
        q[0].tokens = std::span<const int32_t>(o.tokens).subspan(static_cast<size_t>(150 + t), 1);
        q[0].want_logits = true;
        q[1].start_pos = 90 + t;
        q[1].tokens = std::span<const int32_t>(o.tokens).subspan(static_cast<size_t>(90 + t), 1);
        q[1].want_logits = true;
        const float* dd = g.model->step(q, false, s.get());
        std::vector<float> r(static_cast<size_t>(2 * V));
        s.sync();
        cuda::copy_to_host(r.data(), dd, r.size() * 4);
        a_rows.insert(a_rows.end(), r.begin(), r.begin() + V);
        b_rows.insert(b_rows.end(), r.begin() + V, r.end());
    }
    expect_parity(a_rows, 150, 10, "batched decode A");
    expect_parity(b_rows, 90, 10, "batched decode B");
}

// The prompt, then kGreedy tokens each chosen by the GPU's own argmax (graphs on): the same tokens
// as the oracle's greedy continuation.
TEST(GpuTame, GreedyContinuationMatchesOracle) {
    ONECARD_REQUIRE_GPU();
    Gpu& g = gpu();
    const Oracle& o = oracle();
    const FreshSeq fs = fresh_seq();
    cuda::Stream s;
    std::vector<int32_t> seq = o.tokens, out;
    GpuStepSeq q;
    q.slot = fs.slot;
    q.block_table = fs.blocks;
    q.want_logits = true;
    q.tokens = seq;
    for (int64_t i = 0; i < kGreedy; ++i) {
        g.model->step(std::span<const GpuStepSeq>(&q, 1), false, s.get());
        const int32_t* id = g.model->argmax_last(s.get());
        int32_t next = 0;
        s.sync();
        cuda::copy_to_host(&next, id, sizeof(next));
        out.push_back(next);
        seq.push_back(next);
        q.start_pos = static_cast<int64_t>(seq.size()) - 1;
        q.tokens = std::span<const int32_t>(seq).subspan(seq.size() - 1, 1);
    }
    int64_t same = 0;
    while (same < kGreedy && out[static_cast<size_t>(same)] == o.greedy[static_cast<size_t>(same)]) ++same;
    std::printf("[gpu tame] greedy continuation: first %lld of %lld tokens identical to the oracle's\n",
                static_cast<long long>(same), static_cast<long long>(kGreedy));
    EXPECT_EQ(out, o.greedy);
}

// The fault probe: chunked prefill of rows 0..159 (64 + 61 + 35), then 32 one-token decode steps
// (graphs), on a fresh sequence. Verdicts on the prefill rows and on the decode rows.
struct Probe {
    Verdict prefill, decode;
    bool caught() const { return !prefill.pass || !decode.pass; }
};
Probe probe() {
    std::vector<int64_t> steps = {64, 61, 35};
    steps.resize(3 + 32, 1);
    const std::vector<float> rows = run_chunks(steps);
    Probe p;
    p.prefill = check(rows, 0, 160);
    p.decode = check(rows_from(rows, 160), 160, 32);
    return p;
}

TEST(GpuTame, PlantedFaultsAreCaught) {
    ONECARD_REQUIRE_GPU();
    Gpu& g = gpu();
    const Probe clean = probe();
    print_verdict("clean", "probe: chunked prefill rows 0..159", clean.prefill);
    print_verdict("clean", "probe: decode rows 160..191", clean.decode);
    ASSERT_FALSE(clean.caught()) << "the clean probe must meet the bars before faults mean anything";
    struct Fault {
        const char* name;
        bool GpuFaultPlan::*flag;
    };
    const Fault faults[] = {
        {"drop one KV entry per step (ring)", &GpuFaultPlan::drop_ring_row},
        {"sliding window off by one", &GpuFaultPlan::window_off_by_one},
        {"stale indexer keys", &GpuFaultPlan::stale_indexer_keys},
        {"missing SwiGLU clamp", &GpuFaultPlan::no_swiglu_clamp},
        {"routing without the selection bias", &GpuFaultPlan::route_without_bias},
    };
    for (const Fault& f : faults) {
        GpuFaultPlan plan;
        plan.*(f.flag) = true;
        ASSERT_TRUE(plan.any());
        g.model->set_faults(plan);
        const Probe p = probe();
        g.model->set_faults(GpuFaultPlan{});
        const std::string pre = std::string(f.name) + ": prefill", dec = std::string(f.name) + ": decode";
        print_verdict("fault", pre.c_str(), p.prefill);
        print_verdict("fault", dec.c_str(), p.decode);
        EXPECT_TRUE(p.caught()) << f.name << " passes the bars: prefill median " << p.prefill.a.median
                                << ", decode median " << p.decode.a.median << " (bar " << kMedianBar << ")";
    }
    // Faults off again: the model is back to the clean numbers.
    EXPECT_FALSE(probe().caught());
    g.model->check_integrity();
}

}  // namespace
}  // namespace onecard

#else
TEST(GpuTame, NeedsCuda) {
    GTEST_SKIP() << "built without the CUDA backend (ONECARD_CUDA=OFF)";
}
#endif
