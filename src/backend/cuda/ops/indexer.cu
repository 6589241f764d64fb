#include "backend/cuda/ops/indexer.cuh"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops/common.cuh"
#include "backend/cuda/ops/mma.cuh"
#include "backend/cuda/ops/pdl.cuh"

#include <algorithm>

namespace onecard::cuda {
namespace {

// Kernel 1 (scores): one thread per key. A block loads its token's q once (fp32, shared memory) and
// walks key tiles of kScoreThreads; each thread keeps one dot product per head in registers and reads
// its key 4 FP8 bytes at a time while the q values come as broadcast float4 loads. Chunks too small
// to fill the GPU that way (decode) take a split variant (indexer_scores_split_kernel) with the same
// sums. Tokens that see at most topk entries take them all, so no scores are computed for them.
constexpr int kScoreThreads = 256;
constexpr int kTilesPerBlock = 4;  // key tiles per block: amortises the q load over 1024 keys
constexpr int64_t kMaxScoreSmemBytes = 48 * 1024;

// Kernel 2 (top-k): one block per token, exact radix select over the scores' order-preserving bits.
constexpr int kSelThreads = 1024;
constexpr int kSelWarps = kSelThreads / 32;
constexpr int kSelItems = 8;  // consecutive scores per thread in the output pass
constexpr int kSelChunk = kSelThreads * kSelItems;
static_assert(kSelChunk < 65536, "per-chunk counts are packed into 16 bits");
// The select kernel reads its token's score row five times (four radix passes and the output pass):
// rows of up to this many scores are first copied to dynamic shared memory (160 KB: 40,960 CSA
// entries, a 160K-token context), for chunks of few tokens (decode, verify) or small rows, where the
// larger block does not cost occupancy that matters.
constexpr int64_t kSelCacheFloats = 40960;
constexpr int64_t kSelCacheMaxTokens = 256;
constexpr int64_t kSelCacheFreeFloats = 8192;  // rows this small are cached for any chunk

// Entries a token may see, clamped to the caller's bound so a wrong max_visible cannot index past
// the scratch row (positions of padding tokens may be −1: n_visible 0).
__device__ __forceinline__ int64_t visible_entries(int32_t pos, int64_t ratio, int64_t max_visible) {
    const int64_t n = (static_cast<int64_t>(pos) + 1) / ratio;
    return n < 0 ? 0 : (n > max_visible ? max_visible : n);
}

// The token's q row (bf16 [n], n % 8 == 0) into shared fp32: 16-byte loads when the row is aligned
// (always at head_dim 128), so a block pays a few dependent loads per thread, not n / blockDim.
__device__ __forceinline__ void load_q_row(const __nv_bfloat16* qt, int64_t n, float* qf) {
    if ((reinterpret_cast<uintptr_t>(qt) & 15u) == 0) {
        const uint4* q8 = reinterpret_cast<const uint4*>(qt);
        for (int64_t i = threadIdx.x; i < n / 8; i += blockDim.x) {
            const uint4 v = __ldg(q8 + i);
            const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const float2 f = __bfloat1622float2(h[j]);
                qf[8 * i + 2 * j] = f.x;
                qf[8 * i + 2 * j + 1] = f.y;
            }
        }
    } else {
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) qf[i] = __bfloat162float(qt[i]);
    }
}

// acc[i] = q_i · key for N heads (q: their fp32 rows, float4 [N, n_d4]), the key's E4M3 bytes read
// and decoded 4 at a time, once for all N heads. Both score kernels use it, so their dot products
// (and, summed in the same order, their scores) agree bit for bit.
template <int N>
__device__ __forceinline__ void key_dots(const float4* q, const uint32_t* key4, int64_t n_d4, float (&acc)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) acc[i] = 0.0f;
    for (int64_t d4 = 0; d4 < n_d4; ++d4) {
        const uint32_t kw = __ldg(key4 + d4);
        const float k0 = dev::e4m3_to_f32(static_cast<uint8_t>(kw));
        const float k1 = dev::e4m3_to_f32(static_cast<uint8_t>(kw >> 8));
        const float k2 = dev::e4m3_to_f32(static_cast<uint8_t>(kw >> 16));
        const float k3 = dev::e4m3_to_f32(static_cast<uint8_t>(kw >> 24));
#pragma unroll
        for (int i = 0; i < N; ++i) {
            const float4 qv = q[i * n_d4 + d4];
            acc[i] = fmaf(qv.x, k0, fmaf(qv.y, k1, fmaf(qv.z, k2, fmaf(qv.w, k3, acc[i]))));
        }
    }
}

