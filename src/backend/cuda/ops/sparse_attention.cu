#include "backend/cuda/ops/sparse_attention.cuh"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops/common.cuh"
#include "backend/cuda/ops/mma.cuh"
#include "backend/cuda/ops/pdl.cuh"

#include <algorithm>
#include <cstdint>

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
    dev::pdl_wait();
    dev::pdl_trigger();
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

// ---------------------------------------------------------------------------------------------------
// Tensor-core kernel. One block = one token × one head group (64 heads = four m16 tiles) × one split
// of the token's valid keys. Keys go through shared memory in tiles of 64: raw entries arrive by
// cp.async (the next tile's copy overlaps this tile's math), are decoded once to bf16 (E4M3 × 2^k is
// exact in bf16), then
//   S = q·kᵀ   [64 heads × 64 keys]: warp w owns head tile w&3 and keys 16·(w>>2)..+16, over 512 dims;
//   O += P·V   [64 heads × 512 dims]: warp w owns dims 32w..+32 for all 64 heads (64 fp32 accumulators);
// K = V, so the same smem tile feeds both products (ldmatrix for kᵀ, ldmatrix.trans for v).
// Online softmax in log2 units (fp32): the row max is exchanged between the four key-quarter warps
// of a head tile through smem, so all four hold identical m; each keeps its own partial row sum.
constexpr int kTcWarps = 16;
constexpr int kTcThreads = kTcWarps * 32;
constexpr int kTcHeads = 64;
constexpr int kTileKeys = 64;
constexpr int kRowStride = kHeadDim + 8;  // bf16 per Qs/Ks row: 1040 B, the 8 rows of an ldmatrix hit distinct banks
constexpr int kPStride = kTileKeys + 8;   // bf16 per Ps row: 144 B, same reason
constexpr int kListCap = 1024;            // valid-key offsets held in smem per round
constexpr int kMaxEntryBytes = 1024;
constexpr int kTargetBlocks = 132;  // one wave on an H200 (one ~190 KB block per SM)
constexpr int kMaxSplits = 64;
constexpr int kMinSplitKeys = 32;  // a split of half a tile still halves its q·kᵀ and p·v work
constexpr float kLog2e = 1.4426950408889634f;

// Shared memory layout (bytes); the raw staging tile is last because its size depends on entry_bytes.
constexpr int kOffQ = 0;                                   // [64][kRowStride] bf16
constexpr int kOffK = kOffQ + kTcHeads * kRowStride * 2;   // [64][kRowStride] bf16
constexpr int kOffP = kOffK + kTileKeys * kRowStride * 2;  // [64][kPStride] bf16
constexpr int kOffList = kOffP + kTcHeads * kPStride * 2;  // [kListCap] int64
constexpr int kOffRedMax = kOffList + kListCap * 8;        // [4][64] fp32
constexpr int kOffRedL = kOffRedMax + 4 * kTcHeads * 4;    // [4][64] fp32
constexpr int kOffCorr = kOffRedL + 4 * kTcHeads * 4;      // [64] fp32
constexpr int kOffMFin = kOffCorr + kTcHeads * 4;          // [64] fp32
constexpr int kOffCnt = kOffMFin + kTcHeads * 4;           // [32] int
constexpr int kOffRaw = kOffCnt + 32 * 4;                  // [64][entry_bytes] u8
static_assert(kOffList % 16 == 0 && kOffRaw % 16 == 0, "smem regions stay 16-byte aligned");

size_t tc_smem_bytes(int64_t entry_bytes) {
    return static_cast<size_t>(kOffRaw + kTileKeys * entry_bytes);
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async8(void* dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(smem_u32(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void cp_async_wait_all() {
    asm volatile("cp.async.wait_all;\n" ::: "memory");
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p))
                 : "memory");
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p))
                 : "memory");
}

// Two E4M3 bytes (low byte = lower dim) times a power-of-two scale -> two bf16 (exact).
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint32_t pair, float s) {
    const __half2_raw hr = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair & 0xFFFFu), __NV_E4M3);
    const float2 f = __half22float2(__half2(hr));
    const __nv_bfloat162 b = __floats2bfloat162_rn(f.x * s, f.y * s);
    return *reinterpret_cast<const uint32_t*>(&b);
}

