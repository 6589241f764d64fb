// The ends of the forward pass on the GPU: the token embedding into the hyper-connection streams and the
// HC head that collapses them. Parity oracles: the CPU forward's embedding copy, cpu::hc_head.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace onecard::cuda {

// X [n, hc, D] bf16: every stream of token i is embed[tokens[i]] (embed [vocab, D] bf16).
void embed_streams(const int32_t* tokens, const __nv_bfloat16* embed, __nv_bfloat16* X, int64_t n, int64_t dim,
                   int64_t hc, cudaStream_t stream);

// y [n, D] bf16 = Σ_j pre_j · X_j with pre = sigmoid(mixes·scale[0] + base) + eps and
// mixes = rsqrt(mean(v²) + norm_eps) · (fn · v), v = flatten(X_i) (cpu::hc_head). X [n, 4, D] bf16,
// fn [4, 4·D] fp32, base [4], scale [1].
void hc_head_bf16(const __nv_bfloat16* X, const float* fn, const float* base, const float* scale, __nv_bfloat16* y,
                  int64_t n, int64_t dim, float hc_eps, float norm_eps, cudaStream_t stream);

}  // namespace onecard::cuda
