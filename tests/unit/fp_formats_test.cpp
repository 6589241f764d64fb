// Every decoder in core/fp_formats.h over ALL codes, against reference definitions written here
// from the format specifications (sign/exponent/mantissa formulas evaluated in double, plus spec
// anchor values); encoders against a brute-force "nearest representable, ties to even" search.
#include "core/fp_formats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace onecard {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- reference definitions (from the specs, not from fp_formats.cpp) -------------------------

// OCP 8-bit FP spec, E4M3: S.EEEE.MMM, bias 7, subnormals at E=0, S.1111.111 is NaN, no infinity.
double ref_e4m3fn(uint8_t b) {
    const double sign = (b & 0x80) ? -1.0 : 1.0;
    const int e = (b >> 3) & 0xF, m = b & 0x7;
    if (e == 15 && m == 7) return kNaN;
    if (e == 0) return sign * std::pow(2.0, -6) * (m / 8.0);
    return sign * std::pow(2.0, e - 7) * (1.0 + m / 8.0);
}

// FNUZ E4M3 (MI300): bias 8, the only NaN is 0x80 (the would-be -0), no infinity, no -0.
double ref_e4m3fnuz(uint8_t b) {
    if (b == 0x80) return kNaN;
    const double sign = (b & 0x80) ? -1.0 : 1.0;
    const int e = (b >> 3) & 0xF, m = b & 0x7;
    if (e == 0) return sign * std::pow(2.0, -7) * (m / 8.0);
    return sign * std::pow(2.0, e - 8) * (1.0 + m / 8.0);
}

// OCP E5M2: S.EEEEE.MM, bias 15, IEEE-style: E=31 is infinity (M=0) or NaN.
double ref_e5m2(uint8_t b) {
    const double sign = (b & 0x80) ? -1.0 : 1.0;
    const int e = (b >> 2) & 0x1F, m = b & 0x3;
    if (e == 31) return m == 0 ? sign * kInf : kNaN;
    if (e == 0) return sign * std::pow(2.0, -14) * (m / 4.0);
    return sign * std::pow(2.0, e - 15) * (1.0 + m / 4.0);
}

// OCP MX spec, FP4 E2M1: the eight magnitudes, listed.
const double kE2m1Magnitudes[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
double ref_e2m1(uint8_t code) {
    const double mag = kE2m1Magnitudes[code & 0x7];
    return (code & 0x8) ? -mag : mag;
}

// OCP MX spec, E8M0 scale: 2^(v - 127), 0xFF is NaN.
double ref_ue8m0(uint8_t v) {
    return v == 0xFF ? kNaN : std::pow(2.0, static_cast<int>(v) - 127);
}

// IEEE binary16 and bfloat16 from their fields. `finite_only` evaluates the all-ones exponent as
// an ordinary binade (used to get the value "one step past the largest finite" for rounding).
double ref_ieee(uint32_t bits, int n_exp, int n_man, bool finite_only = false) {
    const int bias = (1 << (n_exp - 1)) - 1;
    const double sign = (bits >> (n_exp + n_man)) & 1 ? -1.0 : 1.0;
    const int e = static_cast<int>((bits >> n_man) & ((1u << n_exp) - 1));
    const uint32_t m = bits & ((1u << n_man) - 1);
    const double frac = static_cast<double>(m) / static_cast<double>(1u << n_man);
    if (e == (1 << n_exp) - 1 && !finite_only) return m == 0 ? sign * kInf : kNaN;
    if (e == 0) return sign * std::pow(2.0, 1 - bias) * frac;
    return sign * std::pow(2.0, e - bias) * (1.0 + frac);
}

// Equal as values, NaN matching NaN, and the sign of zero kept.
void expect_same(double want, float got, const char* format, unsigned code) {
    if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << format << " code 0x" << std::hex << code << " should be NaN, got " << got;
        return;
    }
    EXPECT_EQ(static_cast<double>(got), want) << format << " code 0x" << std::hex << code;
    EXPECT_EQ(std::signbit(got), std::signbit(want)) << format << " code 0x" << std::hex << code << " sign";
}