// grid (key tile groups, tokens of the chunk); dynamic smem: q [n_heads, head_dim] + w [n_heads] fp32.
// scores [chunk, ld]: row tc holds token t0 + tc's scores for s < n_visible. A token that sees at most
// topk entries takes them all (indexer_select_kernel), so its scores are not computed.
template <int kHeads>
__global__ void __launch_bounds__(kScoreThreads)
    indexer_scores_kernel(const __nv_bfloat16* __restrict__ q, const float* __restrict__ w,
                          const int32_t* __restrict__ positions, const int32_t* __restrict__ row_of_token,
                          const uint8_t* __restrict__ pool, PagedStreamAddr addr, int64_t head_dim, float softmax_scale,
                          int64_t max_visible, int64_t topk, int64_t t0, float* __restrict__ scores, int64_t ld) {
    dev::pdl_wait();
    dev::pdl_trigger();
    extern __shared__ float4 smem4[];
    float4* q_s = smem4;                                                   // [kHeads, head_dim / 4]
    float* w_s = reinterpret_cast<float*>(smem4 + kHeads * head_dim / 4);  // [kHeads]
    const int64_t tc = blockIdx.y, t = t0 + tc;
    const int64_t n_vis = visible_entries(positions[t], addr.ratio, max_visible);
    if (n_vis <= topk) return;
    if (static_cast<int64_t>(blockIdx.x) * kScoreThreads >= n_vis) return;  // no tile of this block is visible

    load_q_row(q + t * kHeads * head_dim, kHeads * head_dim, reinterpret_cast<float*>(q_s));
    if (threadIdx.x < kHeads) w_s[threadIdx.x] = w[t * kHeads + threadIdx.x];
    __syncthreads();

    const int64_t seq = row_of_token[t];
    const int64_t n_d4 = head_dim / 4;
    float* out = scores + tc * ld;
    for (int64_t tile = blockIdx.x; tile * kScoreThreads < n_vis; tile += gridDim.x) {
        const int64_t s = tile * kScoreThreads + threadIdx.x;
        if (s >= n_vis) break;  // no barrier below: threads may leave independently
        const uint8_t* key = pool + paged_entry_offset(addr, seq, s);
        const uint32_t* key4 = reinterpret_cast<const uint32_t*>(key);  // 4-byte aligned (host-checked)
        float acc[kHeads];
        key_dots<kHeads>(q_s, key4, n_d4, acc);
        // The key's scale is a power of two, so applying it after the dot product gives the same
        // products as the CPU's decode-then-multiply (only the summation order differs).
        const float kscale = __ldg(reinterpret_cast<const float*>(key + head_dim));
        float score = 0.0f;
#pragma unroll
        for (int h = 0; h < kHeads; ++h) {
            const float dot = acc[h] * kscale;
            // The CPU's expression, h ascending, without contraction (as the split kernel sums it).
            score = __fadd_rn(score, __fmul_rn(dot > 0.0f ? dot * softmax_scale : 0.0f, w_s[h]));
        }
        out[s] = score;
    }
}