__device__ __forceinline__ int block_sum_int(int v, int* cnt) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = __reduce_add_sync(0xffffffffu, v);
    if (lane == 0) cnt[warp] = v;
    __syncthreads();
    int s = 0;
#pragma unroll
    for (int w = 0; w < kTcWarps; ++w) s += cnt[w];
    __syncthreads();  // cnt is reused
    return s;
}

// list[c − lo] = offset of the c-th valid slot of `row` (list order), for c in [lo, hi). A block-wide
// stream compaction over the whole row: ballot within a warp, per-warp counts through smem.
__device__ void gather_keys(const int64_t* __restrict__ row, int64_t max_keys, int64_t lo, int64_t hi, int64_t* list,
                            int* cnt) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();      // cnt and list may still be in use
    int64_t running = 0;  // valid slots before this chunk (uniform)
    for (int64_t base = 0; base < max_keys && running < hi; base += kTcThreads) {
        const int64_t j = base + threadIdx.x;
        const int64_t off = j < max_keys ? row[j] : -1;
        const bool valid = off >= 0;
        const unsigned bal = __ballot_sync(0xffffffffu, valid);
        if (lane == 0) cnt[warp] = __popc(bal);
        __syncthreads();
        int before = 0, total = 0;
#pragma unroll
        for (int w = 0; w < kTcWarps; ++w) {
            const int c = cnt[w];
            before += w < warp ? c : 0;
            total += c;
        }
        const int64_t c = running + before + __popc(bal & ((1u << lane) - 1u));
        if (valid && c >= lo && c < hi) list[c - lo] = off;
        running += total;
        __syncthreads();
    }
}

// Raw entries list[first .. first+n) -> raw [n][eb] (cp.async, 8 B pieces: entries are 8-byte aligned).
__device__ __forceinline__ void issue_raw_tile(const uint8_t* __restrict__ pool, const int64_t* list, int first, int n,
                                               int eb, uint8_t* raw) {
    const int chunks = eb >> 3;
    for (int i = threadIdx.x; i < n * chunks; i += kTcThreads) {
        const int k = i / chunks, c = i - k * chunks;
        cp_async8(raw + k * eb + c * 8, pool + list[first + k] + c * 8);
    }
    cp_async_commit();
}

// raw [64][eb] -> Ks [64][kRowStride] bf16, 8 dims per step (56 nope steps, 8 rope steps per key).
// Keys n..63 become zeros: their p is 0, and 0 · (stale smem, possibly NaN bits) would not be.
__device__ __forceinline__ void decode_tile(const uint8_t* raw, int n, int eb, __nv_bfloat16* Ks) {
    constexpr int kNopeSteps = kNopeDim / 8;  // 56
    for (int u = threadIdx.x; u < kTileKeys * 64; u += kTcThreads) {
        const int k = u >> 6, c = u & 63;
        uint4 o = make_uint4(0u, 0u, 0u, 0u);
        if (k < n) {
            const uint8_t* e = raw + k * eb;
            if (c < kNopeSteps) {
                const uint2 w = *reinterpret_cast<const uint2*>(e + c * 8);
                const float s = dev::ue8m0_to_float(e[kNopeDim + 2 * 64 + c / 8]);
                o.x = e4m3x2_to_bf16x2(w.x, s);
                o.y = e4m3x2_to_bf16x2(w.x >> 16, s);
                o.z = e4m3x2_to_bf16x2(w.y, s);
                o.w = e4m3x2_to_bf16x2(w.y >> 16, s);
            } else {
                const uint8_t* r = e + kNopeDim + (c - kNopeSteps) * 16;
                const uint2 a = *reinterpret_cast<const uint2*>(r);
                const uint2 b = *reinterpret_cast<const uint2*>(r + 8);
                o = make_uint4(a.x, a.y, b.x, b.y);
            }
        }
        *reinterpret_cast<uint4*>(Ks + k * kRowStride + c * 8) = o;
    }
}

