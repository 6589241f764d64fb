#include "model_cuda/gpu_linear.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops/bf16_gemv.cuh"
#include "backend/cuda/ops/elementwise.cuh"
#include "backend/cuda/ops/fp8_gemv.cuh"
#include "backend/cuda/ops/fp8_quant.cuh"
#include "core/error.h"

namespace onecard {
namespace {
constexpr size_t kCublasWorkspace = size_t{32} << 20;
}

GpuLinears::GpuLinears(cuda::DeviceArena& workspace)
    : ws_(workspace),
      fp8_gemm_(workspace.alloc(kCublasWorkspace, "cuBLASLt workspace (fp8)"), kCublasWorkspace),
      bf16_gemm_(workspace.alloc(kCublasWorkspace, "cuBLAS workspace (bf16)"), kCublasWorkspace) {}

void GpuLinears::fp8(const GpuFp8Linear& l, const __nv_bfloat16* x, int64_t m, __nv_bfloat16* y, cudaStream_t s,
                     int64_t ld_y) {
    if (m == 0) return;
    const int64_t k = l.n_in, n = l.n_out;
    const cuda::DeviceArena::Mark mark = ws_.mark();
    if (gemv_ok(l, m)) {
        auto* xq = ws_.alloc_n<uint8_t>(static_cast<size_t>(m * k), "fp8 linear: xq");
        auto* xs = ws_.alloc_n<float>(static_cast<size_t>(m * k / 128), "fp8 linear: xs");
        cuda::quantize_fp8_1x128(x, xq, xs, m, k, cuda::ActScaleLayout::RowMajor, s);
        cuda::fp8_gemv(xq, xs, l.w, l.ws, y, m, n, k, s, ld_y);
    } else {
        ONECARD_CHECK(ld_y == 0 || ld_y == n, "fp8 linear: the GEMM path writes dense rows (ld {} for n {})", ld_y, n);
        const int64_t mp = (m + cuda::kFp8GemmRowMultiple - 1) / cuda::kFp8GemmRowMultiple * cuda::kFp8GemmRowMultiple;
        auto* xq = ws_.alloc_n<uint8_t>(static_cast<size_t>(mp * k), "fp8 linear: xq");
        auto* xs = ws_.alloc_n<float>(static_cast<size_t>(mp * k / 128), "fp8 linear: xs");
        auto* yp = mp == m ? y : ws_.alloc_n<__nv_bfloat16>(static_cast<size_t>(mp * n), "fp8 linear: padded y");
        // KBlockMajor scales are [k/128, mp] with the row count as stride, so the pad rows are quantised
        // too, from zeros (finite scales); their outputs are dropped.
        if (mp != m) {
            auto* xpad = ws_.alloc_n<__nv_bfloat16>(static_cast<size_t>(mp * k), "fp8 linear: padded x");
            CUDA_CHECK(cudaMemcpyAsync(xpad, x, static_cast<size_t>(m * k) * 2, cudaMemcpyDeviceToDevice, s));
            CUDA_CHECK(cudaMemsetAsync(xpad + m * k, 0, static_cast<size_t>((mp - m) * k) * 2, s));
            cuda::quantize_fp8_1x128(xpad, xq, xs, mp, k, cuda::ActScaleLayout::KBlockMajor, s);
        } else {
            cuda::quantize_fp8_1x128(x, xq, xs, m, k, cuda::ActScaleLayout::KBlockMajor, s);
        }
        fp8_gemm_.run(xq, xs, l.w, l.ws, yp, mp, n, k, s);
        if (yp != y) CUDA_CHECK(cudaMemcpyAsync(y, yp, static_cast<size_t>(m * n) * 2, cudaMemcpyDeviceToDevice, s));
    }
    ws_.release(mark);
}

void GpuLinears::fp8_quantized(const GpuFp8Linear& l, const uint8_t* xq, const float* xs, int64_t m, __nv_bfloat16* y,
                               cudaStream_t s, int64_t ld_y) {
    ONECARD_CHECK(gemv_ok(l, m), "fp8 linear: a pre-quantised input needs the GEMV path ({} rows, k {})", m, l.n_in);
    if (m > 0) cuda::fp8_gemv(xq, xs, l.w, l.ws, y, m, l.n_out, l.n_in, s, ld_y);
}

void GpuLinears::bf16(const GpuBf16Linear& l, const __nv_bfloat16* x, int64_t m, void* y, cuda::GemmOut out,
                      cudaStream_t s, int64_t ld_x, float scale) {
    ONECARD_CHECK(scale == 1.0f || out == cuda::GemmOut::F32, "bf16 linear: a scaled output must be fp32");
    if (m == 0) return;
    if (gemv_ && m <= kGemvMaxRows && cuda::bf16_gemv_ok(x, ld_x ? ld_x : l.n_in, l.w, l.n_in)) {
        cuda::bf16_gemv(x, l.w, y, out, {.m = m, .n = l.n_out, .k = l.n_in, .ld_x = ld_x}, s,
                        scale);  // alpha: the epilogue scale
        return;
    }
    bf16_gemm_.run(x, ld_x, l.w, y, out, 0, m, l.n_out, l.n_in, s);
    if (scale != 1.0f) cuda::scale_f32(static_cast<float*>(y), scale, m * l.n_out, s);
}

void GpuLinears::bf16_f32(const GpuBf16Linear& l, const float* x, int64_t m, float* y, cudaStream_t s) {
    if (m == 0) return;
    const cuda::DeviceArena::Mark mark = ws_.mark();
    auto* hl = ws_.alloc_n<__nv_bfloat16>(static_cast<size_t>(2 * m * l.n_in), "head: hi|lo rows");  // [2m, k]
    auto* y2 = ws_.alloc_n<float>(static_cast<size_t>(2 * m * l.n_out), "head: hi|lo outputs");      // [2m, n]
    cuda::split_bf16(x, hl, m, l.n_in, s);
    bf16(l, hl, 2 * m, y2, cuda::GemmOut::F32, s);
    cuda::add_halves(y2, y, m, l.n_out, s);
    ws_.release(mark);
}

void GpuLinears::grouped(const GpuFp8Linear& l, int64_t groups, const __nv_bfloat16* x, int64_t m, __nv_bfloat16* z,
                         cudaStream_t s) {
    if (m == 0) return;
    ONECARD_CHECK(l.n_out % groups == 0 && (l.n_out / groups) % 128 == 0 && l.n_in % 128 == 0,
                  "wo_a: {} rows in {} groups of whole 128-row blocks, k {} a multiple of 128", l.n_out, groups,
                  l.n_in);
    const int64_t rows = l.n_out / groups, k = l.n_in;
    if (gemv_ && m <= cuda::kBf16GemvFp8wMaxM && reinterpret_cast<uintptr_t>(x) % 16 == 0) {
        cuda::bf16_gemv_fp8w(x, l.w, l.ws, z, cuda::GemmOut::Bf16,
                             {.m = m, .n = l.n_out, .k = k, .rows_per_group = rows}, s);
        return;
    }
    const cuda::DeviceArena::Mark mark = ws_.mark();
    auto* wg = ws_.alloc_n<__nv_bfloat16>(static_cast<size_t>(rows * k), "wo_a: one group in bf16");
    const int64_t scale_rows = rows / 128 * cuda::fp8_gemm_weight_scale_ld(k);  // floats per group
    for (int64_t g = 0; g < groups; ++g) {
        cuda::fp8_weight_to_bf16(l.w + g * rows * k, l.ws + g * scale_rows, wg, rows, k, s);
        bf16_gemm_.run(x + g * k, groups * k, wg, z + g * rows, cuda::GemmOut::Bf16, groups * rows, m, rows, k, s);
    }
    ws_.release(mark);
}

}  // namespace onecard
