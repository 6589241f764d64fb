// FP8 block-scaled GEMM through cuBLASLt (VEC128_32F activations, BLK128x128_32F weights) vs the
// CPU product of the dequantised operands. Tolerance as for the GEMV: relative L2 ≤ 4e-3, worst
// element ≤ 1e-2 of max|ref|. The probes print which scale layouts and token counts cuBLASLt takes.
#include "fp8_linear_util.h"

#ifdef ONECARD_HAVE_CUDA

#include "backend/cuda/ops/fp8_gemm.cuh"
#include "backend/cuda/ops/fp8_quant.cuh"
#include "core/error.h"

#include <algorithm>
#include <cstdio>

namespace onecard {
namespace {

struct GemmRun {
    std::vector<float> y;
    std::string error;  // cuBLASLt refusal, if any
};

// ws_override: fp32 weight scales laid out by the caller (the probe); otherwise the checkpoint bytes
// are converted on the GPU in `layout`.
GemmRun run_gemm(const test::Fp8LinearCase& c, cuda::Fp8GemmScaleLayout layout,
                 const std::vector<float>* ws_override = nullptr) {
    cuda::DeviceArena arena(size_t{512} << 20, "gemm test");
    const int64_t m = c.m, n = c.n, k = c.k;
    auto* dx = test::upload(arena, test::to_bf16_bits(c.x), "x");
    auto* dw = test::upload(arena, c.w, "w");
    auto* dws8 = test::upload(arena, c.w_scale, "w_scale");
    const size_t n_ws = std::max<size_t>(static_cast<size_t>(cuda::fp8_gemm_weight_scale_floats(n, k)),
                                         ws_override ? ws_override->size() : 0);
    auto* dws = arena.alloc_n<float>(n_ws, "w_scale f32");
    auto* dxq = arena.alloc_n<uint8_t>(c.x.size(), "xq");
    auto* dxs = arena.alloc_n<float>(static_cast<size_t>(m * k / 128), "xs");
    auto* dy = arena.alloc_n<uint16_t>(c.ref.size(), "y");
    const size_t ws_bytes = size_t{32} << 20;
    void* workspace = arena.alloc(ws_bytes, "cublaslt workspace");
    cuda::fill_bytes(dy, 0xFF, c.ref.size() * 2);
    cuda::Stream s;
    if (ws_override)
        cuda::copy_to_device(dws, *ws_override);
    else if (layout.weight_transposed)
        cuda::ue8m0_to_f32(dws8, dws, (n + 127) / 128, k / 128, true, s.get());
    else
        cuda::fp8_gemm_prepare_weight_scales(dws8, dws, n, k, s.get());
    cuda::quantize_fp8_1x128(reinterpret_cast<const __nv_bfloat16*>(dx), dxq, dxs, m, k, layout.act, s.get());
    GemmRun out;
    try {
        cuda::Fp8GemmLt gemm(workspace, ws_bytes);
        gemm.run(dxq, dxs, dw, dws, reinterpret_cast<__nv_bfloat16*>(dy), m, n, k, s.get());
        s.sync();
        out.y = test::from_bf16_bits(cuda::copy_to_host(dy, c.ref.size()));
    } catch (const Error& e) {
        out.error = e.what();
    }
    return out;
}

void check_gemm(int64_t m, int64_t n, int64_t k, uint32_t seed) {
    const auto c = test::make_fp8_linear_case(m, n, k, seed);
    const GemmRun r = run_gemm(c, cuda::kFp8GemmScaleLayout);
    ASSERT_TRUE(r.error.empty()) << r.error;
    EXPECT_LE(test::rel_l2(r.y, c.ref), 4e-3) << "m " << m << " n " << n << " k " << k;
    EXPECT_LE(test::max_err_rel_to_max(r.y, c.ref), 1e-2) << "m " << m << " n " << n << " k " << k;
}

// Scale memory orders, with the leading dimension of the scale matrix dense or padded to 4 floats
// (16 bytes). Non-square block grids (3 × 5 weight blocks) so every wrong order reads wrong scales.
// The second H200 run (docs/results.md) found only [n/128, k/128] with rows padded to 4 floats
// right at 3 × 5; the probe prints all four and checks fp8_gemm_prepare_weight_scales matches.
TEST(CudaFp8Gemm, ScaleLayoutProbe) {
    ONECARD_REQUIRE_GPU();
    const auto c = test::make_fp8_linear_case(64, 384, 640, 41);
    const int64_t nb = 3, kb = 5;
    int n_match = 0;
    for (int variant = 0; variant < 4; ++variant) {
        const bool transposed = variant & 1, padded = variant & 2;
        const int64_t inner = transposed ? nb : kb, outer = transposed ? kb : nb;
        const int64_t ld = padded ? (inner + 3) / 4 * 4 : inner;
        std::vector<float> ws(static_cast<size_t>(outer * ld), 1.0f);
        for (int64_t i = 0; i < nb; ++i)
            for (int64_t j = 0; j < kb; ++j)
                ws[transposed ? j * ld + i : i * ld + j] = ue8m0_to_f32(c.w_scale[i * kb + j]);
        const GemmRun r = run_gemm(c, cuda::kFp8GemmScaleLayout, &ws);
        const double err = r.error.empty() ? test::rel_l2(r.y, c.ref) : INFINITY;
        std::printf("[probe] weight scales %s ld %ld: %s rel_l2 %.3e\n",
                    transposed ? "[k/128, n/128]" : "[n/128, k/128]", static_cast<long>(ld),
                    r.error.empty() ? "ran" : r.error.c_str(), err);
        n_match += err <= 4e-3;
    }
    EXPECT_GE(n_match, 1) << "no scale layout matches the CPU";
    // The layout the op documents and prepares (padded rows) must be the one that matches.
    const GemmRun own = run_gemm(c, cuda::kFp8GemmScaleLayout);
    ASSERT_TRUE(own.error.empty()) << own.error;
    EXPECT_LE(test::rel_l2(own.y, c.ref), 4e-3);
    EXPECT_LE(test::max_err_rel_to_max(own.y, c.ref), 1e-2);
}

TEST(CudaFp8Gemm, PrefillShapesMatchCpu) {
    ONECARD_REQUIRE_GPU();
    check_gemm(256, 1024, 4096, 42);  // wq_a at a 256-token chunk
    check_gemm(128, 4096, 2048, 43);  // shared-expert w2
}

// cuBLASLt's block-scaled kernels take m (tokens) in multiples of 4 only (probed on the H200:
// m = 37 refused, 36/40/48 run): other counts are refused by our check with a message naming the fix.
TEST(CudaFp8Gemm, TokenCountsMultipleOfFourMatchOthersRefused) {
    ONECARD_REQUIRE_GPU();
    for (const int64_t m : {36, 37, 40, 52}) {
        const auto c = test::make_fp8_linear_case(m, 512, 1024, static_cast<uint32_t>(44 + m));
        const GemmRun r = run_gemm(c, cuda::kFp8GemmScaleLayout);
        std::printf("[probe] m %ld: %s\n", static_cast<long>(m), r.error.empty() ? "supported" : "refused");
        if (m % cuda::kFp8GemmRowMultiple == 0) {
            ASSERT_TRUE(r.error.empty()) << r.error;
            EXPECT_LE(test::rel_l2(r.y, c.ref), 4e-3) << "m " << m;
        } else {
            EXPECT_NE(r.error.find("not a multiple of 4"), std::string::npos) << r.error;
        }
    }
}

}  // namespace
}  // namespace onecard

#else
TEST(CudaFp8Gemm, Unavailable) {
    GTEST_SKIP() << "built without CUDA (ONECARD_CUDA=OFF)";
}
#endif
