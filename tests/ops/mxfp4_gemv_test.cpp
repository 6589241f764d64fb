// MXFP4 expert GEMV parity: GPU (token, expert) pairs vs the CPU product of the FP8-quantised
// activation and cpu::dequant_mxfp4 of the picked expert. Tolerance: relative L2 ≤ 4e-3, worst
// element ≤ 1e-2 of max|ref| (fp32 accumulation order + bf16 output).
#include "gpu_test_util.h"

#ifdef ONECARD_HAVE_CUDA

#include "backend/cpu/linear.h"
#include "backend/cpu/quant_sim.h"
#include "backend/cuda/ops/fp8_quant.cuh"
#include "backend/cuda/ops/mxfp4_gemv.cuh"

namespace onecard {
namespace {

void check_experts(int64_t n_experts, int64_t n, int64_t k, const std::vector<int32_t>& experts,
                   const std::vector<int32_t>& rows, int64_t n_act_rows, uint32_t seed) {
    std::mt19937 rng(seed);
    const auto x = test::random_bf16_values(rng, static_cast<size_t>(n_act_rows * k));
    std::uniform_int_distribution<int> byte(0, 255), sc(118, 130);
    std::vector<uint8_t> w(static_cast<size_t>(n_experts * n * k / 2)), ws(static_cast<size_t>(n_experts * n * k / 32));
    for (auto& b : w) b = static_cast<uint8_t>(byte(rng));
    for (auto& b : ws) b = static_cast<uint8_t>(sc(rng));
    const int64_t n_pairs = static_cast<int64_t>(experts.size());

    std::vector<float> xd = x;
    for (int64_t r = 0; r < n_act_rows; ++r) cpu::fp8_quant_dequant(xd.data() + r * k, k, 128);
    std::vector<float> ref(static_cast<size_t>(n_pairs * n));
    for (int64_t p = 0; p < n_pairs; ++p) {
        const int64_t e = experts[p];
        const auto wd = cpu::dequant_mxfp4(w.data() + e * n * k / 2, ws.data() + e * n * k / 32, n, k);
        cpu::matmul_nt(xd.data() + rows[p] * k, wd.data(), ref.data() + p * n, 1, k, n);
    }

    cuda::DeviceArena arena(size_t{256} << 20, "mxfp4 test");
    auto* dx = test::upload(arena, test::to_bf16_bits(x), "x");
    auto* dw = test::upload(arena, w, "w");
    auto* dws = test::upload(arena, ws, "ws");
    auto* de = test::upload(arena, experts, "experts");
    auto* dr = test::upload(arena, rows, "rows");
    auto* dxq = arena.alloc_n<uint8_t>(x.size(), "xq");
    auto* dxs = arena.alloc_n<float>(static_cast<size_t>(n_act_rows * k / 128), "xs");
    auto* dy = arena.alloc_n<uint16_t>(ref.size(), "y");
    cuda::fill_bytes(dy, 0xFF, ref.size() * 2);
    cuda::Stream s;
    cuda::quantize_fp8_1x128(reinterpret_cast<const __nv_bfloat16*>(dx), dxq, dxs, n_act_rows, k,
                             cuda::ActScaleLayout::RowMajor, s.get());
    cuda::mxfp4_expert_gemv(dxq, dxs, dw, dws, de, dr, reinterpret_cast<__nv_bfloat16*>(dy), n_pairs, n, k, s.get());
    s.sync();
    const auto y = test::from_bf16_bits(cuda::copy_to_host(dy, ref.size()));
    EXPECT_LE(test::rel_l2(y, ref), 4e-3) << "n " << n << " k " << k;
    EXPECT_LE(test::max_err_rel_to_max(y, ref), 1e-2) << "n " << n << " k " << k;
}

TEST(CudaMxfp4Gemv, GateUpShapeMatchesCpu) {
    ONECARD_REQUIRE_GPU();
    // w1/w3-like: [n, 4096] with 5 (token, expert) pairs over 2 tokens, an expert used twice.
    check_experts(3, 384, 4096, {2, 0, 1, 2, 0}, {0, 0, 1, 1, 1}, 2, 51);
}

TEST(CudaMxfp4Gemv, DownShapeMatchesCpu) {
    ONECARD_REQUIRE_GPU();
    // w2-like: k = 2048 (one 16-byte load pass less than the unroll), n not a multiple of 8.
    check_experts(4, 1036, 2048, {3, 1, 0}, {2, 0, 1}, 3, 52);
}

}  // namespace
}  // namespace onecard

#else
TEST(CudaMxfp4Gemv, Unavailable) { GTEST_SKIP() << "built without CUDA (ONECARD_CUDA=OFF)"; }
#endif