// grid (n_splits, n_tok, ceil(n_heads / 64)), 512 threads, tc_smem_bytes(eb) dynamic smem.
// part_acc == nullptr: one split, the block applies the sink and writes `out`. Otherwise it writes
// its unnormalised partial: part_acc [n_tok, n_splits, n_heads, 512], part_ml [.., 2] = (m in log2
// units, l), m = −inf and l = 0 for a split without keys.
__global__ void __launch_bounds__(kTcThreads, 1)
    sparse_attn_tc_kernel(const __nv_bfloat16* __restrict__ q, const uint8_t* __restrict__ pool,
                          const int64_t* __restrict__ kv_off, int64_t max_keys, const float* __restrict__ sink,
                          __nv_bfloat16* __restrict__ out, float* __restrict__ part_acc, float* __restrict__ part_ml,
                          int n_heads, int n_splits, int eb, float scale_log2) {
    dev::pdl_wait();
    dev::pdl_trigger();
    extern __shared__ __align__(16) uint8_t smem[];
    auto* Qs = reinterpret_cast<__nv_bfloat16*>(smem + kOffQ);
    auto* Ks = reinterpret_cast<__nv_bfloat16*>(smem + kOffK);
    auto* Ps = reinterpret_cast<__nv_bfloat16*>(smem + kOffP);
    auto* list = reinterpret_cast<int64_t*>(smem + kOffList);
    auto* red_max = reinterpret_cast<float*>(smem + kOffRedMax);
    auto* red_l = reinterpret_cast<float*>(smem + kOffRedL);
    auto* corr_s = reinterpret_cast<float*>(smem + kOffCorr);
    auto* m_fin = reinterpret_cast<float*>(smem + kOffMFin);
    auto* cnt = reinterpret_cast<int*>(smem + kOffCnt);
    uint8_t* raw = smem + kOffRaw;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int split = blockIdx.x;
    const int64_t t = blockIdx.y;
    const int h0 = blockIdx.z * kTcHeads;
    const int nh = min(kTcHeads, n_heads - h0);
    const int64_t* row = kv_off + t * max_keys;

    // q [64 heads][512] -> Qs (cp.async, waited with the first key tile); heads past the last are zero.
    const __nv_bfloat16* qt = q + (t * n_heads + h0) * kHeadDim;
    for (int i = tid; i < kTcHeads * (kHeadDim / 8); i += kTcThreads) {
        const int h = i / (kHeadDim / 8), c = i % (kHeadDim / 8);
        __nv_bfloat16* dst = Qs + h * kRowStride + c * 8;
        if (h < nh)
            cp_async16(dst, qt + static_cast<int64_t>(h) * kHeadDim + c * 8);
        else
            *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);
    }
    cp_async_commit();

    // This split's share of the valid keys, balanced by count (holes can sit anywhere in the list).
    int nv_local = 0;
    for (int64_t j = tid; j < max_keys; j += kTcThreads) nv_local += row[j] >= 0 ? 1 : 0;
    const int64_t nv = block_sum_int(nv_local, cnt);
    const int64_t lo = nv * split / n_splits, hi = nv * (split + 1) / n_splits;

    const int g = lane >> 2, tq = lane & 3;        // mma fragment coordinates
    const int mt = warp & 3, quarter = warp >> 2;  // q·kᵀ role: head tile, key quarter
    const int d0 = warp * 32;                      // p·v role: output dims
    float m_run[2] = {-INFINITY, -INFINITY};       // rows g, g+8 of head tile mt (log2 units)
    float l_run[2] = {0.0f, 0.0f};                 // partial sums over this warp's key quarter
    float oacc[4][4][4];
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int b = 0; b < 4; ++b)
#pragma unroll
            for (int c = 0; c < 4; ++c) oacc[a][b][c] = 0.0f;

    // ldmatrix row addresses (see the fragment layouts of mma.m16n8k16): A from row-major [16][16]
    // tiles, kᵀ from key-major K rows (non-transposed), v from the same rows transposed.
    const __nv_bfloat16* qa = Qs + (mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kRowStride + (lane >> 4) * 8;
    const __nv_bfloat16* kb = Ks + (quarter * 16 + (lane & 7) + (lane >> 4) * 8) * kRowStride + ((lane >> 3) & 1) * 8;
    const __nv_bfloat16* pa = Ps + ((lane & 7) + ((lane >> 3) & 1) * 8) * kPStride + (lane >> 4) * 8;
    const __nv_bfloat16* vb = Ks + ((lane & 7) + ((lane >> 3) & 1) * 8) * kRowStride + d0 + (lane >> 4) * 8;

    for (int64_t r0 = lo; r0 < hi; r0 += kListCap) {
        const int n_round = static_cast<int>(min(hi - r0, static_cast<int64_t>(kListCap)));
        gather_keys(row, max_keys, r0, r0 + n_round, list, cnt);
        const int n_tiles = (n_round + kTileKeys - 1) / kTileKeys;
        issue_raw_tile(pool, list, 0, min(n_round, kTileKeys), eb, raw);
        for (int it = 0; it < n_tiles; ++it) {
            const int n = min(kTileKeys, n_round - it * kTileKeys);
            cp_async_wait_all();
            __syncthreads();  // raw tile (and q) visible to all; every warp is done with the previous Ks/Ps
            decode_tile(raw, n, eb, Ks);
            __syncthreads();  // Ks ready, raw free
            if (it + 1 < n_tiles)
                issue_raw_tile(pool, list, (it + 1) * kTileKeys, min(kTileKeys, n_round - (it + 1) * kTileKeys), eb,
                               raw);

            // S = q·kᵀ for heads mt·16..+16, keys quarter·16..+16 (two n8 tiles).
            float sacc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
            if (quarter * 16 < n) {
#pragma unroll 8
                for (int ks = 0; ks < kHeadDim / 16; ++ks) {
                    uint32_t a[4], b[4];
                    ldsm_x4(a, qa + ks * 16);
                    ldsm_x4(b, kb + ks * 16);
                    dev::mma_m16n8k16_bf16(sacc[0], a[0], a[1], a[2], a[3], b[0], b[1]);
                    dev::mma_m16n8k16_bf16(sacc[1], a[0], a[1], a[2], a[3], b[2], b[3]);
                }
            }
            float tmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int nt = 0; nt < 2; ++nt)
#pragma unroll
                for (int c = 0; c < 4; ++c) {
                    const int key = quarter * 16 + nt * 8 + 2 * tq + (c & 1);
                    const float x = key < n ? sacc[nt][c] * scale_log2 : -INFINITY;
                    sacc[nt][c] = x;
                    tmax[c >> 1] = fmaxf(tmax[c >> 1], x);
                }
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                tmax[i] = fmaxf(tmax[i], __shfl_xor_sync(0xffffffffu, tmax[i], 1));
                tmax[i] = fmaxf(tmax[i], __shfl_xor_sync(0xffffffffu, tmax[i], 2));
            }
            if (tq == 0) {
                red_max[quarter * kTcHeads + mt * 16 + g] = tmax[0];
                red_max[quarter * kTcHeads + mt * 16 + g + 8] = tmax[1];
            }
            __syncthreads();
            // New running max (finite: key 0 of the tile is valid), rescale factor, p = 2^(x − m).
            float corr[2];
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const int r = mt * 16 + g + 8 * i;
                float mx = m_run[i];
#pragma unroll
                for (int qq = 0; qq < 4; ++qq) mx = fmaxf(mx, red_max[qq * kTcHeads + r]);
                corr[i] = exp2f(m_run[i] - mx);  // 0 on the first tile (m_run = −inf)
                m_run[i] = mx;
            }
            float psum[2] = {0.0f, 0.0f};
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
                const float p0 = exp2f(sacc[nt][0] - m_run[0]), p1 = exp2f(sacc[nt][1] - m_run[0]);
                const float p2 = exp2f(sacc[nt][2] - m_run[1]), p3 = exp2f(sacc[nt][3] - m_run[1]);
                // The row sum takes the bf16-rounded weights p·v will use: the output stays a convex
                // combination of the values (the rounding only perturbs relative weights).
                const __nv_bfloat162 b01 = __floats2bfloat162_rn(p0, p1), b23 = __floats2bfloat162_rn(p2, p3);
                psum[0] += __low2float(b01) + __high2float(b01);
                psum[1] += __low2float(b23) + __high2float(b23);
                const int col = quarter * 16 + nt * 8 + 2 * tq;
                *reinterpret_cast<__nv_bfloat162*>(Ps + (mt * 16 + g) * kPStride + col) = b01;
                *reinterpret_cast<__nv_bfloat162*>(Ps + (mt * 16 + g + 8) * kPStride + col) = b23;
            }
            l_run[0] = l_run[0] * corr[0] + psum[0];
            l_run[1] = l_run[1] * corr[1] + psum[1];
            if (quarter == 0 && tq == 0) {
                corr_s[mt * 16 + g] = corr[0];
                corr_s[mt * 16 + g + 8] = corr[1];
            }
            __syncthreads();  // Ps, corr_s ready

            // O = O·corr + P·V for dims d0..d0+32 of all 64 heads.
