#include "backend/cuda/ops/rope.cuh"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops/common.cuh"
#include "backend/cuda/ops/pdl.cuh"

namespace onecard::cuda {
namespace {

// Rotates pair `idx` of x [tokens, n_vec, dim] (pair i of vector idx / n_pairs, on the trailing
// 2·n_pairs dims) at its token's position (dev::rope_rotate: the bits kv_write.cu's fused
// indexer-q path gives too).
__device__ __forceinline__ void rope_one_pair(__nv_bfloat16* x, int64_t idx, int64_t n_vec, int64_t dim,
                                              const float* __restrict__ inv_freq, int n_pairs,
                                              const int32_t* __restrict__ positions, float sign) {
    const int i = static_cast<int>(idx % n_pairs);
    const int64_t vec = idx / n_pairs;  // flattened (token, vector)
    const int64_t tok = vec / n_vec;
    __nv_bfloat16* p = x + vec * dim + (dim - 2 * n_pairs) + 2 * i;
    float ra, rb;
    dev::rope_rotate(__bfloat162float(p[0]), __bfloat162float(p[1]), inv_freq[i], positions[tok], sign, ra, rb);
    p[0] = __float2bfloat16(ra);
    p[1] = __float2bfloat16(rb);
}

// One thread per pair: [n_tok·n_vec·n_pairs] threads.
__global__ void rope_kernel(__nv_bfloat16* x, int64_t n_total_pairs, int64_t n_vec, int64_t dim,
                            const float* __restrict__ inv_freq, int n_pairs, const int32_t* __restrict__ positions,
                            float sign) {
    dev::pdl_wait();
    dev::pdl_trigger();
    const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (idx >= n_total_pairs) return;
    rope_one_pair(x, idx, n_vec, dim, inv_freq, n_pairs, positions, sign);
}

// rope_kernel over two tensors in one launch: threads [0, n_a) take x_a, the rest x_b.
__global__ void rope_pair_kernel(__nv_bfloat16* xa, int64_t n_a, int64_t n_vec_a, __nv_bfloat16* xb, int64_t n_total,
                                 int64_t n_vec_b, int64_t dim, const float* __restrict__ inv_freq, int n_pairs,
                                 const int32_t* __restrict__ positions, float sign) {
    dev::pdl_wait();
    dev::pdl_trigger();
    int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (idx >= n_total) return;
    const bool second = idx >= n_a;
    if (second) idx -= n_a;
    __nv_bfloat16* x = second ? xb : xa;
    const int64_t n_vec = second ? n_vec_b : n_vec_a;
    rope_one_pair(x, idx, n_vec, dim, inv_freq, n_pairs, positions, sign);
}

}  // namespace

void rope_bf16_pair(__nv_bfloat16* x_a, int64_t n_vec_a, __nv_bfloat16* x_b, int64_t n_vec_b, int64_t n_tok,
                    int64_t dim, const RopeRotation& r, cudaStream_t stream) {
    const float* inv_freq = r.inv_freq;
    const int64_t n_rope = r.n_rope;
    const int32_t* positions = r.positions;
    const RopeDirection direction = r.direction;
    ONECARD_CHECK(n_rope > 0 && n_rope % 2 == 0 && n_rope <= dim,
                  "rope_bf16_pair: n_rope {} must be even and <= dim {}", n_rope, dim);
    const int64_t n_a = n_tok * n_vec_a * (n_rope / 2), n_total = n_a + n_tok * n_vec_b * (n_rope / 2);
    if (n_total == 0) return;
    const int threads = 256;
    launch_pdl(rope_pair_kernel, static_cast<unsigned>((n_total + threads - 1) / threads), threads, 0, stream, x_a, n_a,
               n_vec_a, x_b, n_total, n_vec_b, dim, inv_freq, static_cast<int>(n_rope / 2), positions,
               direction == RopeDirection::Inverse ? -1.0f : 1.0f);
    CUDA_CHECK_LAUNCH("rope_pair_kernel");
}

void rope_bf16(__nv_bfloat16* x, int64_t n_tok, int64_t n_vec, int64_t dim, const RopeRotation& r,
               cudaStream_t stream) {
    const float* inv_freq = r.inv_freq;
    const int64_t n_rope = r.n_rope;
    const int32_t* positions = r.positions;
    const RopeDirection direction = r.direction;
    ONECARD_CHECK(n_rope > 0 && n_rope % 2 == 0 && n_rope <= dim, "rope_bf16: n_rope {} must be even and <= dim {}",
                  n_rope, dim);
    const int64_t n_total = n_tok * n_vec * (n_rope / 2);
    if (n_total == 0) return;
    const int threads = 256;
    const int64_t blocks = (n_total + threads - 1) / threads;
    launch_pdl(rope_kernel, static_cast<unsigned>(blocks), threads, 0, stream, x, n_total, n_vec, dim, inv_freq,
               static_cast<int>(n_rope / 2), positions, direction == RopeDirection::Inverse ? -1.0f : 1.0f);
    CUDA_CHECK_LAUNCH("rope_kernel");
}

}  // namespace onecard::cuda
