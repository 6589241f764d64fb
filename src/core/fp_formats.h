// Bit-exact scalar codecs for the low-precision formats in DeepSeek-V4 checkpoints and its QAT
// simulations. These are the definitions every faster path (SIMD, CUDA) is tested against.
#pragma once

#include <cstdint>

namespace onecard {

// ---- decoders ------------------------------------------------------------------------------
float bf16_to_f32(uint16_t v);
float f16_to_f32(uint16_t v);
float e4m3fn_to_f32(uint8_t v);    // OCP E4M3 (NVIDIA): bias 7, max 448, 0x7F/0xFF NaN, 0x80 = -0
float e4m3fnuz_to_f32(uint8_t v);  // AMD MI300 E4M3: bias 8, max 240, 0x80 NaN, no -0
float e5m2_to_f32(uint8_t v);      // OCP E5M2 (IEEE-like, with inf)
float e2m1_to_f32(uint8_t code);   // FP4 E2M1, low 4 bits used; no bias in the scale
float ue8m0_to_f32(uint8_t v);     // 2^(v-127); 0xFF = NaN

// ---- encoders (round to nearest, ties to even) ---------------------------------------------
uint16_t f32_to_bf16(float f);  // NaN stays NaN
// Saturates to +-448 (callers clamp first, as DeepSeek's reference does); NaN -> 0x7F.
uint8_t f32_to_e4m3fn(float f);
// Saturates to +-6; returns a 4-bit code (bit 3 = sign).
uint8_t f32_to_e2m1(float f);

// bf16 rounding of an fp32 value (what a bf16 store followed by a load gives).
inline float round_bf16(float f) {
    return bf16_to_f32(f32_to_bf16(f));
}

}  // namespace onecard