#pragma unroll
            for (int m2 = 0; m2 < 4; ++m2) {
                const float c_lo = corr_s[m2 * 16 + g], c_hi = corr_s[m2 * 16 + g + 8];
#pragma unroll
                for (int nt = 0; nt < 4; ++nt) {
                    oacc[m2][nt][0] *= c_lo;
                    oacc[m2][nt][1] *= c_lo;
                    oacc[m2][nt][2] *= c_hi;
                    oacc[m2][nt][3] *= c_hi;
                }
            }
#pragma unroll
            for (int ks = 0; ks < kTileKeys / 16; ++ks) {
                if (ks * 16 >= n) break;  // uniform: rows past n are zero and their p is 0
                uint32_t b[2][4];
                ldsm_x4_trans(b[0], vb + ks * 16 * kRowStride);
                ldsm_x4_trans(b[1], vb + ks * 16 * kRowStride + 16);
#pragma unroll
                for (int m2 = 0; m2 < 4; ++m2) {
                    uint32_t a[4];
                    ldsm_x4(a, pa + m2 * 16 * kPStride + ks * 16);
                    dev::mma_m16n8k16_bf16(oacc[m2][0], a[0], a[1], a[2], a[3], b[0][0], b[0][1]);
                    dev::mma_m16n8k16_bf16(oacc[m2][1], a[0], a[1], a[2], a[3], b[0][2], b[0][3]);
                    dev::mma_m16n8k16_bf16(oacc[m2][2], a[0], a[1], a[2], a[3], b[1][0], b[1][1]);
                    dev::mma_m16n8k16_bf16(oacc[m2][3], a[0], a[1], a[2], a[3], b[1][2], b[1][3]);
                }
            }
        }
    }
    cp_async_wait_all();  // the q copy, when this split had no key

    // Row sums: the quad's lanes, then the four key quarters; m is the same in all four.
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        l_run[i] += __shfl_xor_sync(0xffffffffu, l_run[i], 1);
        l_run[i] += __shfl_xor_sync(0xffffffffu, l_run[i], 2);
    }
    if (tq == 0) {
        red_l[quarter * kTcHeads + mt * 16 + g] = l_run[0];
        red_l[quarter * kTcHeads + mt * 16 + g + 8] = l_run[1];
        if (quarter == 0) {
            m_fin[mt * 16 + g] = m_run[0];
            m_fin[mt * 16 + g + 8] = m_run[1];
        }
    }
    __syncthreads();

