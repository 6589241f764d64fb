// Routed experts for many tokens (backend/cuda/ops/moe_experts.cuh) and the FP8 1×128 round trip.
// Oracle: the expert loop of model/layer_moe.cpp (detail::moe_forward), restated below for a given
// routing and both weight placements with the same CPU functions (cpu::dequant_mxfp4,
// cpu::fp8_quant_dequant, cpu::matmul_nt, cpu::swiglu_clamped). A CPU-only test proves the
// restatement equals detail::moe_forward in Numerics::Reference bit for bit, so the GPU is compared
// with the model's own numerics.
// Tolerances: fp8_round_1x128 bit-exact (same scale rule, E4M3 round-to-nearest-even, result exact in
// bf16). MoeExperts: relative L2 ≤ 1e-2 and worst element ≤ 2e-2 of max|ref|, against the loop with
// the GPU's bf16 storage points (gate/up, the weighted SwiGLU output, each expert row: the decode
// GEMV path's, which MoeExperts now shares). The GPU multiplies the same values (FP8-rounded bf16
// activations, E2M1·2^k weights exact in bf16) with fp32 accumulation in cuBLAS's order, so the
// differences are fp32 summation order (~1e-6 relative), the rare bf16 or FP8 rounding it tips
// over an edge, and the final bf16 rounding (≈1.1e-3 relative rms): expected ≈2e-3. A path that
// skipped a storage point (say gate/up left in fp32) moves ~1.5% of h by an FP8 step (≈1.7e-2
// relative L2), which this bound rejects.
#include "gpu_test_util.h"

#include "backend/cpu/linear.h"
#include "backend/cpu/moe.h"
#include "backend/cpu/quant_sim.h"
#include "core/fp_formats.h"
#include "model/block_forward.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

