// Whole-model GPU parity: GpuModel (reference numerics, bf16 activations, FP8 KV in the paged pool)
// against the CPU's DeepSeekV4 in Numerics::Reference on a synthetic checkpoint with the real
// per-layer Flash dimensions (hidden 4096, 64 heads × 512, q_lora 1024, o_groups 8 × 1024,
// indexer 64 × 128, window 128), shrunk to 4 layers (SWA, SWA, CSA, HCA; 3 hash-routed), 16 experts
// top-6, moe_inter 1024, vocab 1024, index_topk 32 so the indexer really selects (a 192-token
// prompt has 48 CSA entries).
// Paths: one plain prefill, chunked prefill (64 + 61 + 67), prefill then 1-token decode steps,
// 3-token verify steps (without CUDA graphs; 1-token steps replay captured graphs), every
// combination of GEMV and many-token kernels, and two sequences batched in one step; decode batches
// (<= 64 tokens) take the MXFP4 GEMV expert path, prefill the grouped cuBLAS path.
//
// Oracle. The primary oracle is the CPU with DeepSeekV4::set_bf16_storage: it rounds activations to
// bf16 at exactly the points where GpuModel stores bf16 (or a fused kernel rounds internally) and
// nowhere else, so it computes what the bf16 GPU computes up to fp32 summation order. That matters
// because every quantised linear rounds its input to FP8 (3 mantissa bits): against the plain fp32
// oracle, a bf16-sized change of an input flips a few percent of those rounding decisions and the
// following layers amplify them (tests/model/forward_test.cpp, ReferenceNumericsAmplifySmallDifferences,
// shows it on the CPU alone).
// Bars. Issue 7 asked for median per-position relative L2 <= 2e-2 and argmax agreement >= 98%. On this
// model no implementation that is not bit-identical to the oracle can meet them: the oracle's own
// noise floor is far above. Moving every hyper-connection bias by ONE fp32 ulp (every sub-block input
// changes by ~1e-7 relative, the size of a summation-order difference; test::nudge_hc_bases) moves the
// bf16-storage oracle's logits by a median of ~6e-2 with ~89% argmax agreement on the CPU tiny model
// (tests/model/forward_test.cpp, ReferenceNumericsAmplifyOneUlp; exact numerics move by 6e-7). The
// FP8 1x128 activation roundings, router and indexer picks are discontinuous, and the chaos of a
// random-weight model carries any flip forward. So this test measures that floor on its own model in
// the same run (the oracle against the oracle with nudged biases, one_ulp_floor()) and holds the GPU
// to it: median and worst at most 1.5x the floor's (never tighter than the 2e-2 asked) and argmax
// disagreement at most twice the floor's (agreement capped at 98%), less two binomial standard
// deviations of the row count: the GPU carries more such differences than one nudge (its attention
// probabilities in bf16, every summation order).
// H200 at 312a653+: floor median 6.3e-2, worst 0.128, argmax 93.2%; GPU medians 6.4e-2..7.0e-2,
// argmax 85.6%..100% per path. A real fault (a wrong row, position or path) gives rel. L2 ~1.4. Where the
// oracle does not mirror the GPU (listed in the CPU code): the sparse attention kernel's bf16
// probabilities (the decode and prefill expert paths round at the same points since MoeExperts took
// the GEMV path's, both mirrored by model/layer_moe.cpp).
// Secondary, printed on every path and checked loosely: the same GPU rows against the plain fp32
// oracle, held to the yardstick of the CPU's own bf16 sensitivity (the oracle with only the
// quantised linears' inputs rounded to bf16, DeepSeekV4::set_bf16_linear_inputs, against the plain
// oracle, measured in the same run): median and worst at most 1.5x the sensitivity's (never tighter
// than 2e-2), argmax at least the sensitivity's minus 5 points. That line keeps a regression of the
// reference path (or of the fp32 oracle itself) visible.
#include "gpu_test_util.h"

#ifdef ONECARD_HAVE_CUDA

#include "backend/cuda/stream.h"
#include "engine/memory_plan.h"
#include "kvcache/kv_spec.h"
#include "loader/checkpoint.h"
#include "model/deepseek_v4.h"
#include "model/synth.h"
#include "model/weights.h"
#include "model_cuda/gpu_model.h"
#include "support/test_support.h"

#include <algorithm>
#include <numeric>

