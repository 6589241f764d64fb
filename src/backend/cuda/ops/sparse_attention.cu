#include "backend/cuda/ops/sparse_attention.cuh"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops/common.cuh"

namespace onecard::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kHeadDim = 512;
constexpr int kDimsPerLane = kHeadDim / 32;  // 16
constexpr int kNopeDim = 448;
constexpr int kNopeLanes = kNopeDim / kDimsPerLane;  // lanes 0..27 hold nope dims, 28..31 rope dims

// Decodes this lane's 16 dims of one entry. Entries are only 8-byte aligned (584 = 8·73), so the
// loads are 8 bytes wide.
__device__ __forceinline__ void load_entry_dims(const uint8_t* e, int lane, float* v) {
    if (lane < kNopeLanes) {
        const int d0 = lane * kDimsPerLane;
        const float s = dev::ue8m0_to_float(e[kNopeDim + 2 * 64 + d0 / 64]);
        const uint2 a = *reinterpret_cast<const uint2*>(e + d0);
        const uint2 b = *reinterpret_cast<const uint2*>(e + d0 + 8);
        const uint32_t w[4] = {a.x, a.y, b.x, b.y};
#pragma unroll
        for (int i = 0; i < 16; ++i) v[i] = dev::e4m3_to_f32(static_cast<uint8_t>(w[i / 4] >> (8 * (i % 4)))) * s;
    } else {
        const uint8_t* r = e + kNopeDim + (lane - kNopeLanes) * kDimsPerLane * 2;
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            const uint2 u = *reinterpret_cast<const uint2*>(r + 8 * c);
            const __nv_bfloat162 p0 = *reinterpret_cast<const __nv_bfloat162*>(&u.x);
            const __nv_bfloat162 p1 = *reinterpret_cast<const __nv_bfloat162*>(&u.y);
            v[4 * c + 0] = __low2float(p0);
            v[4 * c + 1] = __high2float(p0);
            v[4 * c + 2] = __low2float(p1);
            v[4 * c + 3] = __high2float(p1);
        }
    }
}

// grid (n_heads, n_tok), 4 warps. Each warp runs an online softmax over keys warp, warp+4, ...;
// the four partial states and the sink are merged at the end.
__global__ void __launch_bounds__(kWarps * 32)
sparse_attn_kernel(const __nv_bfloat16* __restrict__ q, const uint8_t* __restrict__ pool,
                   const int64_t* __restrict__ kv_off, int64_t max_keys, const float* __restrict__ sink,
                   __nv_bfloat16* __restrict__ out, int64_t n_heads, float scale) {
    __shared__ float acc_s[kWarps][kHeadDim];
    __shared__ float m_s[kWarps], l_s[kWarps];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t h = blockIdx.x, t = blockIdx.y;
    const __nv_bfloat16* qh = q + (t * n_heads + h) * kHeadDim + lane * kDimsPerLane;
    float qv[kDimsPerLane];
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) qv[i] = __bfloat162float(qh[i]) * scale;
    float acc[kDimsPerLane];
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) acc[i] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    const int64_t* offs = kv_off + t * max_keys;
    for (int64_t j = warp; j < max_keys; j += kWarps) {
        const int64_t off = offs[j];
        if (off < 0) continue;  // uniform across the warp: every lane reads the same offset
        float kv[kDimsPerLane];
        load_entry_dims(pool + off, lane, kv);
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < kDimsPerLane; ++i) dot = fmaf(qv[i], kv[i], dot);
        const float logit = dev::warp_sum(dot);
        const float m_new = fmaxf(m, logit);
        const float corr = expf(m - m_new);  // 0 on the first key (m = −inf)
        const float p = expf(logit - m_new);
        l = l * corr + p;
#pragma unroll
        for (int i = 0; i < kDimsPerLane; ++i) acc[i] = fmaf(p, kv[i], acc[i] * corr);
        m = m_new;
    }
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) acc_s[warp][lane * kDimsPerLane + i] = acc[i];
    if (lane == 0) {
        m_s[warp] = m;
        l_s[warp] = l;
    }
    __syncthreads();
    // The sink is one more logit (not scaled) with a zero value vector: it only enlarges the denominator.
    float mx = sink[h];
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, m_s[w]);
    float denom = expf(sink[h] - mx);
    float wgt[kWarps];
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
        wgt[w] = m_s[w] == -INFINITY ? 0.0f : expf(m_s[w] - mx);
        denom = fmaf(l_s[w], wgt[w], denom);
    }
    const float inv = 1.0f / denom;
    __nv_bfloat16* oh = out + (t * n_heads + h) * kHeadDim;
    for (int d = threadIdx.x; d < kHeadDim; d += kWarps * 32) {
        float v = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) v = fmaf(acc_s[w][d], wgt[w], v);
        oh[d] = __float2bfloat16(v * inv);
    }
}

}  // namespace

void sparse_attention_decode(const __nv_bfloat16* q, const uint8_t* pool, const int64_t* kv_off, int64_t max_keys,
                             const float* sink, __nv_bfloat16* out, int64_t n_tok, const SparseAttnDims& d,
                             cudaStream_t stream) {
    ONECARD_CHECK(d.head_dim == kHeadDim && d.rope_dim == 64 && d.quant_block == 64,
                  "sparse_attention_decode: only head_dim 512 / rope 64 / quant block 64 is implemented (got {}/{}/{})",
                  d.head_dim, d.rope_dim, d.quant_block);
    ONECARD_CHECK(d.entry_bytes >= kNopeDim + 128 + 7 && d.entry_bytes % 8 == 0,
                  "sparse_attention_decode: entry_bytes {} is not a padded 584-style entry", d.entry_bytes);
    ONECARD_CHECK(n_tok < 65536 && max_keys >= 0, "sparse_attention_decode: {} tokens exceed the grid", n_tok);
    if (n_tok == 0) return;
    const dim3 grid(static_cast<unsigned>(d.n_heads), static_cast<unsigned>(n_tok));
    sparse_attn_kernel<<<grid, kWarps * 32, 0, stream>>>(q, pool, kv_off, max_keys, sink, out, d.n_heads, d.scale);
    CUDA_CHECK_LAUNCH("sparse_attn_kernel");
}

}  // namespace onecard::cuda
