#include "backend/cuda/ops/hyper_connection.cuh"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops/bf16_gemm.cuh"
#include "backend/cuda/ops/common.cuh"
#include "backend/cuda/ops/fp8_quant.cuh"
#include "backend/cuda/ops/pdl.cuh"
#include "backend/cuda/ops/rmsnorm.cuh"

#include <algorithm>
#include <cstdint>

namespace onecard::cuda {
namespace {

constexpr int kHc = static_cast<int>(kHcStreams);
constexpr int kMix = static_cast<int>(kHcMixes);
constexpr int kPreThreads = 256;

// Split-K mixes: 8 warps per block; lane j < 24 owns mix j (its fn row), so every lane keeps its own
// running dot product over the warp's range of 8-element chunks and no cross-lane reduction is
// needed (lanes 24..31 shadow row 23 and drop their result). Each fn chunk (32 B per lane, one
// sector) is reused for a tile of up to 32 tokens whose X chunks are warp-wide broadcast loads.
constexpr int kMixWarps = 8;
constexpr int kMixThreads = kMixWarps * 32;
constexpr int kMaxTile = 32;
// Blocks the split-K grid aims for: 4 per SM on the H200's 132, so decode sizes fill the GPU.
constexpr int64_t kTargetBlocks = 528;
// Finishing kernel: one block per token; each of its kFinXThreads X threads keeps up to kFinCached
// 8-wide d-chunks of all 4 streams in registers (D <= 4096), so X is read once for Σv² and the
// collapse. One more warp runs the Sinkhorn (39 dependent normalisations, the block's longest chain)
// while the X threads collapse.
constexpr int kFinXThreads = 256;
constexpr int kFinXWarps = kFinXThreads / 32;
constexpr int kFinThreads = kFinXThreads + 32;
constexpr int kFinCached = 2;

struct PrePlan {
    int tile = 1;        // tokens per block of the split-K kernel
    int64_t tiles = 1;   // ceil(n_tok / tile)
    int64_t slices = 1;  // blocks over the 4·D reduction per tile
};

PrePlan pre_plan(int64_t n_tok, int64_t dim) {
    PrePlan pl;
    pl.tile = n_tok <= 1 ? 1 : n_tok <= 2 ? 2 : n_tok <= 4 ? 4 : n_tok <= 8 ? 8 : n_tok <= 16 ? 16 : kMaxTile;
    pl.tiles = (n_tok + pl.tile - 1) / pl.tile;
    const int64_t chunks = kHc * dim / 8;
    const int64_t max_slices = std::max<int64_t>(1, chunks / kMixWarps);  // every warp gets >= 1 chunk
    // Also keep the partial sums (n·slices rows of 24) within half of fn's size: the scratch is written
    // and read back, and at n = 64 an uncapped 256 slices would move as many bytes as fn itself.
    const int64_t traffic_cap = std::max<int64_t>(1, kHc * dim / 2 / n_tok);
    pl.slices = std::min({max_slices, traffic_cap, std::max<int64_t>(1, (kTargetBlocks + pl.tiles - 1) / pl.tiles)});
    return pl;
}

bool aligned16(const void* q) {
    return (reinterpret_cast<uintptr_t>(q) & 15u) == 0;
}

// The split path reads X, fn with 16-byte loads and writes x with them: needs D % 8 == 0 and aligned rows.
bool split_path_ok(const void* X, const void* fn, const void* x, int64_t dim) {
    return dim % 8 == 0 && aligned16(X) && aligned16(fn) && aligned16(x);
}

__device__ __forceinline__ float bf16_lo(uint32_t u) {
    return __uint_as_float(u << 16);
}
__device__ __forceinline__ float bf16_hi(uint32_t u) {
    return __uint_as_float(u & 0xFFFF0000u);
}

// 8 consecutive fp32 stream values: one 8-element d-chunk (two 16-byte loads).
struct F8 {
    float4 lo = make_float4(0.f, 0.f, 0.f, 0.f), hi = make_float4(0.f, 0.f, 0.f, 0.f);
};
// Read-only (__ldg) and plain loads of a chunk (16-byte aligned: rows of 4·D floats, D % 8 == 0).
__device__ __forceinline__ F8 ldg8(const float* p) {
    return {__ldg(reinterpret_cast<const float4*>(p)), __ldg(reinterpret_cast<const float4*>(p + 4))};
}
__device__ __forceinline__ F8 ld8(const float* p) {
    return {*reinterpret_cast<const float4*>(p), *reinterpret_cast<const float4*>(p + 4)};
}
__device__ __forceinline__ void st8(float* p, const float* o) {
    *reinterpret_cast<float4*>(p) = make_float4(o[0], o[1], o[2], o[3]);
    *reinterpret_cast<float4*>(p + 4) = make_float4(o[4], o[5], o[6], o[7]);
}

// acc + f·v over 8 elements, in element order.
__device__ __forceinline__ float dot8(const float4& f0, const float4& f1, const F8& v, float acc) {
    acc = fmaf(f0.x, v.lo.x, acc);
    acc = fmaf(f0.y, v.lo.y, acc);
    acc = fmaf(f0.z, v.lo.z, acc);
    acc = fmaf(f0.w, v.lo.w, acc);
    acc = fmaf(f1.x, v.hi.x, acc);
    acc = fmaf(f1.y, v.hi.y, acc);
    acc = fmaf(f1.z, v.hi.z, acc);
    acc = fmaf(f1.w, v.hi.w, acc);
    return acc;
}

__device__ __forceinline__ float sumsq8(const F8& v, float acc) {
    const float f[8] = {v.lo.x, v.lo.y, v.lo.z, v.lo.w, v.hi.x, v.hi.y, v.hi.z, v.hi.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) acc = fmaf(f[i], f[i], acc);
    return acc;
}

__device__ __forceinline__ void unpack8(const F8& v, float* f) {
    f[0] = v.lo.x;
    f[1] = v.lo.y;
    f[2] = v.lo.z;
    f[3] = v.lo.w;
    f[4] = v.hi.x;
    f[5] = v.hi.y;
    f[6] = v.hi.z;
    f[7] = v.hi.w;
}

// 8 bf16 values (sub-block outputs, norm weights) to fp32.
__device__ __forceinline__ void unpack8(const uint4& v, float* f) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        f[2 * i] = bf16_lo(w[i]);
        f[2 * i + 1] = bf16_hi(w[i]);
    }
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
}

