// Hyper-connection parity: hc_pre (mixes + Sinkhorn + collapse) and hc_post on the GPU vs the CPU
// functions on the same fp32 streams (values with all 24 mantissa bits). Tolerances: pre/post/comb are
// fp32 results of a 16384-long reduction in another order: |Δ| ≤ 1e-4 (they are O(1)); the bf16
// collapse within half a bf16 ulp of the fp32 reference plus 1e-3 absolute; hc_post's fp32 streams
// within 2^-20 relative plus 1e-6 (five fused terms in another order). Paths: the split-K path (partial mixes in a
// scratch, then a per-token finish) at decode sizes n = 1, 7, 8, 64 and prefill sizes n = 300, 2048 at
// the Flash width D = 4096 (tiles of 1..32 tokens, a partial last tile, 4..256 slices); the fp32 GEMM
// path of prefill steps (n = 512, 2048); the scratch-less reference kernel; the fallback for a width that is not a
// multiple of 8 (hc_post's scalar kernel too); a CUDA-graph replay of the split path; the fused FP8 copy of x (bytes
// equal to quantize_fp8_1x128).
#include "gpu_test_util.h"

#ifdef ONECARD_HAVE_CUDA

#include "backend/cpu/hyper_connection.h"
#include "backend/cpu/norm.h"
#include "backend/cuda/ops/bf16_gemm.cuh"
#include "backend/cuda/ops/fp8_quant.cuh"
#include "backend/cuda/ops/hyper_connection.cuh"

#include <cstdio>

namespace onecard {
namespace {

constexpr int64_t kHc = 4;

void expect_bf16_close(const std::vector<float>& got, const std::vector<float>& ref, const char* what) {
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_TRUE(std::isfinite(got[i])) << what << ": unwritten element " << i;
        ASSERT_LE(std::fabs(got[i] - ref[i]), std::ldexp(std::fabs(ref[i]), -8) * 1.01f + 1e-3f) << what << " " << i;
    }
}

void expect_f32_close(const std::vector<float>& got, const std::vector<float>& ref, const char* what) {
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < got.size(); ++i)
        ASSERT_LE(std::fabs(got[i] - ref[i]), std::ldexp(std::fabs(ref[i]), -20) + 1e-6f) << what << " " << i;
}

// Residual streams: N(0, 1) fp32 values, not bf16-representable (the kernels must read all their bits).
std::vector<float> random_streams(std::mt19937& rng, size_t n) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> v(n);
    for (auto& x : v) x = nd(rng);
    return v;
}

// kSplit: the scratch (split-K kernel + finish); kGemm: the scratch and a cuBLAS handle (the mixes as one
// fp32 GEMM from kHcGemmMinTokens tokens); kNoScratch: the reference kernel.
enum class PrePath { kSplit, kGemm, kNoScratch };

