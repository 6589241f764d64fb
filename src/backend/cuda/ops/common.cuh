// Device-side helpers shared by the ops: bf16/fp8 conversions, warp and block reductions, UE8M0
// scales. Included only by .cu files (nvcc); the per-op .cuh headers stay host-includable.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace onecard::cuda::dev {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the whole block; `scratch` holds one float per warp (32 floats). Every thread gets the result.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    __syncthreads();  // scratch may still be read by a previous call
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < n_warps ? scratch[lane] : 0.0f;
    return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = (blockDim.x + 31) >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < n_warps ? scratch[lane] : 0.0f;
    return warp_max(v);
}

// 2^(b - 127), exactly: the UE8M0 byte becomes the fp32 exponent field (b = 0 gives 2^-127, a
// denormal, built by hand because the shift would give zero).
__device__ __forceinline__ float ue8m0_to_float(uint8_t b) {
    return b == 0 ? 5.877471754111438e-39f : __uint_as_float(static_cast<uint32_t>(b) << 23);
}

// DeepSeek's power-of-two block scale: 2^ceil(log2(amax * (1/fmt_max))), ceil(log2) taken from the
// fp32 bits (exponent, +1 if any mantissa bit is set) exactly as the reference does.
__device__ __forceinline__ float ue8m0_scale_for(float amax, float fmt_max) {
    const float v = amax * (1.0f / fmt_max);
    const uint32_t bits = __float_as_uint(v);
    const int e = static_cast<int>((bits >> 23) & 0xFF) - 127 + ((bits & 0x7FFFFF) != 0 ? 1 : 0);
    return ldexpf(1.0f, e);
}

// fp32 -> E4M3 (saturating, round to nearest even) -> fp32.
__device__ __forceinline__ uint8_t f32_to_e4m3(float f) {
    return static_cast<uint8_t>(__nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3));
}
__device__ __forceinline__ float e4m3_to_f32(uint8_t v) {
    const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(v), __NV_E4M3);
    return __half2float(__half(h));
}

// E2M1 code (low 4 bits; bit 3 = sign) -> value, built from the bits (no table, so no local memory):
// exponent field e = bits 2..1, mantissa m = bit 0; e = 0 is the subnormal 0 / 0.5.
__device__ __forceinline__ float e2m1_to_f32(uint32_t code) {
    const uint32_t e = (code >> 1) & 3u, m = code & 1u;
    const uint32_t mag = e == 0 ? (m ? 0x3F000000u : 0u) : (((126u + e) << 23) | (m << 22));
    return __uint_as_float(mag | ((code & 8u) << 28));
}

// DeepSeek's 1x128 FP8 activation quantisation of one block held 4 values per lane across a warp:
// block amax (floored at 1e-4), the power-of-two scale for E4M3's 448, then E4M3 with saturation and
// round-to-nearest-even. Returns the 4 codes (element i in byte i) and the block scale.
__device__ __forceinline__ uint32_t fp8_quant_block4(const float (&v)[4], float& scale) {
    float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
    amax = warp_max(amax);
    scale = ue8m0_scale_for(fmaxf(amax, 1e-4f), 448.0f);
    uint32_t packed = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float qv = fminf(fmaxf(v[i] / scale, -448.0f), 448.0f);
        packed |= static_cast<uint32_t>(f32_to_e4m3(qv)) << (8 * i);
    }
    return packed;
}

// One RoPE rotation of the pair (a, b) by angle inv_freq·pos (sign -1: the inverse), fp32, with
// accurate sincosf (angles reach ~1e6 rad) and no contraction, so every kernel that rotates (rope.cu,
// kv_write.cu's fused indexer-q path) gives the same bits.
__device__ __forceinline__ void rope_rotate(float a, float b, float inv_freq, int32_t pos, float sign, float& out_a,
                                            float& out_b) {
    float s, c;
    sincosf(inv_freq * static_cast<float>(pos), &s, &c);
    s *= sign;
    out_a = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
    out_b = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
}

// splitmix64's output function, a strong 64-bit mixer: the device side of engine/sampler.cpp's
// sampler_uniform and of the synthetic weights' counter hash (model_cuda/gpu_synth.cu).
__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

}  // namespace onecard::cuda::dev
