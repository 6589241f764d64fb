#include "backend/cuda/ops/mxfp4_gemv.cuh"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops/common.cuh"

#include <cuda_fp16.h>

#include <algorithm>
#include <cstring>

namespace onecard::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kUnroll = 4;  // 16-byte weight loads in flight per lane (k = 4096 has 4 passes)

// grid (ceil(n / 8), n_pairs); one warp per output row. Lane l reads weight bytes
// [it·512 + 16l, +16) = elements [it·1024 + 32l, +32): exactly one UE8M0 scale group of 32.
// The pair's activation row is dequantised once per block into shared memory (x·scale folded in),
// laid out [k/1024][4][2][32][4] so that the 8 elements of word c of lane l are the floats
// [c][0..1][l][0..3]: each LDS.128 of a warp reads 512 contiguous bytes. The E2M1 codes are decoded
// with integer ops (no conversion instructions); the first H200 run showed the per-element E4M3
// activation conversions of the register version as the limit.
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    mxfp4_expert_gemv_kernel(const uint8_t* __restrict__ xq, const float* __restrict__ xs,
                             const uint8_t* __restrict__ w, const uint8_t* __restrict__ ws,
                             const int32_t* __restrict__ expert_ids, const int32_t* __restrict__ act_rows,
                             __nv_bfloat16* __restrict__ y, int64_t n, int64_t k) {
    extern __shared__ float xsm[];
    const int64_t pair = blockIdx.y;
    const int64_t arow = act_rows[pair];
    const int ki = static_cast<int>(k), half_k = ki / 2, n_groups = ki / 32, n_kb = ki / 128;
    const int lane = threadIdx.x & 31;
    const int64_t row = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + (threadIdx.x >> 5);
    const bool active = row < n;
    const int64_t expert = expert_ids[pair];
    const uint8_t* wr = w + (expert * n + (active ? row : 0)) * half_k;
    const uint8_t* wsr = ws + (expert * n + (active ? row : 0)) * n_groups;
    const int n_iter = half_k / 512;
    // The first weight loads go out before the activation row is staged, so the two memory
    // latencies overlap (the first H200 run showed this kernel latency-bound at ~13% of copy).
    uint4 wv[kUnroll];
    auto load = [&](int it0) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const int off = (it0 + u) * 512 + lane * 16;
            wv[u] = (active && it0 + u < n_iter) ? __ldcs(reinterpret_cast<const uint4*>(wr + off))
                                                 : make_uint4(0, 0, 0, 0);
        }
    };
    load(0);
    const uint8_t* xr = xq + arow * k;
    const float* xsr = xs + arow * n_kb;
    for (int kk = threadIdx.x; kk < ki; kk += blockDim.x) {
        const int it = kk / 1024, within = kk % 1024;
        const int l = within / 32, e8 = within % 32, c = e8 / 8, h = (e8 % 8) / 4, j = e8 % 4;
        xsm[(((it * 4 + c) * 2 + h) * 32 + l) * 4 + j] = dev::e4m3_to_f32(xr[kk]) * xsr[kk / 128];
    }
    __syncthreads();
    if (!active) return;
    float acc = 0.0f;
    for (int it0 = 0; it0 < n_iter; it0 += kUnroll) {
        if (it0 > 0) load(it0);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const int it = it0 + u;
            if (it >= n_iter) break;
            const uint32_t words[4] = {wv[u].x, wv[u].y, wv[u].z, wv[u].w};
            float d = 0.0f;
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                const float4 x0 = *reinterpret_cast<const float4*>(xsm + (((it * 4 + c) * 2 + 0) * 32 + lane) * 4);
                const float4 x1 = *reinterpret_cast<const float4*>(xsm + (((it * 4 + c) * 2 + 1) * 32 + lane) * 4);
                const uint32_t wd = words[c];
                d = fmaf(dev::e2m1_to_f32(wd & 0xFu), x0.x, d);
                d = fmaf(dev::e2m1_to_f32((wd >> 4) & 0xFu), x0.y, d);
                d = fmaf(dev::e2m1_to_f32((wd >> 8) & 0xFu), x0.z, d);
                d = fmaf(dev::e2m1_to_f32((wd >> 12) & 0xFu), x0.w, d);
                d = fmaf(dev::e2m1_to_f32((wd >> 16) & 0xFu), x1.x, d);
                d = fmaf(dev::e2m1_to_f32((wd >> 20) & 0xFu), x1.y, d);
                d = fmaf(dev::e2m1_to_f32((wd >> 24) & 0xFu), x1.z, d);
                d = fmaf(dev::e2m1_to_f32(wd >> 28), x1.w, d);
            }
            acc = fmaf(d, dev::ue8m0_to_float(wsr[it * 32 + lane]), acc);
        }
    }
    acc = dev::warp_sum(acc);
    if (lane == 0) y[pair * n + row] = __float2bfloat16(acc);
}