// The same scores for few tokens (decode): kSplitKeys keys per block and kSplitParts threads per key,
// each taking kHeads / kSplitParts heads, so a step of one token spreads its keys over many SMs
// instead of one block per 1024 keys. Warp p takes head part p of the block's 32 keys, one key per
// lane, so a warp's q reads are one broadcast address (lanes of one key and different parts in a warp
// read q rows 4 KB apart: the same banks, an 8-way conflict on every load). The per-head terms meet in
// shared memory (rows padded to kHeads + 1 floats: conflict-free by key) and are summed in ascending
// head order: the scores equal indexer_scores_kernel's bit for bit.
constexpr int kSplitParts = kScoreThreads / 32;  // 8 warps
constexpr int kSplitKeys = 32;
template <int kHeads>
__global__ void __launch_bounds__(kScoreThreads)
    indexer_scores_split_kernel(const __nv_bfloat16* __restrict__ q, const float* __restrict__ w,
                                const int32_t* __restrict__ positions, const int32_t* __restrict__ row_of_token,
                                const uint8_t* __restrict__ pool, PagedStreamAddr addr, int64_t head_dim,
                                float softmax_scale, int64_t max_visible, int64_t topk, int64_t t0,
                                float* __restrict__ scores, int64_t ld) {
    static_assert(kHeads % kSplitParts == 0, "heads split evenly over a key's threads");
    constexpr int kPartHeads = kHeads / kSplitParts;
    dev::pdl_wait();
    dev::pdl_trigger();
    extern __shared__ float4 smem4[];
    float4* q_s = smem4;                                                   // [kHeads, head_dim / 4]
    float* w_s = reinterpret_cast<float*>(smem4 + kHeads * head_dim / 4);  // [kHeads]
    float* terms = w_s + kHeads;                                           // [kSplitKeys, kHeads + 1]
    const int64_t tc = blockIdx.y, t = t0 + tc;
    const int64_t n_vis = visible_entries(positions[t], addr.ratio, max_visible);
    if (n_vis <= topk) return;
    const int64_t s0 = static_cast<int64_t>(blockIdx.x) * kSplitKeys;
    if (s0 >= n_vis) return;

    load_q_row(q + t * kHeads * head_dim, kHeads * head_dim, reinterpret_cast<float*>(q_s));
    if (threadIdx.x < kHeads) w_s[threadIdx.x] = w[t * kHeads + threadIdx.x];
    __syncthreads();

    constexpr int kTermLd = kHeads + 1;
    const int kl = threadIdx.x % kSplitKeys, part = threadIdx.x / kSplitKeys;
    const int64_t s = s0 + kl, n_d4 = head_dim / 4;
    if (s < n_vis) {
        const uint8_t* key = pool + paged_entry_offset(addr, row_of_token[t], s);
        const uint32_t* key4 = reinterpret_cast<const uint32_t*>(key);
        const float kscale = __ldg(reinterpret_cast<const float*>(key + head_dim));
        float acc[kPartHeads];
        key_dots<kPartHeads>(q_s + part * kPartHeads * n_d4, key4, n_d4, acc);
#pragma unroll
        for (int i = 0; i < kPartHeads; ++i) {
            const int h = part * kPartHeads + i;
            const float dot = acc[i] * kscale;
            terms[kl * kTermLd + h] = __fmul_rn(dot > 0.0f ? dot * softmax_scale : 0.0f, w_s[h]);
        }
    }
    __syncthreads();
    if (threadIdx.x < kSplitKeys && s0 + threadIdx.x < n_vis) {
        float score = 0.0f;
        for (int h = 0; h < kHeads; ++h) score = __fadd_rn(score, terms[threadIdx.x * kTermLd + h]);  // h ascending
        scores[tc * ld + s0 + threadIdx.x] = score;
    }
}

// The same scores for launches of many tokens (prefill chunks, large mixed or verify steps) on tensor
// cores: at a long context the per-key kernel's fp32 dot products are most of a chunk's time (a 64K
// prompt's last 8K chunk: 55%). Per token, S[key, head] = K·Qᵀ is a bf16 GEMM (the E4M3 key bytes
// widen to bf16 exactly, q is bf16 already) with fp32 accumulation, so the products are the CPU's and
// only the summation order differs, as between the CPU and the other kernels (the picks agree up to
// rounding at the k-th place; tests/ops/indexer_test.cpp). A warp takes 32 keys (two m16 tiles
// sharing every q fragment) by kHeads / 8 n-tiles of heads, over head_dim / 16 k-steps; the block's
// q sits in shared memory, rows padded by 8 bytes so a fragment load is conflict-free. The k index is
// permuted, identically for keys and q: lane t's slice of k-step s holds dims
// t·head_dim/4 + 4s .. + 3, so a lane reads its key row 4 contiguous bytes at a time (entries are only
// 4-byte aligned) and its q row 8 bytes at a time. The epilogue sums relu(dot · kscale · scale) · w_h
// over its 2 · kHeads / 8 heads, then over the quad's 4 lanes.
constexpr int kTcWarps = 4;
constexpr int kTcKeysPerWarp = 32;
constexpr int64_t kTcKeysPerBlock = 512;
constexpr int kTcHeadDim = 128;        // the only head_dim it takes (the Flash indexer's)
constexpr int64_t kTcMinTokens = 512;  // fewer: the per-key or split kernel (decode, small verify steps)