// ---- decoders over all codes -----------------------------------------------------------------

TEST(FpFormatsDecodeTest, E4m3fnAllCodes) {
    for (unsigned c = 0; c < 256; ++c) expect_same(ref_e4m3fn(c), e4m3fn_to_f32(c), "e4m3fn", c);
    // Anchors from the OCP spec table.
    EXPECT_EQ(e4m3fn_to_f32(0x7E), 448.0f);
    EXPECT_EQ(e4m3fn_to_f32(0x08), 0.015625f);     // min normal 2^-6
    EXPECT_EQ(e4m3fn_to_f32(0x01), 0.001953125f);  // min subnormal 2^-9
    EXPECT_EQ(e4m3fn_to_f32(0x38), 1.0f);
    EXPECT_TRUE(std::signbit(e4m3fn_to_f32(0x80)));  // -0
    EXPECT_TRUE(std::isnan(e4m3fn_to_f32(0x7F)) && std::isnan(e4m3fn_to_f32(0xFF)));
}

TEST(FpFormatsDecodeTest, E4m3fnuzAllCodes) {
    for (unsigned c = 0; c < 256; ++c) expect_same(ref_e4m3fnuz(c), e4m3fnuz_to_f32(c), "e4m3fnuz", c);
    EXPECT_EQ(e4m3fnuz_to_f32(0x7F), 240.0f);         // max
    EXPECT_EQ(e4m3fnuz_to_f32(0x01), 0.0009765625f);  // min subnormal 2^-10
    EXPECT_TRUE(std::isnan(e4m3fnuz_to_f32(0x80)));
}

TEST(FpFormatsDecodeTest, E5m2AllCodes) {
    for (unsigned c = 0; c < 256; ++c) expect_same(ref_e5m2(c), e5m2_to_f32(c), "e5m2", c);
    EXPECT_EQ(e5m2_to_f32(0x7B), 57344.0f);
    EXPECT_EQ(e5m2_to_f32(0x01), std::ldexp(1.0f, -16));
    EXPECT_TRUE(std::isinf(e5m2_to_f32(0x7C)) && std::isinf(e5m2_to_f32(0xFC)));
}

TEST(FpFormatsDecodeTest, E2m1AllSixteenCodes) {
    for (unsigned c = 0; c < 16; ++c) expect_same(ref_e2m1(c), e2m1_to_f32(c), "e2m1", c);
    // Only the low nibble counts: packed bytes carry two codes.
    for (unsigned c = 0; c < 256; ++c) expect_same(ref_e2m1(c & 0xF), e2m1_to_f32(c), "e2m1 (high nibble set)", c);
}

TEST(FpFormatsDecodeTest, Ue8m0All256Codes) {
    for (unsigned c = 0; c < 256; ++c) expect_same(ref_ue8m0(c), ue8m0_to_f32(c), "ue8m0", c);
    EXPECT_EQ(ue8m0_to_f32(127), 1.0f);
    EXPECT_GT(ue8m0_to_f32(0), 0.0f);  // 2^-127 is a float subnormal, not flushed
}

TEST(FpFormatsDecodeTest, Bf16All65536Codes) {
    for (uint32_t c = 0; c < 65536; ++c)
        expect_same(ref_ieee(c, 8, 7), bf16_to_f32(static_cast<uint16_t>(c)), "bf16", c);
}

TEST(FpFormatsDecodeTest, F16All65536Codes) {
    for (uint32_t c = 0; c < 65536; ++c)
        expect_same(ref_ieee(c, 5, 10), f16_to_f32(static_cast<uint16_t>(c)), "f16", c);
}

