// Weight quantisers that produce DeepSeek-V4 checkpoint formats from fp32 values: FP8 E4M3 with
// one UE8M0 scale per 128x128 block, and MXFP4 (E2M1 pairs, low nibble first) with one UE8M0
// scale per 32 consecutive K elements. Bit-deterministic: only exact or correctly rounded IEEE
// operations, so the same input gives the same bytes on every machine.
#pragma once

#include <cstdint>

namespace onecard {

// The UE8M0 byte (biased exponent, value 2^(byte-127)) of the smallest power-of-two scale s with
// amax / s <= fmt_max, i.e. s = 2^ceil(log2(amax / fmt_max)); amax is floored at 1e-4 like
// DeepSeek's act_quant so all-zero blocks get a finite scale. Clamped to [0, 254].
uint8_t ue8m0_scale_for(float amax, float fmt_max);

// Quantise `n_rows` (<= block) rows of a row-major [n_rows, n_cols] fp32 slab that starts at a
// 128-row block boundary: codes [n_rows, n_cols] (E4M3), scales [ceil(n_cols/block)] — one scale
// per column block for this row block.
void quantize_fp8_block_rows(const float* src, int64_t n_rows, int64_t n_cols, int64_t block, uint8_t* codes,
                             uint8_t* scales);

// One row of n_cols (a multiple of 32) values -> packed [n_cols/2] bytes (element 2j in the low
// nibble, 2j+1 in the high nibble) and scales [n_cols/32].
void quantize_mxfp4_row(const float* src, int64_t n_cols, uint8_t* packed, uint8_t* scales);

// Decoders matching the above (for tests and tools): one element of each format.
float dequant_fp8_block(const uint8_t* codes, const uint8_t* scales, int64_t n_cols, int64_t block, int64_t r,
                        int64_t c);
float dequant_mxfp4(const uint8_t* packed, const uint8_t* scales, int64_t n_cols, int64_t r, int64_t c);

}  // namespace onecard
