#include "backend/cuda/ops/moe.cuh"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops/common.cuh"
#include "backend/cuda/ops/pdl.cuh"

namespace onecard::cuda {
namespace {

constexpr int kMaxExperts = 1024;
constexpr int kRouteThreads = 256;
constexpr int kMaxTopK = 32;  // the weights are normalised by one thread over its K picks

// One CUDA block per token. The scores and the biased scores live in shared memory; the top K are
// found by K rounds of a block-wide argmax that skips picked experts. The argmax order is
// "greater biased score, then lower expert id", which is the comparator cpu::route_topk sorts
// with, so the ids and their order match exactly (also on ties).
__global__ void __launch_bounds__(kRouteThreads)
    moe_route_kernel(const float* __restrict__ logits, const float* __restrict__ bias,
                     const int32_t* __restrict__ tid2eid, const int32_t* __restrict__ tokens, int n_experts, int top_k,
                     float route_scale, int32_t* __restrict__ experts, float* __restrict__ weights) {
    dev::pdl_wait();
    dev::pdl_trigger();
    __shared__ float score[kMaxExperts];   // [E] sqrt(softplus(logit))
    __shared__ float biased[kMaxExperts];  // [E] score + bias (selection only)
    __shared__ unsigned char picked[kMaxExperts];
    __shared__ float warp_val[kRouteThreads / 32];
    __shared__ int warp_idx[kRouteThreads / 32];
    __shared__ int chosen[kMaxTopK];
    const int64_t t = blockIdx.x;
    const float* lt = logits + t * n_experts;
    for (int e = threadIdx.x; e < n_experts; e += blockDim.x) {
        const float x = lt[e];
        // PyTorch softplus (beta 1, threshold 20), as cpu::sqrtsoftplus.
        const float sp = x > 20.0f ? x : log1pf(expf(x));
        const float s = sqrtf(sp);
        score[e] = s;
        biased[e] = bias ? s + bias[e] : s;
        picked[e] = 0;
    }
    __syncthreads();

    if (tid2eid) {
        if (threadIdx.x < top_k) chosen[threadIdx.x] = tid2eid[static_cast<int64_t>(tokens[t]) * top_k + threadIdx.x];
    } else {
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        for (int k = 0; k < top_k; ++k) {
            float best_v = -INFINITY;
            int best_i = n_experts;  // sentinel: larger than any id, loses every tie
            for (int e = threadIdx.x; e < n_experts; e += blockDim.x) {
                const float v = biased[e];
                if (!picked[e] && (v > best_v || (v == best_v && e < best_i) || best_i == n_experts)) {
                    best_v = v;
                    best_i = e;
                }
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                const float ov = __shfl_xor_sync(0xffffffffu, best_v, o);
                const int oi = __shfl_xor_sync(0xffffffffu, best_i, o);
                if (oi != n_experts && (best_i == n_experts || ov > best_v || (ov == best_v && oi < best_i))) {
                    best_v = ov;
                    best_i = oi;
                }
            }
            if (lane == 0) {
                warp_val[warp] = best_v;
                warp_idx[warp] = best_i;
            }
            __syncthreads();
            if (threadIdx.x == 0) {
                float v = warp_val[0];
                int i = warp_idx[0];
                for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) {
                    const float ov = warp_val[w];
                    const int oi = warp_idx[w];
                    if (oi != n_experts && (i == n_experts || ov > v || (ov == v && oi < i))) {
                        v = ov;
                        i = oi;
                    }
                }
                chosen[k] = i;
                picked[i] = 1;
            }
            __syncthreads();
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        // Same operation order as cpu::route_topk's normalise_weights (sum in pick order, one
        // division, one multiplication); __f*_rn keeps nvcc from contracting them.
        float sum = 0.0f;
        for (int k = 0; k < top_k; ++k) sum = __fadd_rn(sum, score[chosen[k]]);
        const float den = __fadd_rn(sum, 1e-20f);
        for (int k = 0; k < top_k; ++k) {
            experts[t * top_k + k] = chosen[k];
            weights[t * top_k + k] = __fmul_rn(__fdiv_rn(score[chosen[k]], den), route_scale);
        }
    }
}

// One thread per element; fp32 math as cpu::swiglu_clamped, then the optional per-row scale (a
// separate rounding, as the CPU's h *= w).
__global__ void swiglu_clamp_kernel(const __nv_bfloat16* __restrict__ gate, const __nv_bfloat16* __restrict__ up,
                                    int64_t ld_in, const float* __restrict__ row_scale, __nv_bfloat16* __restrict__ h,
                                    int64_t rows, int64_t inter, float limit) {
    dev::pdl_wait();
    dev::pdl_trigger();
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= rows * inter) return;
    const int64_t r = i / inter, c = i % inter;
    float g = __bfloat162float(gate[r * ld_in + c]);
    float u = __bfloat162float(up[r * ld_in + c]);
    if (limit > 0.0f) {
        g = fminf(g, limit);
        u = fminf(fmaxf(u, -limit), limit);
    }
    float v = __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
    if (row_scale) v = __fmul_rn(v, row_scale[r]);
    h[i] = __float2bfloat16(v);
}

// swiglu_clamp_kernel's value, rounded to bf16, then quantize_fp8_kernel's 1x128 E4M3 rounding of
// it (RowMajor scales, the shared dev::fp8_quant_block4): one warp per 128-wide block, 4 elements per
// lane, the same fp32 operations in the same order as the two kernels back to back, so the bytes are
// identical.
__global__ void swiglu_quant_kernel(const __nv_bfloat16* __restrict__ gate, const __nv_bfloat16* __restrict__ up,
                                    int64_t ld_in, const float* __restrict__ row_scale, uint8_t* __restrict__ q,
                                    float* __restrict__ scales, int64_t rows, int64_t inter, float limit) {
    dev::pdl_wait();
    dev::pdl_trigger();
    const int64_t n_kb = inter / 128;
    const int64_t blk = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) >> 5;
    if (blk >= rows * n_kb) return;  // whole warps leave together
    const int lane = threadIdx.x & 31;
    const int64_t r = blk / n_kb, c0 = (blk % n_kb) * 128 + lane * 4;
    float v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        float g = __bfloat162float(gate[r * ld_in + c0 + i]);
        float u = __bfloat162float(up[r * ld_in + c0 + i]);
        if (limit > 0.0f) {
            g = fminf(g, limit);
            u = fminf(fmaxf(u, -limit), limit);
        }
        float h = __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
        if (row_scale) h = __fmul_rn(h, row_scale[r]);
        v[i] = __bfloat162float(__float2bfloat16(h));
    }
    float sc;
    *reinterpret_cast<uint32_t*>(q + r * inter + c0) = dev::fp8_quant_block4(v, sc);  // as quantize_fp8_kernel
    if (lane == 0) scales[blk] = sc;
}