// ---- grouped path ----

constexpr int kGroupThreads = 1024;  // one expert per thread in the scans (n_experts <= 1024)
constexpr int kMaxGroupExperts = 1024;
constexpr int kMaxGroupPairs = 4096;
constexpr int64_t kItemCap = 16;  // pairs of one item at most: bounds the work of one GEMV block

// One block. Counts the pairs per expert, scans the counts into expert starts and item starts,
// writes the items, then places the pairs. The placement is done by ONE warp walking the pairs in
// order, 32 at a time: __match_any_sync finds the lanes of one expert, the lowest of them advances
// the expert's cursor by their number, each lane takes its rank among them; the walk is sequential,
// so the pairs of an expert come out in ascending pair order (stable). n_pairs <= 4096 is at most
// 128 steps (~1 µs at the decode sizes' 12 steps); the counting and the scans use the whole block.
__global__ void __launch_bounds__(kGroupThreads)
    group_pairs_kernel(const int32_t* __restrict__ expert_ids, int n_pairs, int n_experts, int cap, int max_items,
                       int32_t* __restrict__ scratch) {
    __shared__ int cnt[kMaxGroupExperts];
    __shared__ int cursor[kMaxGroupExperts];
    __shared__ int ids[kMaxGroupPairs];
    __shared__ int warp_tot[2][32];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    for (int e = tid; e < n_experts; e += blockDim.x) cnt[e] = 0;
    __syncthreads();
    for (int p = tid; p < n_pairs; p += blockDim.x) {
        const int e = expert_ids[p];
        const bool ok = e >= 0 && e < n_experts;
        ids[p] = ok ? e : -1;
        if (ok) atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    // Exclusive scans (expert = thread) of the pair counts and of the item counts ceil(count / cap).
    const int e = tid;
    const int c = e < n_experts ? cnt[e] : 0;
    const int n_it = (c + cap - 1) / cap;
    int sc = c, si = n_it;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int a = __shfl_up_sync(0xffffffffu, sc, o), b = __shfl_up_sync(0xffffffffu, si, o);
        if (lane >= o) {
            sc += a;
            si += b;
        }
    }
    if (lane == 31) {
        warp_tot[0][warp] = sc;
        warp_tot[1][warp] = si;
    }
    __syncthreads();
    if (warp == 0) {  // blockDim = 1024: exactly 32 warp totals
        int a = warp_tot[0][lane], b = warp_tot[1][lane];
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int ua = __shfl_up_sync(0xffffffffu, a, o), ub = __shfl_up_sync(0xffffffffu, b, o);
            if (lane >= o) {
                a += ua;
                b += ub;
            }
        }
        warp_tot[0][lane] = a;  // inclusive
        warp_tot[1][lane] = b;
    }
    __syncthreads();
    const int start = (warp > 0 ? warp_tot[0][warp - 1] : 0) + sc - c;
    const int item0 = (warp > 0 ? warp_tot[1][warp - 1] : 0) + si - n_it;
    if (e < n_experts) cursor[e] = start;
    int4* items = reinterpret_cast<int4*>(scratch + 4);
    for (int j = 0; j < n_it; ++j) items[item0 + j] = make_int4(e, start + j * cap, min(cap, c - j * cap), 0);
    if (tid == kGroupThreads - 1) scratch[0] = item0 + n_it;  // the last thread's inclusive total
    __syncthreads();
    if (warp != 0) return;
    int32_t* sorted = scratch + 4 + 4 * static_cast<int64_t>(max_items);
    for (int p0 = 0; p0 < n_pairs; p0 += 32) {
        const int p = p0 + lane;
        const int ex = p < n_pairs ? ids[p] : -1;
        const unsigned peers = __match_any_sync(0xffffffffu, ex);
        const int leader = __ffs(peers) - 1;
        const int rank = __popc(peers & ((1u << lane) - 1u));
        int pos = 0;
        if (lane == leader && ex >= 0) {
            pos = cursor[ex];
            cursor[ex] = pos + __popc(peers);
        }
        pos = __shfl_sync(0xffffffffu, pos, leader);
        if (ex >= 0) sorted[pos + rank] = p;
        __syncwarp();  // the cursor update is visible to the next step's leaders
    }
}