// Two E4M3 bytes (low byte first) -> bf16x2, exactly.
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint32_t two) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two & 0xFFFFu), __NV_E4M3);
    const float2 f = __half22float2(__half2(h));
    const __nv_bfloat162 b = __floats2bfloat162_rn(f.x, f.y);
    return *reinterpret_cast<const uint32_t*>(&b);
}

// grid (key groups of kTcKeysPerBlock, tokens of the chunk), kTcWarps warps; dynamic smem: q as
// [kHeads, kTcHeadDim / 4 + 1] uint2 (4 bf16 each; the last one is padding).
template <int kHeads>
__global__ void __launch_bounds__(kTcWarps * 32)
    indexer_scores_tc_kernel(const __nv_bfloat16* __restrict__ q, const float* __restrict__ w,
                             const int32_t* __restrict__ positions, const int32_t* __restrict__ row_of_token,
                             const uint8_t* __restrict__ pool, PagedStreamAddr addr, float softmax_scale,
                             int64_t max_visible, int64_t topk, int64_t t0, float* __restrict__ scores, int64_t ld) {
    static_assert(kHeads % 8 == 0, "heads come in n-tiles of 8");
    constexpr int kNt = kHeads / 8, kSteps = kTcHeadDim / 16, kRowU2 = kTcHeadDim / 4 + 1;
    dev::pdl_wait();
    dev::pdl_trigger();
    extern __shared__ uint2 q_u2[];  // [kHeads, kRowU2]
    const int64_t tc = blockIdx.y, t = t0 + tc;
    const int64_t n_vis = visible_entries(positions[t], addr.ratio, max_visible);
    if (n_vis <= topk) return;
    const int64_t s_begin = static_cast<int64_t>(blockIdx.x) * kTcKeysPerBlock;
    if (s_begin >= n_vis) return;

    const uint2* qg = reinterpret_cast<const uint2*>(q + t * kHeads * kTcHeadDim);  // 8-byte aligned rows
    for (int i = threadIdx.x; i < kHeads * kTcHeadDim / 4; i += blockDim.x)
        q_u2[(i / (kTcHeadDim / 4)) * kRowU2 + i % (kTcHeadDim / 4)] = __ldg(qg + i);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, tq = lane & 3;
    float wl[kNt][2];  // w of heads 8n + 2tq, 8n + 2tq + 1: the columns of this lane's results
#pragma unroll
    for (int n = 0; n < kNt; ++n) {
        wl[n][0] = __ldg(w + t * kHeads + 8 * n + 2 * tq);
        wl[n][1] = __ldg(w + t * kHeads + 8 * n + 2 * tq + 1);
    }
    __syncthreads();

    const int64_t seq = row_of_token[t];
    const int64_t s_end = min(n_vis, s_begin + kTcKeysPerBlock);
    const uint2* qb = q_u2 + g * kRowU2 + tq * (kTcHeadDim / 16);  // lane's q slice of head g, k-step 0
    float* out = scores + tc * ld;
    for (int64_t s0 = s_begin + warp * kTcKeysPerWarp; s0 < s_end; s0 += kTcWarps * kTcKeysPerWarp) {
        // Key rows of this lane: r = 2m + hh is key s0 + 16m + 8hh + g (m: m-tile, hh: row g or g + 8).
        uint32_t kw[4][kSteps];
        float ksc[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int64_t s = s0 + 8 * r + g;
            const bool ok = s < s_end;
            const uint8_t* key = pool + paged_entry_offset(addr, seq, ok ? s : s0);  // s0 < n_vis: readable
            const uint32_t* k4 = reinterpret_cast<const uint32_t*>(key + tq * (kTcHeadDim / 4));
#pragma unroll
            for (int st = 0; st < kSteps; ++st) kw[r][st] = __ldg(k4 + st);
            ksc[r] = ok ? __ldg(reinterpret_cast<const float*>(key + kTcHeadDim)) : 0.0f;
        }
        float acc[2][kNt][4];
#pragma unroll
        for (int m = 0; m < 2; ++m)
#pragma unroll
            for (int n = 0; n < kNt; ++n)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[m][n][j] = 0.0f;
#pragma unroll
        for (int st = 0; st < kSteps; ++st) {
            uint32_t a[2][4];
#pragma unroll
            for (int m = 0; m < 2; ++m) {
                a[m][0] = e4m3x2_to_bf16x2(kw[2 * m][st]);            // row g, dims +0, +1
                a[m][1] = e4m3x2_to_bf16x2(kw[2 * m + 1][st]);        // row g + 8
                a[m][2] = e4m3x2_to_bf16x2(kw[2 * m][st] >> 16);      // row g, dims +2, +3
                a[m][3] = e4m3x2_to_bf16x2(kw[2 * m + 1][st] >> 16);  // row g + 8
            }
#pragma unroll
            for (int n = 0; n < kNt; ++n) {
                const uint2 b = qb[8 * n * kRowU2 + st];
                dev::mma_m16n8k16_bf16(acc[0][n], a[0][0], a[0][1], a[0][2], a[0][3], b.x, b.y);
                dev::mma_m16n8k16_bf16(acc[1][n], a[1][0], a[1][1], a[1][2], a[1][3], b.x, b.y);
            }
        }
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int m = r >> 1, hh = r & 1;
            float part = 0.0f;
#pragma unroll
            for (int n = 0; n < kNt; ++n)
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    const float dot = acc[m][n][2 * hh + j] * ksc[r];
                    part = __fadd_rn(part, __fmul_rn(dot > 0.0f ? dot * softmax_scale : 0.0f, wl[n][j]));
                }
            part += __shfl_xor_sync(0xffffffffu, part, 1);
            part += __shfl_xor_sync(0xffffffffu, part, 2);
            const int64_t s = s0 + 8 * r + g;
            if (tq == 0 && s < s_end) out[s] = part;
        }
    }
}