void check_hc(int64_t n_tok, int64_t dim, uint32_t seed, PrePath path = PrePath::kSplit) {
    std::mt19937 rng(seed);
    const int64_t flat = kHc * dim, n_mix = (2 + kHc) * kHc;
    const auto X = random_streams(rng, static_cast<size_t>(n_tok * flat));
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> fn(static_cast<size_t>(n_mix * flat)), base(static_cast<size_t>(n_mix));
    for (auto& v : fn) v = nd(rng) * 2.0f / std::sqrt(static_cast<float>(flat));
    for (auto& v : base) v = nd(rng);
    const std::vector<float> scale = {0.8f, 1.3f, 2.1f};
    cpu::HCParams p;
    p.hc = kHc;
    p.dim = dim;

    std::vector<float> mixes(static_cast<size_t>(n_tok * n_mix));
    cpu::hc_mixes(X.data(), fn.data(), n_tok, n_mix, p, mixes.data());
    std::vector<float> pre(static_cast<size_t>(n_tok * kHc)), post(pre.size()), comb(static_cast<size_t>(n_tok * 16));
    std::vector<float> x_ref(static_cast<size_t>(n_tok * dim));
    for (int64_t t = 0; t < n_tok; ++t) {
        cpu::hc_split_sinkhorn(mixes.data() + t * n_mix, scale.data(), base.data(), p, pre.data() + t * kHc,
                               post.data() + t * kHc, comb.data() + t * 16);
        cpu::hc_collapse(X.data() + t * flat, pre.data() + t * kHc, p, x_ref.data() + t * dim);
    }

    cuda::HcDims hd;
    hd.dim = dim;
    const size_t scratch_floats = cuda::hc_pre_scratch_floats(n_tok, hd);
    const size_t arena_bytes = static_cast<size_t>(n_tok * flat * 4 + 2 * n_tok * dim * 2 + n_mix * flat * 4) +
                               scratch_floats * 4 + static_cast<size_t>(2 * n_tok * dim + n_tok * dim / 16) +
                               (size_t{16} << 20);  // + the two FP8 copies of x and their scales
    cuda::DeviceArena arena(arena_bytes, "hc test");
    auto* dX = test::upload(arena, X, "X");
    auto* dfn = test::upload(arena, fn, "fn");
    auto* dscale = test::upload(arena, scale, "scale");
    auto* dbase = test::upload(arena, base, "base");
    auto* dx = arena.alloc_n<uint16_t>(x_ref.size(), "x");
    auto* dpre = arena.alloc_n<float>(pre.size(), "pre");
    auto* dpost = arena.alloc_n<float>(post.size(), "post");
    auto* dcomb = arena.alloc_n<float>(comb.size(), "comb");
    auto* da = arena.alloc_n<uint16_t>(static_cast<size_t>(n_tok * dim), "a");
    for (auto [ptr, bytes] : {std::pair<void*, size_t>{dx, x_ref.size() * 2},
                              {dpre, pre.size() * 4},
                              {dpost, post.size() * 4},
                              {dcomb, comb.size() * 4}})
        cuda::fill_bytes(ptr, 0xFF, bytes);
    auto* dscratch = arena.alloc_n<float>(scratch_floats, "scratch");
    cuda::fill_bytes(dscratch, 0xFF, scratch_floats * 4);  // every partial read must have been written
    cuda::Stream s;
    // The call under test; the split path gets the scratch, the reference path none.
    cuda::HcPreArgs args;
    args.X = dX;
    args.fn = dfn;
    args.scale = dscale;
    args.base = dbase;
    args.n_tok = n_tok;
    args.x = reinterpret_cast<__nv_bfloat16*>(dx);
    args.pre = dpre;
    args.post = dpost;
    args.comb = dcomb;
    cuda::Bf16Gemm gemm(nullptr, 0);
    if (path != PrePath::kNoScratch) {
        args.scratch = dscratch;
        args.scratch_floats = scratch_floats;
    }
    if (path == PrePath::kGemm) args.gemm = &gemm;
    cuda::hc_pre(args, hd, s.get());
    s.sync();
    const auto g_pre = cuda::copy_to_host(dpre, pre.size());
    const auto g_post = cuda::copy_to_host(dpost, post.size());
    const auto g_comb = cuda::copy_to_host(dcomb, comb.size());
    for (size_t i = 0; i < pre.size(); ++i) {
        EXPECT_NEAR(g_pre[i], pre[i], 1e-4) << "pre " << i;
        EXPECT_NEAR(g_post[i], post[i], 1e-4) << "post " << i;
    }
    for (size_t i = 0; i < comb.size(); ++i) EXPECT_NEAR(g_comb[i], comb[i], 1e-4) << "comb " << i;
    expect_bf16_close(test::from_bf16_bits(cuda::copy_to_host(dx, x_ref.size())), x_ref, "collapsed x");

    // The same with the sub-block's RMSNorm fused (gpu_model passes attn_norm / ffn_norm): the CPU norm
    // of the bf16 collapse, times a random weight.
    {
        const auto w = test::random_bf16_values(rng, static_cast<size_t>(dim));
        auto* dw = test::upload(arena, test::to_bf16_bits(w), "norm w");
        std::vector<float> xb = x_ref, nref(x_ref.size());
        for (auto& v : xb) v = test::from_bf16_bits(test::to_bf16_bits(std::vector<float>{v}))[0];
        cpu::rmsnorm(xb.data(), w.data(), nref.data(), n_tok, dim, 1e-6f);
        cuda::fill_bytes(dx, 0xFF, x_ref.size() * 2);
        args.rms_weight = reinterpret_cast<const __nv_bfloat16*>(dw);
        args.rms_eps = 1e-6f;
        cuda::hc_pre(args, hd, s.get());
        s.sync();
        // A one-ulp difference in the bf16 collapse (fp32 sums in another order) moves the normalised
        // value by up to two ulps after its own rounding: 2^-6 relative.
        const auto got = test::from_bf16_bits(cuda::copy_to_host(dx, x_ref.size()));
        for (size_t i = 0; i < got.size(); ++i) {
            ASSERT_TRUE(std::isfinite(got[i])) << "normalised x: unwritten element " << i;
            ASSERT_LE(std::fabs(got[i] - nref[i]), std::ldexp(std::fabs(nref[i]), -6) + 2e-3f) << "normalised x " << i;
        }
        // And with x's FP8 1x128 copy written by the same call: byte-equal to quantize_fp8_1x128 of
        // the x it stored (the decode GEMVs read it instead of quantising x themselves).
        if (dim % 128 == 0) {
            const size_t nq = static_cast<size_t>(n_tok * dim), ns = nq / 128;
            auto* dq = arena.alloc_n<uint8_t>(nq, "xq");
            auto* dqs = arena.alloc_n<float>(ns, "xs");
            auto* dq2 = arena.alloc_n<uint8_t>(nq, "xq ref");
            auto* dqs2 = arena.alloc_n<float>(ns, "xs ref");
            cuda::fill_bytes(dq, 0xFF, nq);
            cuda::fill_bytes(dqs, 0xFF, ns * 4);
            cuda::HcPreArgs with_fp8 = args;
            with_fp8.xq = dq;
            with_fp8.xs = dqs;
            cuda::hc_pre(with_fp8, hd, s.get());
            cuda::quantize_fp8_1x128(reinterpret_cast<const __nv_bfloat16*>(dx), dq2, dqs2, n_tok, dim,
                                     cuda::ActScaleLayout::RowMajor, s.get());
            s.sync();
            ASSERT_EQ(cuda::copy_to_host(dq, nq), cuda::copy_to_host(dq2, nq)) << "fused FP8 bytes";
            ASSERT_EQ(cuda::copy_to_host(dqs, ns), cuda::copy_to_host(dqs2, ns)) << "fused FP8 scales";
            EXPECT_EQ(test::from_bf16_bits(cuda::copy_to_host(dx, x_ref.size())), got) << "x unchanged by the copy";
        }
    }

    // hc_post in place on the GPU streams, with the CPU's post/comb uploaded so the check isolates the op.
    const auto a = test::random_bf16_values(rng, static_cast<size_t>(n_tok * dim));
    cuda::copy_to_device(da, test::to_bf16_bits(a));
    cuda::copy_to_device(dpost, post);
    cuda::copy_to_device(dcomb, comb);
    cuda::hc_post(reinterpret_cast<const __nv_bfloat16*>(da), dX, dpost, dcomb, dX, n_tok, hd, s.get());
    s.sync();
    std::vector<float> X_ref = X;
    for (int64_t t = 0; t < n_tok; ++t)
        cpu::hc_post(a.data() + t * dim, post.data() + t * kHc, comb.data() + t * 16, p, X_ref.data() + t * flat);
    expect_f32_close(cuda::copy_to_host(dX, X.size()), X_ref, "hc_post streams");
}