// One thread per (token, column): shared + Σ_k routed·w in k order, fp32; out in bf16.
__global__ void moe_combine_kernel(const __nv_bfloat16* __restrict__ routed, const float* __restrict__ weights,
                                   const __nv_bfloat16* __restrict__ shared, __nv_bfloat16* __restrict__ out, int64_t n,
                                   int64_t top_k, int64_t dim) {
    dev::pdl_wait();
    dev::pdl_trigger();
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= n * dim) return;
    const int64_t t = i / dim, d = i % dim;
    float acc = 0.0f;
    for (int64_t k = 0; k < top_k; ++k) {
        const float v = __bfloat162float(routed[(t * top_k + k) * dim + d]);
        acc = __fadd_rn(acc, weights ? __fmul_rn(v, weights[t * top_k + k]) : v);
    }
    out[i] = __float2bfloat16(__fadd_rn(shared ? __bfloat162float(shared[i]) : 0.0f, acc));
}

}  // namespace

void moe_route(const float* logits, const float* bias, const int32_t* tid2eid, const int32_t* tokens, int64_t n,
               const MoeRouteDims& d, int32_t* experts, float* weights, cudaStream_t stream) {
    const int64_t n_experts = d.n_experts, top_k = d.top_k;
    const float route_scale = d.route_scale;
    ONECARD_CHECK(n_experts > 0 && n_experts <= kMaxExperts, "moe_route: {} experts (1..{} supported)", n_experts,
                  kMaxExperts);
    ONECARD_CHECK(top_k > 0 && top_k <= n_experts && top_k <= kMaxTopK, "moe_route: top_k {} with {} experts", top_k,
                  n_experts);
    ONECARD_CHECK(!tid2eid || tokens, "moe_route: hash routing needs the token ids");
    ONECARD_CHECK(n >= 0 && n < (int64_t{1} << 31), "moe_route: {} tokens", n);
    if (n == 0) return;
    launch_pdl(moe_route_kernel, static_cast<unsigned>(n), kRouteThreads, 0, stream, logits, bias, tid2eid, tokens,
               static_cast<int>(n_experts), static_cast<int>(top_k), route_scale, experts, weights);
    CUDA_CHECK_LAUNCH("moe_route_kernel");
}

