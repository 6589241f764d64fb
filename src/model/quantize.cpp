#include "model/quantize.h"

#include "core/fp_formats.h"

#include <algorithm>
#include <cmath>

namespace onecard {

uint8_t ue8m0_scale_for(float amax, float fmt_max) {
    const double a = std::max(static_cast<double>(amax), 1e-4);
    // ratio = m * 2^e with m in [0.5, 1): ceil(log2(ratio)) is e, or e-1 when ratio is exactly 2^(e-1).
    int e = 0;
    const double m = std::frexp(a / static_cast<double>(fmt_max), &e);
    const int k = (m == 0.5) ? e - 1 : e;
    return static_cast<uint8_t>(std::clamp(k + 127, 0, 254));
}

void quantize_fp8_block_rows(const float* src, int64_t n_rows, int64_t n_cols, int64_t block, uint8_t* codes,
                             uint8_t* scales) {
    const int64_t n_cb = (n_cols + block - 1) / block;
    for (int64_t cb = 0; cb < n_cb; ++cb) {
        const int64_t c0 = cb * block, c1 = std::min(n_cols, c0 + block);
        float amax = 0.0f;
        for (int64_t r = 0; r < n_rows; ++r)
            for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(src[r * n_cols + c]));
        const uint8_t s = ue8m0_scale_for(amax, 448.0f);
        scales[cb] = s;
        const int exp = static_cast<int>(s) - 127;
        for (int64_t r = 0; r < n_rows; ++r)
            for (int64_t c = c0; c < c1; ++c)
                codes[r * n_cols + c] = f32_to_e4m3fn(std::ldexp(src[r * n_cols + c], -exp));  // exact: power of two
    }
}

void quantize_mxfp4_row(const float* src, int64_t n_cols, uint8_t* packed, uint8_t* scales) {
    for (int64_t g = 0; g < n_cols / 32; ++g) {
        float amax = 0.0f;
        for (int64_t c = 0; c < 32; ++c) amax = std::max(amax, std::fabs(src[g * 32 + c]));
        const uint8_t s = ue8m0_scale_for(amax, 6.0f);
        scales[g] = s;
        const int exp = static_cast<int>(s) - 127;
        for (int64_t c = 0; c < 32; c += 2) {
            const uint8_t lo = f32_to_e2m1(std::ldexp(src[g * 32 + c], -exp));
            const uint8_t hi = f32_to_e2m1(std::ldexp(src[g * 32 + c + 1], -exp));
            packed[(g * 32 + c) / 2] = static_cast<uint8_t>(lo | (hi << 4));
        }
    }
}

float dequant_fp8_block(const uint8_t* codes, const uint8_t* scales, int64_t n_cols, int64_t block, int64_t r,
                        int64_t c) {
    const int64_t n_cb = (n_cols + block - 1) / block;
    return e4m3fn_to_f32(codes[r * n_cols + c]) * ue8m0_to_f32(scales[(r / block) * n_cb + c / block]);
}

float dequant_mxfp4(const uint8_t* packed, const uint8_t* scales, int64_t n_cols, int64_t r, int64_t c) {
    const uint8_t byte = packed[r * (n_cols / 2) + c / 2];
    const uint8_t code = (c % 2 == 0) ? (byte & 0xF) : (byte >> 4);
    return e2m1_to_f32(code) * ue8m0_to_f32(scales[r * (n_cols / 32) + c / 32]);
}

}  // namespace onecard