TEST(CudaHyperConnection, FlashWidthMatchesCpu) {
    ONECARD_REQUIRE_GPU();
    check_hc(3, 4096, 61);
}

TEST(CudaHyperConnection, SmallWidthManyTokensMatchesCpu) {
    ONECARD_REQUIRE_GPU();
    check_hc(17, 320, 62);
}

TEST(CudaHyperConnection, FlashWidthDecodeSizesMatchCpu) {
    ONECARD_REQUIRE_GPU();
    for (int64_t n : {1, 7, 8, 64}) {
        SCOPED_TRACE(n);
        check_hc(n, 4096, static_cast<uint32_t>(70 + n));
    }
}

TEST(CudaHyperConnection, FlashWidthPrefillSizesMatchCpu) {
    ONECARD_REQUIRE_GPU();
    for (int64_t n : {300, 2048}) {
        SCOPED_TRACE(n);
        check_hc(n, 4096, static_cast<uint32_t>(80 + n));
    }
}

// The mixes through the fp32 GEMM (what gpu_model passes for prefill steps), at its threshold and above.
TEST(CudaHyperConnection, FlashWidthGemmPathMatchesCpu) {
    ONECARD_REQUIRE_GPU();
    for (int64_t n : {cuda::kHcGemmMinTokens, int64_t{2048}}) {
        SCOPED_TRACE(n);
        check_hc(n, 4096, static_cast<uint32_t>(90 + n), PrePath::kGemm);
    }
}

