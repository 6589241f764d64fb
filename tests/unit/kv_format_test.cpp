// kv_format: encode/decode of KV entries and indexer keys must reproduce, bit for bit, the FP8
// quant-dequant simulation the model was trained with (dsv4-model.md §10.2), written out here
// independently with plain math.
#include "kvcache/kv_format.h"
#include "backend/cpu/quant_sim.h"
#include "core/error.h"
#include "core/fp_formats.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace onecard {
namespace {

// Reference simulation: amax clamped at 1e-4, scale = 2^ceil(log2(amax * (1/448))) with the product
// in fp32 like DeepSeek's reference and the log in double (exact for these magnitudes), x/scale clamped to +-448 then
// rounded to E4M3, times scale.
float ref_scale(float amax) {
    const double y = static_cast<double>(std::max(amax, 1e-4f) * (1.0f / 448.0f));
    return static_cast<float>(std::exp2(std::ceil(std::log2(y))));
}

std::vector<float> simulate_kv_qat(const std::vector<float>& x, int64_t n_rope, int64_t block) {
    std::vector<float> out(x.size());
    const int64_t n_nope = static_cast<int64_t>(x.size()) - n_rope;
    for (int64_t b0 = 0; b0 < n_nope; b0 += block) {
        float amax = 0;
        for (int64_t i = b0; i < b0 + block; ++i) amax = std::max(amax, std::fabs(x[i]));
        const float s = ref_scale(amax);
        for (int64_t i = b0; i < b0 + block; ++i) {
            const float v = std::min(448.0f, std::max(-448.0f, x[i] / s));
            out[i] = e4m3fn_to_f32(f32_to_e4m3fn(v)) * s;
        }
    }
    for (int64_t i = n_nope; i < static_cast<int64_t>(x.size()); ++i) out[i] = round_bf16(x[i]);
    return out;
}

// Values spanning many binades, some blocks tiny (below the 1e-4 floor), some exactly at powers
// of two times 448 (the ceil(log2) edge), all bf16-valued like the model's kv.
std::vector<float> random_vector(std::mt19937& rng, int64_t n, int64_t block) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::uniform_int_distribution<int> binade(-12, 8);
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t b0 = 0; b0 < n; b0 += block) {
        const int mode = static_cast<int>(rng() % 4);
        const float mag = std::ldexp(1.0f, binade(rng));
        for (int64_t i = b0; i < std::min(n, b0 + block); ++i) {
            float v = nd(rng) * mag;
            if (mode == 0) v *= 1e-6f;  // whole block under the amax floor
            x[static_cast<size_t>(i)] = round_bf16(v);
        }
        if (mode == 1) x[static_cast<size_t>(b0)] = 448.0f * std::ldexp(1.0f, binade(rng));  // exact power-of-two scale
    }
    return x;
}

TEST(KvFormat, FlashSizesMatchVllmLayout) {
    const auto fmt = make_kv_entry_format(512, 64);
    EXPECT_EQ(fmt.nope_dim(), 448);
    EXPECT_EQ(fmt.n_scale_blocks(), 7);
    EXPECT_EQ(fmt.scale_offset(), 448 + 128);
    EXPECT_EQ(fmt.entry_bytes(), 584);
    EXPECT_EQ(make_indexer_key_format(128).entry_bytes(), 132);
}

TEST(KvFormat, RejectsShapesThatDoNotBlock) {
    EXPECT_THROW(make_kv_entry_format(100, 64), Error);  // 36 nope dims, not a multiple of 64
    EXPECT_THROW(make_kv_entry_format(64, 64), Error);
    EXPECT_THROW(make_indexer_key_format(30), Error);
}

TEST(KvFormat, Ue8m0ExponentIsExactCeilLog2) {
    EXPECT_EQ(ue8m0_exponent_for_amax(448.0f, 448.0f), 0);
    EXPECT_EQ(ue8m0_exponent_for_amax(448.5f, 448.0f), 1);
    EXPECT_EQ(ue8m0_exponent_for_amax(224.0f, 448.0f), -1);
    EXPECT_EQ(ue8m0_exponent_for_amax(0.0f, 448.0f), ue8m0_exponent_for_amax(1e-4f, 448.0f));
    // 1e-4 / 448 = 2.23e-7, 2^-22 = 2.38e-7 -> exponent -22.
    EXPECT_EQ(ue8m0_exponent_for_amax(0.0f, 448.0f), -22);
    // Just above a power of two: a libm log2 may round to the integer; the exact ceil must not.
    const float just_above = std::nextafter(448.0f * std::ldexp(1.0f, -10), 1e9f);
    EXPECT_EQ(ue8m0_exponent_for_amax(just_above, 448.0f), -9);
}

void check_round_trip(int64_t head_dim, int64_t rope_dim, uint32_t seed) {
    const auto fmt = make_kv_entry_format(head_dim, rope_dim);
    std::mt19937 rng(seed);
    std::vector<uint8_t> bytes(static_cast<size_t>(fmt.entry_bytes()), 0xAB);
    std::vector<float> back(static_cast<size_t>(head_dim));
    for (int trial = 0; trial < 200; ++trial) {
        const auto x = random_vector(rng, head_dim, fmt.quant_block);
        encode_kv_entry(fmt, x.data(), bytes.data());
        decode_kv_entry(fmt, bytes.data(), back.data());
        const auto want = simulate_kv_qat(x, rope_dim, fmt.quant_block);
        for (int64_t i = 0; i < head_dim; ++i) {
            ASSERT_EQ(std::bit_cast<uint32_t>(back[i]), std::bit_cast<uint32_t>(want[i]))
                << "dim " << i << " trial " << trial << " x=" << x[i] << " got " << back[i] << " want " << want[i];
        }
        for (int64_t i = fmt.scale_offset() + fmt.n_scale_blocks(); i < fmt.entry_bytes(); ++i)
            ASSERT_EQ(bytes[static_cast<size_t>(i)], 0) << "pad byte " << i;
    }
}

