#include "backend/cuda/ops/elementwise.cuh"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops/common.cuh"
#include "backend/cuda/ops/pdl.cuh"

namespace onecard::cuda {
namespace {

constexpr int kEltThreads = 256;

unsigned grid_for(int64_t n, int threads) {
    // Grid-stride loops cover the rest; 65535·4 blocks is plenty to fill the GPU.
    const int64_t blocks = (n + threads - 1) / threads;
    return static_cast<unsigned>(blocks < 262140 ? blocks : 262140);
}

__global__ void add_bf16_kernel(const __nv_bfloat16* __restrict__ a, const __nv_bfloat16* __restrict__ b,
                                __nv_bfloat16* y, int64_t n) {
    dev::pdl_wait();
    dev::pdl_trigger();
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        y[i] = __float2bfloat16(__bfloat162float(a[i]) + __bfloat162float(b[i]));
}

__global__ void add_to_streams_kernel(const __nv_bfloat16* __restrict__ e, float* X, int64_t total, int64_t hc,
                                      int64_t dim) {
    dev::pdl_wait();
    dev::pdl_trigger();
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t row = i / (hc * dim), d = i % dim;  // X element (row, stream, d)
        X[i] += __bfloat162float(e[row * dim + d]);
    }
}

__global__ void mean_streams_kernel(const float* __restrict__ X, __nv_bfloat16* __restrict__ out, int64_t total,
                                    int64_t hc, int64_t dim, int64_t ld_out) {
    dev::pdl_wait();
    dev::pdl_trigger();
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t row = i / dim, d = i % dim;  // out element (row, d)
        float sum = 0.0f;
        for (int64_t h = 0; h < hc; ++h) sum += X[(row * hc + h) * dim + d];
        out[row * ld_out + d] = __float2bfloat16(sum / static_cast<float>(hc));
    }
}

// hl rows [0, m): bf16(x); rows [m, 2m): bf16(x - bf16(x)). x [m, k] fp32.
__global__ void split_bf16_kernel(const float* __restrict__ x, __nv_bfloat16* __restrict__ hl, int64_t m, int64_t k) {
    dev::pdl_wait();
    dev::pdl_trigger();
    const int64_t n = m * k;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const __nv_bfloat16 hi = __float2bfloat16(x[i]);
        hl[i] = hi;
        hl[n + i] = __float2bfloat16(x[i] - __bfloat162float(hi));
    }
}

// y [half] = y2[i] + y2[half + i].
__global__ void add_halves_kernel(const float* __restrict__ y2, float* __restrict__ y, int64_t half) {
    dev::pdl_wait();
    dev::pdl_trigger();
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < half;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        y[i] = y2[i] + y2[half + i];
}

__global__ void bf16_to_f32_kernel(const __nv_bfloat16* __restrict__ x, float* __restrict__ y, int64_t n) {
    dev::pdl_wait();
    dev::pdl_trigger();
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        y[i] = __bfloat162float(x[i]);
}

__global__ void f32_to_bf16_kernel(const float* __restrict__ x, __nv_bfloat16* __restrict__ y, int64_t n) {
    dev::pdl_wait();
    dev::pdl_trigger();
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        y[i] = __float2bfloat16(x[i]);
}

__global__ void scale_f32_kernel(float* y, float s, int64_t n) {
    dev::pdl_wait();
    dev::pdl_trigger();
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        y[i] *= s;
}

}  // namespace

void add_bf16(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* y, int64_t n, cudaStream_t stream) {
    if (n <= 0) return;
    launch_pdl(add_bf16_kernel, grid_for(n, kEltThreads), kEltThreads, 0, stream, a, b, y, n);
    CUDA_CHECK_LAUNCH("add_bf16_kernel");
}

void add_to_streams(const __nv_bfloat16* e, float* X, int64_t n, int64_t hc, int64_t dim, cudaStream_t stream) {
    const int64_t total = n * hc * dim;
    if (total <= 0) return;
    launch_pdl(add_to_streams_kernel, grid_for(total, kEltThreads), kEltThreads, 0, stream, e, X, total, hc, dim);
    CUDA_CHECK_LAUNCH("add_to_streams_kernel");
}

void mean_streams(const float* X, __nv_bfloat16* out, int64_t n, int64_t hc, int64_t dim, int64_t ld_out,
                  cudaStream_t stream) {
    const int64_t total = n * dim;
    if (total <= 0) return;
    launch_pdl(mean_streams_kernel, grid_for(total, kEltThreads), kEltThreads, 0, stream, X, out, total, hc, dim,
               ld_out);
    CUDA_CHECK_LAUNCH("mean_streams_kernel");
}

void split_bf16(const float* x, __nv_bfloat16* hl, int64_t m, int64_t k, cudaStream_t stream) {
    if (m * k <= 0) return;
    launch_pdl(split_bf16_kernel, grid_for(m * k, kEltThreads), kEltThreads, 0, stream, x, hl, m, k);
    CUDA_CHECK_LAUNCH("split_bf16_kernel");
}

void add_halves(const float* y2, float* y, int64_t m, int64_t n, cudaStream_t stream) {
    if (m * n <= 0) return;
    launch_pdl(add_halves_kernel, grid_for(m * n, kEltThreads), kEltThreads, 0, stream, y2, y, m * n);
    CUDA_CHECK_LAUNCH("add_halves_kernel");
}

void bf16_to_f32(const __nv_bfloat16* x, float* y, int64_t n, cudaStream_t stream) {
    if (n <= 0) return;
    launch_pdl(bf16_to_f32_kernel, grid_for(n, kEltThreads), kEltThreads, 0, stream, x, y, n);
    CUDA_CHECK_LAUNCH("bf16_to_f32_kernel");
}

void f32_to_bf16(const float* x, __nv_bfloat16* y, int64_t n, cudaStream_t stream) {
    if (n <= 0) return;
    launch_pdl(f32_to_bf16_kernel, grid_for(n, kEltThreads), kEltThreads, 0, stream, x, y, n);
    CUDA_CHECK_LAUNCH("f32_to_bf16_kernel");
}

void scale_f32(float* y, float s, int64_t n, cudaStream_t stream) {
    if (n <= 0) return;
    launch_pdl(scale_f32_kernel, grid_for(n, kEltThreads), kEltThreads, 0, stream, y, s, n);
    CUDA_CHECK_LAUNCH("scale_f32_kernel");
}

}  // namespace onecard::cuda