__device__ __forceinline__ float sigmoidf(float x) {
    return 1.0f / (1.0f + expf(-x));
}

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

// Mixes of one token (already × rsqrt) -> pre/post/comb outputs; pre also to pre_s (shared). One thread.
__device__ void finish_mixes(const float* mix, const float* scale, const float* base, int64_t t, int iters,
                             float hc_eps, float* pre_s, float* pre_out, float* post_out, float* comb_out) {
    float comb[kHc * kHc];
    for (int j = 0; j < kHc; ++j) {
        const float pre = sigmoidf(mix[j] * scale[0] + base[j]) + hc_eps;
        pre_s[j] = pre;
        pre_out[t * kHc + j] = pre;
        post_out[t * kHc + j] = 2.0f * sigmoidf(mix[kHc + j] * scale[1] + base[kHc + j]);
    }
    for (int e = 0; e < kHc * kHc; ++e) comb[e] = mix[2 * kHc + e] * scale[2] + base[2 * kHc + e];
    sinkhorn4(comb, iters, hc_eps);
    for (int e = 0; e < kHc * kHc; ++e) comb_out[t * kHc * kHc + e] = comb[e];
}

// Warp-parallel Sinkhorn (all 32 lanes call it): lane l holds c[j][k] with j·4 + k = l & 15 (lanes
// 16..31 mirror 0..15). A row is lanes differing in bits 0-1 (xor 1, 2), a column bits 2-3 (xor 4, 8);
// the butterfly gives every lane of a row/column the same bits (fp add commutes). The operation
// sequence is sinkhorn4's; only the 4-term sums pair as (a+b)+(c+d) instead of the CPU's left fold.
// One division per lane per step instead of 16 serial ones: ~40 short steps instead of ~640 divisions.
__device__ float sinkhorn4_lanes(float c, int iters, float eps) {
    constexpr unsigned kAll = 0xFFFFFFFFu;
    float m = fmaxf(c, __shfl_xor_sync(kAll, c, 1));
    m = fmaxf(m, __shfl_xor_sync(kAll, m, 2));
    c = expf(c - m);
    float s = c + __shfl_xor_sync(kAll, c, 1);
    s += __shfl_xor_sync(kAll, s, 2);
    c = c / s + eps;
    for (int it = 0; it < iters; ++it) {
        if (it > 0) {
            s = c + __shfl_xor_sync(kAll, c, 1);
            s += __shfl_xor_sync(kAll, s, 2);
            c /= s + eps;
        }
        s = c + __shfl_xor_sync(kAll, c, 4);
        s += __shfl_xor_sync(kAll, s, 8);
        c /= s + eps;
    }
    return c;
}

