// Whole-model GPU parity on the tame synthetic model (issue 23): the same model shape as
// gpu_model_test.cpp (real per-layer Flash dimensions, 4 layers SWA, SWA, CSA, HCA, 3 hash-routed,
// 16 experts top-6, moe_inter 1024, vocab 1024, index_topk 32), drawn with the tame rule
// (SynthOptions::tame, src/model/synth.cpp), so the oracle's own noise floor no longer hides bugs.
//
// Bars (issue 23, fixed numbers, not derived from a floor): per path, median per-position relative L2
// against the bf16-storage oracle (DeepSeekV4::set_bf16_storage; gpu_model_test.cpp's file comment
// says why that oracle) <= 2e-2, argmax agreement >= 99% over every row less two binomial standard
// deviations of the row count (gpu_mtp_test.cpp's reading: one near-tie in a 32-row path is a 97%
// share but no evidence of a rate below 99%), greedy continuations identical for 32 tokens. The rows the oracle decides
// (top-1 ahead of top-2 by at least 3x the largest single-logit move the one-ulp nudge causes anywhere) are counted and
// printed beside them. TameFloorAtFlashDims measures the floor (one fp32 ulp on every hc bias) on the bf16-storage
// oracle and on the plain fp32 reference and holds both to issue 23's 1e-3. That needs the GPU's fp32 residual streams
// and head (model/storage_points.h): with bf16 ones the floor was 5.6e-3.
//
// Paths: plain and chunked prefill, a 512-token step (hc_pre's GEMM path), decode through CUDA graphs, verify steps,
// every GEMV/GEMM x expert-path combination, two sequences in one step, hybrid host experts (half of every layer's
// experts in host RAM), a 32-token greedy continuation. Prefix-cache hits are bit-identical to the
// cold run through the same step shapes (gpu_prefix_cache_test.cpp), so they meet these bars exactly
// when the cold paths here do. Speculation: the verify steps are a path here; the drafters run on the
// tame model against their CPU oracles at these bars in gpu_mtp_test.cpp (MTP block) and
// gpu_dspark_test.cpp (DSpark), and gpu_engine_spec_test.cpp checks the speculative engine's tokens.
//
// Planted faults (GpuFaultPlan, src/model_cuda/gpu_fault_plan.h), each in a probe — chunked prefill
// 64 + 61 + 35 then 32 one-token decode steps, on a slot and KV blocks no other run used (so a stale
// ring slot or indexer key cannot hold the right value by accident) — compared two ways:
//  * TeacherForcedSubBlocksCatchPlantedFaults, the gate: every sub-block of every layer against the
//    oracle fed the GPU's own input streams, judged against the clean probe's figures per sub-block.
//    On the H200 (2026-12-03) it catches all 9, the weakest (RoPE off by one) at 2.8x its clean median.
//  * WholeModelLogitsFaultTable: the final logits, on the tame and on the default (random) drawing. A
//    fault is caught on the tame model when a row set fails issue 23's fixed bars or its median
//    exceeds kLogitRatio x the clean probe's (the same bars relative to the path's own clean distance
//    as the teacher-forced gate; the clean GPU sits at the oracle's one-ulp floor, ~2.7e-4, so the
//    fixed 2e-2 sees only faults 70x that size). The random model is judged by gpu_model_test.cpp's
//    floor-derived bars, to show what its floor test misses. H200, 2026-12-04: the tame logits see
//    all 9 (the weakest, a skipped compressed entry, at 1.64x on the decode rows); the random model 3.
#include "gpu_test_util.h"

#ifdef ONECARD_HAVE_CUDA

#include "backend/cuda/ops/hyper_connection.cuh"
#include "backend/cuda/stream.h"
#include "core/fp_formats.h"
#include "engine/memory_plan.h"
#include "kvcache/kv_spec.h"
#include "loader/checkpoint.h"
#include "model/deepseek_v4.h"
#include "model/expert_placement.h"
#include "model/expert_profile.h"
#include "model/synth.h"
#include "model/weights.h"
#include "model_cuda/gpu_model.h"
#include "model_cuda/host_expert_store.h"
#include "support/test_support.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

