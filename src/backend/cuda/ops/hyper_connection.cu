#include "backend/cuda/ops/hyper_connection.cuh"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops/common.cuh"

namespace onecard::cuda {
namespace {

constexpr int kHc = static_cast<int>(kHcStreams);
constexpr int kMix = static_cast<int>(kHcMixes);
constexpr int kPreThreads = 256;

__device__ __forceinline__ float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

// Sinkhorn on one token's 4×4 comb, same operation order as the CPU oracle: row softmax + eps,
// column normalisation, then (iters − 1) rounds of row and column normalisation, each denominator + eps.
__device__ void sinkhorn4(float* c, int iters, float eps) {
    for (int j = 0; j < kHc; ++j) {
        float mx = c[j * kHc];
        for (int k = 1; k < kHc; ++k) mx = fmaxf(mx, c[j * kHc + k]);
        float sum = 0.0f;
        for (int k = 0; k < kHc; ++k) {
            c[j * kHc + k] = expf(c[j * kHc + k] - mx);
            sum += c[j * kHc + k];
        }
        for (int k = 0; k < kHc; ++k) c[j * kHc + k] = c[j * kHc + k] / sum + eps;
    }
    for (int it = 0; it < iters; ++it) {
        if (it > 0) {
            for (int j = 0; j < kHc; ++j) {
                float s = 0.0f;
                for (int k = 0; k < kHc; ++k) s += c[j * kHc + k];
                for (int k = 0; k < kHc; ++k) c[j * kHc + k] /= s + eps;
            }
        }
        for (int k = 0; k < kHc; ++k) {
            float s = 0.0f;
            for (int j = 0; j < kHc; ++j) s += c[j * kHc + k];
            for (int j = 0; j < kHc; ++j) c[j * kHc + k] /= s + eps;
        }
    }
}

__global__ void __launch_bounds__(kPreThreads)
hc_pre_kernel(const __nv_bfloat16* __restrict__ X, const float* __restrict__ fn, const float* __restrict__ scale,
              const float* __restrict__ base, __nv_bfloat16* __restrict__ x, float* __restrict__ pre_out,
              float* __restrict__ post_out, float* __restrict__ comb_out, int64_t dim, int iters, float hc_eps,
              float norm_eps) {
    __shared__ float red[kMix + 1][kPreThreads / 32];
    __shared__ float pre_s[kHc];
    const int64_t t = blockIdx.x;
    const int64_t flat = kHc * dim;
    const __nv_bfloat16* Xt = X + t * flat;
    float acc[kMix + 1];  // [0, 24): fn·v, [24]: Σv²
#pragma unroll
    for (int j = 0; j <= kMix; ++j) acc[j] = 0.0f;
    for (int64_t i = threadIdx.x; i < flat; i += kPreThreads) {
        const float v = __bfloat162float(Xt[i]);
        acc[kMix] = fmaf(v, v, acc[kMix]);
#pragma unroll
        for (int j = 0; j < kMix; ++j) acc[j] = fmaf(fn[j * flat + i], v, acc[j]);
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int j = 0; j <= kMix; ++j) {
        const float s = dev::warp_sum(acc[j]);
        if (lane == 0) red[j][warp] = s;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float tot[kMix + 1];
        for (int j = 0; j <= kMix; ++j) {
            float s = 0.0f;
            for (int w = 0; w < kPreThreads / 32; ++w) s += red[j][w];
            tot[j] = s;
        }
        const float r = 1.0f / sqrtf(tot[kMix] / static_cast<float>(flat) + norm_eps);
        float comb[kHc * kHc];
        for (int j = 0; j < kHc; ++j) {
            const float pre = sigmoidf(r * tot[j] * scale[0] + base[j]) + hc_eps;
            pre_s[j] = pre;
            pre_out[t * kHc + j] = pre;
            post_out[t * kHc + j] = 2.0f * sigmoidf(r * tot[kHc + j] * scale[1] + base[kHc + j]);
        }
        for (int e = 0; e < kHc * kHc; ++e) comb[e] = r * tot[2 * kHc + e] * scale[2] + base[2 * kHc + e];
        sinkhorn4(comb, iters, hc_eps);
        for (int e = 0; e < kHc * kHc; ++e) comb_out[t * kHc * kHc + e] = comb[e];
    }
    __syncthreads();
    for (int64_t d = threadIdx.x; d < dim; d += kPreThreads) {
        float v = 0.0f;
#pragma unroll
        for (int j = 0; j < kHc; ++j) v = fmaf(pre_s[j], __bfloat162float(Xt[j * dim + d]), v);
        x[t * dim + d] = __float2bfloat16(v);
    }
}

// One thread per (token, d): reads the 4 stream values before writing them, so in place is safe.
__global__ void hc_post_kernel(const __nv_bfloat16* __restrict__ a, const __nv_bfloat16* X,
                               const float* __restrict__ post, const float* __restrict__ comb, __nv_bfloat16* X_out,
                               int64_t n_tok, int64_t dim) {
    const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (idx >= n_tok * dim) return;
    const int64_t t = idx / dim, d = idx % dim;
    float xs[kHc];
#pragma unroll
    for (int j = 0; j < kHc; ++j) xs[j] = __bfloat162float(X[(t * kHc + j) * dim + d]);
    const float av = __bfloat162float(a[t * dim + d]);
    const float* c = comb + t * kHc * kHc;
#pragma unroll
    for (int k = 0; k < kHc; ++k) {
        float v = 0.0f;
#pragma unroll
        for (int j = 0; j < kHc; ++j) v = fmaf(c[j * kHc + k], xs[j], v);
        X_out[(t * kHc + k) * dim + d] = __float2bfloat16(fmaf(post[t * kHc + k], av, v));
    }
}

}  // namespace

void hc_pre_bf16(const __nv_bfloat16* X, const float* fn, const float* scale, const float* base, __nv_bfloat16* x,
                 float* pre, float* post, float* comb, int64_t n_tok, const HcDims& p, cudaStream_t stream) {
    ONECARD_CHECK(p.dim > 0 && p.sinkhorn_iters >= 1, "hc_pre_bf16: dim {} iters {}", p.dim, p.sinkhorn_iters);
    if (n_tok == 0) return;
    hc_pre_kernel<<<static_cast<unsigned>(n_tok), kPreThreads, 0, stream>>>(
        X, fn, scale, base, x, pre, post, comb, p.dim, static_cast<int>(p.sinkhorn_iters), p.hc_eps, p.norm_eps);
    CUDA_CHECK_LAUNCH("hc_pre_kernel");
}

void hc_post_bf16(const __nv_bfloat16* a, const __nv_bfloat16* X, const float* post, const float* comb,
                  __nv_bfloat16* X_out, int64_t n_tok, const HcDims& p, cudaStream_t stream) {
    const int64_t n = n_tok * p.dim;
    if (n == 0) return;
    const int threads = 256;
    hc_post_kernel<<<static_cast<unsigned>((n + threads - 1) / threads), threads, 0, stream>>>(a, X, post, comb, X_out,
                                                                                             n_tok, p.dim);
    CUDA_CHECK_LAUNCH("hc_post_kernel");
}

}  // namespace onecard::cuda
