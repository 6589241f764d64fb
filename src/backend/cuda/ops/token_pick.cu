#include "backend/cuda/ops/token_pick.cuh"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops/common.cuh"
#include "backend/cuda/ops/pdl.cuh"

#include <cfloat>

namespace onecard::cuda {
namespace {

constexpr int kRowThreads = 1024;  // argmax / sampling: one block per logits row

// ---- block reductions on 64-bit values and (value, index) pairs --------------------------------

template <typename T>
__device__ __forceinline__ T warp_sum64(T v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sum over the block in a fixed order (deterministic for doubles too); every thread gets it.
// scratch: 32 entries.
template <typename T>
__device__ T block_sum64(T v, T* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = (blockDim.x + 31) >> 5;
    v = warp_sum64(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < n_warps ? scratch[lane] : T(0);
    return warp_sum64(v);
}

__device__ double block_max_double(double v, double* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = (blockDim.x + 31) >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < n_warps ? scratch[lane] : 0.0;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// (value, id) with "better" = larger value, then lower id; NaN is never stored, so it never wins.
struct ArgBest {
    float v;
    int32_t i;
};
__device__ __forceinline__ ArgBest arg_better(ArgBest a, ArgBest b) {
    return (b.v > a.v || (b.v == a.v && b.i < a.i)) ? b : a;
}

// Logit i of a row under its allowed-token mask (null: none): a clear bit reads as -inf, exactly what
// the host's apply_token_mask writes into the row before engine/sampler.cpp sees it.
__device__ __forceinline__ float masked_logit(const float* row, const uint32_t* mask, int64_t i) {
    return mask == nullptr || ((mask[i >> 5] >> (i & 31)) & 1u) ? row[i] : -INFINITY;
}

// Argmax of one row (under `mask`, may be null) by the whole block; ties to the lower id. A row of
// only NaN gives id 0.
__device__ int32_t block_argmax(const float* row, const uint32_t* mask, int64_t vocab, ArgBest* scratch) {
    ArgBest best{-INFINITY, INT32_MAX};
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float v = masked_logit(row, mask, i);
        if (!isnan(v)) best = arg_better(best, ArgBest{v, static_cast<int32_t>(i)});
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = (blockDim.x + 31) >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        best =
            arg_better(best, ArgBest{__shfl_xor_sync(0xffffffffu, best.v, o), __shfl_xor_sync(0xffffffffu, best.i, o)});
    __syncthreads();
    if (lane == 0) scratch[warp] = best;
    __syncthreads();
    best = lane < n_warps ? scratch[lane] : ArgBest{-INFINITY, INT32_MAX};
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        best =
            arg_better(best, ArgBest{__shfl_xor_sync(0xffffffffu, best.v, o), __shfl_xor_sync(0xffffffffu, best.i, o)});
    return best.i < vocab ? best.i : 0;
}

__global__ void __launch_bounds__(kRowThreads)
    argmax_kernel(const float* __restrict__ logits, int32_t* ids, int64_t vocab) {
    dev::pdl_wait();
    dev::pdl_trigger();
    __shared__ ArgBest scratch[32];
    const int32_t id = block_argmax(logits + blockIdx.x * vocab, nullptr, vocab, scratch);
    if (threadIdx.x == 0) ids[blockIdx.x] = id;
}

// ---- sampling --------------------------------------------------------------------------------
//
// Mirrors engine/sampler.cpp for a row without penalties. The probabilities are computed exactly as
// the CPU does, in double: q_t = exp((x_t − max) / T) / Σ exp(...). Survivors: q_t > 0 and
// q_t ≥ min_p · q_max; then the top_k by (q desc, id asc); then the shortest such prefix whose mass
// reaches top_p of the survivors' mass; then one draw u = sampler_uniform(seed, counter) walking the
// survivors in (q desc, id asc) order when top-k or top-p cut, in id order otherwise (as the CPU).
//
// No sort: every "walk in order until a running total reaches a target" is a radix descent over a
// 96-bit key (q's bits, which order like q for q ≥ 0, then vocab − 1 − id so lower ids come
// first), 8 bits per pass, with histograms of counts (top-k) or of masses (top-p, the draw). Masses
// are fixed point (q · 2^62 rounded, u64): integer sums are exact and order-free, so the result does
// not depend on the thread schedule. Against the CPU's double sums the cut points and the draw can
// only differ when u (or top_p · mass) lies within ~1e-13 relative of a boundary between two tokens;
// the parity test measures that margin and requires it on the rows it compares.

struct Key96 {
    uint64_t hi;  // q's bits in sorted mode, 0 in id-order mode
    uint32_t lo;  // vocab − 1 − id
};
__device__ __forceinline__ bool key_ge(Key96 a, Key96 b) {
    return a.hi > b.hi || (a.hi == b.hi && a.lo >= b.lo);
}

struct SampleRow {
    const double* q;  // [vocab] probabilities of the row
    int64_t vocab;
    double min_keep;  // min-p threshold on q (0 = off)
    bool sorted;      // order by (q desc, id asc); else by id
    Key96 thr_k;      // survivors have key ≥ thr_k (top-k cut; {0,0} = none)
    Key96 thr_p;      // and key ≥ thr_p (top-p cut)
};

__device__ __forceinline__ uint64_t fixed_mass(double q) {
    return __double2ull_rn(q * 0x1p62);
}

__device__ __forceinline__ Key96 key_of(const SampleRow& r, int64_t i, double q) {
    return Key96{r.sorted ? static_cast<uint64_t>(__double_as_longlong(q)) : 0ull,
                 static_cast<uint32_t>(r.vocab - 1 - i)};
}

__device__ __forceinline__ bool survives(const SampleRow& r, double q, Key96 k) {
    return q > 0.0 && q >= r.min_keep && key_ge(k, r.thr_k) && key_ge(k, r.thr_p);
}

// Σ over survivors of 1 (count) or of the fixed-point mass.
__device__ uint64_t survivor_total(const SampleRow& r, bool count, uint64_t* scratch) {
    uint64_t s = 0;
    for (int64_t i = threadIdx.x; i < r.vocab; i += blockDim.x) {
        const double q = r.q[i];
        if (survives(r, q, key_of(r, i, q))) s += count ? 1ull : fixed_mass(q);
    }
    return block_sum64(s, scratch);
}

struct DescentShared {
    unsigned long long hist[256];
    Key96 prefix;
};

// The key of the first survivor, walking keys from the largest down, at which the running total of
// weights (1 or the fixed-point mass) reaches `target` (1 ≤ target ≤ the survivors' total).
// Digits 0..7 are q's bits from the top, 8..11 the id part; id-order mode skips the q digits.
__device__ Key96 descend(const SampleRow& r, bool count, uint64_t target, DescentShared& sh) {
    Key96 prefix{0ull, 0u};
    uint64_t remaining = target;  // meaningful in thread 0 only
    const int lane = threadIdx.x & 31;
    for (int d = r.sorted ? 0 : 8; d < 12; ++d) {
        for (int b = threadIdx.x; b < 256; b += blockDim.x) sh.hist[b] = 0;
        __syncthreads();
        // Uniform trip count so whole warps stay converged for the shuffles below.
        for (int64_t base = 0; base < r.vocab; base += blockDim.x) {
            const int64_t i = base + threadIdx.x;
            int digit = 256;  // 256: not counted at this level
            uint64_t w = 0;
            if (i < r.vocab) {
                const double q = r.q[i];
                const Key96 k = key_of(r, i, q);
                if (survives(r, q, k)) {
                    bool match;
                    if (d < 8) {
                        match = d == 0 || (k.hi >> (64 - 8 * d)) == (prefix.hi >> (64 - 8 * d));
                        digit = static_cast<int>((k.hi >> (56 - 8 * d)) & 0xFF);
                    } else {
                        const int j = d - 8;
                        match = k.hi == prefix.hi && (j == 0 || (k.lo >> (32 - 8 * j)) == (prefix.lo >> (32 - 8 * j)));
                        digit = static_cast<int>((k.lo >> (24 - 8 * j)) & 0xFF);
                    }
                    if (match) {
                        w = count ? 1ull : fixed_mass(q);
                    } else {
                        digit = 256;
                    }
                }
            }
            // The early levels put most of a warp into one bucket: one atomic per warp then, instead of
            // 32 serialised on the same shared address.
            const unsigned counted = __ballot_sync(0xffffffffu, digit != 256);
            if (counted == 0) continue;
            const int first_digit = __shfl_sync(0xffffffffu, digit, __ffs(counted) - 1);
            if (__all_sync(0xffffffffu, digit == 256 || digit == first_digit)) {
                const uint64_t s = warp_sum64(w);
                if (lane == 0) atomicAdd(&sh.hist[first_digit], static_cast<unsigned long long>(s));
            } else if (digit != 256 && w != 0) {
                atomicAdd(&sh.hist[digit], static_cast<unsigned long long>(w));
            }
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            uint64_t above = 0;
            int b = 255;
            for (; b > 0; --b) {
                if (above + sh.hist[b] >= remaining) break;
                above += sh.hist[b];
            }
            remaining -= above;
            if (d < 8) {
                prefix.hi |= static_cast<uint64_t>(b) << (56 - 8 * d);
            } else {
                prefix.lo |= static_cast<uint32_t>(b) << (24 - 8 * (d - 8));
            }
            sh.prefix = prefix;
        }
        __syncthreads();
        prefix = sh.prefix;
    }
    return prefix;
}

// engine/sampler.cpp's sampler_uniform, bit for bit.
__device__ __forceinline__ double sampler_uniform_dev(uint64_t seed, uint64_t counter) {
    const uint64_t bits = dev::splitmix64(dev::splitmix64(seed) ^ dev::splitmix64(counter + 0x632BE59BD9B4E019ULL));
    return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

__global__ void __launch_bounds__(kRowThreads)
    sample_kernel(const float* __restrict__ logits, const SampleParams* __restrict__ params,
                  const uint32_t* __restrict__ masks, int32_t* ids, int64_t vocab, double* __restrict__ scratch) {
    dev::pdl_wait();
    dev::pdl_trigger();
    __shared__ ArgBest arg_scratch[32];
    __shared__ float fscratch[32];
    __shared__ double dscratch[32];
    __shared__ uint64_t uscratch[32];
    __shared__ DescentShared sh;
    const int64_t row = blockIdx.x;
    const float* lg = logits + row * vocab;
    const SampleParams p = params[row];
    // A masked token is a -inf logit from here on: probability exactly 0, so never a survivor.
    const uint32_t* mask = p.masked && masks != nullptr ? masks + row * ((vocab + 31) / 32) : nullptr;
    if (!(p.temperature > 0.0f)) {  // greedy (also NaN temperature)
        const int32_t id = block_argmax(lg, mask, vocab, arg_scratch);
        if (threadIdx.x == 0) ids[row] = id;
        return;
    }
    // max as the CPU's max_element (finite logits assumed; NaN is skipped by fmaxf).
    float mx = -INFINITY;
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) mx = fmaxf(mx, masked_logit(lg, mask, i));
    mx = dev::block_max(mx, fscratch);
    double* q = scratch + row * vocab;
    double sum = 0.0;
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
        // The CPU's expression: (double(x) − double(max)) / double(T), then exp in double.
        const double e = exp((static_cast<double>(masked_logit(lg, mask, i)) - static_cast<double>(mx)) /
                             static_cast<double>(p.temperature));
        q[i] = e;
        sum += e;
    }
    sum = block_sum64(sum, dscratch);
    double q_max = 0.0;
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
        const double v = q[i] / sum;
        q[i] = v;
        q_max = fmax(q_max, v);
    }
    q_max = block_max_double(q_max, dscratch);
    __syncthreads();  // q complete before other threads read it

    SampleRow r{q, vocab, p.min_p > 0.0f ? static_cast<double>(p.min_p) * q_max : 0.0, false, Key96{0, 0}, Key96{0, 0}};
    const uint64_t n_keep = survivor_total(r, true, uscratch);
    const bool top_k_cuts = p.top_k > 0 && static_cast<uint64_t>(p.top_k) < n_keep;
    const bool top_p_on = p.top_p < 1.0f;
    r.sorted = top_k_cuts || top_p_on;
    if (top_k_cuts) r.thr_k = descend(r, true, static_cast<uint64_t>(p.top_k), sh);
    if (top_p_on) {
        const uint64_t mass = survivor_total(r, false, uscratch);
        double t = ceil(static_cast<double>(p.top_p) * static_cast<double>(mass));
        t = fmin(fmax(t, 1.0), static_cast<double>(mass));
        r.thr_p = descend(r, false, static_cast<uint64_t>(t), sh);
    }
    const uint64_t mass = survivor_total(r, false, uscratch);
    // CPU: first survivor whose running (renormalised) total exceeds u, i.e. running mass > u·mass.
    const double u = sampler_uniform_dev(p.seed, p.counter);
    uint64_t target = static_cast<uint64_t>(floor(u * static_cast<double>(mass))) + 1;
    if (target > mass) target = mass;
    const Key96 k = descend(r, false, target, sh);
    if (threadIdx.x == 0) {
        const int64_t id = vocab - 1 - static_cast<int64_t>(k.lo);
        ids[row] = static_cast<int32_t>(id < 0 ? 0 : (id >= vocab ? vocab - 1 : id));
    }
}

}  // namespace

void argmax_rows(const float* logits, int32_t* ids, int64_t n, int64_t vocab, cudaStream_t stream) {
    ONECARD_CHECK(n >= 0 && n < (int64_t{1} << 31) && vocab > 0 && vocab <= INT32_MAX, "argmax_rows: n {} vocab {}", n,
                  vocab);
    if (n == 0) return;
    launch_pdl(argmax_kernel, static_cast<unsigned>(n), kRowThreads, 0, stream, logits, ids, vocab);
    CUDA_CHECK_LAUNCH("argmax_kernel");
}

size_t sample_rows_scratch_bytes(int64_t n, int64_t vocab) {
    return static_cast<size_t>(n) * static_cast<size_t>(vocab) * sizeof(double);
}

void sample_rows(const float* logits, const SampleParams* params, const uint32_t* masks, int32_t* ids, int64_t n,
                 int64_t vocab, void* scratch, cudaStream_t stream) {
    // Keys carry vocab − 1 − id in 32 bits; ids are int32.
    ONECARD_CHECK(n >= 0 && n < (int64_t{1} << 31) && vocab > 0 && vocab <= INT32_MAX, "sample_rows: n {} vocab {}", n,
                  vocab);
    if (n == 0) return;
    launch_pdl(sample_kernel, static_cast<unsigned>(n), kRowThreads, 0, stream, logits, params, masks, ids, vocab,
               static_cast<double*>(scratch));
    CUDA_CHECK_LAUNCH("sample_kernel");
}

}  // namespace onecard::cuda