TEST(CudaHyperConnection, NoScratchReferenceKernelMatchesCpu) {
    ONECARD_REQUIRE_GPU();
    check_hc(5, 4096, 63, PrePath::kNoScratch);
}

TEST(CudaHyperConnection, WidthNotMultipleOf8FallsBackAndMatchesCpu) {
    ONECARD_REQUIRE_GPU();
    check_hc(6, 100, 64);
}

// The split path inside a CUDA graph (decode steps are captured): replay gives the direct run's bits.
TEST(CudaHyperConnection, SplitPathReplaysInCudaGraph) {
    ONECARD_REQUIRE_GPU();
    const int64_t n = 8, dim = 4096, flat = kHc * dim, n_mix = (2 + kHc) * kHc;
    std::mt19937 rng(65);
    const auto X = random_streams(rng, static_cast<size_t>(n * flat));
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> fn(static_cast<size_t>(n_mix * flat)), base(static_cast<size_t>(n_mix));
    for (auto& v : fn) v = nd(rng) * 2.0f / std::sqrt(static_cast<float>(flat));
    for (auto& v : base) v = nd(rng);
    const std::vector<float> scale = {0.8f, 1.3f, 2.1f};
    cuda::HcDims hd;
    hd.dim = dim;
    const size_t scratch_floats = cuda::hc_pre_scratch_floats(64, hd);  // a larger step's buffer serves n = 8
    cuda::DeviceArena arena(size_t{16} << 20, "hc graph test");
    const float* dX = test::upload(arena, X, "X");
    auto* dfn = test::upload(arena, fn, "fn");
    auto* dscale = test::upload(arena, scale, "scale");
    auto* dbase = test::upload(arena, base, "base");
    auto* dx = arena.alloc_n<__nv_bfloat16>(static_cast<size_t>(n * dim), "x");
    auto* dpre = arena.alloc_n<float>(static_cast<size_t>(n * kHc), "pre");
    auto* dpost = arena.alloc_n<float>(static_cast<size_t>(n * kHc), "post");
    auto* dcomb = arena.alloc_n<float>(static_cast<size_t>(n * 16), "comb");
    auto* dscratch = arena.alloc_n<float>(scratch_floats, "scratch");
    cuda::Stream s;
    cuda::HcPreArgs args;
    args.X = dX;
    args.fn = dfn;
    args.scale = dscale;
    args.base = dbase;
    args.n_tok = n;
    args.x = dx;
    args.pre = dpre;
    args.post = dpost;
    args.comb = dcomb;
    args.scratch = dscratch;
    args.scratch_floats = scratch_floats;
    auto run = [&] { cuda::hc_pre(args, hd, s.get()); };
    run();
    s.sync();
    const auto x_direct = cuda::copy_to_host(reinterpret_cast<const uint16_t*>(dx), static_cast<size_t>(n * dim));
    const auto comb_direct = cuda::copy_to_host(dcomb, static_cast<size_t>(n * 16));
    cuda::fill_bytes(dx, 0xFF, static_cast<size_t>(n * dim) * 2);
    cuda::fill_bytes(dcomb, 0xFF, static_cast<size_t>(n * 16) * 4);
    cudaGraph_t g = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeThreadLocal), cudaSuccess);
    run();
    ASSERT_EQ(cudaStreamEndCapture(s.get(), &g), cudaSuccess);
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, s.get()), cudaSuccess);
    s.sync();
    EXPECT_EQ(cuda::copy_to_host(reinterpret_cast<const uint16_t*>(dx), static_cast<size_t>(n * dim)), x_direct);
    EXPECT_EQ(cuda::copy_to_host(dcomb, static_cast<size_t>(n * 16)), comb_direct);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);
}

}  // namespace
}  // namespace onecard

#else
TEST(CudaHyperConnection, Unavailable) {
    GTEST_SKIP() << "built without CUDA (ONECARD_CUDA=OFF)";
}
#endif
