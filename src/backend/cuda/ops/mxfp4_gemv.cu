#include "backend/cuda/ops/mxfp4_gemv.cuh"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops/common.cuh"
#include "backend/cuda/ops/mma.cuh"
#include "backend/cuda/ops/mxfp4_layout.cuh"
#include "backend/cuda/ops/pdl.cuh"

#include <algorithm>

namespace onecard::cuda {
namespace {

constexpr int64_t kMaxGemvK = 8192;  // staged activations of 8 pairs: <= 66 KB of shared memory
constexpr int kGroupThreads = 1024;  // one expert per thread in the scans (n_experts <= 1024)
constexpr int kMaxGroupExperts = 1024;
constexpr int64_t kItemCap = 8;  // pairs of one item at most: the N of the GEMV's mma

// One block. Counts the pairs per expert, scans the counts into expert starts and item starts,
// writes the items, then places the pairs. The placement is done by ONE warp walking the pairs in
// order, 32 at a time: __match_any_sync finds the lanes of one expert, the lowest of them advances
// the expert's cursor by their number, each lane takes its rank among them; the walk is sequential,
// so the pairs of an expert come out in ascending pair order (stable). n_pairs <= 4096 is at most
// 128 steps (~1 µs at the decode sizes' 12 steps); the counting and the scans use the whole block.
__global__ void __launch_bounds__(kGroupThreads)
    group_pairs_kernel(const int32_t* __restrict__ expert_ids, int n_pairs, int n_experts, int cap, int max_items,
                       int32_t* __restrict__ scratch) {
    dev::pdl_wait();
    dev::pdl_trigger();
    __shared__ int cnt[kMaxGroupExperts];
    __shared__ int cursor[kMaxGroupExperts];
    __shared__ int ids[kMxfp4MaxGroupPairs];
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

constexpr int kMmaWarps = 4;  // row tiles of 16 rows per block
constexpr int kMmaThreads = kMmaWarps * 32;
constexpr int kStagePad = 32;  // bytes after each staged activation row (bank spread)

// The 8 E2M1 codes of one word (element 2j = low nibble of byte j) as E4M3 bytes worth e2m1·2^-6,
// exactly: code s|e1 e0|m becomes s|0 0 e1 e0|m 0 0, i.e. 2^(e-7)(1 + m/2) for e > 0 and the E4M3
// subnormal m·2^-7 for e = 0 (the code 0.5). `even` gets elements 0, 2, 4, 6 (byte j = element 2j),
// `odd` elements 1, 3, 5, 7. Four integer ops each, no conversions.
__device__ __forceinline__ void e2m1x8_to_e4m3(uint32_t w, uint32_t& even, uint32_t& odd) {
    even = ((w & 0x08080808u) << 4) | ((w & 0x07070707u) << 2);
    odd = (w & 0x80808080u) | ((w >> 2) & 0x1C1C1C1Cu);
}

// grid (ceil(tiles / kMmaWarps), item slots), tiles = n/16 row tiles of matrix A then of B (when B
// is given). A block takes an item (<= 8 pairs of one expert) and stages the pairs' E4M3 activation
// rows in shared memory, each 8-byte unit (elements 32G + 8t .. + 7) split into its even and odd
// elements to match the A fragments; each warp then streams one row tile of the expert's tiled
// codes (mxfp4_layout.cuh) once, with one mma.m16n8k32 per 32-element scale group:
//   lane (g, t) holds codes word t of group G for rows g and g + 8 (A), the pair g's activations
//   [32G + 8t, +8) (B), and gets D[row g | g + 8][pair 2t | 2t + 1];
//   acc += D · 2^(scale(row, G) - 127) · xs[pair, G/4]   (fp32; the 2^6 of the decode is undone at the end).
// Weights are double-buffered a chunk of 8 groups (2 KB per warp) ahead. S = 1: each warp owns a row
// tile; S = kMmaWarps (few items, e.g. batch 1): the block's warps share one row tile and take its
// chunks round-robin, adding their sums in shared memory, so each warp waits on a quarter of the
// round trips.
template <int S>
__global__ void __launch_bounds__(kMmaThreads)
    mxfp4_mma_gemv_kernel(const uint8_t* __restrict__ xq, const float* __restrict__ xs,
                          const int32_t* __restrict__ act_rows, const int32_t* __restrict__ scratch, int max_items,
                          Mxfp4Matrix ma, Mxfp4Matrix mb, int n, int k) {
    dev::pdl_wait();
    dev::pdl_trigger();
    extern __shared__ uint4 stage4[];
    uint8_t* stage = reinterpret_cast<uint8_t*>(stage4);
    const int stride = k + kStagePad;
    const int n_kb = k / 128, units = k / 8;
    float* xsm = reinterpret_cast<float*>(stage + kItemCap * stride);  // [kItemCap][n_kb]
    int* pid = reinterpret_cast<int*>(xsm + kItemCap * n_kb);          // [kItemCap]

    const int n_items = scratch[0];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int tiles_a = n / 16, tiles = mb.w != nullptr ? 2 * tiles_a : tiles_a;
    static_assert(S == 1 || S == kMmaWarps, "the reduction barrier needs the whole block on one tile");
    __shared__ float4 red[kMmaWarps][32];
    const int tile = static_cast<int>(blockIdx.x) * (kMmaWarps / S) + warp / S, part = warp % S;
    const bool in_b = tile >= tiles_a;
    // Values, not a reference into the parameter space (a selected reference costs a local copy).
    const uint8_t* const mat_w = in_b ? mb.w : ma.w;
    const uint8_t* const mat_ws = in_b ? mb.ws : ma.ws;
    __nv_bfloat16* const mat_y = in_b ? mb.y : ma.y;
    const int rtile = in_b ? tile - tiles_a : tile;
    const int n_chunks = k / 256;

    for (int slot = blockIdx.y; slot < n_items; slot += gridDim.y) {
        if (slot != static_cast<int>(blockIdx.y)) __syncthreads();  // the previous item still reads the stage
        const int4 item = reinterpret_cast<const int4*>(scratch + 4)[slot];
        const int32_t* sorted = scratch + 4 + 4 * static_cast<int64_t>(max_items) + item.y;
        const int64_t expert = item.x;
        const int count = item.z;
        for (int u = threadIdx.x; u < count * units; u += blockDim.x) {
            const int mi = u / units, c = u % units;
            const int p = sorted[mi];
            const int64_t arow = act_rows != nullptr ? act_rows[p] : p;
            const uint2 v = __ldg(reinterpret_cast<const uint2*>(xq + arow * k) + c);
            *reinterpret_cast<uint2*>(stage + mi * stride + c * 8) =
                make_uint2(__byte_perm(v.x, v.y, 0x6420), __byte_perm(v.x, v.y, 0x7531));
        }
        for (int u = threadIdx.x; u < count * n_kb; u += blockDim.x) {
            const int mi = u / n_kb;
            const int p = sorted[mi];
            const int64_t arow = act_rows != nullptr ? act_rows[p] : p;
            xsm[u] = xs[arow * n_kb + u % n_kb];
        }
        if (threadIdx.x < kItemCap) pid[threadIdx.x] = static_cast<int>(threadIdx.x) < count ? sorted[threadIdx.x] : -1;
        __syncthreads();
        if (tile >= tiles) continue;  // warp-uniform (block-uniform when S > 1); joins the next item's barrier

        const uint8_t* wt = mat_w + expert * n * (k / 2) + static_cast<int64_t>(rtile) * 8 * k + lane * 16;
        const uint8_t* st = mat_ws + expert * n * (k / 32) + static_cast<int64_t>(rtile) * (k / 2) + g * 16;
        const bool has_b = g < count;
        const uint8_t* brow = stage + g * stride + t * 8;
        const bool c0_ok = 2 * t < count, c1_ok = 2 * t + 1 < count;
        const float* xs0 = xsm + (c0_ok ? 2 * t : 0) * n_kb;
        const float* xs1 = xsm + (c1_ok ? 2 * t + 1 : 0) * n_kb;
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};

        auto load = [&](int c, uint4(&w)[4], uint4& s) {
#pragma unroll
            for (int i = 0; i < 4; ++i) w[i] = __ldcs(reinterpret_cast<const uint4*>(wt + (c * 4 + i) * 512));
            s = __ldg(reinterpret_cast<const uint4*>(st + c * 128));
        };
        auto compute = [&](int c, const uint4(&w)[4], const uint4& s) {
            const uint32_t sw[4] = {s.x, s.y, s.z, s.w};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int kb = c * 2 + i / 2;  // the 1x128 activation block of groups 8c + 2i, 8c + 2i + 1
                const float x0 = c0_ok ? xs0[kb] : 0.0f, x1 = c1_ok ? xs1[kb] : 0.0f;
#pragma unroll
                for (int q = 0; q < 2; ++q) {
                    const int j = 2 * i + q, G = c * 8 + j;
                    const uint32_t wg = q == 0 ? w[i].x : w[i].z, wg8 = q == 0 ? w[i].y : w[i].w;
                    uint32_t a0, a1, a2, a3;
                    e2m1x8_to_e4m3(wg, a0, a2);
                    e2m1x8_to_e4m3(wg8, a1, a3);
                    uint2 b = make_uint2(0u, 0u);
                    if (has_b) b = *reinterpret_cast<const uint2*>(brow + G * 32);
                    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // one scale group per mma: no running sum inside
                    dev::mma_m16n8k32_e4m3(d, a0, a1, a2, a3, b.x, b.y);
                    // Scale bytes 2j (row g) and 2j + 1 (row g + 8) of the 16 the lane loaded.
                    const uint32_t word = sw[j / 2];
                    const float s_g = dev::ue8m0_to_float(static_cast<uint8_t>(word >> (16 * (j % 2))));
                    const float s_g8 = dev::ue8m0_to_float(static_cast<uint8_t>(word >> (16 * (j % 2) + 8)));
                    acc[0] = fmaf(d[0], s_g * x0, acc[0]);
                    acc[1] = fmaf(d[1], s_g * x1, acc[1]);
                    acc[2] = fmaf(d[2], s_g8 * x0, acc[2]);
                    acc[3] = fmaf(d[3], s_g8 * x1, acc[3]);
                }
            }
        };
        uint4 wa[4], wb[4], sa, sb;
        if (part < n_chunks) load(part, wa, sa);
        for (int c = part; c < n_chunks; c += 2 * S) {
            if (c + S < n_chunks) load(c + S, wb, sb);
            compute(c, wa, sa);
            if (c + S < n_chunks) {
                if (c + 2 * S < n_chunks) load(c + 2 * S, wa, sa);
                compute(c + S, wb, sb);
            }
        }
        if (S > 1) {
            red[warp][lane] = make_float4(acc[0], acc[1], acc[2], acc[3]);
            __syncthreads();
            if (part != 0) continue;
            for (int w = 1; w < S; ++w) {  // fixed order: deterministic sums
                const float4 p = red[warp + w][lane];
                acc[0] += p.x;
                acc[1] += p.y;
                acc[2] += p.z;
                acc[3] += p.w;
            }
        }
        // 64 undoes the decode's 2^-6 (exact).
        const int row = rtile * 16 + g;
        if (c0_ok) {
            mat_y[static_cast<int64_t>(pid[2 * t]) * n + row] = __float2bfloat16(acc[0] * 64.0f);
            mat_y[static_cast<int64_t>(pid[2 * t]) * n + row + 8] = __float2bfloat16(acc[2] * 64.0f);
        }
        if (c1_ok) {
            mat_y[static_cast<int64_t>(pid[2 * t + 1]) * n + row] = __float2bfloat16(acc[1] * 64.0f);
            mat_y[static_cast<int64_t>(pid[2 * t + 1]) * n + row + 8] = __float2bfloat16(acc[3] * 64.0f);
        }
    }
}

size_t mma_smem_bytes(int64_t k) {
    return static_cast<size_t>(kItemCap * (k + kStagePad) + kItemCap * (k / 128) * 4 + kItemCap * 4);
}

}  // namespace

