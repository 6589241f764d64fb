// The ends of the forward pass on the GPU: the token embedding into the hyper-connection streams and the
// HC head that collapses them. Parity oracles: the CPU forward's embedding copy, cpu::hc_head.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace onecard::cuda {

// X [n, hc, D]: every stream of token i is embed[tokens[i]] (embed [vocab, D] bf16), fp32 for the
// residual streams, bf16 for the MTP block's one embedding row (hc = 1). Both are exact copies.
void embed_streams(const int32_t* tokens, const __nv_bfloat16* embed, float* X, int64_t n, int64_t dim, int64_t hc,
                   cudaStream_t stream);
void embed_streams(const int32_t* tokens, const __nv_bfloat16* embed, __nv_bfloat16* X, int64_t n, int64_t dim,
                   int64_t hc, cudaStream_t stream);

// y [n, D] fp32 = Σ_j pre_j · X_j with pre = sigmoid(mixes·scale[0] + base) + eps and
// mixes = rsqrt(mean(v²) + norm_eps) · (fn · v), v = flatten(X_i) (cpu::hc_head). X [n, 4, D] fp32,
// fn [4, 4·D] fp32, base [4], scale [1].
void hc_head(const float* X, const float* fn, const float* base, const float* scale, float* y, int64_t n, int64_t dim,
             float hc_eps, float norm_eps, cudaStream_t stream);

}  // namespace onecard::cuda