namespace onecard {
namespace {

// All routed experts of a layer in the checkpoint's MXFP4 layout.
struct MxExperts {
    int64_t n_experts = 0, dim = 0, inter = 0;
    std::vector<uint8_t> w1, s1, w3, s3, w2, s2;  // w1/w3 [E, F, D/2] + [E, F, D/32]; w2 [E, D, F/2] + [E, D, F/32]
};

// Random codes; scales 2^-ceil(log2 √k) or twice that, so that w·x has a std of a few units and the
// SwiGLU clamp at 10 is reached by some elements, not most.
MxExperts random_experts(std::mt19937& rng, int64_t E, int64_t D, int64_t F) {
    MxExperts w{E, D, F, {}, {}, {}, {}, {}, {}};
    std::uniform_int_distribution<int> byte(0, 255), coin(0, 1);
    auto fill = [&](std::vector<uint8_t>& packed, std::vector<uint8_t>& scale, int64_t rows, int64_t k) {
        packed.resize(static_cast<size_t>(E * rows * k / 2));
        scale.resize(static_cast<size_t>(E * rows * k / 32));
        for (auto& b : packed) b = static_cast<uint8_t>(byte(rng));
        const int base = 127 - static_cast<int>(std::ceil(std::log2(std::sqrt(static_cast<double>(k)))));
        for (auto& s : scale) s = static_cast<uint8_t>(base + coin(rng));
    };
    fill(w.w1, w.s1, F, D);
    fill(w.w3, w.s3, F, D);
    fill(w.w2, w.s2, D, F);
    return w;
}

struct Routing {
    std::vector<int32_t> experts;  // [n, K]
    std::vector<float> weights;    // [n, K]
};

// Learned routing of random logits through the CPU router (any valid routing would do).
Routing random_routing(std::mt19937& rng, int64_t n, int64_t E, int64_t K) {
    std::normal_distribution<float> d(0.0f, 2.0f);
    std::vector<float> logits(static_cast<size_t>(n * E)), scores(static_cast<size_t>(n * E)), bias(E);
    for (auto& v : logits) v = d(rng);
    for (auto& v : bias) v = 0.1f * d(rng);
    cpu::sqrtsoftplus(logits.data(), n * E, scores.data());
    Routing r{std::vector<int32_t>(static_cast<size_t>(n * K)), std::vector<float>(static_cast<size_t>(n * K))};
    for (int64_t t = 0; t < n; ++t)
        cpu::route_topk(scores.data() + t * E, bias.data(), E, K, 1.5f, r.experts.data() + t * K,
                        r.weights.data() + t * K);
    return r;
}

struct ExpertOutputs {
    std::vector<float> weight_before_w2;  // [n, D] REF: h·w rounded to FP8, then w2
    std::vector<float> weight_after_w2;   // [n, D] HF: w·(w2 · fp8(h))
};

// layer_moe.cpp's routed-expert loop in Numerics::Reference (apply_linear of a quantised linear =
// FP8 1×128 round trip of each input row, then cpu::matmul_nt), for both weight placements; with
// bf16_storage, rounded where DeepSeekV4::set_bf16_storage rounds it (the GPU's storage points: gate
// and up, the weighted SwiGLU output before its FP8 rounding, each expert output row).
ExpertOutputs cpu_expert_loop(const MxExperts& w, const std::vector<float>& xn, const Routing& r, int64_t n, int64_t K,
                              float limit, bool bf16_storage = false) {
    auto store = [&](std::vector<float>& v) {
        if (bf16_storage)
            for (float& x : v) x = round_bf16(x);
    };
    const int64_t D = w.dim, F = w.inter, E = w.n_experts;
    ExpertOutputs out{std::vector<float>(static_cast<size_t>(n * D), 0.0f),
                      std::vector<float>(static_cast<size_t>(n * D), 0.0f)};
    for (int64_t e = 0; e < E; ++e) {
        std::vector<int64_t> rows;
        std::vector<float> row_w;
        for (int64_t t = 0; t < n; ++t)
            for (int64_t k = 0; k < K; ++k)
                if (r.experts[t * K + k] == e) {
                    rows.push_back(t);
                    row_w.push_back(r.weights[t * K + k]);
                }
        if (rows.empty()) continue;
        const int64_t m = static_cast<int64_t>(rows.size());
        const auto w1 = cpu::dequant_mxfp4(w.w1.data() + e * F * D / 2, w.s1.data() + e * F * D / 32, F, D);
        const auto w3 = cpu::dequant_mxfp4(w.w3.data() + e * F * D / 2, w.s3.data() + e * F * D / 32, F, D);
        const auto w2 = cpu::dequant_mxfp4(w.w2.data() + e * D * F / 2, w.s2.data() + e * D * F / 32, D, F);
        std::vector<float> xs(static_cast<size_t>(m * D));  // [m, D]
        for (int64_t i = 0; i < m; ++i) {
            std::copy(xn.begin() + rows[i] * D, xn.begin() + (rows[i] + 1) * D, xs.begin() + i * D);
            cpu::fp8_quant_dequant(xs.data() + i * D, D, 128);
        }
        std::vector<float> gate(static_cast<size_t>(m * F)), up(gate.size()), h(gate.size());  // [m, F]
        cpu::matmul_nt(xs.data(), w1.data(), gate.data(), m, D, F);
        cpu::matmul_nt(xs.data(), w3.data(), up.data(), m, D, F);
        store(gate);
        store(up);
        cpu::swiglu_clamped(gate.data(), up.data(), m * F, limit, h.data());
        std::vector<float> hw = h, y(static_cast<size_t>(m * D));
        for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < F; ++j) hw[i * F + j] *= row_w[i];
        store(hw);
        for (int64_t i = 0; i < m; ++i) cpu::fp8_quant_dequant(hw.data() + i * F, F, 128);
        cpu::matmul_nt(hw.data(), w2.data(), y.data(), m, F, D);
        store(y);
        for (int64_t i = 0; i < m; ++i)
            for (int64_t d = 0; d < D; ++d) out.weight_before_w2[rows[i] * D + d] += y[i * D + d];
        store(h);
        for (int64_t i = 0; i < m; ++i) cpu::fp8_quant_dequant(h.data() + i * F, F, 128);
        cpu::matmul_nt(h.data(), w2.data(), y.data(), m, F, D);
        store(y);
        for (int64_t i = 0; i < m; ++i)
            for (int64_t d = 0; d < D; ++d) out.weight_after_w2[rows[i] * D + d] += y[i * D + d] * row_w[i];
    }
    return out;
}

std::vector<float> random_values(std::mt19937& rng, size_t n, float sigma) {
    std::normal_distribution<float> d(0.0f, sigma);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

// Runs on the CPU (CI): the restated loop is the model's moe_forward. The router is moe_forward's
// own (fp32 gate matmul, sqrtsoftplus, route_topk), recomputed here the same way; the shared expert
// has w2 = 0 so moe_forward's output is exactly the routed sum.
TEST(MoeExpertOracle, RestatedLoopEqualsMoeForwardReference) {
    std::mt19937 rng(31);
    const int64_t D = 512, F = 256, E = 8, K = 2, n = 37;
    const MxExperts mx = random_experts(rng, E, D, F);
    ModelConfig cfg;
    cfg.vocab_size = 100;
    cfg.hidden_size = D;
    cfg.n_routed_experts = E;
    cfg.num_experts_per_tok = K;
    cfg.moe_intermediate_size = F;
    cfg.routed_scaling_factor = 1.5;
    cfg.swiglu_limit = 10.0;
    DenseMoE moe;
    moe.gate = {random_values(rng, static_cast<size_t>(E * D), 0.05f), E, D, false};
    moe.bias = random_values(rng, static_cast<size_t>(E), 0.1f);
    for (int64_t e = 0; e < E; ++e) {
        DenseExpert ex;
        ex.w1 = {cpu::dequant_mxfp4(mx.w1.data() + e * F * D / 2, mx.s1.data() + e * F * D / 32, F, D), F, D, true};
        ex.w3 = {cpu::dequant_mxfp4(mx.w3.data() + e * F * D / 2, mx.s3.data() + e * F * D / 32, F, D), F, D, true};
        ex.w2 = {cpu::dequant_mxfp4(mx.w2.data() + e * D * F / 2, mx.s2.data() + e * D * F / 32, D, F), D, F, true};
        moe.experts.push_back(std::move(ex));
    }
    moe.shared.w1 = {random_values(rng, static_cast<size_t>(F * D), 0.05f), F, D, true};
    moe.shared.w3 = {random_values(rng, static_cast<size_t>(F * D), 0.05f), F, D, true};
    moe.shared.w2 = {std::vector<float>(static_cast<size_t>(D * F), 0.0f), D, F, true};
    const auto xn = random_values(rng, static_cast<size_t>(n * D), 1.0f);

    const std::vector<float> no_rope;
    const detail::BlockContext ctx{cfg, Numerics::Reference, no_rope, no_rope};
    std::vector<float> model_out(static_cast<size_t>(n * D));
    detail::moe_forward(ctx, moe, false, 0, nullptr, xn.data(), n, model_out.data());

    std::vector<float> logits(static_cast<size_t>(n * E)), scores(logits.size());
    cpu::matmul_nt(xn.data(), moe.gate.w.data(), logits.data(), n, D, E);
    cpu::sqrtsoftplus(logits.data(), n * E, scores.data());
    Routing r{std::vector<int32_t>(static_cast<size_t>(n * K)), std::vector<float>(static_cast<size_t>(n * K))};
    for (int64_t t = 0; t < n; ++t)
        cpu::route_topk(scores.data() + t * E, moe.bias.data(), E, K, 1.5f, r.experts.data() + t * K,
                        r.weights.data() + t * K);
    const auto loop = cpu_expert_loop(mx, xn, r, n, K, 10.0f);
    double max_abs_out = 0.0;
    for (size_t i = 0; i < model_out.size(); ++i) {
        ASSERT_EQ(loop.weight_before_w2[i], model_out[i]) << "element " << i;
        max_abs_out = std::max(max_abs_out, std::fabs(static_cast<double>(model_out[i])));
    }
    // The same with the GPU's bf16 storage points (the oracle of the GPU tests below): moe_forward
    // rounds the sum once at the end (StoragePoint::MoeResult), the restatement leaves that to the
    // comparison.
    {
        detail::BlockContext sctx{cfg, Numerics::Reference, no_rope, no_rope};
        sctx.storage = StoragePoints::all();
        std::vector<float> storage_out(static_cast<size_t>(n * D));
        detail::moe_forward(sctx, moe, false, 0, nullptr, xn.data(), n, storage_out.data());
        const auto sloop = cpu_expert_loop(mx, xn, r, n, K, 10.0f, true);
        size_t n_diff = 0;
        for (size_t i = 0; i < storage_out.size(); ++i) {
            ASSERT_EQ(round_bf16(sloop.weight_before_w2[i]), storage_out[i]) << "bf16 storage, element " << i;
            n_diff += storage_out[i] != round_bf16(loop.weight_before_w2[i]);
        }
        EXPECT_GT(n_diff, 0u);  // the storage points really change something
    }
    EXPECT_GT(max_abs_out, 1.0);  // the comparison is not between two zero vectors
    // The two weight placements differ by more than the GPU tolerance, so the GPU tests tell them apart.
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < model_out.size(); ++i) {
        const double d = static_cast<double>(loop.weight_after_w2[i]) - loop.weight_before_w2[i];
        num += d * d;
        den += static_cast<double>(loop.weight_before_w2[i]) * loop.weight_before_w2[i];
    }
    std::printf("placement difference: rel L2 %.4g\n", std::sqrt(num / den));
    EXPECT_GT(std::sqrt(num / den), 1e-2);
}

}  // namespace
}  // namespace onecard

