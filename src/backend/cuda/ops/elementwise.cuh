// The small element-wise ops the model glue needs (residual adds, dtype conversions, scaling).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace onecard::cuda {

// y = a + b, bf16 [n] (fp32 add).
void add_bf16(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* y, int64_t n, cudaStream_t stream);
// X [n, hc, D] bf16 += e [n, D] bf16 in every stream (fp32 add): the MTP block adds the next
// token's projected embedding to each of its input streams.
void add_to_streams_bf16(const __nv_bfloat16* e, __nv_bfloat16* X, int64_t n, int64_t hc, int64_t dim,
                         cudaStream_t stream);
// out[i·ld_out + d] = bf16(mean over the hc streams of X[i, :, d]) (fp32 sum), X [n, hc, D] bf16: the
// DSpark drafter's taps of the main model (docs/dspark.md §1), written into column block of a wider row.
void mean_streams_bf16(const __nv_bfloat16* X, __nv_bfloat16* out, int64_t n, int64_t hc, int64_t dim, int64_t ld_out,
                       cudaStream_t stream);
// y [n] = f32(x) / bf16(x) conversions.
void bf16_to_f32(const __nv_bfloat16* x, float* y, int64_t n, cudaStream_t stream);
void f32_to_bf16(const float* x, __nv_bfloat16* y, int64_t n, cudaStream_t stream);
// y [n, k] *= s (fp32 scalar), fp32.
void scale_f32(float* y, float s, int64_t n, cudaStream_t stream);

}  // namespace onecard::cuda