__global__ void __launch_bounds__(kPreThreads)
    hc_pre_kernel(const float* __restrict__ X, const float* __restrict__ fn, const float* __restrict__ scale,
                  const float* __restrict__ base, __nv_bfloat16* __restrict__ x, float* __restrict__ pre_out,
                  float* __restrict__ post_out, float* __restrict__ comb_out, int64_t dim, int iters, float hc_eps,
                  float norm_eps) {
    dev::pdl_wait();
    dev::pdl_trigger();
    __shared__ float red[kMix + 1][kPreThreads / 32];
    __shared__ float pre_s[kHc];
    const int64_t t = blockIdx.x;
    const int64_t flat = kHc * dim;
    const float* Xt = X + t * flat;
    float acc[kMix + 1];  // [0, 24): fn·v, [24]: Σv²
#pragma unroll
    for (int j = 0; j <= kMix; ++j) acc[j] = 0.0f;
    for (int64_t i = threadIdx.x; i < flat; i += kPreThreads) {
        const float v = Xt[i];
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
        for (int j = 0; j < kMix; ++j) tot[j] *= r;
        finish_mixes(tot, scale, base, t, iters, hc_eps, pre_s, pre_out, post_out, comb_out);
    }
    __syncthreads();
    for (int64_t d = threadIdx.x; d < dim; d += kPreThreads) {
        float v = 0.0f;
#pragma unroll
        for (int j = 0; j < kHc; ++j) v = fmaf(pre_s[j], Xt[j * dim + d], v);
        x[t * dim + d] = __float2bfloat16(v);
    }
}

// Split-K partial mixes: block (tile, slice) -> part[t, j, slice] = Σ over the slice of fn[j, i]·v[t, i]
// for the tile's tokens (slice-minor, so the finish reads each mix's partials as one contiguous run). The slice's
// 8-element chunks are spread evenly over its 8 warps.
template <int TT>
__global__ void __launch_bounds__(kMixThreads, 2)
    hc_mix_partial_kernel(const float* __restrict__ X, const float* __restrict__ fn, float* __restrict__ part,
                          int64_t n_tok, int64_t flat, int64_t slices) {
    __shared__ float red[kMixWarps][TT][kMix];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t t0 = static_cast<int64_t>(blockIdx.x) * TT, slice = blockIdx.y;
    const int nt = static_cast<int>(min(static_cast<int64_t>(TT), n_tok - t0));
    const int64_t chunks = flat / 8, n_warps = slices * kMixWarps, gw = slice * kMixWarps + warp;
    const int64_t c_begin = gw * chunks / n_warps, c_end = (gw + 1) * chunks / n_warps;
    const float* f_row = fn + static_cast<int64_t>(lane < kMix ? lane : kMix - 1) * flat;
    const float* Xt = X + t0 * flat;
    float acc[TT];
#pragma unroll
    for (int t = 0; t < TT; ++t) acc[t] = 0.0f;
    // fn is a weight (nothing in the step writes it): the first chunk is requested before waiting for
    // the previous kernel (pdl.cuh), then each chunk's fn one iteration ahead. At decode sizes a warp
    // has about one chunk, so this hides the whole fn read behind that kernel's tail.
    float4 f0n = make_float4(0.f, 0.f, 0.f, 0.f), f1n = f0n;
    if (c_begin < c_end) {
        f0n = __ldg(reinterpret_cast<const float4*>(f_row + c_begin * 8));
        f1n = __ldg(reinterpret_cast<const float4*>(f_row + c_begin * 8 + 4));
    }
    dev::pdl_wait();
    dev::pdl_trigger();
    for (int64_t c = c_begin; c < c_end; ++c) {
        const float4 f0 = f0n, f1 = f1n;
        if (c + 1 < c_end) {
            f0n = __ldg(reinterpret_cast<const float4*>(f_row + (c + 1) * 8));
            f1n = __ldg(reinterpret_cast<const float4*>(f_row + (c + 1) * 8 + 4));
        }
#pragma unroll
        for (int t = 0; t < TT; ++t) {
            if (t < nt) {
                const F8 v = ldg8(Xt + t * flat + c * 8);  // broadcast
                acc[t] = dot8(f0, f1, v, acc[t]);
            }
        }
    }
    if (lane < kMix) {
#pragma unroll
        for (int t = 0; t < TT; ++t) red[warp][t][lane] = acc[t];
    }
    __syncthreads();
    for (int e = threadIdx.x; e < nt * kMix; e += kMixThreads) {
        const int t = e / kMix, j = e % kMix;
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < kMixWarps; ++w) s += red[w][t][j];
        part[((t0 + t) * kMix + j) * slices + slice] = s;
    }
}

