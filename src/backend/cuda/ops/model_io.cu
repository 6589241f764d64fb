#include "backend/cuda/ops/model_io.cuh"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops/common.cuh"
#include "backend/cuda/ops/pdl.cuh"

#include <cfloat>

namespace onecard::cuda {
namespace {

constexpr int kEltThreads = 256;
constexpr int kHeadThreads = 256;
constexpr int kRowThreads = 1024;  // argmax / sampling: one block per logits row
constexpr int kHc = 4;

unsigned grid_for(int64_t n, int threads) {
    // Grid-stride loops cover the rest; 65535·4 blocks is plenty to fill the GPU.
    const int64_t blocks = (n + threads - 1) / threads;
    return static_cast<unsigned>(blocks < 262140 ? blocks : 262140);
}

// ---- small element-wise ops ------------------------------------------------------------------

__global__ void embed_streams_kernel(const int32_t* __restrict__ tokens, const __nv_bfloat16* __restrict__ embed,
                                     __nv_bfloat16* __restrict__ X, int64_t n, int64_t dim, int64_t hc) {
    dev::pdl_wait();
    dev::pdl_trigger();
    const int64_t total = n * dim;
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
         idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t i = idx / dim, d = idx % dim;
        const __nv_bfloat16 v = embed[static_cast<int64_t>(tokens[i]) * dim + d];
        for (int64_t j = 0; j < hc; ++j) X[(i * hc + j) * dim + d] = v;
    }
}

__global__ void add_bf16_kernel(const __nv_bfloat16* __restrict__ a, const __nv_bfloat16* __restrict__ b,
                                __nv_bfloat16* y, int64_t n) {
    dev::pdl_wait();
    dev::pdl_trigger();
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        y[i] = __float2bfloat16(__bfloat162float(a[i]) + __bfloat162float(b[i]));
}

__global__ void bf16_to_f32_kernel(const __nv_bfloat16* __restrict__ x, float* __restrict__ y, int64_t n) {
    dev::pdl_wait();
    dev::pdl_trigger();
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        y[i] = __bfloat162float(x[i]);
}

__global__ void f32_to_bf16_kernel(const float* __restrict__ x, __nv_bfloat16* __restrict__ y, int64_t n) {
    dev::pdl_wait();
    dev::pdl_trigger();
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        y[i] = __float2bfloat16(x[i]);
}

__global__ void scale_f32_kernel(float* y, float s, int64_t n) {
    dev::pdl_wait();
    dev::pdl_trigger();
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        y[i] *= s;
}

// ---- HC head ---------------------------------------------------------------------------------

__device__ __forceinline__ float sigmoidf(float x) {
    return 1.0f / (1.0f + expf(-x));
}

// One block per token: the 4 dot products fn_j · v and Σv² in one pass over v = flatten(X_t)
// [4·D], then y = Σ_j pre_j · X_j. mixes = rsqrt(mean(v²)+eps) · (fn · v) equals cpu::hc_mixes'
// fn · rmsnorm(v) up to rounding.
__global__ void __launch_bounds__(kHeadThreads)
    hc_head_kernel(const __nv_bfloat16* __restrict__ X, const float* __restrict__ fn, const float* __restrict__ base,
                   const float* __restrict__ scale, __nv_bfloat16* __restrict__ y, int64_t dim, float hc_eps,
                   float norm_eps) {
    dev::pdl_wait();
    dev::pdl_trigger();
    __shared__ float red[kHc + 1][kHeadThreads / 32];
    __shared__ float pre_s[kHc];
    const int64_t t = blockIdx.x;
    const int64_t flat = kHc * dim;
    const __nv_bfloat16* Xt = X + t * flat;
    float acc[kHc + 1];  // [0, 4): fn_j · v, [4]: Σv²
#pragma unroll
    for (int j = 0; j <= kHc; ++j) acc[j] = 0.0f;
    for (int64_t i = threadIdx.x; i < flat; i += kHeadThreads) {
        const float v = __bfloat162float(Xt[i]);
        acc[kHc] = fmaf(v, v, acc[kHc]);
#pragma unroll
        for (int j = 0; j < kHc; ++j) acc[j] = fmaf(fn[j * flat + i], v, acc[j]);
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int j = 0; j <= kHc; ++j) {
        const float s = dev::warp_sum(acc[j]);
        if (lane == 0) red[j][warp] = s;
    }
    __syncthreads();
    if (threadIdx.x < kHc) {
        const int j = threadIdx.x;
        float dot = 0.0f, ss = 0.0f;
        for (int w = 0; w < kHeadThreads / 32; ++w) {
            dot += red[j][w];
            ss += red[kHc][w];
        }
        const float r = 1.0f / sqrtf(ss / static_cast<float>(flat) + norm_eps);
        pre_s[j] = sigmoidf(r * dot * scale[0] + base[j]) + hc_eps;
    }
    __syncthreads();
    for (int64_t d = threadIdx.x; d < dim; d += kHeadThreads) {
        float v = 0.0f;
#pragma unroll
        for (int j = 0; j < kHc; ++j) v = fmaf(pre_s[j], __bfloat162float(Xt[j * dim + d]), v);
        y[t * dim + d] = __float2bfloat16(v);
    }
}

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

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

// engine/sampler.cpp's sampler_uniform, bit for bit.
__device__ __forceinline__ double sampler_uniform_dev(uint64_t seed, uint64_t counter) {
    const uint64_t bits = splitmix64(splitmix64(seed) ^ splitmix64(counter + 0x632BE59BD9B4E019ULL));
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

void embed_streams(const int32_t* tokens, const __nv_bfloat16* embed, __nv_bfloat16* X, int64_t n, int64_t dim,
                   int64_t hc, cudaStream_t stream) {
    ONECARD_CHECK(n >= 0 && dim > 0 && hc > 0, "embed_streams: n {} dim {} hc {}", n, dim, hc);
    if (n == 0) return;
    launch_pdl(embed_streams_kernel, grid_for(n * dim, kEltThreads), kEltThreads, 0, stream, tokens, embed, X, n, dim,
               hc);
    CUDA_CHECK_LAUNCH("embed_streams_kernel");
}

void hc_head_bf16(const __nv_bfloat16* X, const float* fn, const float* base, const float* scale, __nv_bfloat16* y,
                  int64_t n, int64_t dim, float hc_eps, float norm_eps, cudaStream_t stream) {
    ONECARD_CHECK(n >= 0 && n < (int64_t{1} << 31) && dim > 0, "hc_head_bf16: n {} dim {}", n, dim);
    if (n == 0) return;
    launch_pdl(hc_head_kernel, static_cast<unsigned>(n), kHeadThreads, 0, stream, X, fn, base, scale, y, dim, hc_eps,
               norm_eps);
    CUDA_CHECK_LAUNCH("hc_head_kernel");
}

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

void add_bf16(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* y, int64_t n, cudaStream_t stream) {
    if (n <= 0) return;
    launch_pdl(add_bf16_kernel, grid_for(n, kEltThreads), kEltThreads, 0, stream, a, b, y, n);
    CUDA_CHECK_LAUNCH("add_bf16_kernel");
}

void bf16_to_f32(const __nv_bfloat16* x, float* y, int64_t n, cudaStream_t stream) {
    if (n <= 0) return;
    launch_pdl(bf16_to_f32_kernel, grid_for(n, kEltThreads), kEltThreads, 0, stream, x, y, n);
    CUDA_CHECK_LAUNCH("bf16_to_f32_kernel");
}

void f32_to_bf16(const float* x, __nv_bfloat16* y, int64_t n, cudaStream_t stream) {
    if (n <= 0) return;
    launch_pdl(f32_to_bf16_kernel, grid_for(n, kEltThreads), kEltThreads, 0, stream, x, y, n);
    CUDA_CHECK_LAUNCH("f32_to_bf16_kernel");
}

void scale_f32(float* y, float s, int64_t n, cudaStream_t stream) {
    if (n <= 0) return;
    launch_pdl(scale_f32_kernel, grid_for(n, kEltThreads), kEltThreads, 0, stream, y, s, n);
    CUDA_CHECK_LAUNCH("scale_f32_kernel");
}

}  // namespace onecard::cuda