#ifdef ONECARD_HAVE_CUDA

#include "backend/cuda/ops/moe_experts.cuh"
#include "backend/cuda/ops/mxfp4_layout.cuh"
#include "core/error.h"

namespace onecard {
namespace {

TEST(CudaFp8Round1x128, BitExactVsCpuOnBf16Values) {
    ONECARD_REQUIRE_GPU();
    std::mt19937 rng(41);
    const int64_t rows = 37, k = 512, ld = 640;  // padded rows: columns [k, ld) must stay untouched
    std::vector<float> x = test::random_bf16_values(rng, static_cast<size_t>(rows * ld));
    // Per-block magnitudes from 2^-24 (below the 1e-4 amax clamp) to 2^12, and one block of 448·2^j
    // edge values (the E4M3 maximum must survive the round trip unchanged).
    std::uniform_int_distribution<int> ex(-24, 12);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t b = 0; b < k / 128; ++b) {
            const int e = ex(rng);
            for (int64_t i = 0; i < 128; ++i)
                x[r * ld + b * 128 + i] = round_bf16(std::ldexp(x[r * ld + b * 128 + i], e));
        }
    for (int64_t i = 0; i < 128; i += 7) x[3 * ld + i] = 448.0f * (i % 2 ? 1.0f : -0.5f);
    std::vector<float> ref = x;
    for (int64_t r = 0; r < rows; ++r) cpu::fp8_quant_dequant(ref.data() + r * ld, k, 128);