// One block per token: mixes = Σ_slices part, Σv² from the token's streams (kept in registers),
// rsqrt, sigmoid (8 lanes), then the X warps collapse x = Σ_j pre_j·X_j while the last warp runs the
// Sinkhorn (sinkhorn4_lanes) and writes comb.
__global__ void __launch_bounds__(kFinThreads)
    hc_pre_finish_kernel(const float* __restrict__ X, const float* __restrict__ part, const float* __restrict__ scale,
                         const float* __restrict__ base, __nv_bfloat16* __restrict__ x, float* __restrict__ pre_out,
                         float* __restrict__ post_out, float* __restrict__ comb_out, int64_t dim, int64_t slices,
                         int iters, float hc_eps, float norm_eps, const __nv_bfloat16* __restrict__ rms_w,
                         float rms_eps, uint8_t* __restrict__ xq, float* __restrict__ xs) {
    dev::pdl_wait();
    dev::pdl_trigger();
    static_assert(kMix % kFinXWarps == 0, "each X warp sums kMix / kFinXWarps mixes");
    constexpr int kMixPerWarp = kMix / kFinXWarps;
    __shared__ float mix_s[kMix];
    __shared__ float sum_scratch[32];
    __shared__ float pre_s[kHc];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const bool x_warp = warp < kFinXWarps;
    const int64_t t = blockIdx.x, flat = kHc * dim, dchunks = dim / 8;
    const float* Xt = X + t * flat;
    // [kFinCached][4] chunks of 8 floats: this thread's d-chunks of every stream, loaded first so the
    // partial sums below overlap their latency. The Sinkhorn warp holds none.
    F8 xc[kFinCached][kHc];
#pragma unroll
    for (int i = 0; i < kFinCached; ++i) {
        const int64_t c = threadIdx.x + static_cast<int64_t>(i) * kFinXThreads;
#pragma unroll
        for (int j = 0; j < kHc; ++j) xc[i][j] = x_warp && c < dchunks ? ldg8(Xt + j * dim + c * 8) : F8{};
    }
    // Partial mixes [24, slices] of this token: X warp w sums mixes w, w + 8, w + 16, its lanes striding
    // over the slices (coalesced, several loads in flight per lane), then a warp sum.
    if (x_warp) {
        float s[kMixPerWarp];
#pragma unroll
        for (int q = 0; q < kMixPerWarp; ++q) s[q] = 0.0f;
        const float* pt = part + t * kMix * slices;
#pragma unroll 4
        for (int64_t sl = lane; sl < slices; sl += 32) {
#pragma unroll
            for (int q = 0; q < kMixPerWarp; ++q) s[q] += pt[(warp + q * kFinXWarps) * slices + sl];
        }
#pragma unroll
        for (int q = 0; q < kMixPerWarp; ++q) {
            const float v = dev::warp_sum(s[q]);
            if (lane == 0) mix_s[warp + q * kFinXWarps] = v;
        }
    }
    float sq = 0.0f;  // zero chunks (past D, or the Sinkhorn warp) add nothing
#pragma unroll
    for (int i = 0; i < kFinCached; ++i)
#pragma unroll
        for (int j = 0; j < kHc; ++j) sq = sumsq8(xc[i][j], sq);
    if (x_warp) {
        for (int64_t c = threadIdx.x + static_cast<int64_t>(kFinCached) * kFinXThreads; c < dchunks; c += kFinXThreads)
            for (int j = 0; j < kHc; ++j) sq = sumsq8(ldg8(Xt + j * dim + c * 8), sq);
    }
    sq = dev::block_sum(sq, sum_scratch);  // its barriers also publish mix_s
    const float r = 1.0f / sqrtf(sq / static_cast<float>(flat) + norm_eps);
    if (threadIdx.x < kMix) mix_s[threadIdx.x] *= r;
    __syncthreads();
    if (threadIdx.x < kHc) {
        const int j = threadIdx.x;
        const float pre = sigmoidf(mix_s[j] * scale[0] + base[j]) + hc_eps;
        pre_s[j] = pre;
        pre_out[t * kHc + j] = pre;
    } else if (threadIdx.x < 2 * kHc) {
        const int j = threadIdx.x - kHc;
        post_out[t * kHc + j] = 2.0f * sigmoidf(mix_s[kHc + j] * scale[1] + base[kHc + j]);
    }
    __syncthreads();
    if (!x_warp) {
        const int e = lane & (kHc * kHc - 1);
        const float c = sinkhorn4_lanes(mix_s[2 * kHc + e] * scale[2] + base[2 * kHc + e], iters, hc_eps);
        if (lane < kHc * kHc) comb_out[t * kHc * kHc + e] = c;
        if (rms_w == nullptr) return;
        // The fused RMSNorm's block sum needs every warp; this one adds nothing.
        const float ss = dev::block_sum(0.0f, sum_scratch);
        (void)ss;
        return;
    }
    if (rms_w != nullptr) {
        // x = RMSNorm(Σ_j pre_j·X_j) · w, as rmsnorm_kernel computes it from the bf16 collapse (the
        // caller guarantees every chunk is cached: D <= kFinCached·kFinXThreads·8).
        float pre[kHc];
#pragma unroll
        for (int j = 0; j < kHc; ++j) pre[j] = pre_s[j];
        float o[kFinCached][8];
        float ss = 0.0f;
#pragma unroll
        for (int i = 0; i < kFinCached; ++i) {
            float xs[kHc][8];
#pragma unroll
            for (int j = 0; j < kHc; ++j) unpack8(xc[i][j], xs[j]);
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                float acc = 0.0f;
#pragma unroll
                for (int j = 0; j < kHc; ++j) acc = fmaf(pre[j], xs[j][e], acc);
                o[i][e] = __bfloat162float(__float2bfloat16(acc));  // the collapse is bf16 (REF)
                ss += o[i][e] * o[i][e];
            }
        }
        ss = dev::block_sum(ss, sum_scratch);
        const float inv = 1.0f / sqrtf(ss / static_cast<float>(dim) + rms_eps);
#pragma unroll
        for (int i = 0; i < kFinCached; ++i) {
            const int64_t c = threadIdx.x + static_cast<int64_t>(i) * kFinXThreads;
            const bool in = c < dchunks;
            float y[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
            if (in) {
                const uint4 wv = __ldg(reinterpret_cast<const uint4*>(rms_w + c * 8));
                float wf[8];
                unpack8(wv, wf);
#pragma unroll
                for (int e = 0; e < 8; ++e) y[e] = wf[e] * (o[i][e] * inv);
                *reinterpret_cast<uint4*>(x + t * dim + c * 8) = make_uint4(
                    pack_bf16x2(y[0], y[1]), pack_bf16x2(y[2], y[3]), pack_bf16x2(y[4], y[5]), pack_bf16x2(y[6], y[7]));
            }
            if (xq != nullptr) {
                // quantize_fp8_1x128 of the bf16 x just stored: a 128-wide block is 16 consecutive
                // chunks = a half warp (kFinXThreads % 16 == 0, dim % 128 == 0), the same scale rule
                // and E4M3 rounding, so the bytes are that kernel's.
                float amax = 0.0f;
#pragma unroll
                for (int e = 0; e < 8; ++e) {
                    y[e] = __bfloat162float(__float2bfloat16(y[e]));
                    amax = fmaxf(amax, fabsf(y[e]));
                }
#pragma unroll
                for (int off = 1; off < 16; off <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
                const float sc = dev::ue8m0_scale_for(fmaxf(amax, 1e-4f), 448.0f);
                if (in) {
                    uint32_t lo = 0, hi = 0;
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        lo |= static_cast<uint32_t>(dev::f32_to_e4m3(fminf(fmaxf(y[e] / sc, -448.0f), 448.0f)))
                              << (8 * e);
                        hi |= static_cast<uint32_t>(dev::f32_to_e4m3(fminf(fmaxf(y[e + 4] / sc, -448.0f), 448.0f)))
                              << (8 * e);
                    }
                    *reinterpret_cast<uint2*>(xq + t * dim + c * 8) = make_uint2(lo, hi);
                    if (c % 16 == 0) xs[t * (dim / 128) + c / 16] = sc;
                }
            }
        }
        return;
    }
    float pre[kHc];
#pragma unroll
    for (int j = 0; j < kHc; ++j) pre[j] = pre_s[j];
    auto collapse = [&](const F8* v, int64_t c) {  // v: the 4 streams' chunk c
        float xs[kHc][8];
#pragma unroll
        for (int j = 0; j < kHc; ++j) unpack8(v[j], xs[j]);
        float o[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            float acc = 0.0f;
#pragma unroll
            for (int j = 0; j < kHc; ++j) acc = fmaf(pre[j], xs[j][e], acc);
            o[e] = acc;
        }
        const uint4 out = make_uint4(pack_bf16x2(o[0], o[1]), pack_bf16x2(o[2], o[3]), pack_bf16x2(o[4], o[5]),
                                     pack_bf16x2(o[6], o[7]));
        *reinterpret_cast<uint4*>(x + t * dim + c * 8) = out;
    };
#pragma unroll
    for (int i = 0; i < kFinCached; ++i) {
        const int64_t c = threadIdx.x + static_cast<int64_t>(i) * kFinXThreads;
        if (c < dchunks) collapse(xc[i], c);
    }
    for (int64_t c = threadIdx.x + static_cast<int64_t>(kFinCached) * kFinXThreads; c < dchunks; c += kFinXThreads) {
        F8 v[kHc];
        for (int j = 0; j < kHc; ++j) v[j] = ldg8(Xt + j * dim + c * 8);
        collapse(v, c);
    }
}

