// FP8 1×128 activation quantisation: bit-exact parity with cpu::fp8_quant_dequant and
// cpu::ue8m0_block_scale (the scales are powers of two and E4M3 rounding is deterministic, so the
// tolerance is zero), in both scale layouts; and the exact UE8M0 -> fp32 conversion.
#include "gpu_test_util.h"

#ifdef ONECARD_HAVE_CUDA

#include "backend/cpu/quant_sim.h"
#include "backend/cuda/ops/fp8_quant.cuh"

#include <algorithm>

namespace onecard {
namespace {

// Rows whose 128-blocks span 2^-30 .. 2^20 in magnitude; one block below the 1e-4 amax clamp.
std::vector<float> varied_blocks(std::mt19937& rng, int64_t n_rows, int64_t k) {
    std::vector<float> x = test::random_bf16_values(rng, static_cast<size_t>(n_rows * k));
    std::uniform_int_distribution<int> ex(-30, 20);
    for (int64_t b = 0; b < n_rows * k / 128; ++b) {
        const float f = std::ldexp(1.0f, ex(rng));
        for (int64_t i = 0; i < 128; ++i) x[b * 128 + i] = round_bf16(x[b * 128 + i] * f);
    }
    for (int64_t i = 0; i < 128; ++i) x[128 + i] = round_bf16(x[128 + i] * 1e-6f);
    return x;
}

void check_quant(int64_t n_rows, int64_t k, cuda::ActScaleLayout layout, uint32_t seed) {
    std::mt19937 rng(seed);
    const std::vector<float> x = varied_blocks(rng, n_rows, k);
    const int64_t n_kb = k / 128;
    cuda::DeviceArena arena(size_t{32} << 20, "quant test");
    auto* dx = test::upload(arena, test::to_bf16_bits(x), "x");
    auto* dq = arena.alloc_n<uint8_t>(x.size(), "q");
    auto* ds = arena.alloc_n<float>(static_cast<size_t>(n_rows * n_kb), "scales");
    cuda::fill_bytes(dq, 0xFF, x.size());
    cuda::fill_bytes(ds, 0xFF, static_cast<size_t>(n_rows * n_kb) * 4);
    cuda::Stream s;
    cuda::quantize_fp8_1x128(reinterpret_cast<const __nv_bfloat16*>(dx), dq, ds, n_rows, k, layout, s.get());
    s.sync();
    const auto q = cuda::copy_to_host(dq, x.size());
    const auto sc = cuda::copy_to_host(ds, static_cast<size_t>(n_rows * n_kb));

    std::vector<float> ref = x;
    for (int64_t r = 0; r < n_rows; ++r) cpu::fp8_quant_dequant(ref.data() + r * k, k, 128);
    for (int64_t r = 0; r < n_rows; ++r) {
        for (int64_t b = 0; b < n_kb; ++b) {
            float amax = 0.0f;
            for (int64_t i = 0; i < 128; ++i) amax = std::max(amax, std::fabs(x[r * k + b * 128 + i]));
            const float want = cpu::ue8m0_block_scale(std::max(amax, 1e-4f), 448.0f);
            const float got = layout == cuda::ActScaleLayout::RowMajor ? sc[r * n_kb + b] : sc[b * n_rows + r];
            ASSERT_EQ(got, want) << "scale of row " << r << " block " << b;
            for (int64_t i = 0; i < 128; ++i) {
                const int64_t e = r * k + b * 128 + i;
                ASSERT_EQ(e4m3fn_to_f32(q[e]) * got, ref[e]) << "element " << e;
            }
        }
    }
}

TEST(CudaFp8Quant, RowMajorScalesBitExact) {
    ONECARD_REQUIRE_GPU();
    check_quant(9, 4096, cuda::ActScaleLayout::RowMajor, 21);
}

TEST(CudaFp8Quant, KBlockMajorScalesBitExact) {
    ONECARD_REQUIRE_GPU();
    check_quant(5, 1024, cuda::ActScaleLayout::KBlockMajor, 22);
}

TEST(CudaFp8Quant, Ue8m0ToF32ExactAndTransposed) {
    ONECARD_REQUIRE_GPU();
    const int64_t rows = 15, cols = 17;  // 255 bytes: every non-NaN code once
    std::vector<uint8_t> in(static_cast<size_t>(rows * cols));
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(i);
    std::shuffle(in.begin(), in.end(), std::mt19937(23));
    cuda::DeviceArena arena(size_t{1} << 20, "ue8m0 test");
    auto* din = test::upload(arena, in, "in");
    auto* dout = arena.alloc_n<float>(in.size(), "out");
    auto* dt = arena.alloc_n<float>(in.size(), "out_t");
    cuda::Stream s;
    cuda::ue8m0_to_f32(din, dout, rows, cols, false, s.get());
    cuda::ue8m0_to_f32(din, dt, rows, cols, true, s.get());
    s.sync();
    const auto out = cuda::copy_to_host(dout, in.size());
    const auto tr = cuda::copy_to_host(dt, in.size());
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
            const float want = ue8m0_to_f32(in[r * cols + c]);
            ASSERT_EQ(out[r * cols + c], want) << "byte " << int(in[r * cols + c]);
            ASSERT_EQ(tr[c * rows + r], want) << "transposed byte " << int(in[r * cols + c]);
        }
    }
}

}  // namespace
}  // namespace onecard

#else
TEST(CudaFp8Quant, Unavailable) {
    GTEST_SKIP() << "built without CUDA (ONECARD_CUDA=OFF)";
}
#endif