#pragma unroll
    for (int m2 = 0; m2 < 4; ++m2)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int r = m2 * 16 + g + 8 * hf;
            if (r >= nh) continue;
            const float l = red_l[r] + red_l[kTcHeads + r] + red_l[2 * kTcHeads + r] + red_l[3 * kTcHeads + r];
            const float m = m_fin[r];
            const int64_t head = h0 + r;
            if (part_acc == nullptr) {
                // The sink is one more logit with a zero value vector: it only enlarges the denominator.
                const float s2 = sink[head] * kLog2e;
                const float mx = fmaxf(m, s2);
                const float w = exp2f(m - mx);  // 0 when the token has no key
                const float inv = w / (exp2f(s2 - mx) + l * w);
                __nv_bfloat16* o = out + (t * n_heads + head) * kHeadDim + d0 + 2 * tq;
#pragma unroll
                for (int nt = 0; nt < 4; ++nt)
                    *reinterpret_cast<__nv_bfloat162*>(o + nt * 8) =
                        __floats2bfloat162_rn(oacc[m2][nt][2 * hf] * inv, oacc[m2][nt][2 * hf + 1] * inv);
            } else {
                const int64_t pi = (t * n_splits + split) * n_heads + head;
                float* pacc = part_acc + pi * kHeadDim + d0 + 2 * tq;
#pragma unroll
                for (int nt = 0; nt < 4; ++nt)
                    *reinterpret_cast<float2*>(pacc + nt * 8) =
                        make_float2(oacc[m2][nt][2 * hf], oacc[m2][nt][2 * hf + 1]);
                if (warp == 0 && tq == 0) *reinterpret_cast<float2*>(part_ml + pi * 2) = make_float2(m, l);
            }
        }
}

