#include "backend/cuda/ops/embed_head.cuh"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops/common.cuh"
#include "backend/cuda/ops/pdl.cuh"

namespace onecard::cuda {
namespace {

constexpr int kEltThreads = 256;
constexpr int kHeadThreads = 256;
constexpr int kHc = 4;

unsigned grid_for(int64_t n, int threads) {
    // Grid-stride loops cover the rest; 65535·4 blocks is plenty to fill the GPU.
    const int64_t blocks = (n + threads - 1) / threads;
    return static_cast<unsigned>(blocks < 262140 ? blocks : 262140);
}

template <typename T>
__global__ void embed_streams_kernel(const int32_t* __restrict__ tokens, const __nv_bfloat16* __restrict__ embed,
                                     T* __restrict__ X, int64_t n, int64_t dim, int64_t hc) {
    dev::pdl_wait();
    dev::pdl_trigger();
    const int64_t total = n * dim;
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
         idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t i = idx / dim, d = idx % dim;
        const __nv_bfloat16 v = embed[static_cast<int64_t>(tokens[i]) * dim + d];
        for (int64_t j = 0; j < hc; ++j) X[(i * hc + j) * dim + d] = static_cast<T>(v);
    }
}

// ---- HC head ---------------------------------------------------------------------------------

__device__ __forceinline__ float sigmoidf(float x) {
    return 1.0f / (1.0f + expf(-x));
}

// One block per token: the 4 dot products fn_j · v and Σv² in one pass over v = flatten(X_t)
// [4·D], then y = Σ_j pre_j · X_j. mixes = rsqrt(mean(v²)+eps) · (fn · v) equals cpu::hc_mixes'
// fn · rmsnorm(v) up to rounding.
__global__ void __launch_bounds__(kHeadThreads)
    hc_head_kernel(const float* __restrict__ X, const float* __restrict__ fn, const float* __restrict__ base,
                   const float* __restrict__ scale, float* __restrict__ y, int64_t dim, float hc_eps, float norm_eps) {
    dev::pdl_wait();
    dev::pdl_trigger();
    __shared__ float red[kHc + 1][kHeadThreads / 32];
    __shared__ float pre_s[kHc];
    const int64_t t = blockIdx.x;
    const int64_t flat = kHc * dim;
    const float* Xt = X + t * flat;
    float acc[kHc + 1];  // [0, 4): fn_j · v, [4]: Σv²
#pragma unroll
    for (int j = 0; j <= kHc; ++j) acc[j] = 0.0f;
    for (int64_t i = threadIdx.x; i < flat; i += kHeadThreads) {
        const float v = Xt[i];
        acc[kHc] = fmaf(v, v, acc[kHc]);
#pragma unroll
        for (int j = 0; j < kHc; ++j) acc[j] = fmaf(fn[j * flat + i], v, acc[j]);
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int j = 0; j <= kHc; ++j) {
        const float s = dev::warp_sum(acc[j]);
        if (lane == 0) red[j][warp] = s;
    }
    __syncthreads();
    if (threadIdx.x < kHc) {
        const int j = threadIdx.x;
        float dot = 0.0f, ss = 0.0f;
        for (int w = 0; w < kHeadThreads / 32; ++w) {
            dot += red[j][w];
            ss += red[kHc][w];
        }
        const float r = 1.0f / sqrtf(ss / static_cast<float>(flat) + norm_eps);
        pre_s[j] = sigmoidf(r * dot * scale[0] + base[j]) + hc_eps;
    }
    __syncthreads();
    for (int64_t d = threadIdx.x; d < dim; d += kHeadThreads) {
        float v = 0.0f;
#pragma unroll
        for (int j = 0; j < kHc; ++j) v = fmaf(pre_s[j], Xt[j * dim + d], v);
        y[t * dim + d] = v;
    }
}

template <typename T>
void launch_embed_streams(const int32_t* tokens, const __nv_bfloat16* embed, T* X, int64_t n, int64_t dim, int64_t hc,
                          cudaStream_t stream) {
    ONECARD_CHECK(n >= 0 && dim > 0 && hc > 0, "embed_streams: n {} dim {} hc {}", n, dim, hc);
    if (n == 0) return;
    launch_pdl(embed_streams_kernel<T>, grid_for(n * dim, kEltThreads), kEltThreads, 0, stream, tokens, embed, X, n,
               dim, hc);
    CUDA_CHECK_LAUNCH("embed_streams_kernel");
}

}  // namespace

void embed_streams(const int32_t* tokens, const __nv_bfloat16* embed, float* X, int64_t n, int64_t dim, int64_t hc,
                   cudaStream_t stream) {
    launch_embed_streams(tokens, embed, X, n, dim, hc, stream);
}

void embed_streams(const int32_t* tokens, const __nv_bfloat16* embed, __nv_bfloat16* X, int64_t n, int64_t dim,
                   int64_t hc, cudaStream_t stream) {
    launch_embed_streams(tokens, embed, X, n, dim, hc, stream);
}

void hc_head(const float* X, const float* fn, const float* base, const float* scale, float* y, int64_t n, int64_t dim,
             float hc_eps, float norm_eps, cudaStream_t stream) {
    ONECARD_CHECK(n >= 0 && n < (int64_t{1} << 31) && dim > 0, "hc_head: n {} dim {}", n, dim);
    if (n == 0) return;
    launch_pdl(hc_head_kernel, static_cast<unsigned>(n), kHeadThreads, 0, stream, X, fn, base, scale, y, dim, hc_eps,
               norm_eps);
    CUDA_CHECK_LAUNCH("hc_head_kernel");
}

}  // namespace onecard::cuda