namespace onecard {
namespace {

constexpr int64_t kPrompt = 192;
constexpr int64_t kGreedy = 32;
constexpr double kMedianBar = 2e-2;     // issue 23: median per-position relative L2
constexpr double kArgmaxBar = 0.99;     // issue 23: argmax agreement
constexpr double kFloorTarget = 1e-3;   // issue 23: the tame model's one-ulp floor
constexpr double kDecidedMargin = 3.0;  // decided rows: top-2 gap >= 3x the floor's largest logit move
constexpr double kLogitRatio = 1.5;     // a fault probe's logits: median above 1.5x the clean probe's on a row set
constexpr int64_t kSlots = 40, kBlocksPerSeq = 2;  // a fresh slot per run; 512 tokens each

// The CPU side (no GPU needed): a checkpoint, the oracle's logits, its floor and greedy run.
struct Oracle {
    bool tame = true;
    test::TempDir dir{"gpu_tame"};
    ModelConfig cfg;
    std::unique_ptr<Checkpoint> ckpt;
    ModelWeights w;
    std::vector<int32_t> tokens;  // [kPrompt]
    std::vector<float> logits;    // [kPrompt, vocab] bf16-storage reference oracle
    std::vector<float> nudged;    // the same with every hc bias one fp32 ulp up
    std::vector<float> fp32;      // [kPrompt, vocab] the plain fp32 reference (no bf16 storage)
    std::vector<float> fp32_nudged;
    std::vector<int32_t> greedy;  // [kGreedy] the oracle's greedy continuation of the prompt (tame only)
    ExpertUseProfile picks;       // routing picks over the prompt
    test::LogitsAgreement floor;  // nudged against logits
    // Rows whose oracle top-1 leads top-2 by >= kDecidedMargin x the largest single-logit move the
    // one-ulp nudge caused anywhere: no perturbation of the floor's size can flip them.
    std::vector<bool> decided;  // [kPrompt]
};

Oracle* make_oracle(bool tame) {
    auto* x = new Oracle;
    x->tame = tame;
    x->cfg = test::write_flash_dims_checkpoint(x->dir.path(), 424242, 16, 32, tame);
    x->ckpt = std::make_unique<Checkpoint>(Checkpoint::open(x->dir.path()));
    x->w = bind_weights(x->cfg, *x->ckpt);
    std::mt19937 rng(7);
    std::uniform_int_distribution<int32_t> tok(2, static_cast<int32_t>(x->cfg.vocab_size) - 1);
    for (int64_t i = 0; i < kPrompt; ++i) x->tokens.push_back(tok(rng));
    x->picks = ExpertUseProfile(x->cfg.num_hidden_layers, x->cfg.n_routed_experts);
    const int64_t V = x->cfg.vocab_size;
    {
        DeepSeekV4 cpu(x->cfg, x->w, Numerics::Reference);
        cpu.set_bf16_storage(true);
        cpu.set_expert_use_sink(&x->picks);
        SequenceState st = cpu.new_sequence();
        x->logits = cpu.forward(st, x->tokens);
        cpu.set_expert_use_sink(nullptr);
        auto argmax = [V](const float* row) { return static_cast<int32_t>(std::max_element(row, row + V) - row); };
        int32_t next = argmax(x->logits.data() + (kPrompt - 1) * V);
        for (int64_t i = 0; tame && i < kGreedy; ++i) {
            x->greedy.push_back(next);
            const std::vector<float> l = cpu.forward(st, std::span<const int32_t>(&next, 1));
            next = argmax(l.data());
        }
    }
    std::vector<std::vector<float>> storage;
    const ModelWeights nudged_w = test::nudge_hc_bases(x->w, storage);
    for (bool bf16 : {true, false}) {
        DeepSeekV4 nudged(x->cfg, nudged_w, Numerics::Reference);
        nudged.set_bf16_storage(bf16);
        SequenceState sn = nudged.new_sequence();
        (bf16 ? x->nudged : x->fp32_nudged) = nudged.forward(sn, x->tokens);
    }
    {
        DeepSeekV4 plain(x->cfg, x->w, Numerics::Reference);
        SequenceState sp = plain.new_sequence();
        x->fp32 = plain.forward(sp, x->tokens);
    }
    x->floor = test::compare_logits(x->nudged, x->logits, 0, kPrompt, V);
    float largest_move = 0.0f;
    for (size_t i = 0; i < x->logits.size(); ++i)
        largest_move = std::max(largest_move, std::fabs(x->nudged[i] - x->logits[i]));
    for (int64_t r = 0; r < kPrompt; ++r) {
        std::vector<float> row(x->logits.begin() + r * V, x->logits.begin() + (r + 1) * V);
        std::partial_sort(row.begin(), row.begin() + 2, row.end(), std::greater<float>());
        x->decided.push_back(row[0] - row[1] >= kDecidedMargin * largest_move);
    }
    return x;
}

const Oracle& oracle() {
    static const Oracle* o = make_oracle(true);
    return *o;
}
// The default (chaotic) drawing at the same seed: gpu_model_test.cpp's model, for the fault table's
// "would the random-model floor test have caught it" column.
const Oracle& random_oracle() {
    static const Oracle* o = make_oracle(false);
    return *o;
}

// The GPU side: the model over a pool with room for a fresh sequence per run.
struct Gpu {
    const Oracle* o = nullptr;
    std::unique_ptr<cuda::DeviceArena> arena;
    std::unique_ptr<HostExpertStore> store;  // hybrid: the experts kept in host RAM
    GpuModelWeights w;
    std::unique_ptr<GpuKvPool> pool;
    std::unique_ptr<GpuModel> model;
    int32_t next_slot = 0;
};

Gpu* make_gpu(const Oracle& o, const ExpertPlacement* placement) {
    auto* x = new Gpu;
    x->o = &o;
    x->arena = std::make_unique<cuda::DeviceArena>(size_t{20} << 30, "gpu tame test");
    x->w = upload_weights(o.cfg, o.w, *x->arena, placement);
    if (placement) {
        x->store = std::make_unique<HostExpertStore>(o.cfg, *placement);
        x->store->fill_from(o.w);
        x->store->check_integrity();
        attach_host_experts(x->w, *x->store, *x->arena, 0);
    }
    const KvCacheSpec spec = make_kv_cache_spec(kv_model_shape_from_config(o.cfg), 256);
    KvPoolSize size;
    size.n_slots = kSlots;
    size.n_blocks = kSlots * kBlocksPerSeq;
    GpuModelOptions mo;
    mo.max_num_batched_tokens = 512;
    mo.max_num_seqs = kSlots;  // one block-table row per slot
    mo.max_model_len = 1024;
    mo.host_experts.n_threads = 4;
    x->pool = std::make_unique<GpuKvPool>(spec, size, mo.max_num_batched_tokens, *x->arena);
    x->model = std::make_unique<GpuModel>(o.cfg, x->w, *x->pool, mo, *x->arena);
    return x;
}

Gpu& gpu() {
    static Gpu* g = make_gpu(oracle(), nullptr);
    return *g;
}
Gpu& random_gpu() {
    static Gpu* g = make_gpu(random_oracle(), nullptr);
    return *g;
}
// The tame model with half of every layer's experts in host RAM (odd ids on even layers, even ids on
// odd layers, as hybrid_experts_test.cpp), computed by the host expert pool on decode steps.
Gpu& hybrid_gpu() {
    static Gpu* g = [] {
        static ExpertPlacement placement =
            ExpertPlacement::all_on_gpu(oracle().cfg.num_hidden_layers, oracle().cfg.n_routed_experts);
        for (int64_t l = 0; l < oracle().cfg.num_hidden_layers; ++l)
            for (int64_t e = 0; e < oracle().cfg.n_routed_experts; ++e)
                placement.on_gpu[static_cast<size_t>(l)][static_cast<size_t>(e)] = (e + l) % 2 == 0;
        return make_gpu(oracle(), &placement);
    }();
    return *g;
}

// A slot and KV blocks no earlier run wrote: nothing stale in them can equal what a run should read.
struct FreshSeq {
    int32_t slot = -1;
    std::vector<int32_t> blocks;
};
FreshSeq fresh_seq(Gpu& g) {
    if (g.next_slot >= kSlots) throw std::runtime_error("gpu tame test: out of fresh slots (raise kSlots)");
    FreshSeq f;
    f.slot = g.next_slot++;
    for (int32_t i = 0; i < kBlocksPerSeq; ++i) f.blocks.push_back(f.slot * kBlocksPerSeq + i);
    return f;
}

// One step of the oracle's prompt tokens [pos, pos + c) on sequence fs, finished on the host (synced,
// host experts checked). Returns the step's device logits.
const float* prompt_step(Gpu& g, const FreshSeq& fs, int64_t pos, int64_t c, LogitRows rows, cuda::Stream& s) {
    GpuStepSeq q;
    q.slot = fs.slot;
    q.block_table = fs.blocks;
    q.start_pos = pos;
    q.tokens = std::span<const int32_t>(g.o->tokens).subspan(static_cast<size_t>(pos), static_cast<size_t>(c));
    q.want_logits = true;
    const float* d = g.model->step(std::span<const GpuStepSeq>(&q, 1), rows, s.get());
    s.sync();
    g.model->check_host_experts();
    return d;
}

// One sequence on a fresh slot, the prompt in steps of `chunks` tokens; every row's logits.
std::vector<float> run_chunks(Gpu& g, const std::vector<int64_t>& chunks) {
    const int64_t V = g.o->cfg.vocab_size;
    const FreshSeq fs = fresh_seq(g);
    cuda::Stream s;
    std::vector<float> out;
    int64_t pos = 0;
    for (int64_t c : chunks) {
        const float* d = prompt_step(g, fs, pos, c, LogitRows::All, s);
        std::vector<float> rows(static_cast<size_t>(c * V));
        cuda::copy_to_host(rows.data(), d, rows.size() * 4);
        out.insert(out.end(), rows.begin(), rows.end());
        pos += c;
    }
    return out;
}
std::vector<float> run_chunks(const std::vector<int64_t>& chunks) {
    return run_chunks(gpu(), chunks);
}

// Issue 23's argmax bar on n rows: at least 99% of them less two binomial standard deviations.
double argmax_bar_rows(int64_t n) {
    const double r = static_cast<double>(n);
    return kArgmaxBar * r - 2.0 * std::sqrt(r * kArgmaxBar * (1.0 - kArgmaxBar));
}
bool argmax_meets_bar(int64_t same, int64_t n) {
    return static_cast<double>(same) >= argmax_bar_rows(n);
}

// Issue 23's check on one path: GPU rows [0, n) against oracle rows [row0, row0 + n). The argmax bar
// is held on the rows the oracle decides (Oracle::decided); every row's agreement is printed too.
struct Verdict {
    test::LogitsAgreement a;
    int64_t decided = 0, decided_same = 0;
    bool pass = false;
};
Verdict check(const Oracle& o, const std::vector<float>& gpu_rows, int64_t row0, int64_t n) {
    const int64_t V = o.cfg.vocab_size;
    Verdict v;
    v.a = test::compare_logits(gpu_rows, o.logits, row0, n, V);
    for (int64_t i = 0; i < n; ++i) {
        if (!o.decided[static_cast<size_t>(row0 + i)]) continue;
        const float* x = gpu_rows.data() + i * V;
        const float* y = o.logits.data() + (row0 + i) * V;
        ++v.decided;
        v.decided_same += std::max_element(x, x + V) - x == std::max_element(y, y + V) - y;
    }
    if (o.tame) {
        v.pass = v.a.median <= kMedianBar && argmax_meets_bar(v.a.argmax_same, v.a.n);
    } else {  // gpu_model_test.cpp's bars, derived from the random model's own floor
        const test::FloorBars b = test::floor_bars(o.floor.median, o.floor.worst, o.floor.argmax_share());
        v.pass = b.pass(v.a.median, v.a.worst, v.a.argmax_same, v.a.n);
    }
    return v;
}
Verdict check(const std::vector<float>& gpu_rows, int64_t row0, int64_t n) {
    return check(oracle(), gpu_rows, row0, n);
}

void print_verdict(const char* what, const char* path, const Verdict& v) {
    std::printf(
        "[gpu tame] %-8s %-44s rows %3lld: rel L2 median %.2e (bar %.0e, %5.2fx) worst %.2e  argmax %lld/%lld "
        "(bar %.0f%%), decided rows %lld/%lld  -> %s\n",
        what, path, static_cast<long long>(v.a.n), v.a.median, kMedianBar, v.a.median / kMedianBar, v.a.worst,
        static_cast<long long>(v.a.argmax_same), static_cast<long long>(v.a.n), 100 * kArgmaxBar,
        static_cast<long long>(v.decided_same), static_cast<long long>(v.decided),
        v.pass ? "within the bars" : "FAILS the bars");
}

void expect_parity(const std::vector<float>& gpu_rows, int64_t row0, int64_t n, const char* path) {
    const Verdict v = check(gpu_rows, row0, n);
    print_verdict("path", path, v);
    EXPECT_LE(v.a.median, kMedianBar) << path;
    EXPECT_GE(static_cast<double>(v.a.argmax_same), argmax_bar_rows(v.a.n))
        << path << ": " << v.a.argmax_same << "/" << v.a.n;
}

std::vector<float> rows_from(const std::vector<float>& all, int64_t first_row, int64_t vocab) {
    return std::vector<float>(all.begin() + first_row * vocab, all.end());
}
std::vector<float> rows_from(const std::vector<float>& all, int64_t first_row) {
    return rows_from(all, first_row, oracle().cfg.vocab_size);
}

// The floor, measured the way (the bf16-storage oracle against itself with every hc bias one
// fp32 ulp up) and on the plain fp32 reference, both held to issue 23's 1e-3.
TEST(GpuTame, TameFloorAtFlashDims) {
    // CPU only, but minutes on CI's 2 cores (eight forwards at 4096 wide): measured where the GPU
    // paths are; the tiny preset's floor is in CI (tests/model/tame_model_test.cpp).
    ONECARD_REQUIRE_GPU();
    const Oracle& o = oracle();
    const test::LogitsAgreement& fl = o.floor;
    const test::LogitsAgreement f32 = test::compare_logits(o.fp32_nudged, o.fp32, 0, kPrompt, o.cfg.vocab_size);
    const test::LogitsAgreement rf = random_oracle().floor;
    const auto decided = std::count(o.decided.begin(), o.decided.end(), true);
    std::printf(
        "[gpu tame] one-ulp floor at Flash dims, bf16-storage oracle: median %.3g worst %.3g argmax %lld/%lld "
        "(target: median <= %.0e; parity bar %.0e); plain fp32 oracle: median %.3g worst %.3g; the default (random) "
        "drawing's bf16-storage floor: median %.3g argmax %lld/%lld; decided rows %lld/%lld\n",
        fl.median, fl.worst, static_cast<long long>(fl.argmax_same), static_cast<long long>(fl.n), kFloorTarget,
        kMedianBar, f32.median, f32.worst, rf.median, static_cast<long long>(rf.argmax_same),
        static_cast<long long>(rf.n), static_cast<long long>(decided), static_cast<long long>(kPrompt));
    // Not degenerate: every expert of every layer is picked over the prompt.
    for (int64_t l = 0; l < o.cfg.num_hidden_layers; ++l)
        for (int64_t e = 0; e < o.cfg.n_routed_experts; ++e)
            EXPECT_GT(o.picks.count(l, e), 0u) << "layer " << l << " expert " << e;
    EXPECT_GT(fl.worst, 0.0) << "the nudge must reach the logits";
    EXPECT_LE(fl.median, kMedianBar / 2) << "the oracle's own floor leaves the parity bar no room";
    EXPECT_LT(fl.median, rf.median / 4) << "the tame rule must lower the floor well below the random model's";
    EXPECT_GE(decided, kPrompt / 2) << "too few rows with a decided argmax for the argmax bar to mean much";
    // At 4096 wide the FP8 activation roundings flip even in fp32 (unlike on the tiny preset), so the
    // floor is what the tame rule's post weight lets through (src/model/synth.cpp, the rule's comment).
    EXPECT_LE(fl.median, kFloorTarget) << "issue 23's floor target at Flash dims (bf16-storage oracle)";
    EXPECT_LE(f32.median, kFloorTarget) << "issue 23's floor target at Flash dims (plain fp32 oracle)";
    EXPECT_TRUE(argmax_meets_bar(fl.argmax_same, fl.n)) << "the oracle's own argmax under the nudge";
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
        g.model->set_decode_paths(moe_gemv ? GpuModel::ExpertPath::Gemv : GpuModel::ExpertPath::Grouped,
                                  lin_gemv ? GpuModel::LinearPath::Gemv : GpuModel::LinearPath::Gemm);
        std::vector<int64_t> steps(1, 176);
        steps.resize(1 + 16, 1);
        const std::string path = std::string("decode, experts ") + (moe_gemv ? "gemv" : "grouped") + ", linears " +
                                 (lin_gemv ? "gemv" : "gemm");
        expect_parity(rows_from(run_chunks(steps), 176), 176, 16, path.c_str());
    }
    g.model->set_decode_paths(GpuModel::ExpertPath::Gemv, GpuModel::LinearPath::Gemv);
    g.model->check_integrity();
    g.pool->check_integrity();
}

// Hybrid experts (issue 13's path): half of every layer's experts in host RAM. Prefill stages them
// onto the GPU (the many-token path); decode steps hand them to the host expert pool.
TEST(GpuTame, HybridHostExperts) {
    ONECARD_REQUIRE_GPU();
    Gpu& h = hybrid_gpu();
    ASSERT_NE(h.model->host_experts(), nullptr);
    expect_parity(run_chunks(h, {kPrompt}), 0, kPrompt, "hybrid: plain prefill");
    std::vector<int64_t> decode(1, 160);
    decode.resize(1 + 32, 1);
    expect_parity(rows_from(run_chunks(h, decode), 160), 160, 32, "hybrid: decode 1-token steps (graphs)");
    h.model->check_integrity();
}

TEST(GpuTame, TwoSequencesInOneStep) {
    ONECARD_REQUIRE_GPU();
    Gpu& g = gpu();
    const Oracle& o = oracle();
    const int64_t V = o.cfg.vocab_size;
    const FreshSeq a = fresh_seq(g), b = fresh_seq(g);
    cuda::Stream s;
    GpuStepSeq q[2];
    q[0].slot = a.slot;
    q[0].block_table = a.blocks;
    q[0].tokens = std::span<const int32_t>(o.tokens).first(150);
    q[1].slot = b.slot;
    q[1].block_table = b.blocks;
    q[1].tokens = std::span<const int32_t>(o.tokens).first(90);
    const float* d = g.model->step(q, LogitRows::All, s.get());
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
        const float* dd = g.model->step(q, LogitRows::Last, s.get());
        std::vector<float> r(static_cast<size_t>(2 * V));
        s.sync();
        cuda::copy_to_host(r.data(), dd, r.size() * 4);
        a_rows.insert(a_rows.end(), r.begin(), r.begin() + V);
        b_rows.insert(b_rows.end(), r.begin() + V, r.end());
    }
    expect_parity(a_rows, 150, 10, "batched decode A");
    expect_parity(b_rows, 90, 10, "batched decode B");
}

