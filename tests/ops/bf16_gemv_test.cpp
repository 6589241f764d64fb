// bf16 GEMV (tensor cores, decode) parity against cpu::matmul_nt on the same bf16-valued inputs.
// Every product of two bf16 values is exact in fp32 and the tensor core accumulates in fp32, so the
// only difference is the summation order: fp32 output within rel L2 1e-5 (as bf16_gemm_test); bf16
// output within one bf16 rounding (2^-8 of |ref|, +1%) plus 1e-5 of the largest output. Covers every
// warp split (16, 8, 4 warps per tile), 1/2/4 column tiles, several 32-row passes, a row count that
// is not a multiple of 16, a strided x, and the grouped form wo_a uses.
// The FP8-stored form (wo_a as the checkpoint holds it): every E4M3 code but NaN (subnormals and
// -0 included) with power-of-two block scales over 2^-24..2^6 must multiply as the bf16 matrix
// E4M3 · scale — the same oracle, and fp8_weight_to_bf16 must produce exactly that matrix.
#include "gpu_test_util.h"

#ifdef ONECARD_HAVE_CUDA

#include "backend/cpu/linear.h"
#include "backend/cuda/ops/bf16_gemv.cuh"
#include "backend/cuda/ops/fp8_gemm.cuh"
#include "core/error.h"
#include "core/fp_formats.h"

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
    cuda::Bf16GemvShape shape;
    shape.m = m;
    shape.n = n;
    shape.k = k;
    shape.ld_x = ld_x;
    shape.rows_per_group = groups > 1 ? rows : 0;
    cuda::bf16_gemv(reinterpret_cast<const __nv_bfloat16*>(dx), reinterpret_cast<const __nv_bfloat16*>(dw), dy, out,
                    shape, s.get(), alpha);
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

// W [n, k] as E4M3 codes + fp32 block scales (the GEMM layout), x bf16; y checked against the CPU
// product with the dequantised bf16 matrix.
// subnormals_only: every code has exponent field 0 (a kernel that flushed them would return zeros).
void check_gemv_fp8w(int64_t m, int64_t n, int64_t k, cuda::GemmOut out, int64_t groups, uint32_t seed,
                     bool subnormals_only = false) {
    SCOPED_TRACE("fp8 weights: m " + std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k) +
                 " groups " + std::to_string(groups));
    std::mt19937 rng(seed);
    const int64_t lx = k * groups, rows = n / groups, ld = cuda::fp8_gemm_weight_scale_ld(k);
    const auto x = test::random_bf16_values(rng, static_cast<size_t>(m * lx));
    std::vector<uint8_t> codes(static_cast<size_t>(n * k));
    std::uniform_int_distribution<int> byte(0, 255);
    for (auto& c : codes) {
        do c = static_cast<uint8_t>(byte(rng));
        while ((c & 0x7F) == 0x7F);  // NaN codes are not weights
        if (subnormals_only) c &= 0x87;
    }
    std::vector<float> ws(static_cast<size_t>(cuda::fp8_gemm_weight_scale_floats(n, k)), 0.0f);
    std::uniform_int_distribution<int> expo(-24, 6);
    for (int64_t rb = 0; rb < (n + 127) / 128; ++rb)
        for (int64_t cb = 0; cb < k / 128; ++cb) ws[static_cast<size_t>(rb * ld + cb)] = std::ldexp(1.0f, expo(rng));
    std::vector<float> w(codes.size());  // the bf16 values E4M3 · scale (exact)
    for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < k; ++c) {
            const float v =
                e4m3fn_to_f32(codes[static_cast<size_t>(r * k + c)]) * ws[static_cast<size_t>(r / 128 * ld + c / 128)];
            ASSERT_EQ(v, round_bf16(v));
            w[static_cast<size_t>(r * k + c)] = v;
        }
    std::vector<float> ref(static_cast<size_t>(m * n));
    for (int64_t g = 0; g < groups; ++g) {
        std::vector<float> part(static_cast<size_t>(m * rows));
        cpu::matmul_nt(x.data() + g * k, w.data() + g * rows * k, part.data(), m, k, rows, lx, rows);
        for (int64_t i = 0; i < m; ++i)
            for (int64_t r = 0; r < rows; ++r) ref[i * n + g * rows + r] = part[i * rows + r];
    }
    const size_t esz = out == cuda::GemmOut::F32 ? 4 : 2;
    cuda::DeviceArena arena(
        static_cast<size_t>(m * lx * 2 + n * k * 3 + ws.size() * 4 + m * n * 4) + (size_t{16} << 20), "gemv fp8w test");
    auto* dx = test::upload(arena, test::to_bf16_bits(x), "x");
    auto* dw = test::upload(arena, codes, "w");
    auto* dws = test::upload(arena, ws, "ws");
    auto* dwb = arena.alloc_n<__nv_bfloat16>(static_cast<size_t>(n * k), "w bf16");
    void* dy = arena.alloc(static_cast<size_t>(m * n) * esz, "y");
    cuda::fill_bytes(dy, 0xFF, static_cast<size_t>(m * n) * esz);
    cuda::Stream s;
    cuda::Bf16GemvShape shape;
    shape.m = m;
    shape.n = n;
    shape.k = k;
    shape.rows_per_group = groups > 1 ? rows : 0;
    cuda::bf16_gemv_fp8w(reinterpret_cast<const __nv_bfloat16*>(dx), dw, dws, dy, out, shape, s.get());
    cuda::fp8_weight_to_bf16(dw, dws, dwb, n, k, s.get());
    s.sync();
    const auto wb = test::from_bf16_bits(cuda::copy_to_host(reinterpret_cast<const uint16_t*>(dwb), w.size()));
    for (size_t i = 0; i < w.size(); ++i) ASSERT_EQ(wb[i], w[i]) << "fp8_weight_to_bf16 element " << i;
    if (out == cuda::GemmOut::F32) {
        const auto got = cuda::copy_to_host(static_cast<const float*>(dy), ref.size());
        for (size_t i = 0; i < got.size(); ++i) ASSERT_TRUE(std::isfinite(got[i])) << "unwritten element " << i;
        EXPECT_LE(test::rel_l2(got, ref), 1e-5);
    } else {
        const auto got = test::from_bf16_bits(cuda::copy_to_host(static_cast<const uint16_t*>(dy), ref.size()));
        const double tol_abs = 1e-5 * test::max_abs(ref);
        for (size_t i = 0; i < got.size(); ++i) {
            ASSERT_TRUE(std::isfinite(got[i])) << "unwritten element " << i;
            ASSERT_LE(std::fabs(got[i] - ref[i]), std::ldexp(std::fabs(ref[i]), -8) * 1.01 + tol_abs)
                << "element " << i << " got " << got[i] << " ref " << ref[i];
        }
    }
}