int64_t mxfp4_group_scratch_ints(int64_t n_pairs) {
    return 4 + 5 * std::max<int64_t>(n_pairs, 0);
}

MoePairGroups mxfp4_group_pairs(const int32_t* expert_ids, int64_t n_pairs, int64_t n_experts,
                                int64_t max_pairs_per_expert, int32_t* scratch, int64_t scratch_ints,
                                cudaStream_t stream) {
    ONECARD_CHECK(n_pairs >= 0 && n_pairs <= kMxfp4MaxGroupPairs, "mxfp4_group_pairs: {} pairs (at most {})", n_pairs,
                  kMxfp4MaxGroupPairs);
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
    launch_pdl(group_pairs_kernel, 1, kGroupThreads, 0, stream, expert_ids, static_cast<int>(n_pairs),
               static_cast<int>(n_experts), static_cast<int>(g.max_item_pairs), static_cast<int>(g.max_items), scratch);
    CUDA_CHECK_LAUNCH("group_pairs_kernel");
    return g;
}

void mxfp4_grouped_gemv(const Mxfp4GroupedGemvArgs& args, const MoePairGroups& groups, cudaStream_t stream) {
    const int64_t n = args.n, k = args.k;
    ONECARD_CHECK(mxfp4_tileable(n, k) && k <= kMaxGemvK,
                  "mxfp4_grouped_gemv: [{}, {}] needs rows % 16 == 0 and k % 256 == 0, k <= {}", n, k, kMaxGemvK);
    ONECARD_CHECK(n <= (int64_t{1} << 24), "mxfp4_grouped_gemv: bad n {}", n);
    ONECARD_CHECK(args.b.w == nullptr || (args.b.ws != nullptr && args.b.y != nullptr),
                  "mxfp4_grouped_gemv: second matrix incomplete");
    if (groups.n_pairs == 0 || groups.max_items == 0) return;
    ONECARD_CHECK(groups.scratch != nullptr && groups.max_item_pairs >= 1 && groups.max_item_pairs <= kItemCap,
                  "mxfp4_grouped_gemv: groups not built");
    const int64_t tiles = (args.b.w != nullptr ? 2 : 1) * (n / 16);
    // Item slots: the bound when it is small (batch <= 8: nearly tight); else 3/4 of it (batch 64:
    // bound ~260, ~180 items for uniform routing), blocks past the count taking a second item.
    const int64_t slots = groups.max_items <= 64 ? groups.max_items : (groups.max_items * 3 + 3) / 4;
    const size_t smem = mma_smem_bytes(k);
    const Mxfp4Matrix a = args.a, b = args.b;
    auto go = [&](auto kernel, int64_t tiles_per_block) {
        if (smem > 48 * 1024) {
            CUDA_CHECK(
                cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
        }
        const dim3 grid(static_cast<unsigned>((tiles + tiles_per_block - 1) / tiles_per_block),
                        static_cast<unsigned>(slots));
        launch_pdl(kernel, grid, kMmaThreads, smem, stream, args.xq, args.xs, args.act_rows, groups.scratch,
                   static_cast<int>(groups.max_items), a, b, static_cast<int>(n), static_cast<int>(k));
    };
    // Few (item, tile) pairs (batch 1: 6 items x 256 tiles) leave each warp a long chain of round
    // trips: split the chunks of a tile over the block's warps instead.
    if (groups.max_items * tiles < 8192) {
        go(mxfp4_mma_gemv_kernel<kMmaWarps>, 1);
    } else {
        go(mxfp4_mma_gemv_kernel<1>, kMmaWarps);
    }
    CUDA_CHECK_LAUNCH("mxfp4_mma_gemv_kernel");
}

}  // namespace onecard::cuda
