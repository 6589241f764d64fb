#include "backend/cpu/quant_sim.h"

#include "core/error.h"
#include "core/fp_formats.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace onecard::cpu {

float ue8m0_block_scale(float amax, float fmt_max) {
    // REF multiplies by the reciprocal of the format maximum, then takes ceil(log2) from the fp32
    // bits (exponent, +1 if any mantissa bit is set); done the same way so scales match bit for bit.
    const float v = amax * (1.0f / fmt_max);
    const uint32_t bits = std::bit_cast<uint32_t>(v);
    const int32_t exponent = static_cast<int32_t>((bits >> 23) & 0xFF) - 127 + ((bits & 0x7FFFFF) != 0 ? 1 : 0);
    return std::ldexp(1.0f, exponent);
}

void fp8_quant_dequant(float* x, int64_t n, int64_t block) {
    ONECARD_CHECK(block > 0, "fp8 quant: block {} must be positive", block);
    for (int64_t b = 0; b < n; b += block) {
        const int64_t len = std::min(block, n - b);  // a short tail block (REF shapes never have one)
        float amax = 0.0f;
        for (int64_t i = 0; i < len; ++i) amax = std::max(amax, std::fabs(x[b + i]));
        const float s = ue8m0_block_scale(std::max(amax, 1e-4f), 448.0f);
        for (int64_t i = 0; i < len; ++i) {
            const float q = std::clamp(x[b + i] / s, -448.0f, 448.0f);
            x[b + i] = e4m3fn_to_f32(f32_to_e4m3fn(q)) * s;
        }
    }
}

void fp4_quant_dequant(float* x, int64_t n, int64_t block) {
    ONECARD_CHECK(block > 0 && n % block == 0, "fp4 quant: length {} is not a multiple of block {}", n, block);
    for (int64_t b = 0; b < n; b += block) {
        float amax = 0.0f;
        for (int64_t i = 0; i < block; ++i) amax = std::max(amax, std::fabs(x[b + i]));
        const float s = ue8m0_block_scale(std::max(amax, 6.0f * std::ldexp(1.0f, -126)), 6.0f);
        for (int64_t i = 0; i < block; ++i) {
            const float q = std::clamp(x[b + i] / s, -6.0f, 6.0f);
            x[b + i] = e2m1_to_f32(f32_to_e2m1(q)) * s;
        }
    }
}

void hadamard_transform(float* x, int64_t n) {
    ONECARD_CHECK(n > 0 && (n & (n - 1)) == 0, "hadamard: length {} is not a power of two", n);
    for (int64_t h = 1; h < n; h *= 2) {
        for (int64_t i = 0; i < n; i += 2 * h) {
            for (int64_t j = i; j < i + h; ++j) {
                const float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
        }
    }
    const float scale = 1.0f / std::sqrt(static_cast<float>(n));
    for (int64_t i = 0; i < n; ++i) x[i] *= scale;
}

}  // namespace onecard::cpu
