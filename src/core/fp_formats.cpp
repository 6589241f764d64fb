#include "core/fp_formats.h"

#include <bit>
#include <cmath>
#include <limits>

namespace onecard {

namespace {
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Generic decoder for a sign/exponent/mantissa byte with subnormals.
float decode_minifloat(uint8_t v, int exp_bits, int man_bits, int bias) {
    const int sign = (v >> (exp_bits + man_bits)) & 1;
    const int e = (v >> man_bits) & ((1 << exp_bits) - 1);
    const int m = v & ((1 << man_bits) - 1);
    float mag;
    if (e == 0) {
        mag = std::ldexp(static_cast<float>(m), 1 - bias - man_bits);
    } else {
        mag = std::ldexp(1.0f + static_cast<float>(m) / static_cast<float>(1 << man_bits), e - bias);
    }
    return sign ? -mag : mag;
}
}  // namespace

float bf16_to_f32(uint16_t v) {
    return std::bit_cast<float>(static_cast<uint32_t>(v) << 16);
}

uint16_t f32_to_bf16(float f) {
    uint32_t u = std::bit_cast<uint32_t>(f);
    if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);  // keep it a quiet NaN
    const uint32_t rounding_bias = 0x7FFF + ((u >> 16) & 1);
    return static_cast<uint16_t>((u + rounding_bias) >> 16);
}

float f16_to_f32(uint16_t v) {
    const int e = (v >> 10) & 0x1F;
    if (e == 0x1F) {
        if (v & 0x3FF) return kNaN;
        return (v & 0x8000) ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
    }
    const int sign = v >> 15;
    const int m = v & 0x3FF;
    const float mag =
        e == 0 ? std::ldexp(static_cast<float>(m), -24) : std::ldexp(1.0f + static_cast<float>(m) / 1024.0f, e - 15);
    return sign ? -mag : mag;
}

float e4m3fn_to_f32(uint8_t v) {
    if ((v & 0x7F) == 0x7F) return kNaN;
    return decode_minifloat(v, 4, 3, 7);
}

float e4m3fnuz_to_f32(uint8_t v) {
    if (v == 0x80) return kNaN;
    return decode_minifloat(v, 4, 3, 8);
}

float e5m2_to_f32(uint8_t v) {
    const int e = (v >> 2) & 0x1F;
    if (e == 0x1F) {
        if (v & 0x3) return kNaN;
        return (v & 0x80) ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
    }
    return decode_minifloat(v, 5, 2, 15);
}

float e2m1_to_f32(uint8_t code) {
    return decode_minifloat(code & 0xF, 2, 1, 1);
}

float ue8m0_to_f32(uint8_t v) {
    if (v == 0xFF) return kNaN;
    // 2^(v-127); v == 0 is 2^-127, a float subnormal, exactly representable.
    return std::ldexp(1.0f, static_cast<int>(v) - 127);
}

uint8_t f32_to_e4m3fn(float f) {
    if (std::isnan(f)) return 0x7F;
    const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
    float a = std::fabs(f);
    if (a >= 448.0f) return sign | 0x7E;
    uint8_t code;
    if (a < std::ldexp(1.0f, -6)) {
        // Subnormal range: step 2^-9. A result of 8 is the smallest normal (code 0x08): continuous.
        code = static_cast<uint8_t>(std::nearbyint(std::ldexp(a, 9)));
    } else {
        int e;
        const float fr = std::frexp(a, &e);  // a = fr * 2^e, fr in [0.5, 1)
        const int exp = e - 1;               // a = (2*fr) * 2^exp, 2*fr in [1, 2)
        int q = static_cast<int>(std::nearbyint((2.0f * fr - 1.0f) * 8.0f));
        int biased = exp + 7;
        if (q == 8) {
            q = 0;
            ++biased;
        }
        code = static_cast<uint8_t>((biased << 3) | q);
        if (code > 0x7E) code = 0x7E;
    }
    return sign | code;
}

uint8_t f32_to_e2m1(float f) {
    static constexpr float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    const uint8_t sign = std::signbit(f) ? 0x8 : 0x0;
    const float a = std::isnan(f) ? 6.0f : std::fabs(f);
    uint8_t best = 7;
    if (a < 6.0f) {
        for (uint8_t c = 0; c < 7; ++c) {
            const float lo = kMag[c], hi = kMag[c + 1];
            if (a <= hi) {
                const float mid = 0.5f * (lo + hi);
                if (a < mid)
                    best = c;
                else if (a > mid)
                    best = static_cast<uint8_t>(c + 1);
                else
                    best = (c % 2 == 0) ? c : static_cast<uint8_t>(c + 1);  // tie: even code
                break;
            }
        }
    }
    return sign | best;
}

}  // namespace onecard
