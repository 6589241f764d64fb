#include "backend/cuda/ops/fp8_quant.cuh"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops/common.cuh"
#include "backend/cuda/ops/pdl.cuh"

namespace onecard::cuda {
namespace {

// One warp per 128-element block: each lane owns 4 consecutive elements (one 8-byte load).
__global__ void quantize_fp8_kernel(const __nv_bfloat16* __restrict__ x, uint8_t* __restrict__ q,
                                    float* __restrict__ scales, int64_t n_blocks_total, int64_t n_kb, int64_t n_rows,
                                    bool kblock_major) {
    dev::pdl_wait();
    dev::pdl_trigger();
    const int64_t blk = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (blk >= n_blocks_total) return;
    const int64_t base = blk * 128 + lane * 4;
    const uint2 raw = *reinterpret_cast<const uint2*>(x + base);
    const __nv_bfloat162 p0 = *reinterpret_cast<const __nv_bfloat162*>(&raw.x);
    const __nv_bfloat162 p1 = *reinterpret_cast<const __nv_bfloat162*>(&raw.y);
    const float v[4] = {__low2float(p0), __high2float(p0), __low2float(p1), __high2float(p1)};
    float s;
    *reinterpret_cast<uint32_t*>(q + base) = dev::fp8_quant_block4(v, s);
    if (lane == 0) {
        const int64_t row = blk / n_kb, kb = blk % n_kb;
        scales[kblock_major ? kb * n_rows + row : row * n_kb + kb] = s;
    }
}

__global__ void ue8m0_to_f32_kernel(const uint8_t* __restrict__ in, float* __restrict__ out, int64_t rows, int64_t cols,
                                    bool transpose, int64_t ld_out) {
    dev::pdl_wait();
    dev::pdl_trigger();
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= rows * cols) return;
    const int64_t r = i / cols, c = i % cols;
    out[transpose ? c * ld_out + r : r * ld_out + c] = dev::ue8m0_to_float(in[i]);
}

}  // namespace

void quantize_fp8_1x128(const __nv_bfloat16* x, uint8_t* q, float* scales, int64_t n_rows, int64_t k,
                        ActScaleLayout layout, cudaStream_t stream) {
    ONECARD_CHECK(k > 0 && k % 128 == 0, "quantize_fp8_1x128: k {} is not a multiple of 128", k);
    const int64_t n_kb = k / 128, n_blocks = n_rows * n_kb;
    if (n_blocks == 0) return;
    const int threads = 256;  // 8 blocks of 128 per CUDA block
    const int64_t grid = (n_blocks * 32 + threads - 1) / threads;
    launch_pdl(quantize_fp8_kernel, static_cast<unsigned>(grid), threads, 0, stream, x, q, scales, n_blocks, n_kb,
               n_rows, layout == ActScaleLayout::KBlockMajor);
    CUDA_CHECK_LAUNCH("quantize_fp8_kernel");
}

void ue8m0_to_f32(const uint8_t* in, float* out, int64_t rows, int64_t cols, bool transpose, cudaStream_t stream,
                  int64_t ld_out) {
    const int64_t n = rows * cols;
    if (n == 0) return;
    if (ld_out == 0) ld_out = transpose ? rows : cols;
    const int threads = 256;
    launch_pdl(ue8m0_to_f32_kernel, static_cast<unsigned>((n + threads - 1) / threads), threads, 0, stream, in, out,
               rows, cols, transpose, ld_out);
    CUDA_CHECK_LAUNCH("ue8m0_to_f32_kernel");
}

}  // namespace onecard::cuda