// A 512-token step (the whole prompt twice and its first 128 tokens, three sequences): hc_pre forms
// the mixes on its fp32 GEMM from kHcGemmMinTokens tokens, the path of prefill-sized steps, which the
// other tests' steps (<= 192 tokens) never take. Every sequence's rows meet the oracle's bars.
TEST(GpuTame, PrefillSizedStepTakesTheMixGemm) {
    ONECARD_REQUIRE_GPU();
    Gpu& g = gpu();
    const Oracle& o = oracle();
    const int64_t V = o.cfg.vocab_size;
    const int64_t lens[3] = {kPrompt, kPrompt, 128};
    static_assert(2 * kPrompt + 128 == 512 && 512 >= cuda::kHcGemmMinTokens, "one step on the GEMM path");
    cuda::Stream s;
    GpuStepSeq q[3];
    const FreshSeq f[3] = {fresh_seq(g), fresh_seq(g), fresh_seq(g)};  // q's block tables view them
    for (int i = 0; i < 3; ++i) {
        q[i].slot = f[i].slot;
        q[i].block_table = f[i].blocks;
        q[i].tokens = std::span<const int32_t>(o.tokens).first(static_cast<size_t>(lens[i]));
    }
    const float* d = g.model->step(q, LogitRows::All, s.get());
    std::vector<float> rows(static_cast<size_t>(512 * V));
    s.sync();
    cuda::copy_to_host(rows.data(), d, rows.size() * 4);
    int64_t row0 = 0;
    const char* names[3] = {"512-token step: sequence A", "512-token step: sequence B", "512-token step: sequence C"};
    for (int i = 0; i < 3; ++i) {
        expect_parity(std::vector<float>(rows.begin() + row0 * V, rows.begin() + (row0 + lens[i]) * V), 0, lens[i],
                      names[i]);
        row0 += lens[i];
    }
    g.model->check_integrity();
}