namespace onecard {
namespace {

constexpr int64_t kPrompt = 192;

struct Fixture {
    ModelConfig cfg;
    std::vector<int32_t> tokens;     // [kPrompt]
    std::vector<float> cpu;          // [kPrompt, vocab] CPU reference logits (plain fp32 oracle)
    std::vector<float> cpu_bf16;     // the same with bf16-rounded inputs to the quantised linears
    std::vector<float> cpu_storage;  // the same with the GPU's bf16 storage (set_bf16_storage): primary
    std::vector<float> cpu_nudged;   // cpu_storage's model with every hc bias one fp32 ulp up: its noise floor
    std::unique_ptr<cuda::DeviceArena> arena;
    GpuModelWeights w;
    std::unique_ptr<GpuKvPool> pool;
    std::unique_ptr<GpuModel> model;
    KvCacheSpec spec;
};

Fixture& fixture() {
    static Fixture* f = [] {
        auto* fx = new Fixture;
        test::TempDir dir("gpu_model");
        fx->cfg = test::write_flash_dims_checkpoint(dir.path(), 424242, 16, 32);
        const Checkpoint ckpt = Checkpoint::open(dir.path());
        const ModelWeights w = bind_weights(fx->cfg, ckpt);
        std::mt19937 rng(7);
        std::uniform_int_distribution<int32_t> tok(2, static_cast<int32_t>(fx->cfg.vocab_size) - 1);
        for (int64_t i = 0; i < kPrompt; ++i) fx->tokens.push_back(tok(rng));
        {
            DeepSeekV4 cpu(fx->cfg, w, Numerics::Reference);
            SequenceState st = cpu.new_sequence();
            fx->cpu = cpu.forward(st, fx->tokens);
            cpu.set_bf16_linear_inputs(true);
            SequenceState st2 = cpu.new_sequence();
            fx->cpu_bf16 = cpu.forward(st2, fx->tokens);
            cpu.set_bf16_linear_inputs(false);
            cpu.set_bf16_storage(true);
            SequenceState st3 = cpu.new_sequence();
            fx->cpu_storage = cpu.forward(st3, fx->tokens);
            std::vector<std::vector<float>> storage;
            DeepSeekV4 nudged(fx->cfg, test::nudge_hc_bases(w, storage), Numerics::Reference);
            nudged.set_bf16_storage(true);
            SequenceState st4 = nudged.new_sequence();
            fx->cpu_nudged = nudged.forward(st4, fx->tokens);
        }
        fx->arena = std::make_unique<cuda::DeviceArena>(size_t{24} << 30, "gpu model test");
        fx->w = upload_weights(fx->cfg, w, *fx->arena);
        fx->spec = make_kv_cache_spec(kv_model_shape_from_config(fx->cfg), 256);
        KvPoolSize size;
        size.n_slots = 4;
        size.n_blocks = 8;
        GpuModelOptions mo;
        mo.max_num_batched_tokens = 512;
        mo.max_num_seqs = 4;
        mo.max_model_len = 1024;
        fx->pool = std::make_unique<GpuKvPool>(fx->spec, size, mo.max_num_batched_tokens, *fx->arena);
        fx->model = std::make_unique<GpuModel>(fx->cfg, fx->w, *fx->pool, mo, *fx->arena);
        return fx;
    }();
    return *f;
}

struct Agreement {
    double median = 0, worst = 0;
    int64_t argmax_same = 0, n = 0;
    std::vector<double> per_row;
};

// Rows [0, n) of `gpu` against rows [row0, row0 + n) of `ref`.
Agreement compare(const std::vector<float>& gpu, int64_t row0, int64_t n, const std::vector<float>& cpu_rows) {
    const Fixture& f = fixture();
    const int64_t V = f.cfg.vocab_size;
    std::vector<double> errs;
    Agreement a;
    for (int64_t i = 0; i < n; ++i) {
        std::vector<float> g(gpu.begin() + i * V, gpu.begin() + (i + 1) * V);
        std::vector<float> c(cpu_rows.begin() + (row0 + i) * V, cpu_rows.begin() + (row0 + i + 1) * V);
        errs.push_back(test::rel_l2(g, c));
        a.argmax_same +=
            std::max_element(g.begin(), g.end()) - g.begin() == std::max_element(c.begin(), c.end()) - c.begin();
    }
    a.n = n;
    a.per_row = errs;
    std::vector<double> s = errs;
    std::sort(s.begin(), s.end());
    a.median = s[s.size() / 2];
    a.worst = s.back();
    return a;
}

// The CPU's own sensitivity to bf16 activation storage over the whole prompt (see the file comment).
const Agreement& sensitivity() {
    static const Agreement s = [] {
        const Fixture& f = fixture();
        return compare(f.cpu_bf16, 0, kPrompt, f.cpu);
    }();
    return s;
}

// Argmax agreement is a count over the path's rows (10 decode rows on some paths): every bar on it
// allows two binomial standard deviations below the expected count at the bar's rate.
void print_rows(const Agreement& a) {
    std::printf("[gpu model]   per-row rel L2:");
    for (size_t i = 0; i < a.per_row.size(); ++i) std::printf("%s%.2g", i % 16 ? " " : "\n    ", a.per_row[i]);
    std::printf("\n");
}

// Secondary: rows against `against` (the plain fp32 oracle, or other GPU rows) under the yardstick
// bars of the CPU's own bf16 sensitivity, with the two-sd argmax slack on every row count (as before
// the bf16-storage oracle existed).
void expect_yardstick(const Agreement& a, const char* path, const char* against) {
    const Agreement& sens = sensitivity();
    const double max_median = std::max(2e-2, 1.5 * sens.median), max_worst = std::max(2e-2, 1.5 * sens.worst);
    const double min_argmax = std::min(0.98, static_cast<double>(sens.argmax_same) / sens.n - 0.05);
    std::printf(
        "[gpu model]   %s vs %s: rel L2 median %.2e worst %.2e  argmax %lld/%lld  (yardstick bars: "
        "median <= %.2e, worst <= %.2e, argmax >= %.0f%% less 2 binomial sd; cpu bf16 sensitivity median "
        "%.2e worst %.2e argmax %.1f%%)\n",
        path, against, a.median, a.worst, static_cast<long long>(a.argmax_same), static_cast<long long>(a.n),
        max_median, max_worst, 100 * min_argmax, sens.median, sens.worst, 100.0 * sens.argmax_same / sens.n);
    EXPECT_LE(a.median, max_median) << path << " vs " << against;
    EXPECT_LE(a.worst, max_worst) << path << " vs " << against;
    const double n = static_cast<double>(a.n);
    EXPECT_GE(static_cast<double>(a.argmax_same), min_argmax * n - 2.0 * std::sqrt(n * min_argmax * (1.0 - min_argmax)))
        << path << " vs " << against;
}

// The bf16-storage oracle against itself with every hc bias one fp32 ulp up (see the file comment).
const Agreement& one_ulp_floor() {
    static const Agreement s = [] {
        const Fixture& f = fixture();
        return compare(f.cpu_nudged, 0, kPrompt, f.cpu_storage);
    }();
    return s;
}

// Issue 7's bars where the oracle's own noise floor allows them, else the floor's (file comment).
void expect_parity(const Agreement& a, const char* path) {
    const Agreement& fl = one_ulp_floor();
    const test::FloorBars bars = test::floor_bars(fl.median, fl.worst, static_cast<double>(fl.argmax_same) / fl.n);
    const double max_median = bars.max_median, max_worst = bars.max_worst, min_argmax = bars.min_argmax;
    std::printf(
        "[gpu model] %-34s rows %3lld  vs bf16-storage oracle: rel L2 median %.2e worst %.2e  argmax "
        "%lld/%lld  (bars: median <= %.2e, worst <= %.2e, argmax >= %.1f%% less 2 binomial sd; oracle's one-ulp "
        "floor: median %.2e worst %.2e argmax %.1f%%)\n",
        path, static_cast<long long>(a.n), a.median, a.worst, static_cast<long long>(a.argmax_same),
        static_cast<long long>(a.n), max_median, max_worst, 100 * min_argmax, fl.median, fl.worst,
        100.0 * fl.argmax_same / fl.n);
    if (a.median > max_median || a.worst > max_worst) print_rows(a);
    EXPECT_LE(a.median, max_median) << path;
    EXPECT_LE(a.worst, max_worst) << path;
    EXPECT_GE(static_cast<double>(a.argmax_same), bars.min_argmax_rows(a.n)) << path;
}

// GPU rows [0, n) against oracle rows [row0, row0 + n): the primary check and the secondary line.
void expect_matches_cpu(const std::vector<float>& gpu, int64_t row0, int64_t n, const char* path) {
    const Fixture& f = fixture();
    expect_parity(compare(gpu, row0, n, f.cpu_storage), path);
    expect_yardstick(compare(gpu, row0, n, f.cpu), path, "fp32 oracle");
}

std::vector<int32_t> blocks_for(int32_t first) {
    return {first, first + 1};
}  // 512 tokens of blocks

// Runs steps for one sequence in `slot`; chunk sizes in `chunks`; returns every row's logits.
// model: the fixture's unless given.
std::vector<float> run_chunks(int32_t slot, const std::vector<int64_t>& chunks, GpuModel* model = nullptr) {
    Fixture& f = fixture();
    if (model == nullptr) model = f.model.get();
    const int64_t V = f.cfg.vocab_size;
    cuda::Stream s;
    const std::vector<int32_t> bt = blocks_for(slot * 2);
    std::vector<float> out;
    int64_t pos = 0;
    for (int64_t c : chunks) {
        GpuStepSeq q;
        q.slot = slot;
        q.block_table = bt;
        q.start_pos = pos;
        q.tokens = std::span<const int32_t>(f.tokens).subspan(static_cast<size_t>(pos), static_cast<size_t>(c));
        q.want_logits = true;
        const float* d = model->step(std::span<const GpuStepSeq>(&q, 1), LogitRows::All, s.get());
        std::vector<float> rows(static_cast<size_t>(c * V));
        s.sync();  // the step runs on a non-blocking stream: finish it before the (default-stream) copy
        cuda::copy_to_host(rows.data(), d, rows.size() * 4);
        out.insert(out.end(), rows.begin(), rows.end());
        pos += c;
    }
    return out;
}

TEST(GpuModel, PlainPrefillMatchesCpuReference) {
    ONECARD_REQUIRE_GPU();
    expect_matches_cpu(run_chunks(0, {kPrompt}), 0, kPrompt, "plain prefill");
}

TEST(GpuModel, ChunkedPrefillMatchesCpuAndPlainArgmax) {
    ONECARD_REQUIRE_GPU();
    const auto chunked = run_chunks(1, {64, 61, 67});
    expect_matches_cpu(chunked, 0, kPrompt, "chunked prefill 64+61+67");
    // GPU against GPU: chunk boundaries change which kernels run (GEMV vs GEMM, grouped vs GEMV
    // experts, whose bf16 rounding points differ), so FP8 decisions flip as they do between the fp32
    // oracle and bf16 storage: the yardstick bars.
    const auto plain = run_chunks(0, {kPrompt});
    expect_yardstick(compare(chunked, 0, kPrompt, plain), "chunked prefill 64+61+67", "plain prefill (GPU)");
}

TEST(GpuModel, DecodeAndVerifyStepsMatchCpuReference) {
    ONECARD_REQUIRE_GPU();
    std::vector<int64_t> decode(1, 160);
    decode.resize(1 + 32, 1);
    const auto d = run_chunks(2, decode);
    const int64_t V = fixture().cfg.vocab_size;
    expect_matches_cpu(std::vector<float>(d.begin() + 160 * V, d.end()), 160, 32, "decode 1-token steps");
    EXPECT_GT(fixture().model->n_graphs(), 0) << "1-token steps should have been captured as CUDA graphs";
    // The same steps without graphs (launch by launch) must agree as well.
    fixture().model->set_cuda_graphs(false);
    std::vector<int64_t> verify(1, 150);
    for (int i = 0; i < 14; ++i) verify.push_back(3);
    const auto v = run_chunks(3, verify);
    fixture().model->set_cuda_graphs(true);
    expect_matches_cpu(std::vector<float>(v.begin() + 150 * V, v.end()), 150, 42, "verify 3-token steps, no graphs");
}

// Decode through each combination of the GEMV kernels and the many-token paths (grouped cuBLAS
// experts, cuBLASLt GEMM linears): all must meet the bars, so a fault is pinned to one path.
TEST(GpuModel, DecodeThroughEveryKernelPathMatchesCpuReference) {
    ONECARD_REQUIRE_GPU();
    Fixture& f = fixture();
    const int64_t V = f.cfg.vocab_size;
    for (int mask = 0; mask < 4; ++mask) {
        const bool moe_gemv = mask & 1, lin_gemv = mask & 2;
        f.model->set_decode_paths(moe_gemv ? GpuModel::ExpertPath::Gemv : GpuModel::ExpertPath::Grouped,
                                  lin_gemv ? GpuModel::LinearPath::Gemv : GpuModel::LinearPath::Gemm);
        std::vector<int64_t> steps(1, 176);
        steps.resize(1 + 16, 1);
        const auto d = run_chunks(2, steps);
        const std::string path = std::string("decode, experts ") + (moe_gemv ? "gemv" : "grouped") + ", linears " +
                                 (lin_gemv ? "gemv" : "gemm");
        expect_matches_cpu(std::vector<float>(d.begin() + 176 * V, d.end()), 176, 16, path.c_str());
    }
    f.model->set_decode_paths(GpuModel::ExpertPath::Gemv, GpuModel::LinearPath::Gemv);
    f.model->check_integrity();
    f.pool->check_integrity();
}

// Many-token steps on the grouped MXFP4 GEMV (GpuModelOptions::moe_gemv_max_tokens raised from 64 to
// 512, as serve's auto bound does with every expert on the GPU): a 192-token prefill and chunks of
// 64 + 61 + 67 tokens, which the fixture's model sends through MoeExperts' GEMMs, meet the same bars.
TEST(GpuModel, ManyTokenStepsOnTheExpertGemvMatchCpuReference) {
    ONECARD_REQUIRE_GPU();
    Fixture& f = fixture();
    GpuModelOptions mo;
    mo.max_num_batched_tokens = 512;
    mo.max_num_seqs = 4;
    mo.max_model_len = 1024;
    mo.moe_gemv_max_tokens = 512;
    GpuModel gemv(f.cfg, f.w, *f.pool, mo, *f.arena);
    expect_matches_cpu(run_chunks(0, {kPrompt}, &gemv), 0, kPrompt, "plain prefill, experts gemv");
    expect_matches_cpu(run_chunks(1, {64, 61, 67}, &gemv), 0, kPrompt, "chunked prefill, experts gemv");
    gemv.check_integrity();
}

TEST(GpuModel, TwoSequencesInOneStepMatchCpuReference) {
    ONECARD_REQUIRE_GPU();
    Fixture& f = fixture();
    const int64_t V = f.cfg.vocab_size;
    cuda::Stream s;
    // Sequence A: the whole prompt in slot 0; sequence B: its first 100 tokens in slot 1 (causal, so
    // B's rows equal A's first 100 rows of the CPU reference), then both decode together.
    const auto bt0 = blocks_for(0), bt1 = blocks_for(2);
    GpuStepSeq q[2];
    q[0].slot = 0;
    q[0].block_table = bt0;
    q[0].tokens = std::span<const int32_t>(f.tokens).first(150);
    q[1].slot = 1;
    q[1].block_table = bt1;
    q[1].tokens = std::span<const int32_t>(f.tokens).first(90);
    const float* d = f.model->step(q, LogitRows::All, s.get());
    std::vector<float> rows(static_cast<size_t>(240 * V));
    s.sync();
    cuda::copy_to_host(rows.data(), d, rows.size() * 4);
    expect_matches_cpu(std::vector<float>(rows.begin(), rows.begin() + 150 * V), 0, 150, "batched prefill A");
    expect_matches_cpu(std::vector<float>(rows.begin() + 150 * V, rows.end()), 0, 90, "batched prefill B");
    // Decode both together for 10 steps: A at 150.., B at 90.. (both positions have CPU rows).
    std::vector<float> a_rows, b_rows;
    for (int64_t t = 0; t < 10; ++t) {
        q[0].start_pos = 150 + t;
        q[0].tokens = std::span<const int32_t>(f.tokens).subspan(static_cast<size_t>(150 + t), 1);
        q[0].want_logits = true;
        q[1].start_pos = 90 + t;
        q[1].tokens = std::span<const int32_t>(f.tokens).subspan(static_cast<size_t>(90 + t), 1);
        q[1].want_logits = true;
        const float* dd = f.model->step(q, LogitRows::Last, s.get());
        std::vector<float> r(static_cast<size_t>(2 * V));
        s.sync();
        cuda::copy_to_host(r.data(), dd, r.size() * 4);
        a_rows.insert(a_rows.end(), r.begin(), r.begin() + V);
        b_rows.insert(b_rows.end(), r.begin() + V, r.end());
    }
    expect_matches_cpu(a_rows, 150, 10, "batched decode A");
    expect_matches_cpu(b_rows, 90, 10, "batched decode B");
}

}  // namespace
}  // namespace onecard

#else
TEST(GpuModel, NeedsCuda) {
    GTEST_SKIP() << "built without the CUDA backend (ONECARD_CUDA=OFF)";
}
#endif