// grid (n_heads, n_tok), 128 threads × 4 dims: merges the splits' (m, l, acc) and the sink.
__global__ void __launch_bounds__(128)
    sparse_attn_combine_kernel(const float* __restrict__ part_acc, const float* __restrict__ part_ml,
                               const float* __restrict__ sink, __nv_bfloat16* __restrict__ out, int n_heads,
                               int n_splits) {
    dev::pdl_wait();
    dev::pdl_trigger();
    const int64_t head = blockIdx.x, t = blockIdx.y;
    const int64_t base = t * n_splits * n_heads + head;  // partial index of split s: base + s·n_heads
    const float s2 = sink[head] * kLog2e;
    float mx = s2;
    for (int s = 0; s < n_splits; ++s) mx = fmaxf(mx, part_ml[(base + s * n_heads) * 2]);
    float denom = exp2f(s2 - mx);
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const int d = threadIdx.x * 4;
    for (int s = 0; s < n_splits; ++s) {
        const int64_t pi = base + s * n_heads;
        const float2 ml = *reinterpret_cast<const float2*>(part_ml + pi * 2);
        const float w = exp2f(ml.x - mx);  // 0 for a split without keys (m = −inf, l = 0, acc = 0)
        denom = fmaf(ml.y, w, denom);
        const float4 a = *reinterpret_cast<const float4*>(part_acc + pi * kHeadDim + d);
        acc.x = fmaf(a.x, w, acc.x);
        acc.y = fmaf(a.y, w, acc.y);
        acc.z = fmaf(a.z, w, acc.z);
        acc.w = fmaf(a.w, w, acc.w);
    }
    const float inv = 1.0f / denom;
    __nv_bfloat16* o = out + (t * n_heads + head) * kHeadDim + d;
    *reinterpret_cast<__nv_bfloat162*>(o) = __floats2bfloat162_rn(acc.x * inv, acc.y * inv);
    *reinterpret_cast<__nv_bfloat162*>(o + 2) = __floats2bfloat162_rn(acc.z * inv, acc.w * inv);
}

void check_dims(const SparseAttnDims& d, int64_t n_tok, int64_t max_keys) {
    ONECARD_CHECK(d.head_dim == kHeadDim && d.rope_dim == 64 && d.quant_block == 64,
                  "sparse_attention: only head_dim 512 / rope 64 / quant block 64 is implemented (got {}/{}/{})",
                  d.head_dim, d.rope_dim, d.quant_block);
    ONECARD_CHECK(d.entry_bytes >= kNopeDim + 128 + 7 && d.entry_bytes % 8 == 0 && d.entry_bytes <= kMaxEntryBytes,
                  "sparse_attention: entry_bytes {} is not a padded 584-style entry", d.entry_bytes);
    ONECARD_CHECK(d.n_heads >= 1 && d.n_heads < (int64_t{1} << 20), "sparse_attention: {} heads", d.n_heads);
    ONECARD_CHECK(n_tok < 65536 && max_keys >= 0 && max_keys < (int64_t{1} << 30),
                  "sparse_attention: {} tokens x {} keys exceed the grid", n_tok, max_keys);
}

}  // namespace