// One thread per (token, 8-element d-chunk), 16-byte loads and stores. X_out may alias X (no
// __restrict__, no read-only loads of X): each thread reads its 4 stream chunks before writing them.
__global__ void hc_post_vec_kernel(const __nv_bfloat16* __restrict__ a, const float* X, const float* __restrict__ post,
                                   const float* __restrict__ comb, float* X_out, int64_t n_tok, int64_t dim) {
    dev::pdl_wait();
    dev::pdl_trigger();
    const int64_t dchunks = dim / 8;
    const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (idx >= n_tok * dchunks) return;
    const int64_t t = idx / dchunks, c = idx % dchunks;
    float xs[kHc][8], av[8];
#pragma unroll
    for (int j = 0; j < kHc; ++j) unpack8(ld8(X + (t * kHc + j) * dim + c * 8), xs[j]);
    unpack8(__ldg(reinterpret_cast<const uint4*>(a + t * dim + c * 8)), av);
    float cm[kHc * kHc], pk[kHc];
#pragma unroll
    for (int e = 0; e < kHc * kHc; ++e) cm[e] = __ldg(comb + t * kHc * kHc + e);
#pragma unroll
    for (int k = 0; k < kHc; ++k) pk[k] = __ldg(post + t * kHc + k);
#pragma unroll
    for (int k = 0; k < kHc; ++k) {
        float o[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            float v = 0.0f;
#pragma unroll
            for (int j = 0; j < kHc; ++j) v = fmaf(cm[j * kHc + k], xs[j][e], v);
            o[e] = fmaf(pk[k], av[e], v);
        }
        st8(X_out + (t * kHc + k) * dim + c * 8, o);
    }
}