// The prompt, then kGreedy tokens each chosen by the GPU's own argmax (graphs on): the same tokens
// as the oracle's greedy continuation.
TEST(GpuTame, GreedyContinuationMatchesOracle) {
    ONECARD_REQUIRE_GPU();
    Gpu& g = gpu();
    const Oracle& o = oracle();
    const FreshSeq fs = fresh_seq(g);
    cuda::Stream s;
    std::vector<int32_t> seq = o.tokens, out;
    GpuStepSeq q;
    q.slot = fs.slot;
    q.block_table = fs.blocks;
    q.want_logits = true;
    q.tokens = seq;
    for (int64_t i = 0; i < kGreedy; ++i) {
        g.model->step(std::span<const GpuStepSeq>(&q, 1), LogitRows::Last, s.get());
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
    // Caught against a clean probe of the same model: the fixed bars, or a median kLogitRatio x the
    // clean one on either row set.
    bool caught_against(const Probe& clean) const {
        return caught() || prefill.a.median > kLogitRatio * clean.prefill.a.median ||
               decode.a.median > kLogitRatio * clean.decode.a.median;
    }
};
Probe probe(Gpu& g) {
    std::vector<int64_t> steps = {64, 61, 35};
    steps.resize(3 + 32, 1);
    const std::vector<float> rows = run_chunks(g, steps);
    Probe p;
    p.prefill = check(*g.o, rows, 0, 160);
    p.decode = check(*g.o, rows_from(rows, 160, g.o->cfg.vocab_size), 160, 32);
    return p;
}

struct Fault {
    const char* name;
    bool GpuFaultPlan::*flag;
};
constexpr Fault kFaults[] = {
    {"drop one KV entry per step (ring)", &GpuFaultPlan::drop_ring_row},
    {"sliding window off by one", &GpuFaultPlan::window_off_by_one},
    {"skip one compressed entry per step", &GpuFaultPlan::skip_compressed_entry},
    {"stale indexer keys", &GpuFaultPlan::stale_indexer_keys},
    {"FP8 block scale x2 (FNUZ trap)", &GpuFaultPlan::fp8_block_scale_x2},
    {"missing SwiGLU clamp", &GpuFaultPlan::no_swiglu_clamp},
    {"routing without the selection bias", &GpuFaultPlan::route_without_bias},
    {"two experts' routing weights swapped", &GpuFaultPlan::swap_expert_weights},
    {"RoPE position off by one (queries)", &GpuFaultPlan::rope_off_by_one},
};

Probe probe_with(Gpu& g, const Fault& f) {
    GpuFaultPlan plan;
    plan.*(f.flag) = true;
    g.model->set_faults(plan);
    const Probe p = probe(g);
    g.model->set_faults(GpuFaultPlan{});
    return p;
}

// Each planted fault against the final logits: on the tame model by issue 23's bars and relative to the
// clean probe (Probe::caught_against), on the random model by gpu_model_test.cpp's floor-derived bars,
// to show which ones that model's logit comparison misses. The sub-block gate is
// TeacherForcedSubBlocksCatchPlantedFaults below.
TEST(GpuTame, WholeModelLogitsFaultTable) {
    ONECARD_REQUIRE_GPU();
    Gpu& g = gpu();
    Gpu& r = random_gpu();
    const Probe clean = probe(g), clean_random = probe(r);
    print_verdict("clean", "probe: chunked prefill rows 0..159", clean.prefill);
    print_verdict("clean", "probe: decode rows 160..191", clean.decode);
    print_verdict("clean", "random model: prefill", clean_random.prefill);
    print_verdict("clean", "random model: decode", clean_random.decode);
    EXPECT_FALSE(clean.caught()) << "the clean probe must meet the bars before faults mean anything";
    EXPECT_FALSE(clean_random.caught()) << "the random model's clean probe must meet its floor bars";
    std::printf(
        "[gpu tame] fault table (median rel. L2 prefill / decode; tame: bar %.0e or %.1fx the clean %.2e / %.2e; "
        "random-model bar from its floor)\n",
        kMedianBar, kLogitRatio, clean.prefill.a.median, clean.decode.a.median);
    for (const Fault& f : kFaults) {
        const Probe p = probe_with(g, f), q = probe_with(r, f);
        const std::string pre = std::string(f.name) + ": prefill", dec = std::string(f.name) + ": decode";
        print_verdict("fault", pre.c_str(), p.prefill);
        print_verdict("fault", dec.c_str(), p.decode);
        std::printf("[gpu tame] | %-38s | tame %.2e / %.2e (x%.2f / x%.2f): %-6s | random %.2e / %.2e: %s |\n", f.name,
                    p.prefill.a.median, p.decode.a.median, p.prefill.a.median / clean.prefill.a.median,
                    p.decode.a.median / clean.decode.a.median, p.caught_against(clean) ? "caught" : "MISSED",
                    q.prefill.a.median, q.decode.a.median, q.caught() ? "caught" : "missed");
        EXPECT_TRUE(p.caught_against(clean))
            << f.name << " passes the bars: prefill median " << p.prefill.a.median << ", decode median "
            << p.decode.a.median << " (clean " << clean.prefill.a.median << " / " << clean.decode.a.median << ")";
    }
    // Faults off again: the models are back to the clean numbers (the FNUZ fault's scale restored).
    EXPECT_FALSE(probe(g).caught_against(clean));
    g.model->check_integrity();
    r.model->check_integrity();
}

// Teacher forcing: the same probes compared sub-block by sub-block. The GPU records its residual
// streams at every sub-block boundary (GpuModel::set_stream_recording; steps run without graphs,
// the kernels are the same); the bf16-storage oracle runs each sub-block alone on the GPU's own input
// streams (DeepSeekV4::forward_sub_block), so a sub-block's distance is its own error, not the chaos
// of every layer before it. Distance at a position: |X_gpu − X_oracle| / |X_oracle − X_in| at the
// sub-block's output (the error relative to what the sub-block changed). A fault is caught when some
// sub-block's median over the prefill or the decode rows exceeds kTfMedianRatio x the clean probe's,
// or its worst row kTfWorstRatio x the clean worst: bars relative to the floor of the same path
// (GPU runs are deterministic, so the clean figures are exact).
constexpr double kTfMedianRatio = 1.5;
constexpr double kTfWorstRatio = 2.0;

struct TfStats {
    double median = 0, worst = 0;
};
struct TfProbe {
    std::vector<TfStats> prefill, decode;  // [2·layers]: attention, MoE of layer 0, then layer 1, ...
};

TfStats tf_stats(std::vector<double> d) {
    TfStats t;
    std::sort(d.begin(), d.end());
    t.median = d[d.size() / 2];
    t.worst = d.back();
    return t;
}

TfProbe teacher_forced_probe(Gpu& g, const DeepSeekV4& cpu) {
    const Oracle& o = *g.o;
    const int64_t row = 4 * o.cfg.hidden_size, L = o.cfg.num_hidden_layers, P = 2 * L + 1, T = kPrompt;
    std::vector<std::vector<float>> X(static_cast<size_t>(P), std::vector<float>(static_cast<size_t>(T * row)));
    std::vector<int64_t> steps = {64, 61, 35};
    steps.resize(3 + 32, 1);
    const FreshSeq fs = fresh_seq(g);
    cuda::Stream s;
    g.model->set_stream_recording(true);
    int64_t pos = 0;
    for (int64_t c : steps) {
        prompt_step(g, fs, pos, c, LogitRows::Last, s);
        const std::vector<float>& rec = g.model->recorded_streams();
        EXPECT_EQ(static_cast<int64_t>(rec.size()), P * c * row);
        for (int64_t pt = 0; pt < P; ++pt)
            for (int64_t i = 0; i < c * row; ++i)
                X[static_cast<size_t>(pt)][static_cast<size_t>(pos * row + i)] =
                    rec[static_cast<size_t>(pt * c * row + i)];
        pos += c;
    }
    g.model->set_stream_recording(false);
    TfProbe out;
    SequenceState st = cpu.new_sequence();
    for (int64_t k = 0; k + 1 < P; ++k) {
        std::vector<float> y = X[static_cast<size_t>(k)];
        cpu.forward_sub_block(st, k / 2, k % 2 == 0 ? DeepSeekV4::SubBlock::Attention : DeepSeekV4::SubBlock::Moe,
                              o.tokens, y.data());
        const std::vector<float>& in = X[static_cast<size_t>(k)];
        const std::vector<float>& got = X[static_cast<size_t>(k + 1)];
        std::vector<double> d(static_cast<size_t>(T));
        for (int64_t t = 0; t < T; ++t) {
            double err = 0, moved = 0;
            for (int64_t i = t * row; i < (t + 1) * row; ++i) {
                const double e = double(got[static_cast<size_t>(i)]) - y[static_cast<size_t>(i)];
                const double m = double(y[static_cast<size_t>(i)]) - in[static_cast<size_t>(i)];
                err += e * e;
                moved += m * m;
            }
            d[static_cast<size_t>(t)] = std::sqrt(err / std::max(moved, 1e-30));
        }
        out.prefill.push_back(tf_stats({d.begin(), d.begin() + 160}));
        out.decode.push_back(tf_stats({d.begin() + 160, d.end()}));
    }
    return out;
}

const char* tf_name(int64_t k) {
    static const char* names[] = {"attn", "moe"};
    return names[k % 2];
}

// The worst ratio of a probe to the clean one over every sub-block and both row sets; where.
struct TfVerdict {
    double median_ratio = 0, worst_ratio = 0;
    std::string where;
    bool caught() const { return median_ratio > kTfMedianRatio || worst_ratio > kTfWorstRatio; }
};
TfVerdict tf_verdict(const TfProbe& p, const TfProbe& clean) {
    TfVerdict v;
    for (size_t k = 0; k < p.prefill.size(); ++k)
        for (int part = 0; part < 2; ++part) {
            const TfStats& a = part ? p.decode[k] : p.prefill[k];
            const TfStats& c = part ? clean.decode[k] : clean.prefill[k];
            const double mr = a.median / c.median, wr = a.worst / c.worst;
            if (std::max(mr / kTfMedianRatio, wr / kTfWorstRatio) >
                std::max(v.median_ratio / kTfMedianRatio, v.worst_ratio / kTfWorstRatio)) {
                v.median_ratio = mr;
                v.worst_ratio = wr;
                v.where = std::string("layer ") + std::to_string(k / 2) + " " + tf_name(static_cast<int64_t>(k)) +
                          (part ? ", decode rows" : ", prefill rows");
            }
        }
    return v;
}

TEST(GpuTame, TeacherForcedSubBlocksCatchPlantedFaults) {
    ONECARD_REQUIRE_GPU();
    Gpu& g = gpu();
    const Oracle& o = oracle();
    DeepSeekV4 cpu(o.cfg, o.w, Numerics::Reference);
    cpu.set_bf16_storage(true);
    const TfProbe clean = teacher_forced_probe(g, cpu);
    std::printf("[gpu tame] teacher forcing, clean GPU per sub-block (median / worst, prefill | decode):\n");
    for (size_t k = 0; k < clean.prefill.size(); ++k)
        std::printf("[gpu tame]   layer %zu %-4s  %.2e / %.2e | %.2e / %.2e\n", k / 2, tf_name(static_cast<int64_t>(k)),
                    clean.prefill[k].median, clean.prefill[k].worst, clean.decode[k].median, clean.decode[k].worst);
    // The clean probe against itself is the identity; a second clean run must reproduce it exactly.
    const TfVerdict again = tf_verdict(teacher_forced_probe(g, cpu), clean);
    EXPECT_FALSE(again.caught()) << "a clean rerun differs from the clean run: " << again.where;
    std::printf(
        "[gpu tame] teacher-forced fault table (largest ratio to the clean sub-block; bars %.1fx median, %.1fx "
        "worst)\n",
        kTfMedianRatio, kTfWorstRatio);
    for (const Fault& f : kFaults) {
        GpuFaultPlan plan;
        plan.*(f.flag) = true;
        g.model->set_faults(plan);
        const TfVerdict v = tf_verdict(teacher_forced_probe(g, cpu), clean);
        g.model->set_faults(GpuFaultPlan{});
        std::printf("[gpu tame] | %-38s | median x%.2f, worst x%.2f at %-28s | %s |\n", f.name, v.median_ratio,
                    v.worst_ratio, v.where.c_str(), v.caught() ? "caught" : "MISSED");
        EXPECT_TRUE(v.caught()) << f.name << ": the largest sub-block ratio is x" << v.median_ratio << " median, x"
                                << v.worst_ratio << " worst (" << v.where << ")";
    }
    g.model->check_integrity();
}

}  // namespace
}  // namespace onecard

#else
TEST(GpuTame, NeedsCuda) {
    GTEST_SKIP() << "built without the CUDA backend (ONECARD_CUDA=OFF)";
}
#endif
