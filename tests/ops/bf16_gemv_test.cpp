// bf16 GEMV (tensor cores, decode) parity against cpu::matmul_nt on the same bf16-valued inputs.
// Every product of two bf16 values is exact in fp32 and the tensor core accumulates in fp32, so the
// only difference is the summation order: fp32 output within rel L2 1e-5 (as bf16_gemm_test); bf16
// output within one bf16 rounding (2^-8 of |ref|, +1%) plus 1e-5 of the largest output. Covers every
// warp split (16, 8, 4 warps per tile), 1/2/4 column tiles, several 32-row passes, a row count that
// is not a multiple of 16, a strided x, and the grouped form wo_a uses.
#include "gpu_test_util.h"

#ifdef ONECARD_HAVE_CUDA

#include "backend/cpu/linear.h"
#include "backend/cuda/ops/bf16_gemv.cuh"
#include "core/error.h"

#include <string>

namespace onecard {
namespace {

// groups > 1: W [n, k] is `groups` blocks of n/groups rows, block g multiplies x columns [g·k, +k).
void check_gemv(int64_t m, int64_t n, int64_t k, cuda::GemmOut out, int64_t ld_x, int64_t groups, uint32_t seed,
                float alpha = 1.0f) {
    const std::string what = "m " + std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k) +
                             (out == cuda::GemmOut::Bf16 ? " bf16" : " f32") + " ld_x " + std::to_string(ld_x) +
                             " groups " + std::to_string(groups);
    SCOPED_TRACE(what);
    std::mt19937 rng(seed);
    const int64_t lx = ld_x ? ld_x : k * groups, rows = n / groups;
    const auto x = test::random_bf16_values(rng, static_cast<size_t>(m * lx));
    const auto w = test::random_bf16_values(rng, static_cast<size_t>(n * k), 0.05f);
    std::vector<float> ref(static_cast<size_t>(m * n));
    for (int64_t g = 0; g < groups; ++g) {
        std::vector<float> part(static_cast<size_t>(m * rows));
        cpu::matmul_nt(x.data() + g * k, w.data() + g * rows * k, part.data(), m, k, rows, lx, rows);
        for (int64_t i = 0; i < m; ++i)
            for (int64_t r = 0; r < rows; ++r) ref[i * n + g * rows + r] = part[i * rows + r] * alpha;
    }
    const size_t esz = out == cuda::GemmOut::F32 ? 4 : 2;
    cuda::DeviceArena arena(static_cast<size_t>(m * lx * 2 + n * k * 2 + m * n * 4) + (size_t{16} << 20), "gemv test");
    auto* dx = test::upload(arena, test::to_bf16_bits(x), "x");
    auto* dw = test::upload(arena, test::to_bf16_bits(w), "w");
    void* dy = arena.alloc(static_cast<size_t>(m * n) * esz, "y");
    cuda::fill_bytes(dy, 0xFF, static_cast<size_t>(m * n) * esz);
    cuda::Stream s;
    cuda::bf16_gemv(reinterpret_cast<const __nv_bfloat16*>(dx), ld_x, reinterpret_cast<const __nv_bfloat16*>(dw), dy,
                    out, 0, m, n, k, s.get(), groups > 1 ? rows : 0, alpha);
    s.sync();
    std::vector<float> got;
    if (out == cuda::GemmOut::F32) {
        got = cuda::copy_to_host(static_cast<const float*>(dy), ref.size());
        for (size_t i = 0; i < got.size(); ++i) ASSERT_TRUE(std::isfinite(got[i])) << "unwritten element " << i;
        EXPECT_LE(test::rel_l2(got, ref), 1e-5);
    } else {
        got = test::from_bf16_bits(cuda::copy_to_host(static_cast<const uint16_t*>(dy), ref.size()));
        const double tol_abs = 1e-5 * test::max_abs(ref);
        for (size_t i = 0; i < got.size(); ++i) {
            ASSERT_TRUE(std::isfinite(got[i])) << "unwritten element " << i;
            ASSERT_LE(std::fabs(got[i] - ref[i]), std::ldexp(std::fabs(ref[i]), -8) * 1.01 + tol_abs)
                << "element " << i << " got " << got[i] << " ref " << ref[i];
        }
    }
}

TEST(CudaBf16Gemv, DecodeShapesMatchCpu) {
    ONECARD_REQUIRE_GPU();
    check_gemv(1, 1024, 4096, cuda::GemmOut::F32, 0, 1, 11);    // compressor wkv (16 warps split k)
    check_gemv(1, 256, 4096, cuda::GemmOut::F32, 0, 1, 12);     // router gate
    check_gemv(2, 64, 4096, cuda::GemmOut::F32, 0, 1, 13);      // indexer weights_proj (4 tiles)
    check_gemv(2, 64, 4096, cuda::GemmOut::F32, 0, 1, 16, 0.125f);  // ... with its 1/sqrt(64) in the epilogue
    check_gemv(1, 8192, 4096, cuda::GemmOut::Bf16, 0, 8, 14);   // wo_a: 8 groups of 1024 rows (8 warps)
    check_gemv(3, 20000, 256, cuda::GemmOut::F32, 0, 1, 15);    // head-like: 1250 tiles (4 warps)
}

TEST(CudaBf16Gemv, OddShapesStridesAndPassesMatchCpu) {
    ONECARD_REQUIRE_GPU();
    check_gemv(5, 520, 576, cuda::GemmOut::Bf16, 0, 1, 21);     // n % 16 != 0, k = 9 blocks
    check_gemv(4, 384, 512, cuda::GemmOut::F32, 1024, 1, 22);   // strided x rows
    check_gemv(20, 300, 1024, cuda::GemmOut::Bf16, 0, 1, 23);   // four column tiles
    check_gemv(40, 160, 448, cuda::GemmOut::F32, 0, 1, 24);     // two passes: 32 + 8 rows
    check_gemv(12, 256, 192, cuda::GemmOut::Bf16, 0, 4, 25);    // grouped, two column tiles
}

TEST(CudaBf16Gemv, RefusesUnsupportedShapes) {
    ONECARD_REQUIRE_GPU();
    cuda::DeviceArena arena(size_t{1} << 20, "gemv refusal");
    auto* p = arena.alloc_n<__nv_bfloat16>(4096, "buf");
    EXPECT_FALSE(cuda::bf16_gemv_ok(p, 100, p, 100));
    EXPECT_THROW(cuda::bf16_gemv(p, 0, p, p, cuda::GemmOut::F32, 0, 1, 16, 100, nullptr), Error);
    EXPECT_THROW(cuda::bf16_gemv(p, 0, p, p, cuda::GemmOut::F32, 0, 1, 40, 64, nullptr, 24), Error);
}

}  // namespace
}  // namespace onecard

#else
TEST(CudaBf16Gemv, Unavailable) {
    GTEST_SKIP() << "built without CUDA (ONECARD_CUDA=OFF)";
}
#endif
