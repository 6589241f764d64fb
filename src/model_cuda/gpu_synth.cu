// Fill kernels for synthetic device weights (gpu_synth_fill.cuh; the tensor walk is gpu_synth.cpp).
// Counter-based: each value is a hash of (tensor key, element index), so any grid shape gives the
// same bytes and no state is carried between elements or launches.
#include "model_cuda/gpu_synth_fill.cuh"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops/common.cuh"
#include "core/error.h"

#include <algorithm>

namespace onecard::cuda {

namespace {

constexpr int kThreads = 256;
constexpr uint64_t kCounterStep = 0xD1B54A32D192ED03ull;  // odd: idx -> key + idx·step is a bijection

__device__ __forceinline__ uint64_t hash_at(uint64_t key, uint64_t idx) {
    return dev::splitmix64(key + idx * kCounterStep);
}

// Uniform in [0, 1) with 24 bits (exact in fp32).
__device__ __forceinline__ float uniform_at(uint64_t key, uint64_t idx) {
    return static_cast<float>(hash_at(key, idx) >> 40) * 0x1p-24f;
}

// Standard normal by Box-Muller from one 64-bit hash (24 bits each for radius and angle: |z| ≤ 5.8,
// a tail cut that matters nowhere here). Deterministic on a given GPU; not bit-portable across
// architectures (logf/cospif), which nothing needs.
__device__ __forceinline__ float normal_at(uint64_t key, uint64_t idx) {
    const uint64_t h = hash_at(key, idx);
    const float u1 = (static_cast<float>(h >> 40) + 1.0f) * 0x1p-24f;       // (0, 1]: log stays finite
    const float u2 = static_cast<float>((h >> 16) & 0xFFFFFFu) * 0x1p-24f;  // [0, 1)
    return sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
}

// The FP8 block exponent offset (0 or 1) of block `b`; codes and scales of one linear both call it.
__device__ __forceinline__ int fp8_block_bump(uint64_t block_key, int64_t b) {
    return static_cast<int>(hash_at(block_key, static_cast<uint64_t>(b)) & 1u);
}

__device__ __forceinline__ int64_t first_index() {
    return blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_stride() {
    return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// Grid-stride loops: a capped grid covers any size with 64-bit indices.
unsigned grid_for(int64_t n_items) {
    const int64_t blocks = (n_items + kThreads - 1) / kThreads;
    return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(blocks, int64_t{1} << 16)));
}

// Each thread writes 16 consecutive codes, which share one row and one 128×128 block (n_in % 128 == 0).
__global__ void fp8_codes_kernel(uint8_t* __restrict__ w, int64_t n_out, int64_t n_in, uint64_t key, uint64_t block_key,
                                 float sigma, int e0) {
    const int64_t n_chunks = n_out * n_in / 16, n_cb = n_in / 128;
    for (int64_t ch = first_index(); ch < n_chunks; ch += grid_stride()) {
        const int64_t i0 = ch * 16, r = i0 / n_in, c0 = i0 % n_in;
        const int e = e0 + fp8_block_bump(block_key, (r / 128) * n_cb + c0 / 128);
        const float mul = ldexpf(sigma, -e);
        uint32_t words[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            uint32_t v = 0;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const uint64_t idx = static_cast<uint64_t>(i0 + q * 4 + j);
                v |= static_cast<uint32_t>(dev::f32_to_e4m3(normal_at(key, idx) * mul)) << (8 * j);
            }
            words[q] = v;
        }
        reinterpret_cast<uint4*>(w)[ch] = make_uint4(words[0], words[1], words[2], words[3]);
    }
}

__global__ void fp8_scales_kernel(float* __restrict__ ws, int64_t n_rb, int64_t n_cb, int64_t ld, uint64_t block_key,
                                  int e0) {
    for (int64_t i = first_index(); i < n_rb * ld; i += grid_stride()) {
        const int64_t rb = i / ld, cb = i % ld;
        ws[i] = cb < n_cb ? ldexpf(1.0f, e0 + fp8_block_bump(block_key, rb * n_cb + cb)) : 0.0f;
    }
}

__global__ void random_bytes_kernel(uint8_t* __restrict__ out, int64_t n_bytes, uint64_t key) {
    for (int64_t ch = first_index(); ch < n_bytes / 16; ch += grid_stride()) {
        const uint64_t a = hash_at(key, static_cast<uint64_t>(2 * ch));
        const uint64_t b = hash_at(key, static_cast<uint64_t>(2 * ch + 1));
        reinterpret_cast<uint4*>(out)[ch] = make_uint4(static_cast<uint32_t>(a), static_cast<uint32_t>(a >> 32),
                                                       static_cast<uint32_t>(b), static_cast<uint32_t>(b >> 32));
    }
}

__global__ void mx_scales_kernel(uint8_t* __restrict__ out, int64_t n, uint64_t key, int base_byte, float p_high) {
    for (int64_t i = first_index(); i < n; i += grid_stride())
        out[i] = static_cast<uint8_t>(base_byte + (uniform_at(key, static_cast<uint64_t>(i)) < p_high ? 1 : 0));
}

__global__ void bf16_normal_kernel(__nv_bfloat16* __restrict__ out, int64_t n, uint64_t key, float mean, float std) {
    for (int64_t i = first_index(); i < n; i += grid_stride()) {
        const float v = std == 0.0f ? mean : mean + std * normal_at(key, static_cast<uint64_t>(i));
        out[i] = __float2bfloat16_rn(v);
    }
}

__global__ void f32_normal_kernel(float* __restrict__ out, int64_t n, uint64_t key, float mean, float std) {
    for (int64_t i = first_index(); i < n; i += grid_stride())
        out[i] = mean + std * normal_at(key, static_cast<uint64_t>(i));
}

__global__ void hc_base_kernel(float* __restrict__ out, int64_t n, int64_t hc, bool head, float pre, uint64_t key) {
    for (int64_t j = first_index(); j < n; j += grid_stride()) {
        float v;
        if (head || j < hc) {
            v = pre;
        } else if (j < 2 * hc) {
            v = 0.0f;
        } else {
            const int64_t k = j - 2 * hc;
            v = (k / hc == k % hc) ? 3.0f : 0.0f;
        }
        out[j] = v + 0.02f * normal_at(key, static_cast<uint64_t>(j));
    }
}

// Pick j draws a rank in [0, n_experts − j) among the experts not yet taken and turns it into the
// expert by stepping over the taken ones (kept ascending) at or below it: k distinct, uniform.
__global__ void tid2eid_kernel(int32_t* __restrict__ out, int64_t vocab, int k, int n_experts, uint64_t key) {
    for (int64_t r = first_index(); r < vocab; r += grid_stride()) {
        int taken[kSynthMaxTopK];
        for (int j = 0; j < k; ++j) {
            const uint64_t h = hash_at(key, static_cast<uint64_t>(r * k + j));
            int v = static_cast<int>(((h >> 32) * static_cast<uint64_t>(n_experts - j)) >> 32);
            int pos = 0;
            for (; pos < j && taken[pos] <= v; ++pos) ++v;
            for (int t = j; t > pos; --t) taken[t] = taken[t - 1];
            taken[pos] = v;
            out[r * k + j] = v;
        }
    }
}

}  // namespace

