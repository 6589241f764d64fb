#include "backend/cuda/ops/kv_write.cuh"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops/common.cuh"
#include "backend/cuda/ops/pdl.cuh"

#include <cmath>

namespace onecard::cuda {
namespace {

constexpr float kE4m3Max = 448.0f;
constexpr float kFp4Max = 6.0f;
constexpr float kAmaxFloor = 1e-4f;                      // kvcache / REF floor for FP8 blocks
constexpr float kFp4AmaxFloor = 6.0f * 1.17549435e-38f;  // 6·2^-126 (cpu::fp4_quant_dequant)
constexpr int kRowThreads = 128;

// k of the UE8M0 scale 2^k for a (floored) amax: ceil(log2(amax · (1/fmt_max))) from the fp32 bits,
// the same rule as kvcache's ue8m0_exponent_for_amax and cpu::ue8m0_block_scale (exponent field,
// +1 if any mantissa bit is set; a subnormal product has field 0 and gives -126).
__device__ __forceinline__ int ue8m0_exponent(float amax, float fmt_max) {
    const float v = amax * (1.0f / fmt_max);
    const uint32_t bits = __float_as_uint(v);
    return static_cast<int>((bits >> 23) & 0xFF) - 127 + ((bits & 0x7FFFFF) != 0 ? 1 : 0);
}

// 2^k as an fp32, k in [-126, 127] (every exponent these scales take: amax is floored and finite).
__device__ __forceinline__ float pow2(int k) {
    return __uint_as_float(static_cast<uint32_t>(k + 127) << 23);
}

// x · 2^-k clamped to ±448, then E4M3 (RNE, saturating). x · 2^-k is the correctly rounded x / 2^k,
// i.e. the CPU's ldexp(x, -k), bit for bit (no fast-math in this build).
__device__ __forceinline__ uint8_t quantise_e4m3(float x, int k) {
    const float v = fminf(fmaxf(x * pow2(-k), -kE4m3Max), kE4m3Max);
    return dev::f32_to_e4m3(v);
}

// bf16 bits as kvcache's f32_to_bf16 produces them from the bf16 value's fp32: identical bits,
// except that a NaN is made quiet.
__device__ __forceinline__ uint16_t bf16_bits_for_store(__nv_bfloat16 v) {
    const uint16_t h = __bfloat16_as_ushort(v);
    const bool nan = (h & 0x7F80u) == 0x7F80u && (h & 0x7Fu) != 0;
    return nan ? static_cast<uint16_t>(h | 0x40u) : h;
}

// One block per row. Entries sit at arbitrary byte offsets (the pool interleaves kinds, 584-byte
// entries are only 8-byte aligned and tiny formats may be less), so all stores are byte stores; a
// KV write is a few hundred bytes per token and layer, never the bottleneck.
__global__ void __launch_bounds__(kRowThreads)
    kv_write_kernel(const __nv_bfloat16* __restrict__ rows, int64_t ld_rows, const int64_t* __restrict__ dst,
                    uint8_t* __restrict__ pool, int n_nope, int rope_dim, int quant_block, int n_blocks,
                    int entry_bytes) {
    dev::pdl_wait();
    dev::pdl_trigger();
    extern __shared__ uint32_t amax_bits[];  // [n_blocks]: |x| as fp32 bits (non-negative: integer order = float order)
    const int64_t off = dst[blockIdx.x];
    if (off < 0) return;  // whole block leaves together, before any barrier
    const __nv_bfloat16* x = rows + static_cast<int64_t>(blockIdx.x) * ld_rows;
    uint8_t* out = pool + off;
    const int t = threadIdx.x;

    for (int b = t; b < n_blocks; b += blockDim.x) amax_bits[b] = 0u;
    __syncthreads();
    for (int e = t; e < n_nope; e += blockDim.x) {
        const float a = fabsf(__bfloat162float(x[e]));
        if (!isnan(a)) atomicMax(&amax_bits[e / quant_block], __float_as_uint(a));  // std::max skips NaN too
    }
    __syncthreads();

    for (int e = t; e < n_nope; e += blockDim.x) {
        const int k = ue8m0_exponent(fmaxf(__uint_as_float(amax_bits[e / quant_block]), kAmaxFloor), kE4m3Max);
        out[e] = quantise_e4m3(__bfloat162float(x[e]), k);
    }
    const int scale_off = n_nope + 2 * rope_dim;
    for (int b = t; b < n_blocks; b += blockDim.x) {
        const int k = ue8m0_exponent(fmaxf(__uint_as_float(amax_bits[b]), kAmaxFloor), kE4m3Max);
        out[scale_off + b] = static_cast<uint8_t>(min(max(k + 127, 0), 254));
    }
    for (int i = t; i < rope_dim; i += blockDim.x) {
        const uint16_t h = bf16_bits_for_store(x[n_nope + i]);
        out[n_nope + 2 * i] = static_cast<uint8_t>(h & 0xFFu);  // little-endian, as memcpy on the host
        out[n_nope + 2 * i + 1] = static_cast<uint8_t>(h >> 8);
    }
    for (int p = scale_off + n_blocks + t; p < entry_bytes; p += blockDim.x) out[p] = 0;
}

// One block per key: a single amax over the whole key, then the codes and the fp32 scale 2^k.
__global__ void __launch_bounds__(kRowThreads)
    indexer_key_kernel(const __nv_bfloat16* __restrict__ keys, const int64_t* __restrict__ dst,
                       uint8_t* __restrict__ pool, int dim) {
    dev::pdl_wait();
    dev::pdl_trigger();
    __shared__ float scratch[32];
    const int64_t off = dst[blockIdx.x];
    if (off < 0) return;
    const __nv_bfloat16* x = keys + static_cast<int64_t>(blockIdx.x) * dim;
    uint8_t* out = pool + off;
    float amax = 0.0f;
    for (int e = threadIdx.x; e < dim; e += blockDim.x) amax = fmaxf(amax, fabsf(__bfloat162float(x[e])));
    amax = dev::block_max(amax, scratch);
    const int k = ue8m0_exponent(fmaxf(amax, kAmaxFloor), kE4m3Max);
    for (int e = threadIdx.x; e < dim; e += blockDim.x) out[e] = quantise_e4m3(__bfloat162float(x[e]), k);
    if (threadIdx.x < 4) {
        const uint32_t s = __float_as_uint(pow2(k));  // ldexp(1, k): k >= -22 here, always normal
        out[dim + threadIdx.x] = static_cast<uint8_t>(s >> (8 * threadIdx.x));
    }
}

// E2M1 magnitude of |q| <= 6, round to nearest with ties to the even code, as onecard's
// f32_to_e2m1 (codes 0..7 = 0, .5, 1, 1.5, 2, 3, 4, 6; the midpoints below are the ties).
__device__ __forceinline__ float e2m1_round_magnitude(float a) {
    if (a <= 0.25f) return 0.0f;  // tie -> code 0
    if (a < 0.75f) return 0.5f;   // tie -> code 2
    if (a <= 1.25f) return 1.0f;  // tie -> code 2
    if (a < 1.75f) return 1.5f;   // tie -> code 4
    if (a <= 2.5f) return 2.0f;   // tie -> code 4
    if (a < 3.5f) return 3.0f;    // tie -> code 6
    if (a <= 5.0f) return 4.0f;   // tie -> code 6
    return 6.0f;
}

// One block per vector, one thread per element (dim in [32, 1024]). The butterflies run stage by
// stage in the CPU's Sylvester order: every element sees the same fp32 additions in the same order,
// so the transform is bit-identical to cpu::hadamard_transform. A warp = one FP4 block of 32.
// With inv_freq (the indexer queries): first RoPE on the trailing 2·n_pairs dims at the vector's token
// position (token = vector / vec_per_token), rounded to bf16 exactly as rope_bf16 stores it, so the
// fused kernel gives the bits of rope_bf16 followed by hadamard_fp4_sim.
__global__ void __launch_bounds__(1024)
    hadamard_fp4_kernel(__nv_bfloat16* x, int dim, float scale, const float* __restrict__ inv_freq, int n_pairs,
                        const int32_t* __restrict__ positions, int vec_per_token) {
    dev::pdl_wait();
    dev::pdl_trigger();
    __shared__ float buf[1024];
    const int t = threadIdx.x;
    __nv_bfloat16* v = x + static_cast<int64_t>(blockIdx.x) * dim;
    const int rope0 = dim - 2 * n_pairs;
    if (inv_freq != nullptr && t >= rope0) {
        const int i = (t - rope0) / 2, e = rope0 + 2 * i;  // pair i: elements e (even) and e + 1
        float ra, rb;
        dev::rope_rotate(__bfloat162float(v[e]), __bfloat162float(v[e + 1]), inv_freq[i],
                         positions[blockIdx.x / vec_per_token], 1.0f, ra, rb);
        buf[t] = __bfloat162float(__float2bfloat16(t == e ? ra : rb));
    } else {
        buf[t] = __bfloat162float(v[t]);
    }
    __syncthreads();
    for (int h = 1; h < dim; h *= 2) {
        if (t < dim / 2) {
            const int j = (t / h) * 2 * h + (t % h);
            const float a = buf[j], b = buf[j + h];
            buf[j] = a + b;
            buf[j + h] = a - b;
        }
        __syncthreads();
    }
    const float y = buf[t] * scale;
    const float amax = dev::warp_max(fabsf(y));
    const int k = ue8m0_exponent(fmaxf(amax, kFp4AmaxFloor), kFp4Max);  // k in [-126, 126]
    const float q = fminf(fmaxf(y * pow2(-k), -kFp4Max), kFp4Max);
    // copysign keeps -0 for a negative value that rounds to zero (the CPU code keeps the sign bit).
    const float r = copysignf(e2m1_round_magnitude(fabsf(q)), q) * pow2(k);
    v[t] = __float2bfloat16(r);  // ≤ 2 significant bits times 2^k: exact in bf16
}

}  // namespace

void kv_write_entries(const __nv_bfloat16* rows, int64_t ld_rows, const int64_t* dst, uint8_t* pool, int64_t n,
                      const KvEntryDims& d, cudaStream_t stream) {
    ONECARD_CHECK(d.head_dim > 0 && d.rope_dim >= 0 && d.rope_dim < d.head_dim,
                  "kv_write_entries: need 0 <= rope_dim ({}) < head_dim ({})", d.rope_dim, d.head_dim);
    const int64_t n_nope = d.head_dim - d.rope_dim;
    ONECARD_CHECK(d.quant_block > 0 && n_nope % d.quant_block == 0,
                  "kv_write_entries: nope dims {} are not a multiple of the FP8 block {}", n_nope, d.quant_block);
    const int64_t n_blocks = n_nope / d.quant_block;
    ONECARD_CHECK(n_blocks <= 255, "kv_write_entries: {} scale blocks (at most 255)", n_blocks);
    const int64_t used = n_nope + 2 * d.rope_dim + n_blocks;
    ONECARD_CHECK(d.entry_bytes >= used && d.entry_bytes < (int64_t{1} << 30),
                  "kv_write_entries: entry_bytes {} does not hold the {} bytes of an entry", d.entry_bytes, used);
    if (ld_rows == 0) ld_rows = d.head_dim;
    ONECARD_CHECK(ld_rows >= d.head_dim, "kv_write_entries: row stride {} < head_dim {}", ld_rows, d.head_dim);
    ONECARD_CHECK(n >= 0 && n < (int64_t{1} << 31), "kv_write_entries: {} rows exceed the grid", n);
    if (n == 0) return;
    const size_t smem = static_cast<size_t>(n_blocks) * sizeof(uint32_t);
    launch_pdl(kv_write_kernel, static_cast<unsigned>(n), kRowThreads, smem, stream, rows, ld_rows, dst, pool,
               static_cast<int>(n_nope), static_cast<int>(d.rope_dim), static_cast<int>(d.quant_block),
               static_cast<int>(n_blocks), static_cast<int>(d.entry_bytes));
    CUDA_CHECK_LAUNCH("kv_write_kernel");
}

void indexer_key_write(const __nv_bfloat16* keys, const int64_t* dst, uint8_t* pool, int64_t n, int64_t index_head_dim,
                       cudaStream_t stream) {
    ONECARD_CHECK(index_head_dim > 0 && index_head_dim < (int64_t{1} << 30), "indexer_key_write: bad index_head_dim {}",
                  index_head_dim);
    ONECARD_CHECK(n >= 0 && n < (int64_t{1} << 31), "indexer_key_write: {} keys exceed the grid", n);
    if (n == 0) return;
    launch_pdl(indexer_key_kernel, static_cast<unsigned>(n), kRowThreads, 0, stream, keys, dst, pool,
               static_cast<int>(index_head_dim));
    CUDA_CHECK_LAUNCH("indexer_key_kernel");
}

void hadamard_fp4_sim(__nv_bfloat16* x, int64_t n_vec, int64_t dim, cudaStream_t stream) {
    ONECARD_CHECK(dim >= 32 && dim <= 1024 && (dim & (dim - 1)) == 0,
                  "hadamard_fp4_sim: dim {} must be a power of two in [32, 1024] (FP4 blocks of 32)", dim);
    ONECARD_CHECK(n_vec >= 0 && n_vec < (int64_t{1} << 31), "hadamard_fp4_sim: {} vectors exceed the grid", n_vec);
    if (n_vec == 0) return;
    // The same fp32 scale the CPU computes (1/sqrt(float(n)), both correctly rounded).
    const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
    launch_pdl(hadamard_fp4_kernel, static_cast<unsigned>(n_vec), static_cast<unsigned>(dim), 0, stream, x,
               static_cast<int>(dim), scale, static_cast<const float*>(nullptr), 0,
               static_cast<const int32_t*>(nullptr), 1);
    CUDA_CHECK_LAUNCH("hadamard_fp4_kernel");
}

void rope_hadamard_fp4_sim(__nv_bfloat16* x, int64_t n_tok, int64_t vec_per_token, int64_t dim, const float* inv_freq,
                           int64_t n_rope, const int32_t* positions, cudaStream_t stream) {
    ONECARD_CHECK(dim >= 32 && dim <= 1024 && (dim & (dim - 1)) == 0,
                  "rope_hadamard_fp4_sim: dim {} must be a power of two in [32, 1024]", dim);
    ONECARD_CHECK(n_rope > 0 && n_rope % 2 == 0 && n_rope <= dim && vec_per_token > 0,
                  "rope_hadamard_fp4_sim: n_rope {} (even, <= dim {}), {} vectors per token", n_rope, dim,
                  vec_per_token);
    const int64_t n_vec = n_tok * vec_per_token;
    if (n_vec == 0) return;
    ONECARD_CHECK(n_vec < (int64_t{1} << 31), "rope_hadamard_fp4_sim: {} vectors exceed the grid", n_vec);
    const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
    launch_pdl(hadamard_fp4_kernel, static_cast<unsigned>(n_vec), static_cast<unsigned>(dim), 0, stream, x,
               static_cast<int>(dim), scale, inv_freq, static_cast<int>(n_rope / 2), positions,
               static_cast<int>(vec_per_token));
    CUDA_CHECK_LAUNCH("hadamard_fp4_kernel (rope)");
}

}  // namespace onecard::cuda
