#include "backend/cuda/ops/rmsnorm.cuh"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops/common.cuh"
#include "backend/cuda/ops/pdl.cuh"

namespace onecard::cuda {
namespace {

// One block per row: a row is at most a few thousand elements, so one pass for the sum of squares
// and one for the scaled write (the second read hits L1/L2).
__global__ void rmsnorm_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                               __nv_bfloat16* y, int64_t dim, float eps, int64_t ld_x, int64_t ld_y) {
    dev::pdl_wait();
    dev::pdl_trigger();
    __shared__ float scratch[32];
    const __nv_bfloat16* xr = x + blockIdx.x * ld_x;
    __nv_bfloat16* yr = y + blockIdx.x * ld_y;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
        const float v = __bfloat162float(xr[i]);
        ss += v * v;
    }
    ss = dev::block_sum(ss, scratch);
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(dim) + eps);
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
        const float v = __bfloat162float(xr[i]) * inv;
        yr[i] = __float2bfloat16(w ? __bfloat162float(w[i]) * v : v);
    }
}

}  // namespace

void rmsnorm_bf16(const __nv_bfloat16* x, const __nv_bfloat16* weight, __nv_bfloat16* y, int64_t n_rows, int64_t dim,
                  float eps, cudaStream_t stream, int64_t ld_x, int64_t ld_y) {
    ONECARD_CHECK(n_rows >= 0 && dim > 0, "rmsnorm_bf16: bad shape [{}, {}]", n_rows, dim);
    ONECARD_CHECK(n_rows < (int64_t{1} << 31), "rmsnorm_bf16: {} rows exceed the grid", n_rows);
    if (n_rows == 0) return;
    const int threads = dim >= 2048 ? 256 : 128;
    launch_pdl(rmsnorm_kernel, static_cast<unsigned>(n_rows), threads, 0, stream, x, weight, y, dim, eps,
               ld_x ? ld_x : dim, ld_y ? ld_y : dim);
    CUDA_CHECK_LAUNCH("rmsnorm_kernel");
}

}  // namespace onecard::cuda
