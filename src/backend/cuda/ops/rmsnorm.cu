#include "backend/cuda/ops/rmsnorm.cuh"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops/common.cuh"
#include "backend/cuda/ops/pdl.cuh"

#include <algorithm>

namespace onecard::cuda {
namespace {

// One row by one block: a row is at most a few thousand elements, so one pass for the sum of squares
// and one for the scaled write (the second read hits L1/L2).
// In, Out: __nv_bfloat16 or float (the fp32 residual streams and the head's hidden).
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) {
    return __bfloat162float(v);
}
__device__ __forceinline__ float to_f32(float v) {
    return v;
}
__device__ __forceinline__ void store(__nv_bfloat16& y, float v) {
    y = __float2bfloat16(v);
}
__device__ __forceinline__ void store(float& y, float v) {
    y = v;
}

template <typename In, typename Out>
__device__ __forceinline__ void rmsnorm_row(const In* __restrict__ xr, const __nv_bfloat16* __restrict__ w, Out* yr,
                                            int64_t dim, float eps, float* scratch) {
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
        const float v = to_f32(xr[i]);
        ss += v * v;
    }
    ss = dev::block_sum(ss, scratch);
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(dim) + eps);
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
        const float v = to_f32(xr[i]) * inv;
        store(yr[i], w ? __bfloat162float(w[i]) * v : v);
    }
}

template <typename In, typename Out>
__global__ void rmsnorm_kernel(const In* __restrict__ x, const __nv_bfloat16* __restrict__ w, Out* y, int64_t dim,
                               float eps, int64_t ld_x, int64_t ld_y) {
    dev::pdl_wait();
    dev::pdl_trigger();
    __shared__ float scratch[32];
    rmsnorm_row(x + blockIdx.x * ld_x, w, y + blockIdx.x * ld_y, dim, eps, scratch);
}

// Two row sets in one launch (blockIdx.y picks the set), each row as rmsnorm_kernel's.
// Each set's strides arrive resolved (0 replaced by dim).
__global__ void rmsnorm_pair_kernel(RmsNormRows a, RmsNormRows b, float eps) {
    dev::pdl_wait();
    dev::pdl_trigger();
    __shared__ float scratch[32];
    // Fields, not a reference into the parameter space (a selected reference costs a local copy).
    const bool second = blockIdx.y != 0;
    rmsnorm_row((second ? b.x : a.x) + blockIdx.x * (second ? b.ld_x : a.ld_x), second ? b.w : a.w,
                (second ? b.y : a.y) + blockIdx.x * (second ? b.ld_y : a.ld_y), second ? b.dim : a.dim, eps, scratch);
}

template <typename In, typename Out>
void launch_rmsnorm(const In* x, const __nv_bfloat16* weight, Out* y, int64_t n_rows, int64_t dim, float eps,
                    cudaStream_t stream, int64_t ld_x, int64_t ld_y) {
    ONECARD_CHECK(n_rows >= 0 && dim > 0, "rmsnorm: bad shape [{}, {}]", n_rows, dim);
    ONECARD_CHECK(n_rows < (int64_t{1} << 31), "rmsnorm: {} rows exceed the grid", n_rows);
    if (n_rows == 0) return;
    const int threads = dim >= 2048 ? 256 : 128;
    launch_pdl(rmsnorm_kernel<In, Out>, static_cast<unsigned>(n_rows), threads, 0, stream, x, weight, y, dim, eps,
               ld_x ? ld_x : dim, ld_y ? ld_y : dim);
    CUDA_CHECK_LAUNCH("rmsnorm_kernel");
}

}  // namespace

void rmsnorm_bf16(const __nv_bfloat16* x, const __nv_bfloat16* weight, __nv_bfloat16* y, int64_t n_rows, int64_t dim,
                  float eps, cudaStream_t stream, int64_t ld_x, int64_t ld_y) {
    launch_rmsnorm(x, weight, y, n_rows, dim, eps, stream, ld_x, ld_y);
}

void rmsnorm_f32_to_bf16(const float* x, const __nv_bfloat16* weight, __nv_bfloat16* y, int64_t n_rows, int64_t dim,
                         float eps, cudaStream_t stream) {
    launch_rmsnorm(x, weight, y, n_rows, dim, eps, stream, 0, 0);
}

void rmsnorm_f32(const float* x, const __nv_bfloat16* weight, float* y, int64_t n_rows, int64_t dim, float eps,
                 cudaStream_t stream) {
    launch_rmsnorm(x, weight, y, n_rows, dim, eps, stream, 0, 0);
}

void rmsnorm_bf16_pair(const RmsNormRows& first, const RmsNormRows& second, int64_t n_rows, float eps,
                       cudaStream_t stream) {
    ONECARD_CHECK(n_rows >= 0 && n_rows < (int64_t{1} << 31) && first.dim > 0 && second.dim > 0,
                  "rmsnorm_bf16_pair: bad shape {} rows, dims {} and {}", n_rows, first.dim, second.dim);
    if (n_rows == 0) return;
    // The thread count rmsnorm_bf16 picks for the wider set; the other gets the same (the block
    // size does not change a row's result beyond the fp32 summation order, which tests bound).
    const int threads = std::max(first.dim, second.dim) >= 2048 ? 256 : 128;
    auto rows = [](RmsNormRows r) {
        r.ld_x = r.ld_x ? r.ld_x : r.dim;
        r.ld_y = r.ld_y ? r.ld_y : r.dim;
        return r;
    };
    launch_pdl(rmsnorm_pair_kernel, dim3(static_cast<unsigned>(n_rows), 2), threads, 0, stream, rows(first),
               rows(second), eps);
    CUDA_CHECK_LAUNCH("rmsnorm_pair_kernel");
}

}  // namespace onecard::cuda