constexpr int kGemvWarps = 8;
constexpr int kGemvThreads = kGemvWarps * 32;
constexpr int kChunkIters = 4;               // 16-byte weight loads per row slot and lane held at once (k <= 4096)
constexpr int64_t kGemvSmemMax = 64 * 1024;  // staged fp32 activations of one pass: G·k·4 bytes

struct GemvMat {
    const uint8_t* w;
    const uint8_t* ws;
    __nv_bfloat16* y;
};

__device__ __forceinline__ float2 half2_bits_to_float2(uint32_t u) {
    __half2 h;
    memcpy(&h, &u, 4);
    return __half22float2(h);
}

// The 8 E2M1 codes of one 32-bit word (element 2j = low nibble of byte j) as fp32 values times
// 2^-14, exact: the code s|e1 e0 m placed as the fp16 bit pattern s00000 e1 e0 m 000000000 is
// 2^(e-15)(1+m/2) for e > 0 and the subnormal m·2^-15 for e = 0, i.e. e2m1·2^-14 in both cases (no
// compare/select for the subnormal). Byte-parallel: the high bytes of the 4 fp16 values of the low
// (high) nibbles are built in one word with shifts and masks, then PRMT spreads two of them into a
// half2; 11 integer ops + 8 half->float conversions per 8 codes.
__device__ __forceinline__ void decode_e2m1x8(uint32_t wd, float (&f)[8]) {
    const uint32_t lo = ((wd << 4) & 0x80808080u) | ((wd << 1) & 0x0E0E0E0Eu);  // elements 0, 2, 4, 6
    const uint32_t hi = (wd & 0x80808080u) | ((wd >> 3) & 0x0E0E0E0Eu);         // elements 1, 3, 5, 7
    const float2 a = half2_bits_to_float2(__byte_perm(lo, 0u, 0x1404));         // {0, lo.b0, 0, lo.b1}: e0, e2
    const float2 b = half2_bits_to_float2(__byte_perm(lo, 0u, 0x3424));         // e4, e6
    const float2 c = half2_bits_to_float2(__byte_perm(hi, 0u, 0x1404));         // e1, e3
    const float2 d = half2_bits_to_float2(__byte_perm(hi, 0u, 0x3424));         // e5, e7
    f[0] = a.x;
    f[1] = c.x;
    f[2] = a.y;
    f[3] = c.y;
    f[4] = b.x;
    f[5] = d.x;
    f[6] = b.y;
    f[7] = d.y;
}

