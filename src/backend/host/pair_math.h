// The element-wise steps of one (token, expert) pair, shared by the reference and the pool so both
// round at exactly the same points (the GPU expert path's; see host_experts.h).
#pragma once

#include <cstdint>

namespace onecard::host::detail {

// x[k] = e4m3(xq[k]) · xs[k/128] for k in [0, dim): xq [dim], xs [dim/128], x [dim] natural fp32.
// e4m3_table: [256] E4M3 code -> fp32 (make_e4m3_table). Exact: xs is a power of two.
void decode_act_row(const uint8_t* xq, const float* xs, int64_t dim, const float* e4m3_table, float* x);
void make_e4m3_table(float* table /*[256]*/);

// One 128-block of the SwiGLU output, FP8-quantised and dequantised:
//   h[i] = bf16(silu(min(g, L)) · clamp(u, -L, L) · weight)   (L <= 0: no clamp; moe.cu's order)
//   s = 2^ceil(log2(max(amax|h|, 1e-4) / 448)),  h_deq[i] = e4m3(clamp(h[i] / s, ±448)) · s
// g, u: [128] (already bf16-rounded), h_deq: [128] natural fp32. Optional codes [128] / *scale out.
void swiglu_quant_block(const float* g, const float* u, float weight, float limit, float* h_deq,
                        uint8_t* codes = nullptr, float* scale = nullptr);

// Round-to-nearest-even fp32 -> bf16 bits (NaN kept quiet), and the rounded value as fp32.
inline uint16_t bf16_bits(float f) {
    uint32_t b = __builtin_bit_cast(uint32_t, f);
    if ((b & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((b >> 16) | 0x40u);
    b += 0x7FFFu + ((b >> 16) & 1u);
    return static_cast<uint16_t>(b >> 16);
}
inline float bf16_value(float f) {
    return __builtin_bit_cast(float, static_cast<uint32_t>(bf16_bits(f)) << 16);
}

}  // namespace onecard::host::detail