TEST(KvFormat, FlashEntryRoundTripEqualsQatSimulation) {
    check_round_trip(512, 64, 1234);
}
TEST(KvFormat, TinyEntryRoundTripEqualsQatSimulation) {
    check_round_trip(128, 64, 99);
}

// The model's own QAT simulation (backend/cpu, used by the CPU forward pass in reference numerics)
// must agree bit for bit with what the cache stores, or a model reading the cache would diverge.
TEST(KvFormat, RoundTripEqualsTheModelsQatSimulation) {
    const auto fmt = make_kv_entry_format(512, 64);
    std::mt19937 rng(2024);
    std::vector<uint8_t> bytes(584);
    std::vector<float> back(512);
    for (int trial = 0; trial < 300; ++trial) {
        auto x = random_vector(rng, 512, 64);
        if (trial % 3 == 0) x[static_cast<size_t>(64 * (trial % 7))] = 448.0f * std::ldexp(1.0f, trial % 9 - 4);
        encode_kv_entry(fmt, x.data(), bytes.data());
        decode_kv_entry(fmt, bytes.data(), back.data());
        std::vector<float> sim = x;
        cpu::fp8_quant_dequant(sim.data(), 448, 64);
        for (int i = 448; i < 512; ++i) sim[static_cast<size_t>(i)] = round_bf16(sim[static_cast<size_t>(i)]);
        for (int i = 0; i < 512; ++i)
            ASSERT_EQ(std::bit_cast<uint32_t>(back[i]), std::bit_cast<uint32_t>(sim[static_cast<size_t>(i)]))
                << "dim " << i << " trial " << trial;
    }
    for (float amax : {1e-6f, 1e-4f, 0.3f, 448.0f, 449.0f, 3.5e4f, std::nextafter(896.0f, 0.0f)})
        EXPECT_EQ(std::ldexp(1.0f, ue8m0_exponent_for_amax(amax, 448.0f)),
                  cpu::ue8m0_block_scale(std::max(amax, 1e-4f), 448.0f))
            << amax;
}

// Indexer keys reach the cache already FP4-simulated (Hadamard, then E2M1 in blocks of 32): every
// value is a 3-bit-mantissa number times a power of two, so the 132-byte FP8 store adds no error for
// keys whose block scales lie within FP8's range of each other.
TEST(KvFormat, IndexerKeyStoreIsLosslessForFp4SimulatedKeys) {
    const auto fmt = make_indexer_key_format(128);
    std::mt19937 rng(31);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<uint8_t> bytes(132);
    std::vector<float> back(128);
    for (int trial = 0; trial < 500; ++trial) {
        std::vector<float> k(128);
        const float mag = std::ldexp(1.0f, trial % 12 - 6);
        for (auto& v : k) v = round_bf16(nd(rng) * mag);
        cpu::hadamard_transform(k.data(), 128);
        cpu::fp4_quant_dequant(k.data(), 128, 32);
        encode_indexer_key(fmt, k.data(), bytes.data());
        decode_indexer_key(fmt, bytes.data(), back.data());
        for (int i = 0; i < 128; ++i)
            ASSERT_EQ(back[i], k[static_cast<size_t>(i)]) << "dim " << i << " trial " << trial;
    }
}

TEST(KvFormat, EncodeIsIdempotentOnQuantisedValues) {
    // Decoded values are on the FP8 grid of their own scale: re-encoding gives the same bytes.
    const auto fmt = make_kv_entry_format(512, 64);
    std::mt19937 rng(7);
    const auto x = random_vector(rng, 512, 64);
    std::vector<uint8_t> a(584), b(584);
    std::vector<float> y(512);
    encode_kv_entry(fmt, x.data(), a.data());
    decode_kv_entry(fmt, a.data(), y.data());
    encode_kv_entry(fmt, y.data(), b.data());
    EXPECT_EQ(a, b);
}

TEST(KvFormat, IndexerKeyRoundTripEqualsQatSimulation) {
    const auto fmt = make_indexer_key_format(128);
    std::mt19937 rng(42);
    std::vector<uint8_t> bytes(132);
    std::vector<float> back(128);
    for (int trial = 0; trial < 200; ++trial) {
        const auto x = random_vector(rng, 128, 128);
        encode_indexer_key(fmt, x.data(), bytes.data());
        decode_indexer_key(fmt, bytes.data(), back.data());
        const auto want = simulate_kv_qat(x, 0, 128);  // one block of 128, no rope tail
        for (int i = 0; i < 128; ++i)
            ASSERT_EQ(std::bit_cast<uint32_t>(back[i]), std::bit_cast<uint32_t>(want[i])) << "dim " << i;
        float scale;
        std::memcpy(&scale, bytes.data() + 128, 4);
        int e;
        EXPECT_EQ(std::frexp(scale, &e), 0.5f) << "scale " << scale << " is not a power of two";
    }
}

}  // namespace
}  // namespace onecard
