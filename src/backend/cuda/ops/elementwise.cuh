// The small element-wise ops the model glue needs (residual adds, dtype conversions, scaling).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace onecard::cuda {

// y = a + b, bf16 [n] (fp32 add).
void add_bf16(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* y, int64_t n, cudaStream_t stream);
// X [n, hc, D] fp32 += e [n, D] bf16 in every stream: the MTP block adds the next token's projected
// embedding to each of its input streams.
void add_to_streams(const __nv_bfloat16* e, float* X, int64_t n, int64_t hc, int64_t dim, cudaStream_t stream);
// out[i·ld_out + d] = bf16(mean over the hc streams of X[i, :, d]) (fp32 sum), X [n, hc, D] fp32: the
// DSpark drafter's taps of the main model (docs/dspark.md §1), written into column block of a wider row.
void mean_streams(const float* X, __nv_bfloat16* out, int64_t n, int64_t hc, int64_t dim, int64_t ld_out,
                  cudaStream_t stream);
// An fp32 x [m, k] as two bf16 rows each, for a bf16 GEMM that must see ~16 mantissa bits of x:
// hl [2m, k], rows [0, m) hi = bf16(x), rows [m, 2m) lo = bf16(x - hi). W·hi + W·lo (fold_halves)
// (add_halves) is W·x to ~2^-17 relative.
void split_bf16(const float* x, __nv_bfloat16* hl, int64_t m, int64_t k, cudaStream_t stream);
// y [m, n] fp32 = rows [0, m) + rows [m, 2m) of y2 [2m, n].
void add_halves(const float* y2, float* y, int64_t m, int64_t n, cudaStream_t stream);
// y [n] = f32(x) / bf16(x) conversions.
void bf16_to_f32(const __nv_bfloat16* x, float* y, int64_t n, cudaStream_t stream);
void f32_to_bf16(const float* x, __nv_bfloat16* y, int64_t n, cudaStream_t stream);
// y [n, k] *= s (fp32 scalar), fp32.
void scale_f32(float* y, float s, int64_t n, cudaStream_t stream);

}  // namespace onecard::cuda