void swiglu_clamp(const __nv_bfloat16* gate, const __nv_bfloat16* up, int64_t ld_in, const float* row_scale,
                  __nv_bfloat16* h, int64_t rows, int64_t inter, float limit, cudaStream_t stream) {
    ONECARD_CHECK(rows >= 0 && inter > 0 && ld_in >= inter, "swiglu_clamp: rows {} inter {} ld_in {}", rows, inter,
                  ld_in);
    const int64_t total = rows * inter;
    if (total == 0) return;
    const int threads = 256;
    launch_pdl(swiglu_clamp_kernel, static_cast<unsigned>((total + threads - 1) / threads), threads, 0, stream, gate,
               up, ld_in, row_scale, h, rows, inter, limit);
    CUDA_CHECK_LAUNCH("swiglu_clamp_kernel");
}

void moe_combine(const __nv_bfloat16* routed, const float* weights, const __nv_bfloat16* shared, __nv_bfloat16* out,
                 int64_t n, int64_t top_k, int64_t dim, cudaStream_t stream) {
    ONECARD_CHECK(n >= 0 && top_k > 0 && dim > 0, "moe_combine: n {} top_k {} dim {}", n, top_k, dim);
    const int64_t total = n * dim;
    if (total == 0) return;
    const int threads = 256;
    launch_pdl(moe_combine_kernel, static_cast<unsigned>((total + threads - 1) / threads), threads, 0, stream, routed,
               weights, shared, out, n, top_k, dim);
    CUDA_CHECK_LAUNCH("moe_combine_kernel");
}

void swiglu_clamp_quant(const __nv_bfloat16* gate, const __nv_bfloat16* up, int64_t ld_in, const float* row_scale,
                        uint8_t* q, float* scales, int64_t rows, int64_t inter, float limit, cudaStream_t stream) {
    ONECARD_CHECK(rows >= 0 && inter > 0 && inter % 128 == 0 && ld_in >= inter,
                  "swiglu_clamp_quant: rows {} inter {} (a multiple of 128) ld_in {}", rows, inter, ld_in);
    const int64_t warps = rows * (inter / 128);
    if (warps == 0) return;
    const int threads = 256;
    launch_pdl(swiglu_quant_kernel, static_cast<unsigned>((warps * 32 + threads - 1) / threads), threads, 0, stream,
               gate, up, ld_in, row_scale, q, scales, rows, inter, limit);
    CUDA_CHECK_LAUNCH("swiglu_quant_kernel");
}

}  // namespace onecard::cuda