// Order-preserving map float -> uint32 (a > b as floats <=> key(a) > key(b)). −0 is folded into +0
// first because the CPU compares floats, where the two zeros tie.
__device__ __forceinline__ uint32_t order_key(float f) {
    uint32_t b = __float_as_uint(f);
    if ((b << 1) == 0u) b = 0u;
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// Exclusive prefix sum over the block (kSelThreads threads) and the block total. `warp_tot` holds
// kSelWarps values; the leading barrier protects it from the previous call's readers.
__device__ __forceinline__ uint32_t block_exclusive_scan(uint32_t v, uint32_t* warp_tot, uint32_t& total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    uint32_t incl = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const uint32_t u = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += u;
    }
    __syncthreads();
    if (lane == 31) warp_tot[warp] = incl;
    __syncthreads();
    uint32_t before = 0;
    total = 0;
    for (int i = 0; i < kSelWarps; ++i) {  // 32 broadcast reads; cheaper than a second scan level
        const uint32_t x = warp_tot[i];
        if (i < warp) before += x;
        total += x;
    }
    return before + incl - v;
}

// grid (tokens of the chunk), kSelThreads threads. out row t: the min(topk, n_visible) highest
// scores' indices ascending (ties to the lower index), then −1. cache_row: the row is first copied to
// the dynamic shared memory (max_visible floats of it).
__global__ void __launch_bounds__(kSelThreads)
    indexer_select_kernel(const float* __restrict__ scores, int64_t ld, const int32_t* __restrict__ positions,
                          int64_t ratio, int64_t max_visible, int64_t t0, int64_t topk, int32_t* __restrict__ out,
                          bool cache_row) {
    dev::pdl_wait();
    dev::pdl_trigger();
    extern __shared__ float row_cache[];
    __shared__ uint32_t hist[kSelWarps][256];  // per-warp histograms: scores cluster in few bins
    __shared__ uint32_t warp_tot[kSelWarps];
    __shared__ uint32_t sel_digit, sel_remaining;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t tc = blockIdx.x, t = t0 + tc;
    const int64_t n_vis = visible_entries(positions[t], ratio, max_visible);
    int32_t* o = out + t * topk;
    if (n_vis <= topk) {  // everything visible is picked
        for (int64_t j = threadIdx.x; j < topk; j += kSelThreads) o[j] = j < n_vis ? static_cast<int32_t>(j) : -1;
        return;
    }
    const float* row = scores + tc * ld;
    if (cache_row) {
        for (int64_t s = threadIdx.x; s < n_vis; s += kSelThreads) row_cache[s] = row[s];
        __syncthreads();
        row = row_cache;
    }

    // Radix select, 8 bits per pass from the top: after the pass for `shift`, `prefix` holds the
    // k-th largest key's bits above shift and `remaining` how many picks are still to come from the
    // keys that share them. Invariant: at least `remaining` keys match the prefix.
    uint32_t prefix = 0, mask = 0, remaining = static_cast<uint32_t>(topk);
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = threadIdx.x; i < kSelWarps * 256; i += kSelThreads) (&hist[0][0])[i] = 0;
        __syncthreads();
        // Scores cluster in few bins, so the lanes of a warp that share a bin add once, together
        // (match_any; the loop bound is block-uniform, so every lane takes part in each match).
        for (int64_t base = 0; base < n_vis; base += kSelThreads) {
            const int64_t s = base + threadIdx.x;
            uint32_t bin = 256u;  // none
            if (s < n_vis) {
                const uint32_t u = order_key(row[s]);
                if ((u & mask) == prefix) bin = (u >> shift) & 0xFFu;
            }
            const uint32_t peers = __match_any_sync(0xffffffffu, bin);
            if (bin < 256u && lane == __ffs(peers) - 1)
                atomicAdd(&hist[warp][bin], static_cast<uint32_t>(__popc(peers)));
        }
        __syncthreads();
        if (threadIdx.x < 256) {
            uint32_t c = 0;
            for (int w = 0; w < kSelWarps; ++w) c += hist[w][threadIdx.x];
            hist[0][threadIdx.x] = c;  // only this thread touches column threadIdx.x
        }
        __syncthreads();
        if (warp == 0) {
            // Lane l owns bins 255 − 8l − i (i = 0..7, descending); find the bin where the count of
            // keys at or above it first reaches `remaining`.
            uint32_t c[8], lane_total = 0;
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                c[i] = hist[0][255 - 8 * lane - i];
                lane_total += c[i];
            }
            uint32_t incl = lane_total;
