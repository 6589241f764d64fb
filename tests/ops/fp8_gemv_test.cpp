// FP8 block-scaled GEMV parity (decode path): GPU quantise + fp8_gemv vs the CPU product of the
// dequantised operands. Tolerance: fp32 accumulation in another order plus the bf16 output
// rounding: relative L2 ≤ 4e-3, worst element ≤ 1e-2 of max|ref|.
#include "fp8_linear_util.h"

#ifdef ONECARD_HAVE_CUDA

#include "backend/cuda/ops/fp8_gemm.cuh"
#include "backend/cuda/ops/fp8_gemv.cuh"
#include "backend/cuda/ops/fp8_quant.cuh"

namespace onecard {
namespace {

void check_gemv(int64_t m, int64_t n, int64_t k, uint32_t seed) {
    const auto c = test::make_fp8_linear_case(m, n, k, seed);
    cuda::DeviceArena arena(size_t{256} << 20, "gemv test");
    auto* dx = test::upload(arena, test::to_bf16_bits(c.x), "x");
    auto* dw = test::upload(arena, c.w, "w");
    auto* dws8 = test::upload(arena, c.w_scale, "w_scale");
    auto* dws = arena.alloc_n<float>(static_cast<size_t>(cuda::fp8_gemm_weight_scale_floats(n, k)), "w_scale f32");
    auto* dxq = arena.alloc_n<uint8_t>(c.x.size(), "xq");
    auto* dxs = arena.alloc_n<float>(static_cast<size_t>(m * k / 128), "xs");
    auto* dy = arena.alloc_n<uint16_t>(c.ref.size(), "y");
    cuda::fill_bytes(dy, 0xFF, c.ref.size() * 2);
    cuda::Stream s;
    cuda::fp8_gemm_prepare_weight_scales(dws8, dws, n, k, s.get());
    cuda::quantize_fp8_1x128(reinterpret_cast<const __nv_bfloat16*>(dx), dxq, dxs, m, k, cuda::ActScaleLayout::RowMajor,
                             s.get());
    cuda::fp8_gemv(dxq, dxs, dw, dws, reinterpret_cast<__nv_bfloat16*>(dy), m, n, k, s.get());
    s.sync();
    const auto y = test::from_bf16_bits(cuda::copy_to_host(dy, c.ref.size()));
    EXPECT_LE(test::rel_l2(y, c.ref), 4e-3) << "m " << m << " n " << n << " k " << k;
    EXPECT_LE(test::max_err_rel_to_max(y, c.ref), 1e-2) << "m " << m << " n " << n << " k " << k;
}

TEST(CudaFp8Gemv, SingleTokenMatchesCpu) {
    ONECARD_REQUIRE_GPU();
    check_gemv(1, 1024, 4096, 31);   // wq_a shape (16 warps split k)
    check_gemv(1, 520, 2048, 32);    // n not a multiple of 128 or of the 16-row tile
    check_gemv(1, 32768, 1024, 36);  // wq_b shape (4 warps per tile)
    check_gemv(1, 4096, 8192, 37);   // wo_b shape (8 warps per tile)
    check_gemv(2, 520, 384, 38);     // k = 3 blocks: fewer blocks than warps
}

TEST(CudaFp8Gemv, SmallBatchesMatchCpu) {
    ONECARD_REQUIRE_GPU();
    check_gemv(3, 512, 1024, 33);
    check_gemv(8, 384, 4096, 34);
    check_gemv(11, 256, 1536, 35);   // two column tiles of 8
    check_gemv(20, 4096, 2048, 39);  // four column tiles
    check_gemv(40, 256, 1536, 40);   // two passes: 32 + 8 rows
}

}  // namespace
}  // namespace onecard

#else
TEST(CudaFp8Gemv, Unavailable) {
    GTEST_SKIP() << "built without CUDA (ONECARD_CUDA=OFF)";
}
#endif