void synth_fill_fp8_codes(uint8_t* w, int64_t n_out, int64_t n_in, uint64_t key, uint64_t block_key, float sigma,
                          int e0, cudaStream_t stream) {
    ONECARD_CHECK(n_in % 128 == 0, "synth_fill_fp8_codes: n_in {} is not a multiple of 128", n_in);
    if (n_out * n_in == 0) return;
    fp8_codes_kernel<<<grid_for(n_out * n_in / 16), kThreads, 0, stream>>>(w, n_out, n_in, key, block_key, sigma, e0);
    CUDA_CHECK_LAUNCH("fp8_codes_kernel");
}

void synth_fill_fp8_scales(float* ws, int64_t n_rb, int64_t n_cb, int64_t ld, uint64_t block_key, int e0,
                           cudaStream_t stream) {
    ONECARD_CHECK(n_cb <= ld, "synth_fill_fp8_scales: {} column blocks in rows of {}", n_cb, ld);
    if (n_rb * ld == 0) return;
    fp8_scales_kernel<<<grid_for(n_rb * ld), kThreads, 0, stream>>>(ws, n_rb, n_cb, ld, block_key, e0);
    CUDA_CHECK_LAUNCH("fp8_scales_kernel");
}

void synth_fill_random_bytes(uint8_t* out, int64_t n_bytes, uint64_t key, cudaStream_t stream) {
    ONECARD_CHECK(n_bytes % 16 == 0, "synth_fill_random_bytes: {} bytes is not a multiple of 16", n_bytes);
    if (n_bytes == 0) return;
    random_bytes_kernel<<<grid_for(n_bytes / 16), kThreads, 0, stream>>>(out, n_bytes, key);
    CUDA_CHECK_LAUNCH("random_bytes_kernel");
}

void synth_fill_mx_scales(uint8_t* out, int64_t n, uint64_t key, int base_byte, float p_high, cudaStream_t stream) {
    ONECARD_CHECK(base_byte >= 0 && base_byte + 1 <= 254, "synth_fill_mx_scales: scale byte {} out of range",
                  base_byte);
    if (n == 0) return;
    mx_scales_kernel<<<grid_for(n), kThreads, 0, stream>>>(out, n, key, base_byte, p_high);
    CUDA_CHECK_LAUNCH("mx_scales_kernel");
}

void synth_fill_bf16_normal(void* out, int64_t n, uint64_t key, float mean, float std, cudaStream_t stream) {
    if (n == 0) return;
    bf16_normal_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(out), n, key, mean, std);
    CUDA_CHECK_LAUNCH("bf16_normal_kernel");
}

void synth_fill_f32_normal(float* out, int64_t n, uint64_t key, float mean, float std, cudaStream_t stream) {
    if (n == 0) return;
    f32_normal_kernel<<<grid_for(n), kThreads, 0, stream>>>(out, n, key, mean, std);
    CUDA_CHECK_LAUNCH("f32_normal_kernel");
}

void synth_fill_hc_base(float* out, int64_t n, int64_t hc, bool head, float pre, uint64_t key, cudaStream_t stream) {
    ONECARD_CHECK(hc > 0, "synth_fill_hc_base: hc_mult {}", hc);
    if (n == 0) return;
    hc_base_kernel<<<grid_for(n), kThreads, 0, stream>>>(out, n, hc, head, pre, key);
    CUDA_CHECK_LAUNCH("hc_base_kernel");
}

void synth_fill_tid2eid(int32_t* out, int64_t vocab, int k, int n_experts, uint64_t key, cudaStream_t stream) {
    ONECARD_CHECK(k > 0 && k <= kSynthMaxTopK && k <= n_experts,
                  "synth_fill_tid2eid: {} distinct experts of {} per row (at most {})", k, n_experts, kSynthMaxTopK);
    if (vocab == 0) return;
    tid2eid_kernel<<<grid_for(vocab), kThreads, 0, stream>>>(out, vocab, k, n_experts, key);
    CUDA_CHECK_LAUNCH("tid2eid_kernel");
}

}  // namespace onecard::cuda
