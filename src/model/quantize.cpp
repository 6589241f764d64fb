#include "model/quantize.h"

#include "core/fp_formats.h"

#include <algorithm>
#include <cmath>

namespace onecard {

namespace {

// 2^k as a float; exact for the k a UE8M0 byte can give (-127..127).
float pow2f(int k) {
    return std::ldexp(1.0f, k);
}

// E2M1 code of a value already divided by its block scale: round to nearest, ties to the even
// code (the same rounding as f32_to_e2m1; the synth test checks they agree bit for bit), by
// comparing with the midpoints of 0, 0.5, 1, 1.5, 2, 3, 4, 6. NaN cannot occur (finite input).
uint8_t e2m1_code(float v) {
    const uint8_t sign = std::signbit(v) ? 0x8 : 0x0;
    const float a = std::fabs(v);
    uint8_t m;
    if (a <= 0.25f)
        m = 0;
    else if (a < 0.75f)
        m = 1;
    else if (a <= 1.25f)
        m = 2;
    else if (a < 1.75f)
        m = 3;
    else if (a <= 2.5f)
        m = 4;
    else if (a < 3.5f)
        m = 5;
    else if (a <= 5.0f)
        m = 6;
    else
        m = 7;
    return sign | m;
}

}  // namespace

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
        // Multiplying by an exact power of two is correctly rounded, the same as ldexp.
        const float inv = pow2f(127 - static_cast<int>(s));
        for (int64_t r = 0; r < n_rows; ++r)
            for (int64_t c = c0; c < c1; ++c) codes[r * n_cols + c] = f32_to_e4m3fn(src[r * n_cols + c] * inv);
    }
}

void quantize_mxfp4_row(const float* src, int64_t n_cols, uint8_t* packed, uint8_t* scales) {
    for (int64_t g = 0; g < n_cols / 32; ++g) {
        float amax = 0.0f;
        for (int64_t c = 0; c < 32; ++c) amax = std::max(amax, std::fabs(src[g * 32 + c]));
        const uint8_t s = ue8m0_scale_for(amax, 6.0f);
        scales[g] = s;
        const float inv = pow2f(127 - static_cast<int>(s));
        for (int64_t c = 0; c < 32; c += 2) {
            const uint8_t lo = e2m1_code(src[g * 32 + c] * inv);
            const uint8_t hi = e2m1_code(src[g * 32 + c + 1] * inv);
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