#pragma unroll
            for (int off = 1; off < 32; off <<= 1) {
                const uint32_t u = __shfl_up_sync(0xffffffffu, incl, off);
                if (lane >= off) incl += u;
            }
            const uint32_t excl = incl - lane_total;
            const uint32_t hit = __ballot_sync(0xffffffffu, excl < remaining && remaining <= incl);
            if (lane == __ffs(hit) - 1) {
                uint32_t cum = excl;
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    if (cum + c[i] >= remaining) {
                        sel_digit = static_cast<uint32_t>(255 - 8 * lane - i);
                        sel_remaining = remaining - cum;
                        break;
                    }
                    cum += c[i];
                }
            }
        }
        __syncthreads();
        prefix |= sel_digit << shift;
        mask |= 0xFFu << shift;
        remaining = sel_remaining;
    }
    // Now prefix is the k-th largest key: take every key above it and the `remaining` lowest-index
    // keys equal to it, in index order. One packed block scan per chunk: high half counts "above",
    // low half counts "equal" (≤ kSelChunk each).
    const uint32_t thr = prefix, n_eq_take = remaining;
    int64_t written = 0;
    uint32_t eq_run = 0;  // equal keys seen in earlier chunks
    for (int64_t base = 0; base < n_vis && written < topk; base += kSelChunk) {
        const int64_t s0 = base + static_cast<int64_t>(threadIdx.x) * kSelItems;
        uint32_t gt = 0, eq = 0;
#pragma unroll
        for (int i = 0; i < kSelItems; ++i) {
            if (s0 + i < n_vis) {
                const uint32_t u = order_key(row[s0 + i]);
                gt |= static_cast<uint32_t>(u > thr) << i;
                eq |= static_cast<uint32_t>(u == thr) << i;
            }
        }
        uint32_t total = 0;
        const uint32_t excl = block_exclusive_scan((__popc(gt) << 16) | __popc(eq), warp_tot, total);
        const uint32_t eq_left = n_eq_take > eq_run ? n_eq_take - eq_run : 0u;  // equal picks still open
        const uint32_t gt_before = excl >> 16, eq_before = excl & 0xFFFFu;
        int64_t pos = written + gt_before + min(eq_before, eq_left);
        uint32_t eq_seen = eq_before;
#pragma unroll
        for (int i = 0; i < kSelItems; ++i) {
            if ((gt >> i) & 1u) {
                o[pos++] = static_cast<int32_t>(s0 + i);
            } else if ((eq >> i) & 1u) {
                if (eq_seen < eq_left) o[pos++] = static_cast<int32_t>(s0 + i);
                ++eq_seen;
            }
        }
        written += (total >> 16) + min(total & 0xFFFFu, eq_left);
        eq_run += total & 0xFFFFu;
    }
    for (int64_t j = written + threadIdx.x; j < topk; j += kSelThreads) o[j] = -1;  // not reached: n_vis > topk
}