// The FNUZ trap: DeepSeek ships OCP e4m3fn; reading the same byte as FNUZ gives exactly half.
TEST(FpFormatsDecodeTest, FnuzTrapSameByteIsExactlyHalf) {
    int n_normal = 0;
    for (unsigned c = 0; c < 256; ++c) {
        if ((c & 0x7F) == 0x7F || c == 0x80) continue;  // NaN in one of the two dialects
        const float ocp = e4m3fn_to_f32(c), fnuz = e4m3fnuz_to_f32(c);
        EXPECT_EQ(fnuz, 0.5f * ocp) << "code 0x" << std::hex << c;
        if (((c >> 3) & 0xF) != 0) {
            ++n_normal;
            EXPECT_EQ(ocp / fnuz, 2.0f) << "code 0x" << std::hex << c;
        }
    }
    EXPECT_EQ(n_normal, 2 * (15 * 8 - 1));  // every normal code of both signs, minus the NaNs
    // Concretely: 1.0 stored by an OCP encoder reads back as 0.5 on MI300.
    EXPECT_EQ(e4m3fnuz_to_f32(f32_to_e4m3fn(1.0f)), 0.5f);
}

// ---- encoders ----------------------------------------------------------------------------------

// Brute force over a code table: the code whose value is nearest to x; on a tie, the even code
// (mantissa LSB 0). Values beyond the largest magnitude saturate to it.
uint8_t ref_nearest(double x, const std::vector<double>& pos_values, uint8_t sign_bit) {
    const double a = std::fabs(x);
    size_t best = 0;
    for (size_t c = 1; c < pos_values.size(); ++c) {
        const double d = std::fabs(pos_values[c] - a), db = std::fabs(pos_values[best] - a);
        if (d < db || (d == db && c % 2 == 0)) best = c;
    }
    return static_cast<uint8_t>(best | (std::signbit(x) ? sign_bit : 0));
}

std::vector<double> e4m3fn_positive_values() {
    std::vector<double> v;
    for (unsigned c = 0; c <= 0x7E; ++c) v.push_back(ref_e4m3fn(c));
    return v;
}

TEST(FpFormatsEncodeTest, E4m3fnRoundTripsEveryFiniteCode) {
    for (unsigned c = 0; c < 256; ++c) {
        if ((c & 0x7F) == 0x7F) continue;
        EXPECT_EQ(f32_to_e4m3fn(static_cast<float>(ref_e4m3fn(c))), c) << "code 0x" << std::hex << c;
    }
}

TEST(FpFormatsEncodeTest, E4m3fnMidpointsRoundToEven) {
    const auto vals = e4m3fn_positive_values();
    for (unsigned c = 0; c + 1 < vals.size(); ++c) {
        const float mid = static_cast<float>((vals[c] + vals[c + 1]) / 2);  // exact: 5 significant bits
        ASSERT_EQ(static_cast<double>(mid), (vals[c] + vals[c + 1]) / 2);
        const uint8_t even = (c % 2 == 0) ? c : c + 1;
        EXPECT_EQ(f32_to_e4m3fn(mid), even) << "midpoint after code 0x" << std::hex << c;
        EXPECT_EQ(f32_to_e4m3fn(-mid), even | 0x80) << "negative midpoint after code 0x" << std::hex << c;
        EXPECT_EQ(f32_to_e4m3fn(std::nextafter(mid, 0.0f)), c) << "just below midpoint 0x" << std::hex << c;
        EXPECT_EQ(f32_to_e4m3fn(std::nextafter(mid, 1e9f)), c + 1) << "just above midpoint 0x" << std::hex << c;
    }
}

TEST(FpFormatsEncodeTest, E4m3fnSaturatesAndHandlesSpecials) {
    for (float x : {448.0f, 449.0f, 464.0f, 480.0f, 1e6f, 3e38f, std::numeric_limits<float>::infinity()}) {
        EXPECT_EQ(f32_to_e4m3fn(x), 0x7E) << x;
        EXPECT_EQ(f32_to_e4m3fn(-x), 0xFE) << -x;
    }
    EXPECT_EQ(f32_to_e4m3fn(std::numeric_limits<float>::quiet_NaN()), 0x7F);
    EXPECT_EQ(f32_to_e4m3fn(std::ldexp(1.0f, -11)), 0x00);
    EXPECT_EQ(f32_to_e4m3fn(-std::ldexp(1.0f, -11)), 0x80);
    EXPECT_EQ(f32_to_e4m3fn(1e-30f), 0x00);
}

