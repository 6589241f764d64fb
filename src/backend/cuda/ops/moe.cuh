// MoE routing and the element-wise parts of the expert path on the GPU (dsv4-model.md §5; CPU:
// backend/cpu/moe.h, model/layer_moe.cpp). The expert matmuls themselves are mxfp4_gemv (decode)
// and MoeExperts (moe_experts.cuh, many tokens).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace onecard::cuda {

// logits [n, E] fp32 (router, fp32) -> experts [n, K] int32 and weights [n, K] fp32.
//  * learned routing (tid2eid == nullptr): scores = sqrt(softplus(logits)) (PyTorch softplus, linear
//    above 20); top K by scores + bias (bias [E] or nullptr; it only selects), ties to the lower
//    expert id, ids in descending biased-score order (cpu::route_topk);
//  * hash routing (tid2eid [vocab, K] int32 on the device): experts = tid2eid[tokens[i]] (cpu::route_hash);
// both: weights = scores[picked] / (Σ scores[picked] + 1e-20) · route_scale. E <= 1024.
struct MoeRouteDims {
    int64_t n_experts = 0;  // E
    int64_t top_k = 0;      // K
    float route_scale = 1.0f;
};
void moe_route(const float* logits, const float* bias, const int32_t* tid2eid, const int32_t* tokens, int64_t n,
               const MoeRouteDims& d, int32_t* experts, float* weights, cudaStream_t stream);

// h [rows, inter] bf16 = silu(min(gate, limit)) · clamp(up, −limit, limit) · (row_scale ? row_scale[r] : 1)
// (limit <= 0: no clamp; cpu::swiglu_clamped), fp32 math. gate/up [rows, inter] bf16 with row
// stride ld_in (gate and up may be the two halves of one [rows, 2·inter] buffer).
void swiglu_clamp(const __nv_bfloat16* gate, const __nv_bfloat16* up, int64_t ld_in, const float* row_scale,
                  __nv_bfloat16* h, int64_t rows, int64_t inter, float limit, cudaStream_t stream);

// swiglu_clamp followed by quantize_fp8_1x128 (RowMajor) of its bf16 result, in one kernel with
// identical bytes: q [rows, inter] E4M3, scales [rows, inter/128] fp32. inter % 128 == 0.
void swiglu_clamp_quant(const __nv_bfloat16* gate, const __nv_bfloat16* up, int64_t ld_in, const float* row_scale,
                        uint8_t* q, float* scales, int64_t rows, int64_t inter, float limit, cudaStream_t stream);

// out [n, D] bf16 = shared [n, D] + Σ_k routed[i·K + k, :] · (weights ? weights[i·K + k] : 1), fp32 sum
// in k order. routed [n·K, D] bf16 (one row per (token, pick)).
void moe_combine(const __nv_bfloat16* routed, const float* weights, const __nv_bfloat16* shared, __nv_bfloat16* out,
                 int64_t n, int64_t top_k, int64_t dim, cudaStream_t stream);

}  // namespace onecard::cuda