// One thread per (token, d): reads the 4 stream values before writing them, so in place is safe.
__global__ void hc_post_kernel(const __nv_bfloat16* __restrict__ a, const float* X, const float* __restrict__ post,
                               const float* __restrict__ comb, float* X_out, int64_t n_tok, int64_t dim) {
    dev::pdl_wait();
    dev::pdl_trigger();
    const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (idx >= n_tok * dim) return;
    const int64_t t = idx / dim, d = idx % dim;
    float xs[kHc];
#pragma unroll
    for (int j = 0; j < kHc; ++j) xs[j] = X[(t * kHc + j) * dim + d];
    const float av = __bfloat162float(a[t * dim + d]);
    const float* c = comb + t * kHc * kHc;
#pragma unroll
    for (int k = 0; k < kHc; ++k) {
        float v = 0.0f;
#pragma unroll
        for (int j = 0; j < kHc; ++j) v = fmaf(c[j * kHc + k], xs[j], v);
        X_out[(t * kHc + k) * dim + d] = fmaf(post[t * kHc + k], av, v);
    }
}

template <int TT>
void launch_mix_partial(const PrePlan& pl, const float* X, const float* fn, float* part, int64_t n_tok, int64_t flat,
                        cudaStream_t stream) {
    const dim3 grid(static_cast<unsigned>(pl.tiles), static_cast<unsigned>(pl.slices));  // slices <= 528
    launch_pdl(hc_mix_partial_kernel<TT>, grid, kMixThreads, 0, stream, X, fn, part, n_tok, flat, pl.slices);
}

}  // namespace