TEST(FpFormatsEncodeTest, E4m3fnMatchesBruteForceOnRandomInputs) {
    const auto vals = e4m3fn_positive_values();
    const uint32_t seed = std::random_device{}();
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> exponent(-12.0f, 9.5f);
    for (int i = 0; i < 20000; ++i) {
        float x = std::exp2(exponent(rng));
        if (rng() % 2) x = -x;
        ASSERT_EQ(f32_to_e4m3fn(x), ref_nearest(x, vals, 0x80)) << "x=" << x << " seed " << seed;
    }
}

TEST(FpFormatsEncodeTest, E2m1RoundTripsTiesAndSaturation) {
    std::vector<double> vals(kE2m1Magnitudes, kE2m1Magnitudes + 8);
    for (unsigned c = 0; c < 16; ++c) EXPECT_EQ(f32_to_e2m1(static_cast<float>(ref_e2m1(c))), c) << c;
    for (unsigned c = 0; c + 1 < 8; ++c) {
        const float mid = static_cast<float>((vals[c] + vals[c + 1]) / 2);
        const uint8_t even = (c % 2 == 0) ? c : c + 1;
        EXPECT_EQ(f32_to_e2m1(mid), even) << "midpoint " << mid;
        EXPECT_EQ(f32_to_e2m1(-mid), even | 0x8) << "midpoint " << -mid;
        EXPECT_EQ(f32_to_e2m1(std::nextafter(mid, 0.0f)), c) << mid;
        EXPECT_EQ(f32_to_e2m1(std::nextafter(mid, 100.0f)), c + 1) << mid;
    }
    for (float x : {6.0f, 7.0f, 1e9f, std::numeric_limits<float>::infinity()}) {
        EXPECT_EQ(f32_to_e2m1(x), 0x7) << x;
        EXPECT_EQ(f32_to_e2m1(-x), 0xF) << -x;
    }
    const uint32_t seed = std::random_device{}();
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-7.0f, 7.0f);
    for (int i = 0; i < 20000; ++i) {
        const float x = u(rng);
        ASSERT_EQ(f32_to_e2m1(x), ref_nearest(x, vals, 0x8)) << "x=" << x << " seed " << seed;
    }
}

// Value-based reference for bf16 RNE: the two bf16 neighbours of x, the nearer one; on a tie the
// one with an even mantissa. Past the largest finite value the upper neighbour is infinity.
uint16_t ref_bf16(float x) {
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    const uint16_t lo = static_cast<uint16_t>(bits >> 16);  // toward zero
    const uint16_t hi = static_cast<uint16_t>(lo + 1);      // away from zero (same sign)
    const double a = std::fabs(static_cast<double>(x));
    const double vlo = std::fabs(ref_ieee(lo, 8, 7, true)), vhi = std::fabs(ref_ieee(hi, 8, 7, true));
    if (a - vlo < vhi - a) return lo;
    if (a - vlo > vhi - a) return hi;
    return (lo & 1) ? hi : lo;
}

TEST(FpFormatsEncodeTest, Bf16RoundsToNearestEvenAroundEveryCode) {
    const uint32_t seed = std::random_device{}();
    std::mt19937 rng(seed);
    for (uint32_t c = 0; c < 65536; ++c) {
        if (((c >> 7) & 0xFF) == 0xFF) continue;  // inf/NaN rows
        for (uint32_t low : {0u, 1u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu, static_cast<uint32_t>(rng() & 0xFFFF)}) {
            const uint32_t bits = (c << 16) | low;
            float x;
            std::memcpy(&x, &bits, 4);
            ASSERT_EQ(f32_to_bf16(x), ref_bf16(x)) << std::hex << "f32 bits 0x" << bits << " seed " << std::dec << seed;
        }
    }
    EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
    EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::infinity()), 0xFF80);
    EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
    // A NaN whose payload lives only in the low 16 bits must not become infinity.
    uint32_t nan_bits = 0x7F800001;
    float low_nan;
    std::memcpy(&low_nan, &nan_bits, 4);
    EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(low_nan))));
    EXPECT_EQ(round_bf16(1.0f + std::ldexp(1.0f, -8)), 1.0f);  // tie -> even (1.0)
}

}  // namespace
}  // namespace onecard