    cuda::DeviceArena arena(size_t{8} << 20, "fp8 round test");
    auto* dx = test::upload(arena, test::to_bf16_bits(x), "x");
    cuda::Stream s;
    cuda::fp8_round_1x128(reinterpret_cast<__nv_bfloat16*>(dx), rows, k, s.get(), ld);
    s.sync();
    const auto y = test::from_bf16_bits(cuda::copy_to_host(dx, x.size()));
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < ld; ++c) {
            const size_t i = static_cast<size_t>(r * ld + c);
            if (c < k)
                ASSERT_EQ(y[i], ref[i]) << "row " << r << " col " << c << " in " << x[i];
            else
                ASSERT_EQ(y[i], x[i]) << "padding changed at row " << r << " col " << c;
        }
}

struct ExpertsCase {
    int64_t dim = 0, inter = 0, n_experts = 0, top_k = 0;
    std::vector<int64_t> n_tokens;  // one run each, on the same MoeExperts object
    uint32_t seed = 0;
};

// E experts' [n, k] matrices (checkpoint layout, back to back) uploaded in the tiled GPU layout.
const uint8_t* upload_tiled(cuda::DeviceArena& arena, const std::vector<uint8_t>& codes,
                            const std::vector<uint8_t>& scales, int64_t E, int64_t n, int64_t k,
                            const uint8_t** scales_out) {
    std::vector<uint8_t> tc(codes.size()), ts(scales.size());
    const size_t cb = static_cast<size_t>(n * k / 2), sb = static_cast<size_t>(n * k / 32);
    for (int64_t e = 0; e < E; ++e)
        cuda::mxfp4_tile_host(codes.data() + static_cast<size_t>(e) * cb, scales.data() + static_cast<size_t>(e) * sb,
                              n, k, tc.data() + static_cast<size_t>(e) * cb, ts.data() + static_cast<size_t>(e) * sb);
    *scales_out = test::upload(arena, ts, "scales");
    return test::upload(arena, tc, "codes");
}

cuda::MxExpertWeights upload_experts(cuda::DeviceArena& arena, const MxExperts& mx, int64_t E, int64_t D, int64_t F) {
    cuda::MxExpertWeights w;
    w.n_experts = E;
    w.dim = D;
    w.inter = F;
    w.w1 = upload_tiled(arena, mx.w1, mx.s1, E, F, D, &w.s1);
    w.w3 = upload_tiled(arena, mx.w3, mx.s3, E, F, D, &w.s3);
    w.w2 = upload_tiled(arena, mx.w2, mx.s2, E, D, F, &w.s2);
    return w;
}

