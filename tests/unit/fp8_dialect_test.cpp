// OCP e4m3fn (+ UE8M0 scale) -> e4m3fnuz (+ doubled scale): every code under every convertible
// scale keeps its exact value; the special codes and the unconvertible scales are handled.
#include "core/fp8_dialect.h"
#include "core/error.h"
#include "core/fp_formats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace onecard {
namespace {

// value = element * 2^(scale - 127), computed in double (exact: 4-bit significands).
double dequant_ocp(uint8_t b, uint8_t scale) {
    return static_cast<double>(e4m3fn_to_f32(b)) * std::ldexp(1.0, scale - 127);
}
double dequant_fnuz(uint8_t b, uint8_t scale) {
    return static_cast<double>(e4m3fnuz_to_f32(b)) * std::ldexp(1.0, scale - 127);
}

TEST(Fp8DialectTest, EveryCodeUnderEveryScaleKeepsItsValue) {
    for (unsigned s = 0; s < 0xFE; ++s) {
        const uint8_t s2 = e8m0_scale_for_fnuz(static_cast<uint8_t>(s));
        ASSERT_EQ(s2, s + 1);
        for (unsigned b = 0; b < 256; ++b) {
            const uint8_t f = e4m3fn_byte_to_fnuz(static_cast<uint8_t>(b));
            const double want = dequant_ocp(b, s);
            const double got = dequant_fnuz(f, s2);
            if (std::isnan(want)) {
                EXPECT_EQ(f, kFnuzNaN) << "OCP NaN 0x" << std::hex << b;
                EXPECT_TRUE(std::isnan(got));
            } else {
                ASSERT_EQ(got, want) << "code 0x" << std::hex << b << " scale 0x" << s;
            }
        }
    }
}

TEST(Fp8DialectTest, SpecialCodes) {
    EXPECT_EQ(e4m3fn_byte_to_fnuz(0x80), 0x00);  // -0 -> +0 (0x80 is FNUZ NaN)
    EXPECT_EQ(e4m3fn_byte_to_fnuz(0x7F), 0x80);
    EXPECT_EQ(e4m3fn_byte_to_fnuz(0xFF), 0x80);
    EXPECT_EQ(e4m3fn_byte_to_fnuz(0x7E), 0x7E);  // 448 = 224 * 2: the byte is kept
    EXPECT_EQ(e4m3fn_byte_to_fnuz(0x01), 0x01);
    for (unsigned b = 0; b < 256; ++b) {
        const uint8_t f = e4m3fn_byte_to_fnuz(static_cast<uint8_t>(b));
        // Only NaN maps to FNUZ NaN: no finite value may become NaN.
        EXPECT_EQ(f == kFnuzNaN, (b & 0x7F) == 0x7F) << std::hex << b;
    }
}

TEST(Fp8DialectTest, UnconvertibleScalesThrow) {
    EXPECT_THROW(e8m0_scale_for_fnuz(0xFE), Error);
    EXPECT_THROW(e8m0_scale_for_fnuz(0xFF), Error);
    std::vector<uint8_t> scales = {0x7F, 0x80, 0xFE}, out(3);
    try {
        e8m0_scales_for_fnuz(scales, out, "layers.0.attn.wq_a.scale");
        FAIL() << "0xFE scale accepted";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("layers.0.attn.wq_a.scale"), std::string::npos) << msg;
        EXPECT_NE(msg.find("scale 2"), std::string::npos) << msg;
    }
}

// A tensor with 128x128 blocks: convert weights and scales separately (in place), then every
// dequantized element equals the original.
TEST(Fp8DialectTest, BlockScaledTensorInPlace) {
    const uint32_t seed = std::random_device{}();
    std::mt19937 rng(seed);
    constexpr int n_rows = 256, n_cols = 384, kBlock = 128;
    constexpr int n_brow = n_rows / kBlock, n_bcol = n_cols / kBlock;
    std::vector<uint8_t> w(n_rows * n_cols), s(n_brow * n_bcol);  // w [n_rows, n_cols], s [n_brow, n_bcol]
    for (auto& b : w) b = static_cast<uint8_t>(rng());
    for (auto& b : s) b = static_cast<uint8_t>(100 + rng() % 50);
    const auto w0 = w;
    const auto s0 = s;
    e4m3fn_to_fnuz(w, w);
    e8m0_scales_for_fnuz(s, s);
    for (int r = 0; r < n_rows; ++r) {
        for (int c = 0; c < n_cols; ++c) {
            const int bi = (r / kBlock) * n_bcol + c / kBlock;
            const double want = dequant_ocp(w0[r * n_cols + c], s0[bi]);
            const double got = dequant_fnuz(w[r * n_cols + c], s[bi]);
            if (std::isnan(want)) {
                ASSERT_TRUE(std::isnan(got));
            } else {
                ASSERT_EQ(got, want) << "r=" << r << " c=" << c << " seed " << seed;
            }
        }
    }
    std::vector<uint8_t> small(3);
    EXPECT_THROW(e4m3fn_to_fnuz(w, small), Error);
}

}  // namespace
}  // namespace onecard