// Blocks of the per-key kernel below which a chunk takes the split kernel (about one wave).
constexpr int64_t kSplitBelowBlocks = 132;

template <int kHeads>
void launch_scores(const __nv_bfloat16* q, const float* w, const int32_t* positions, const int32_t* row_of_token,
                   const uint8_t* pool, const PagedStreamAddr& addr, const IndexerDims& d, int64_t max_visible,
                   int64_t t0, int64_t n_chunk, float* scratch, cudaStream_t stream) {
    if constexpr (kHeads % 8 == 0) {
        if (n_chunk >= kTcMinTokens && d.head_dim == kTcHeadDim && (reinterpret_cast<uintptr_t>(q) & 7u) == 0) {
            const size_t smem = static_cast<size_t>(kHeads) * (kTcHeadDim / 4 + 1) * sizeof(uint2);
            const dim3 grid(static_cast<unsigned>((max_visible + kTcKeysPerBlock - 1) / kTcKeysPerBlock),
                            static_cast<unsigned>(n_chunk));
            launch_pdl(indexer_scores_tc_kernel<kHeads>, grid, kTcWarps * 32, smem, stream, q, w, positions,
                       row_of_token, pool, addr, d.softmax_scale, max_visible, d.topk, t0, scratch, max_visible);
            CUDA_CHECK_LAUNCH("indexer_scores_tc_kernel");
            return;
        }
    }
    const int64_t n_tiles = (max_visible + kScoreThreads - 1) / kScoreThreads;
    const int64_t groups = (n_tiles + kTilesPerBlock - 1) / kTilesPerBlock;
    const size_t smem = static_cast<size_t>(kHeads * d.head_dim + kHeads) * sizeof(float);
    if constexpr (kHeads % kSplitParts == 0) {
        const size_t split_smem = smem + static_cast<size_t>(kSplitKeys * (kHeads + 1)) * sizeof(float);
        if (groups * n_chunk < kSplitBelowBlocks && split_smem <= static_cast<size_t>(kMaxScoreSmemBytes)) {
            const dim3 grid(static_cast<unsigned>((max_visible + kSplitKeys - 1) / kSplitKeys),
                            static_cast<unsigned>(n_chunk));
            launch_pdl(indexer_scores_split_kernel<kHeads>, grid, kScoreThreads, split_smem, stream, q, w, positions,
                       row_of_token, pool, addr, d.head_dim, d.softmax_scale, max_visible, d.topk, t0, scratch,
                       max_visible);
            CUDA_CHECK_LAUNCH("indexer_scores_split_kernel");
            return;
        }
    }
    const dim3 grid(static_cast<unsigned>(groups), static_cast<unsigned>(n_chunk));
    launch_pdl(indexer_scores_kernel<kHeads>, grid, kScoreThreads, smem, stream, q, w, positions, row_of_token, pool,
               addr, d.head_dim, d.softmax_scale, max_visible, d.topk, t0, scratch, max_visible);
    CUDA_CHECK_LAUNCH("indexer_scores_kernel");
}

}  // namespace