TEST(CudaBf16Gemv, Fp8StoredWeightsMultiplyAsTheirBf16Values) {
    ONECARD_REQUIRE_GPU();
    check_gemv_fp8w(1, 8192, 4096, cuda::GemmOut::Bf16, 8, 31);     // wo_a at batch 1 (8 warps)
    check_gemv_fp8w(7, 2048, 512, cuda::GemmOut::Bf16, 2, 32);      // two groups, 16 warps, odd rows
    check_gemv_fp8w(20, 256, 1024, cuda::GemmOut::F32, 1, 33);      // three column tiles
    check_gemv_fp8w(40, 384, 256, cuda::GemmOut::F32, 3, 34);       // eight column tiles, 3 groups
    check_gemv_fp8w(64, 8192, 4096, cuda::GemmOut::Bf16, 8, 36);    // wo_a at batch 64 (one pass)
    check_gemv_fp8w(70, 256, 512, cuda::GemmOut::Bf16, 2, 37);      // two passes (64 + 6 rows)
    check_gemv_fp8w(3, 256, 512, cuda::GemmOut::F32, 1, 35, true);  // E4M3 subnormals only
}

TEST(CudaBf16Gemv, DecodeShapesMatchCpu) {
    ONECARD_REQUIRE_GPU();
    check_gemv(1, 1024, 4096, cuda::GemmOut::F32, 0, 1, 11);        // compressor wkv (16 warps split k)
    check_gemv(1, 256, 4096, cuda::GemmOut::F32, 0, 1, 12);         // router gate
    check_gemv(2, 64, 4096, cuda::GemmOut::F32, 0, 1, 13);          // indexer weights_proj (4 tiles)
    check_gemv(2, 64, 4096, cuda::GemmOut::F32, 0, 1, 16, 0.125f);  // ... with its 1/sqrt(64) in the epilogue
    check_gemv(1, 8192, 4096, cuda::GemmOut::Bf16, 0, 8, 14);       // wo_a: 8 groups of 1024 rows (8 warps)
    check_gemv(3, 20000, 256, cuda::GemmOut::F32, 0, 1, 15);        // head-like: 1250 tiles (4 warps)
}

TEST(CudaBf16Gemv, OddShapesStridesAndPassesMatchCpu) {
    ONECARD_REQUIRE_GPU();
    check_gemv(5, 520, 576, cuda::GemmOut::Bf16, 0, 1, 21);    // n % 16 != 0, k = 9 blocks
    check_gemv(4, 384, 512, cuda::GemmOut::F32, 1024, 1, 22);  // strided x rows
    check_gemv(20, 300, 1024, cuda::GemmOut::Bf16, 0, 1, 23);  // four column tiles
    check_gemv(40, 160, 448, cuda::GemmOut::F32, 0, 1, 24);    // two passes: 32 + 8 rows
    check_gemv(12, 256, 192, cuda::GemmOut::Bf16, 0, 4, 25);   // grouped, two column tiles
}

TEST(CudaBf16Gemv, RefusesUnsupportedShapes) {
    ONECARD_REQUIRE_GPU();
    cuda::DeviceArena arena(size_t{1} << 20, "gemv refusal");
    auto* p = arena.alloc_n<__nv_bfloat16>(4096, "buf");
    EXPECT_FALSE(cuda::bf16_gemv_ok(p, 100, p, 100));
    EXPECT_THROW(cuda::bf16_gemv(p, p, p, cuda::GemmOut::F32, {.m = 1, .n = 16, .k = 100}, nullptr), Error);
    EXPECT_THROW(
        cuda::bf16_gemv(p, p, p, cuda::GemmOut::F32, {.m = 1, .n = 40, .k = 64, .rows_per_group = 24}, nullptr), Error);
}

}  // namespace
}  // namespace onecard

#else
TEST(CudaBf16Gemv, Unavailable) {
    GTEST_SKIP() << "built without CUDA (ONECARD_CUDA=OFF)";
}
#endif