size_t hc_pre_scratch_floats(int64_t max_tok, const HcDims& p) {
    // The slice count falls as n_tok grows, so n·slices is not monotone: take the largest over n <= max_tok.
    int64_t rows = 0;
    for (int64_t n = 1; n <= max_tok; ++n) rows = std::max(rows, n * pre_plan(n, p.dim).slices);
    return static_cast<size_t>(rows * kMix);
}

namespace {

// The reference kernel: one block per token does everything.
void hc_pre_reference(const HcPreArgs& a, const HcDims& p, cudaStream_t stream) {
    launch_pdl(hc_pre_kernel, static_cast<unsigned>(a.n_tok), kPreThreads, 0, stream, a.X, a.fn, a.scale, a.base, a.x,
               a.pre, a.post, a.comb, p.dim, static_cast<int>(p.sinkhorn_iters), p.hc_eps, p.norm_eps);
    CUDA_CHECK_LAUNCH("hc_pre_kernel");
}

}  // namespace

void hc_pre(const HcPreArgs& a, const HcDims& p, cudaStream_t stream) {
    ONECARD_CHECK(p.dim > 0 && p.sinkhorn_iters >= 1, "hc_pre: dim {} iters {}", p.dim, p.sinkhorn_iters);
    ONECARD_CHECK(a.xq == nullptr || (a.rms_weight != nullptr && a.xs != nullptr && p.dim % 128 == 0 &&
                                      reinterpret_cast<uintptr_t>(a.xq) % 8 == 0),
                  "hc_pre: the FP8 copy of x needs the fused norm, scales, dim % 128 == 0 ({}) and 8-byte "
                  "aligned bytes",
                  p.dim);
    const int64_t n_tok = a.n_tok;
    if (n_tok == 0) return;
    const bool fuse_norm = a.rms_weight != nullptr && p.dim <= kFinCached * kFinXThreads * 8 &&
                           reinterpret_cast<uintptr_t>(a.rms_weight) % 16 == 0;
    if (a.scratch == nullptr || !split_path_ok(a.X, a.fn, a.x, p.dim) || (a.rms_weight != nullptr && !fuse_norm)) {
        hc_pre_reference(a, p, stream);
        if (a.rms_weight != nullptr) rmsnorm_bf16(a.x, a.rms_weight, a.x, n_tok, p.dim, a.rms_eps, stream);
        if (a.xq != nullptr) quantize_fp8_1x128(a.x, a.xq, a.xs, n_tok, p.dim, ActScaleLayout::RowMajor, stream);
        return;
    }
    const int64_t flat = kHc * p.dim;
    const float* X = a.X;
    const float* fn = a.fn;
    float* scratch = a.scratch;
    // The mixes land in scratch as [n, slices, 24] partial sums; the finish kernel adds the slices.
    int64_t slices = 1;
    if (a.gemm != nullptr && n_tok >= kHcGemmMinTokens) {
        // One GEMM, one slice per token (hc_pre_scratch_floats covers it: every plan has at least one slice).
        const size_t need = static_cast<size_t>(n_tok * kMix);
        ONECARD_CHECK(a.scratch_floats >= need, "hc_pre: scratch of {} floats, {} tokens need {}", a.scratch_floats,
                      n_tok, need);
        a.gemm->run_f32(X, fn, scratch, n_tok, kMix, flat, stream);
    } else {
        const PrePlan pl = pre_plan(n_tok, p.dim);
        slices = pl.slices;
        const size_t need = static_cast<size_t>(n_tok * pl.slices * kMix);
        ONECARD_CHECK(a.scratch_floats >= need, "hc_pre: scratch of {} floats, {} tokens need {}", a.scratch_floats,
                      n_tok, need);
        switch (pl.tile) {
            case 1:
                launch_mix_partial<1>(pl, X, fn, scratch, n_tok, flat, stream);
                break;
            case 2:
                launch_mix_partial<2>(pl, X, fn, scratch, n_tok, flat, stream);
                break;
            case 4:
                launch_mix_partial<4>(pl, X, fn, scratch, n_tok, flat, stream);
                break;
            case 8:
                launch_mix_partial<8>(pl, X, fn, scratch, n_tok, flat, stream);
                break;
            case 16:
                launch_mix_partial<16>(pl, X, fn, scratch, n_tok, flat, stream);
                break;
            default:
                launch_mix_partial<kMaxTile>(pl, X, fn, scratch, n_tok, flat, stream);
                break;
        }
        CUDA_CHECK_LAUNCH("hc_mix_partial_kernel");
    }
    launch_pdl(hc_pre_finish_kernel, static_cast<unsigned>(n_tok), kFinThreads, 0, stream, X, scratch, a.scale, a.base,
               a.x, a.pre, a.post, a.comb, p.dim, slices, static_cast<int>(p.sinkhorn_iters), p.hc_eps, p.norm_eps,
               fuse_norm ? a.rms_weight : nullptr, a.rms_eps, a.xq, a.xs);
    CUDA_CHECK_LAUNCH("hc_pre_finish_kernel");
}

void hc_post(const __nv_bfloat16* a, const float* X, const float* post, const float* comb, float* X_out, int64_t n_tok,
             const HcDims& p, cudaStream_t stream) {
    const int64_t n = n_tok * p.dim;
    if (n == 0) return;
    if (p.dim % 8 == 0 && aligned16(a) && aligned16(X) && aligned16(X_out)) {
        // 8 elements per thread; 128-thread blocks keep decode sizes (n·D/8 = 512 threads per token) on several SMs.
        const int threads = 128;
        const int64_t work = n / 8;
        launch_pdl(hc_post_vec_kernel, static_cast<unsigned>((work + threads - 1) / threads), threads, 0, stream, a, X,
                   post, comb, X_out, n_tok, p.dim);
        CUDA_CHECK_LAUNCH("hc_post_vec_kernel");
        return;
    }
    const int threads = 256;
    launch_pdl(hc_post_kernel, static_cast<unsigned>((n + threads - 1) / threads), threads, 0, stream, a, X, post, comb,
               X_out, n_tok, p.dim);
    CUDA_CHECK_LAUNCH("hc_post_kernel");
}

}  // namespace onecard::cuda