void indexer_topk(const IndexerTopkArgs& a, const IndexerDims& d, cudaStream_t stream) {
    const __nv_bfloat16* q = a.q;
    const float* w = a.w;
    const int32_t *positions = a.positions, *row_of_token = a.row_of_token;
    const uint8_t* pool = a.pool;
    const PagedStreamAddr& addr = a.addr;
    int32_t* out = a.out;
    const int64_t n = a.n, max_visible = a.max_visible, scratch_floats = a.scratch_floats;
    float* scratch = a.scratch;
    const int64_t H = d.n_heads;
    ONECARD_CHECK(H == 4 || H == 8 || H == 16 || H == 32 || H == 64,
                  "indexer_topk: n_heads {} is not one of 4, 8, 16, 32, 64", H);
    ONECARD_CHECK(d.head_dim > 0 && d.head_dim % 4 == 0, "indexer_topk: head_dim {} must be a positive multiple of 4",
                  d.head_dim);
    ONECARD_CHECK((H * d.head_dim + H) * 4 <= kMaxScoreSmemBytes,
                  "indexer_topk: q of {} heads x {} dims does not fit the score kernel's shared memory", H, d.head_dim);
    ONECARD_CHECK(d.topk > 0 && d.topk < (int64_t{1} << 31), "indexer_topk: topk {} out of range", d.topk);
    ONECARD_CHECK(d.softmax_scale > 0.0f, "indexer_topk: softmax_scale {} must be positive (head_dim^-1/2)",
                  d.softmax_scale);
    ONECARD_CHECK(addr.ratio > 0 && addr.block_size > 0 && addr.block_size % addr.ratio == 0,
                  "indexer_topk: block_size {} must be a positive multiple of ratio {}", addr.block_size, addr.ratio);
    ONECARD_CHECK(addr.entry_bytes == d.head_dim + 4, "indexer_topk: entry_bytes {} != head_dim + 4 ({})",
                  addr.entry_bytes, d.head_dim + 4);
    // The score kernel reads keys 4 bytes at a time and the scale as an fp32.
    ONECARD_CHECK(addr.block_bytes % 4 == 0 && addr.stream_offset % 4 == 0,
                  "indexer_topk: block_bytes {} and stream_offset {} must be multiples of 4", addr.block_bytes,
                  addr.stream_offset);
    ONECARD_CHECK(n >= 0 && max_visible >= 0 && max_visible < (int64_t{1} << 31),
                  "indexer_topk: bad n {} or max_visible {}", n, max_visible);
    ONECARD_CHECK(max_visible == 0 || (scratch != nullptr && scratch_floats >= max_visible),
                  "indexer_topk: scratch of {} floats is smaller than max_visible {}", scratch_floats, max_visible);
    if (n == 0) return;

    // Tokens per pass: as many score rows [max_visible] as the scratch holds (grid.y bound 65535).
    const int64_t rows = max_visible == 0 ? n : scratch_floats / max_visible;
    const int64_t chunk = std::min<int64_t>({n, rows, 65535});
    using LaunchScores =
        void (*)(const __nv_bfloat16*, const float*, const int32_t*, const int32_t*, const uint8_t*,
                 const PagedStreamAddr&, const IndexerDims&, int64_t, int64_t, int64_t, float*, cudaStream_t);
    const LaunchScores launch = H == 4    ? launch_scores<4>
                                : H == 8  ? launch_scores<8>
                                : H == 16 ? launch_scores<16>
                                : H == 32 ? launch_scores<32>
                                          : launch_scores<64>;
    for (int64_t t0 = 0; t0 < n; t0 += chunk) {
        const int64_t n_chunk = std::min(chunk, n - t0);
        if (max_visible > 0)
            launch(q, w, positions, row_of_token, pool, addr, d, max_visible, t0, n_chunk, scratch, stream);
        const bool cache_row = max_visible > 0 && max_visible <= kSelCacheFloats &&
                               (n_chunk <= kSelCacheMaxTokens || max_visible <= kSelCacheFreeFloats);
        const size_t cache_bytes = cache_row ? static_cast<size_t>(max_visible) * sizeof(float) : 0;
        if (cache_bytes > 0) {
            // The kernel's dynamic shared memory bound, raised to the cache's largest size outside graph
            // capture (an uncaptured step, a prefill, always comes first; captured launches replay it).
            cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
            CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
            if (capture == cudaStreamCaptureStatusNone)
                CUDA_CHECK(cudaFuncSetAttribute(indexer_select_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                static_cast<int>(kSelCacheFloats * sizeof(float))));
        }
        launch_pdl(indexer_select_kernel, static_cast<unsigned>(n_chunk), kSelThreads, cache_bytes, stream, scratch,
                   max_visible, positions, addr.ratio, max_visible, t0, d.topk, out, cache_row);
        CUDA_CHECK_LAUNCH("indexer_select_kernel");
    }
}

}  // namespace onecard::cuda