__device__ __forceinline__ float4 e4m3x4_to_float4(uint32_t v, float scale) {
    const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v & 0xFFFFu), __NV_E4M3);
    const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v >> 16), __NV_E4M3);
    const float2 a = __half22float2(__half2(lo)), b = __half22float2(__half2(hi));
    return make_float4(a.x * scale, a.y * scale, b.x * scale, b.y * scale);
}

// grid (row tiles, item slots). Block = one item (<= kItemCap pairs of one expert) × a tile of rows:
// 16 rows of one matrix (two per warp) or, with a second matrix, 8 rows of each (row r of A and row
// r of B per warp, e.g. w1 and w3 sharing the staged activations). Item slots past the device-side
// count exit at once. Each lane holds its 16-byte slices of both row slots for a k-chunk of 4096
// (8 loads in flight, issued before the activations are staged so the two latencies overlap); the
// item's pairs are processed G at a time from shared memory (fp32, x·scale folded in, the
// conflict-free [k/1024][4][2][32][4] layout of mxfp4_expert_gemv_kernel) while the decoded weight
// word serves all G pairs. With k <= 4096 the weights stay in registers across the passes, so an
// expert's rows are read from memory once per item.
template <int G>
__global__ void __launch_bounds__(kGemvThreads, G == 1 ? 3 : 2)
    mxfp4_grouped_gemv_kernel(const uint8_t* __restrict__ xq, const float* __restrict__ xs,
                              const int32_t* __restrict__ act_rows, const int32_t* __restrict__ scratch, int max_items,
                              GemvMat ma, GemvMat mb, int64_t n, int64_t k) {
    extern __shared__ float4 xsm4[];
    float* xsm = reinterpret_cast<float*>(xsm4);
    const int n_items = scratch[0];
    int64_t expert = 0;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int ki = static_cast<int>(k), half_k = ki / 2, n_groups = ki / 32, n_kb = ki / 128;
    const int n_iter = ki / 1024, n_chunks = (n_iter + kChunkIters - 1) / kChunkIters;
    const bool dual = mb.w != nullptr;

    // Row slot s of this warp; the pointers are rebuilt from the kernel parameters where used
    // (registers go to the weights in flight).
    int row[2];
    bool valid[2];
#pragma unroll
    for (int s = 0; s < 2; ++s) {
        row[s] = dual ? static_cast<int>(blockIdx.x) * kGemvWarps + warp
                      : (static_cast<int>(blockIdx.x) * kGemvWarps + warp) * 2 + s;
        valid[s] = row[s] < n;
    }

    uint4 wv[2][kChunkIters];
    uint32_t sb[2];  // the UE8M0 bytes of the lane's group in each 16-byte slice, byte u = slice u
    auto load = [&](int chunk) {
#pragma unroll
        for (int s = 0; s < 2; ++s) {
            const GemvMat& mat = (dual && s == 1) ? mb : ma;
            const int64_t r = expert * n + (valid[s] ? row[s] : 0);
            const uint8_t* wr = mat.w + r * half_k;
            const uint8_t* sr = mat.ws + r * n_groups;
            sb[s] = 0;
#pragma unroll
            for (int u = 0; u < kChunkIters; ++u) {
                const int it = chunk * kChunkIters + u;
                const bool ok = valid[s] && it < n_iter;
                // Streamed once per step: keep it out of L1 (ld.global.cs).
                wv[s][u] =
                    ok ? __ldcs(reinterpret_cast<const uint4*>(wr + it * 512 + lane * 16)) : make_uint4(0, 0, 0, 0);
                sb[s] |= (ok ? static_cast<uint32_t>(__ldg(sr + it * 32 + lane)) : 0u) << (8 * u);
            }
        }
    };
    // Item slots are strided by gridDim.y (the host launches fewer slots than the item bound when
    // that bound is loose, so few blocks are launched only to find nothing to do).
    for (int slot = blockIdx.y; slot < n_items; slot += gridDim.y) {
        if (slot != static_cast<int>(blockIdx.y)) __syncthreads();  // the previous item still reads the staged rows
        const int4 item = reinterpret_cast<const int4*>(scratch + 4)[slot];
        const int32_t* sorted = scratch + 4 + 4 * static_cast<int64_t>(max_items) + item.y;
        expert = item.x;
        const int count = item.z;
        load(0);

        for (int g0 = 0; g0 < count; g0 += G) {
            const int m = min(G, count - g0);
            if (g0 > 0) __syncthreads();  // the previous pass still reads the staged rows
            // Stage: unit t of pair slot mi is 32 activations (two 16-byte loads, one 1x128 scale);
            // its word i (elements 4i..4i+3) is float4 (c = i/2, h = i%2) of lane l = t % 32.
            const int units = k / 32;
            for (int u = threadIdx.x; u < m * units; u += blockDim.x) {
                const int mi = u / units, t = u % units;
                const int p = sorted[g0 + mi];
                const int64_t arow = act_rows != nullptr ? act_rows[p] : p;
                const uint8_t* src = xq + arow * k + t * 32;
                const uint4 q0 = __ldg(reinterpret_cast<const uint4*>(src));
                const uint4 q1 = __ldg(reinterpret_cast<const uint4*>(src + 16));
                const float scale = xs[arow * n_kb + t / 4];
                float* dst = xsm + static_cast<int64_t>(mi) * k + (t / 32) * 1024 + (t % 32) * 4;
                const uint32_t words[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
#pragma unroll
                for (int i = 0; i < 8; ++i)
                    *reinterpret_cast<float4*>(dst + i * 128) = e4m3x4_to_float4(words[i], scale);
            }
            __syncthreads();
            int pid[G];
#pragma unroll
            for (int mi = 0; mi < G; ++mi) pid[mi] = mi < m ? sorted[g0 + mi] : 0;
            float acc[2][G];
#pragma unroll
            for (int s = 0; s < 2; ++s)
#pragma unroll
                for (int mi = 0; mi < G; ++mi) acc[s][mi] = 0.0f;
            for (int chunk = 0; chunk < n_chunks; ++chunk) {
                if (n_chunks > 1 && (chunk > 0 || g0 > 0)) load(chunk);  // k > 4096: re-read (L2) per pass
#pragma unroll
                for (int u = 0; u < kChunkIters; ++u) {
                    const int it = chunk * kChunkIters + u;
                    if (it >= n_iter) break;
#pragma unroll
                    for (int s = 0; s < 2; ++s) {
                        if (!valid[s]) continue;  // warp-uniform
                        const uint32_t words[4] = {wv[s][u].x, wv[s][u].y, wv[s][u].z, wv[s][u].w};
                        float d[G];
#pragma unroll
                        for (int mi = 0; mi < G; ++mi) d[mi] = 0.0f;
#pragma unroll
                        for (int c = 0; c < 4; ++c) {
                            float f[8];
                            decode_e2m1x8(words[c], f);
                            const float* xb = xsm + ((it * 8 + c * 2) * 32 + lane) * 4;
#pragma unroll
                            for (int mi = 0; mi < G; ++mi) {
                                if (mi >= m) break;
                                const float4 x0 = *reinterpret_cast<const float4*>(xb + static_cast<int64_t>(mi) * k);
                                const float4 x1 =
                                    *reinterpret_cast<const float4*>(xb + static_cast<int64_t>(mi) * k + 128);
                                float t = d[mi];
                                t = fmaf(f[0], x0.x, t);
                                t = fmaf(f[1], x0.y, t);
                                t = fmaf(f[2], x0.z, t);
                                t = fmaf(f[3], x0.w, t);
                                t = fmaf(f[4], x1.x, t);
                                t = fmaf(f[5], x1.y, t);
                                t = fmaf(f[6], x1.z, t);
                                t = fmaf(f[7], x1.w, t);
                                d[mi] = t;
                            }
                        }
                        // 2^14 undoes the decode's 2^-14 (exact); the UE8M0 group scale is per 32 = per lane.
                        const float wscale = dev::ue8m0_to_float(static_cast<uint8_t>(sb[s] >> (8 * u)));
#pragma unroll
                        for (int mi = 0; mi < G; ++mi) acc[s][mi] = fmaf(d[mi] * 16384.0f, wscale, acc[s][mi]);
                    }
                }
            }
#pragma unroll
            for (int s = 0; s < 2; ++s) {
                if (!valid[s]) continue;
#pragma unroll
                for (int mi = 0; mi < G; ++mi) {
                    if (mi >= m) break;
                    const float v = dev::warp_sum(acc[s][mi]);
                    __nv_bfloat16* y = (dual && s == 1) ? mb.y : ma.y;
                    if (lane == 0) y[static_cast<int64_t>(pid[mi]) * n + row[s]] = __float2bfloat16(v);
                }
            }
        }
    }
}

template <int G>
void launch_grouped(const uint8_t* xq, const float* xs, const int32_t* act_rows, const MoePairGroups& g, GemvMat a,
                    GemvMat b, int64_t n, int64_t k, cudaStream_t stream) {
    const int64_t rows_per_block = b.w != nullptr ? kGemvWarps : 2 * kGemvWarps;
    // Item slots: the bound when it is small (batch <= 8: nearly tight); else 3/4 of it (batch 64:
    // bound 280, ~200 items for uniform routing), blocks past the count taking a second item.
    const int64_t slots = g.max_items <= 64 ? g.max_items : (g.max_items * 3 + 3) / 4;
    const dim3 grid(static_cast<unsigned>((n + rows_per_block - 1) / rows_per_block), static_cast<unsigned>(slots));
    const size_t smem = static_cast<size_t>(G) * static_cast<size_t>(k) * 4;
    if (smem > 48 * 1024) {
        CUDA_CHECK(cudaFuncSetAttribute(mxfp4_grouped_gemv_kernel<G>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(smem)));
    }
    mxfp4_grouped_gemv_kernel<G>
        <<<grid, kGemvThreads, smem, stream>>>(xq, xs, act_rows, g.scratch, static_cast<int>(g.max_items), a, b, n, k);
    CUDA_CHECK_LAUNCH("mxfp4_grouped_gemv_kernel");
}

}  // namespace

