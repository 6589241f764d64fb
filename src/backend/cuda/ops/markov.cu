#include "backend/cuda/ops/markov.cuh"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops/pdl.cuh"
#include "core/error.h"

namespace onecard::cuda {
namespace {

constexpr int kWarps = 8;  // warps per block; one warp per vocabulary row v

// Lane l holds w2[v, 8l .. 8l + 7] (and further chunks of 256 for ranks above 256): the warp reads a
// w2 row as one coalesced run, then dots it with each sequence's w1 row (tiny, cached).
__global__ void markov_bias_kernel(float* __restrict__ logits, int64_t row0, int64_t row_stride, int64_t n_rows,
                                   const int32_t* __restrict__ prev, const __nv_bfloat16* __restrict__ w1,
                                   const __nv_bfloat16* __restrict__ w2, int64_t rank, int64_t vocab) {
    dev::pdl_wait();
    dev::pdl_trigger();
    const int lane = threadIdx.x & 31;
    const int64_t v = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
    if (v >= vocab) return;
    const __nv_bfloat16* wv = w2 + v * rank;
    for (int64_t r = 0; r < n_rows; ++r) {
        const __nv_bfloat16* m = w1 + int64_t(prev[r]) * rank;
        float acc = 0.0f;
        for (int64_t k0 = int64_t(lane) * 8; k0 < rank; k0 += 256) {
            const uint4 a = *reinterpret_cast<const uint4*>(wv + k0);
            const uint4 b = *reinterpret_cast<const uint4*>(m + k0);
            const auto* pa = reinterpret_cast<const __nv_bfloat162*>(&a);
            const auto* pb = reinterpret_cast<const __nv_bfloat162*>(&b);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float2 fa = __bfloat1622float2(pa[i]), fb = __bfloat1622float2(pb[i]);
                acc += fa.x * fb.x + fa.y * fb.y;
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (lane == 0) logits[(row0 + r * row_stride) * vocab + v] += acc;
    }
}

// One block per sequence: the threads stride over [h ; m] and reduce in a fixed order.
__global__ void confidence_kernel(const __nv_bfloat16* __restrict__ h, int64_t row0, int64_t row_stride,
                                  const int32_t* __restrict__ prev, const __nv_bfloat16* __restrict__ w,
                                  const __nv_bfloat16* __restrict__ w1, int64_t dim, int64_t rank,
                                  float* __restrict__ out) {
    dev::pdl_wait();
    dev::pdl_trigger();
    __shared__ float partial[32];
    const int64_t r = blockIdx.x;
    const __nv_bfloat16* hr = h + (row0 + r * row_stride) * dim;
    const __nv_bfloat16* m = w1 + int64_t(prev[r]) * rank;
    float acc = 0.0f;
    for (int64_t i = threadIdx.x; i < dim + rank; i += blockDim.x)
        acc += __bfloat162float(w[i]) * __bfloat162float(i < dim ? hr[i] : m[i - dim]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) partial[warp] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        float sum = 0.0f;
        for (int i = 0; i < static_cast<int>(blockDim.x >> 5); ++i) sum += partial[i];
        out[r] = sum;
    }
}

}  // namespace

void dspark_confidence(const __nv_bfloat16* h, int64_t row0, int64_t row_stride, int64_t n_rows, const int32_t* prev,
                       const __nv_bfloat16* w, const __nv_bfloat16* w1, int64_t dim, int64_t rank, float* out,
                       cudaStream_t stream) {
    if (n_rows <= 0) return;
    launch_pdl(confidence_kernel, static_cast<unsigned>(n_rows), 256, 0, stream, h, row0, row_stride, prev, w, w1, dim,
               rank, out);
    CUDA_CHECK_LAUNCH("confidence_kernel");
}

void markov_bias_add(float* logits, int64_t row0, int64_t row_stride, int64_t n_rows, const int32_t* prev,
                     const __nv_bfloat16* w1, const __nv_bfloat16* w2, int64_t rank, int64_t vocab,
                     cudaStream_t stream) {
    ONECARD_CHECK(rank > 0 && rank % 8 == 0, "markov head: rank {} (a multiple of 8)", rank);
    if (n_rows <= 0 || vocab <= 0) return;
    const auto blocks = static_cast<unsigned>((vocab + kWarps - 1) / kWarps);
    launch_pdl(markov_bias_kernel, blocks, kWarps * 32, 0, stream, logits, row0, row_stride, n_rows, prev, w1, w2, rank,
               vocab);
    CUDA_CHECK_LAUNCH("markov_bias_kernel");
}

}  // namespace onecard::cuda