void check_moe_experts(const ExpertsCase& c) {
    std::mt19937 rng(c.seed);
    const int64_t D = c.dim, F = c.inter, E = c.n_experts, K = c.top_k;
    const float limit = 10.0f;
    const MxExperts mx = random_experts(rng, E, D, F);
    int64_t max_n = 0;
    for (int64_t n : c.n_tokens) max_n = std::max(max_n, n);
    const size_t scratch_bytes = cuda::MoeExperts::scratch_bytes_for(D, F, max_n * K);
    const size_t weight_bytes = mx.w1.size() * 3 + mx.s1.size() * 3;
    cuda::DeviceArena arena(scratch_bytes + weight_bytes + static_cast<size_t>(max_n * D) * 8 + (size_t{16} << 20),
                            "moe experts test");
    const cuda::MxExpertWeights w = upload_experts(arena, mx, E, D, F);
    void* scratch = arena.alloc(scratch_bytes, "scratch");
    cuda::MoeExperts experts(scratch, scratch_bytes, max_n * K);
    cuda::Stream s;

    for (int64_t n : c.n_tokens) {
        const auto mark = arena.mark();
        const auto x = test::random_bf16_values(rng, static_cast<size_t>(n * D));
        const Routing r = random_routing(rng, n, E, K);
        const ExpertOutputs ref = cpu_expert_loop(mx, x, r, n, K, limit, /*bf16_storage=*/true);

        auto* dx = test::upload(arena, test::to_bf16_bits(x), "x");
        auto* de = test::upload(arena, r.experts, "experts");
        auto* dw = test::upload(arena, r.weights, "weights");
        auto* dout = arena.alloc_n<uint16_t>(static_cast<size_t>(n * D), "out");
        auto* xb = reinterpret_cast<__nv_bfloat16*>(dx);
        cuda::fp8_round_1x128(xb, n, D, s.get());  // the contract: x arrives FP8-rounded
        for (bool before : {true, false}) {
            cuda::fill_bytes(dout, 0xFF, static_cast<size_t>(n * D) * 2);
            experts.run(xb, de, dw, n, K, w, before ? cuda::ExpertWeighting::BeforeW2 : cuda::ExpertWeighting::AfterW2,
                        limit, nullptr, reinterpret_cast<__nv_bfloat16*>(dout), s.get());
            s.sync();
            const auto y = test::from_bf16_bits(cuda::copy_to_host(dout, static_cast<size_t>(n * D)));
            const auto& expect = before ? ref.weight_before_w2 : ref.weight_after_w2;
            EXPECT_LE(test::rel_l2(y, expect), 1e-2) << "n " << n << " D " << D << " before_w2 " << before;
            EXPECT_LE(test::max_err_rel_to_max(y, expect), 2e-2) << "n " << n << " D " << D << " before_w2 " << before;
        }
        arena.release(mark);
    }
}

TEST(CudaMoeExperts, SmallShapeBothPlacementsMatchCpu) {
    ONECARD_REQUIRE_GPU();
    // n = 37 then n = 1 on the same object (second run: 6 of 8 experts get no rows).
    check_moe_experts({.dim = 512, .inter = 256, .n_experts = 8, .top_k = 2, .n_tokens = {37, 1}, .seed = 61});
}

TEST(CudaMoeExperts, FlashLikeShapeBothPlacementsMatchCpu) {
    ONECARD_REQUIRE_GPU();
    check_moe_experts({.dim = 4096, .inter = 2048, .n_experts = 16, .top_k = 6, .n_tokens = {64}, .seed = 62});
}

TEST(CudaMoeExperts, RefusesTooLittleScratchOrTooManyRows) {
    ONECARD_REQUIRE_GPU();
    const int64_t D = 512, F = 256, E = 8, K = 2, n = 4;
    std::mt19937 rng(63);
    const MxExperts mx = random_experts(rng, E, D, F);
    cuda::DeviceArena arena(size_t{32} << 20, "moe experts refusal test");
    const cuda::MxExpertWeights w = upload_experts(arena, mx, E, D, F);
    const Routing r = random_routing(rng, n, E, K);
    auto* de = test::upload(arena, r.experts, "experts");
    auto* dw = test::upload(arena, r.weights, "weights");
    auto* dx = arena.alloc_n<__nv_bfloat16>(static_cast<size_t>(n * D), "x");
    auto* dout = arena.alloc_n<__nv_bfloat16>(static_cast<size_t>(n * D), "out");
    cuda::Stream s;
    const size_t need = cuda::MoeExperts::scratch_bytes_for(D, F, n * K);
    void* scratch = arena.alloc(need, "scratch");
    {
        cuda::MoeExperts short_scratch(scratch, need - 1024, n * K);
        EXPECT_THROW(
            short_scratch.run(dx, de, dw, n, K, w, cuda::ExpertWeighting::BeforeW2, 10.0f, nullptr, dout, s.get()),
            Error);
    }
    {
        cuda::MoeExperts few_rows(scratch, need, n * K - 1);
        EXPECT_THROW(few_rows.run(dx, de, dw, n, K, w, cuda::ExpertWeighting::BeforeW2, 10.0f, nullptr, dout, s.get()),
                     Error);
    }
}

}  // namespace
}  // namespace onecard

#endif  // ONECARD_HAVE_CUDA