void sparse_attention_reference(const __nv_bfloat16* q, const uint8_t* pool, const int64_t* kv_off, int64_t max_keys,
                                const float* sink, __nv_bfloat16* out, int64_t n_tok, const SparseAttnDims& d,
                                cudaStream_t stream) {
    check_dims(d, n_tok, max_keys);
    if (n_tok == 0) return;
    const dim3 grid(static_cast<unsigned>(d.n_heads), static_cast<unsigned>(n_tok));
    launch_pdl(sparse_attn_kernel, grid, kWarps * 32, 0, stream, q, pool, kv_off, max_keys, sink, out, d.n_heads,
               d.scale);
    CUDA_CHECK_LAUNCH("sparse_attn_kernel");
}

int64_t sparse_attention_scratch_floats(int64_t n_heads, int64_t head_dim) {
    // n_tok × splits × head groups stays ≤ kTargetBlocks whenever splits > 1.
    return int64_t{kTargetBlocks} * n_heads * (head_dim + 2);
}

void sparse_attention(const __nv_bfloat16* q, const uint8_t* pool, const int64_t* kv_off, int64_t max_keys,
                      const float* sink, __nv_bfloat16* out, int64_t n_tok, const SparseAttnDims& d,
                      cudaStream_t stream, float* scratch, int64_t scratch_floats) {
    check_dims(d, n_tok, max_keys);
    ONECARD_CHECK(reinterpret_cast<uintptr_t>(q) % 16 == 0, "sparse_attention: q must be 16-byte aligned");
    if (n_tok == 0) return;
    const int64_t groups = (d.n_heads + kTcHeads - 1) / kTcHeads;
    // Splits: enough blocks for about one wave, never fewer than ~32 key slots per split.
    int64_t splits = 1;
    if (scratch != nullptr) {
        const int64_t per_split = d.n_heads * (kHeadDim + 2);  // floats of one (token, split)
        splits = std::min<int64_t>({int64_t{kMaxSplits}, (max_keys + kMinSplitKeys - 1) / kMinSplitKeys,
                                    kTargetBlocks / (n_tok * groups), scratch_floats / (n_tok * per_split)});
        splits = std::max<int64_t>(splits, 1);
    }
    float* part_acc = splits > 1 ? scratch : nullptr;
    float* part_ml = splits > 1 ? scratch + n_tok * splits * d.n_heads * kHeadDim : nullptr;
    const size_t smem = tc_smem_bytes(d.entry_bytes);
    CUDA_CHECK(cudaFuncSetAttribute(sparse_attn_tc_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(smem)));
    const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(n_tok), static_cast<unsigned>(groups));
    const float scale_log2 = d.scale * kLog2e;
    launch_pdl(sparse_attn_tc_kernel, grid, kTcThreads, smem, stream, q, pool, kv_off, max_keys, sink, out, part_acc,
               part_ml, static_cast<int>(d.n_heads), static_cast<int>(splits), static_cast<int>(d.entry_bytes),
               scale_log2);
    CUDA_CHECK_LAUNCH("sparse_attn_tc_kernel");
    if (splits > 1) {
        const dim3 cgrid(static_cast<unsigned>(d.n_heads), static_cast<unsigned>(n_tok));
        launch_pdl(sparse_attn_combine_kernel, cgrid, kHeadDim / 4, 0, stream, part_acc, part_ml, sink, out,
                   static_cast<int>(d.n_heads), static_cast<int>(splits));
        CUDA_CHECK_LAUNCH("sparse_attn_combine_kernel");
    }
}

}  // namespace onecard::cuda