void mxfp4_expert_gemv(const uint8_t* xq, const float* xs, const uint8_t* w, const uint8_t* ws,
                       const int32_t* expert_ids, const int32_t* act_rows, __nv_bfloat16* y, int64_t n_pairs, int64_t n,
                       int64_t k, cudaStream_t stream) {
    ONECARD_CHECK(k > 0 && k % 1024 == 0, "mxfp4_expert_gemv: k {} is not a multiple of 1024", k);
    ONECARD_CHECK(n > 0 && n_pairs >= 0 && n_pairs < 65536, "mxfp4_expert_gemv: bad shape pairs {} n {}", n_pairs, n);
    if (n_pairs == 0) return;
    const dim3 grid(static_cast<unsigned>((n + kWarpsPerBlock - 1) / kWarpsPerBlock), static_cast<unsigned>(n_pairs));
    const size_t smem = static_cast<size_t>(k) * 4;  // k <= 12288 stays under the 48 KB default
    ONECARD_CHECK(k <= 12288, "mxfp4_expert_gemv: k {} exceeds the shared-memory activation row", k);
    mxfp4_expert_gemv_kernel<<<grid, kWarpsPerBlock * 32, smem, stream>>>(xq, xs, w, ws, expert_ids, act_rows, y, n, k);
    CUDA_CHECK_LAUNCH("mxfp4_expert_gemv_kernel");
}

}  // namespace onecard::cuda

