// Manifold-constrained hyper-connections on the GPU (dsv4-model.md §3), for hc = 4 streams.
// hc_pre: per token, mixes = rsqrt(mean(v²)+eps)·(fn·v) over v = flatten(X) [hc·D], split into
// pre/post/comb with sigmoid and the Sinkhorn projection, then x = Σ_j pre_j·X_j. Two
// kernels: a split-K pass over (token tile, slice of the 4·D reduction) writes partial
// mixes to a scratch (so the 1.5 MB fn is streamed by the whole GPU, and each fn element serves a tile
// of tokens), then one block per token sums them, finishes the rsqrt/sigmoid/Sinkhorn and collapses X
// (its Σv² comes from the same registers). Steps of kHcGemmMinTokens tokens or more form the
// mixes as one fp32 cuBLAS GEMM instead, when the caller passes its handle. Without a scratch (or
// for odd shapes) one block per token does everything (the reference kernel).
// hc_post: X'_k = post_k·a + Σ_j comb[j,k]·X_j, element-wise.
// Residual streams are fp32 between sub-blocks (REF keeps them in bf16; model/storage_points.h says
// why onecard does not): the collapse x, the sub-block's input, is bf16. All mixing math is fp32.
// Parity oracle: cpu::hc_mixes, cpu::hc_split_sinkhorn, cpu::hc_collapse, cpu::hc_post.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace onecard::cuda {

class Bf16Gemm;

struct HcDims {
    int64_t dim = 0;  // D
    int64_t sinkhorn_iters = 20;
    float hc_eps = 1e-6f;
    float norm_eps = 1e-6f;
};
inline constexpr int64_t kHcStreams = 4;                            // hc_mult; the kernels are written for 4
inline constexpr int64_t kHcMixes = (2 + kHcStreams) * kHcStreams;  // 24
// Steps from this many tokens take the GEMM path for the mixes (HcPreArgs::gemm). There the split-K plan is
// down to <= 16 slices (its scratch traffic cap), and its warps' broadcast loads of X, one 32-byte sector
// per token, leave it latency-bound: an 8192-token prefill at Flash dims spent 272 ms in the
// hyper-connections with it, 84 ms with the GEMM (results.md, 2026-12-04 19:03).
inline constexpr int64_t kHcGemmMinTokens = 512;

// Floats of device scratch hc_pre needs for ANY n_tok <= max_tok (partial mixes [n, 24, slices];
// the slice count depends on n_tok). Allocate once for the largest step.
size_t hc_pre_scratch_floats(int64_t max_tok, const HcDims& p);

// One hc_pre call: its inputs, outputs, scratch and optional fusions, by name.
struct HcPreArgs {
    const float* X = nullptr;      // [n_tok, 4, D] fp32 residual streams
    const float* fn = nullptr;     // [24, 4·D] fp32
    const float* scale = nullptr;  // [3]
    const float* base = nullptr;   // [24]
    int64_t n_tok = 0;
    __nv_bfloat16* x = nullptr;  // out [n_tok, D] bf16: the collapse (normalised when rms_weight is set)
    float* pre = nullptr;        // out [n_tok, 4]
    float* post = nullptr;       // out [n_tok, 4]
    float* comb = nullptr;       // out [n_tok, 4, 4] (row j = source stream)
    // Split-K scratch, scratch_floats >= hc_pre_scratch_floats(n_tok, p) floats (overwritten); nullptr:
    // the reference kernel, one block per token (slow for small n_tok: each block streams all of fn).
    float* scratch = nullptr;
    size_t scratch_floats = 0;
    // Optional, with the scratch: steps of at least kHcGemmMinTokens tokens compute the mixes as the fp32
    // GEMM X [n, 4·D] · fnᵀ into the scratch (as [n, 24]: one slice) through this handle.
    Bf16Gemm* gemm = nullptr;
    // Optional: x comes out RMS-normalised, x = rmsnorm_bf16(collapse, rms_weight, rms_eps) (the
    // sub-block's attn_norm / ffn_norm), fused into the finishing kernel when D <= 4096.
    const __nv_bfloat16* rms_weight = nullptr;  // [D] bf16
    float rms_eps = 0.0f;
    // Optional, needs rms_weight: x's FP8 1x128 quantisation as quantize_fp8_1x128 (RowMajor) gives it,
    // byte for byte, written by the same kernel (the GEMV paths of the linears that read x then skip
    // their own quantisation launch).
    uint8_t* xq = nullptr;  // [n_tok, D] E4M3
    float* xs = nullptr;    // [n_tok, D/128]
};
void hc_pre(const HcPreArgs& a, const HcDims& p, cudaStream_t stream);

// X_out [n_tok, 4, D] fp32 = post·a + combᵀ·X; X_out may alias X. a [n_tok, D] bf16.
void hc_post(const __nv_bfloat16* a, const float* X, const float* post, const float* comb, float* X_out, int64_t n_tok,
             const HcDims& p, cudaStream_t stream);

}  // namespace onecard::cuda
