// Quantisation simulations of DeepSeek's reference (dsv4-model.md §10), used only in
// Numerics::Reference: values are rounded through the low-precision format and come back as fp32.
// Scales are UE8M0 (powers of two): s = 2^ceil(log2(amax / fmt_max)).
#pragma once

#include <cstdint>

namespace onecard::cpu {

// FP8 E4M3 quant-dequant of x[n] in place, blocks of `block` (a shorter tail block if n % block != 0): amax clamped to
// >= 1e-4, x/s clamped to ±448, round to nearest even. block = 128: activation quantisation in
// front of FP8/FP4 GEMMs; block = 64: KV non-rope dims.
void fp8_quant_dequant(float* x, int64_t n, int64_t block);

// FP4 E2M1 quant-dequant in place, blocks of `block` (32): amax clamped to >= 6·2^-126, ±6.
void fp4_quant_dequant(float* x, int64_t n, int64_t block = 32);

// Orthonormal Walsh–Hadamard transform in place (Sylvester order, scaled by n^-1/2); n a power of 2.
void hadamard_transform(float* x, int64_t n);

// The UE8M0 power-of-two scale for a block's amax: 2^ceil(log2(amax · (1/fmt_max))).
float ue8m0_block_scale(float amax, float fmt_max);

}  // namespace onecard::cpu
