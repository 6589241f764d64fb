// RMSNorm on the GPU: y = w ⊙ (x · rsqrt(mean(x²) + eps)), bf16 in and out, fp32 math
// (dsv4-model.md §6.1; REF multiplies the weight in fp32 before the bf16 cast, as here).
// Parity oracle: cpu::rmsnorm (backend/cpu/norm.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace onecard::cuda {

// x [n_rows, dim] (row stride ld_x, 0 = dim), y [n_rows, dim] (ld_y), weight [dim] or nullptr for the
// unweighted variant (per-head q norm: n_rows = n_tok·n_heads, dim = head_dim). y may alias x.
void rmsnorm_bf16(const __nv_bfloat16* x, const __nv_bfloat16* weight, __nv_bfloat16* y, int64_t n_rows, int64_t dim,
                  float eps, cudaStream_t stream, int64_t ld_x = 0, int64_t ld_y = 0);

// The same from fp32 rows (the residual streams, the head's hidden): y bf16 (the MTP block's hnorm) or
// fp32 (the final norm before the head, which reads it through GpuLinears::bf16_f32). y may alias x.
void rmsnorm_f32_to_bf16(const float* x, const __nv_bfloat16* weight, __nv_bfloat16* y, int64_t n_rows, int64_t dim,
                         float eps, cudaStream_t stream);
void rmsnorm_f32(const float* x, const __nv_bfloat16* weight, float* y, int64_t n_rows, int64_t dim, float eps,
                 cudaStream_t stream);

// One set of rows of rmsnorm_bf16_pair: x [n_rows, dim] (row stride ld_x, 0 = dim) -> y (ld_y) with w.
struct RmsNormRows {
    const __nv_bfloat16* x = nullptr;
    const __nv_bfloat16* w = nullptr;  // [dim]
    __nv_bfloat16* y = nullptr;
    int64_t dim = 0;
    int64_t ld_x = 0, ld_y = 0;
};

// Two rmsnorm_bf16 calls over the same n_rows in one launch (the attention's q_norm and kv_norm of
// one wq_a|wkv output).
void rmsnorm_bf16_pair(const RmsNormRows& first, const RmsNormRows& second, int64_t n_rows, float eps,
                       cudaStream_t stream);

}  // namespace onecard::cuda