namespace onecard::cuda {

int64_t mxfp4_group_scratch_ints(int64_t n_pairs) {
    return 4 + 5 * std::max<int64_t>(n_pairs, 0);
}

MoePairGroups mxfp4_group_pairs(const int32_t* expert_ids, int64_t n_pairs, int64_t n_experts,
                                int64_t max_pairs_per_expert, int32_t* scratch, int64_t scratch_ints,
                                cudaStream_t stream) {
    ONECARD_CHECK(n_pairs >= 0 && n_pairs <= kMaxGroupPairs, "mxfp4_group_pairs: {} pairs (at most {})", n_pairs,
                  kMaxGroupPairs);
    ONECARD_CHECK(n_experts > 0 && n_experts <= kMaxGroupExperts, "mxfp4_group_pairs: {} experts (at most {})",
                  n_experts, kMaxGroupExperts);
    ONECARD_CHECK(scratch_ints >= mxfp4_group_scratch_ints(n_pairs),
                  "mxfp4_group_pairs: scratch of {} ints, {} pairs need {}", scratch_ints, n_pairs,
                  mxfp4_group_scratch_ints(n_pairs));
    MoePairGroups g;
    g.scratch = scratch;
    g.n_pairs = n_pairs;
    g.max_item_pairs = std::clamp<int64_t>(max_pairs_per_expert, 1, kItemCap);
    // Items = Σ_e ceil(c_e / cap) <= (experts with pairs) + n_pairs / cap, and each has a pair.
    g.max_items = std::min(n_pairs, std::min(n_experts, n_pairs) + n_pairs / g.max_item_pairs);
    if (n_pairs == 0) return g;
    group_pairs_kernel<<<1, kGroupThreads, 0, stream>>>(expert_ids, static_cast<int>(n_pairs),
                                                        static_cast<int>(n_experts), static_cast<int>(g.max_item_pairs),
                                                        static_cast<int>(g.max_items), scratch);
    CUDA_CHECK_LAUNCH("group_pairs_kernel");
    return g;
}

void mxfp4_grouped_gemv(const uint8_t* xq, const float* xs, const int32_t* act_rows, const MoePairGroups& groups,
                        const uint8_t* w, const uint8_t* ws, __nv_bfloat16* y, const uint8_t* w_b, const uint8_t* ws_b,
                        __nv_bfloat16* y_b, int64_t n, int64_t k, cudaStream_t stream) {
    ONECARD_CHECK(k > 0 && k % 1024 == 0 && k <= 16384, "mxfp4_grouped_gemv: k {} is not a multiple of 1024 <= 16384",
                  k);
    ONECARD_CHECK(n > 0 && n <= (int64_t{1} << 31), "mxfp4_grouped_gemv: bad n {}", n);
    ONECARD_CHECK(w_b == nullptr || (ws_b != nullptr && y_b != nullptr),
                  "mxfp4_grouped_gemv: second matrix incomplete");
    if (groups.n_pairs == 0 || groups.max_items == 0) return;
    ONECARD_CHECK(groups.scratch != nullptr && groups.max_item_pairs >= 1, "mxfp4_grouped_gemv: groups not built");
    // Pairs per pass: as many as the item can have, at most 8 and what 64 KB of staged fp32 rows hold
    // (k = 4096: 4, k = 2048: 8). Batch 1 (one pair per expert) gets G = 1: 16 KB, more blocks per SM.
    const int64_t cap = std::min<int64_t>({8, kGemvSmemMax / (4 * k), groups.max_item_pairs});
    const GemvMat a{w, ws, y}, b{w_b, ws_b, y_b};
    if (cap >= 8) {
        launch_grouped<8>(xq, xs, act_rows, groups, a, b, n, k, stream);
    } else if (cap >= 4) {
        launch_grouped<4>(xq, xs, act_rows, groups, a, b, n, k, stream);
    } else if (cap >= 2) {
        launch_grouped<2>(xq, xs, act_rows, groups, a, b, n, k, stream);
    } else {
        launch_grouped<1>(xq, xs, act_rows, groups, a, b, n, k, stream);
    }
}

}  // namespace onecard::cuda
