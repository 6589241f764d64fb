// KV writes on the GPU vs the kvcache byte format's CPU encoders, compared BYTE FOR BYTE (tolerance
// zero: the scales are powers of two chosen by the same fp32 bit rule, x·2^-k is exact or correctly
// rounded on both sides, E4M3 rounding is RNE on both, and the rope dims are copied bf16 bits).
//  * kv_write_entries == encode_kv_entry of the bf16 row's fp32 values, at scattered byte offsets
//    (some odd), skipped rows (dst < 0) and the bytes between entries untouched (pool pre-filled
//    with a pattern; the whole pool is compared).
//  * indexer_key_write == encode_indexer_key, same checks.
//  * hadamard_fp4_sim == cpu::hadamard_transform + cpu::fp4_quant_dequant: exact bf16 bits. The GPU
//    runs the CPU's butterflies in the same Sylvester stage order (same fp32 additions per element),
//    multiplies by the same fp32 1/sqrt(n), and the FP4 result (≤ 2 significant bits · 2^k) is
//    representable in bf16, so there is no rounding left to differ.
#include "gpu_test_util.h"

#ifdef ONECARD_HAVE_CUDA

#include "backend/cpu/quant_sim.h"
#include "backend/cpu/rope.h"
#include "backend/cuda/ops/elementwise.cuh"
#include "backend/cuda/ops/kv_write.cuh"
#include "backend/cuda/ops/rope.cuh"
#include "kvcache/kv_format.h"

#include <algorithm>
#include <iterator>
#include <numeric>

namespace onecard {
namespace {

constexpr uint8_t kPattern = 0xA5;  // pool bytes no write may touch

// Row r of [n, ld] gets a magnitude profile that exercises the scale rule: plain N(0,1), tiny
// (below the 1e-4 amax floor), huge (near the top of the fp32/bf16 range), per-block magnitudes
// spanning 2^-40..2^40, a block whose amax is exactly 448·2^k (power-of-two edge of the ceil), a
// block of ±0 with one tiny value, and a block where small values underflow to E4M3 subnormals/−0.
std::vector<float> varied_rows(std::mt19937& rng, int64_t n, int64_t ld, int64_t head_dim, int64_t block) {
    std::vector<float> x = test::random_bf16_values(rng, static_cast<size_t>(n * ld));
    std::uniform_int_distribution<int> ex(-40, 40);
    for (int64_t r = 0; r < n; ++r) {
        float* row = x.data() + r * ld;
        auto scale_all = [&](float f) {
            for (int64_t i = 0; i < head_dim; ++i) row[i] = round_bf16(row[i] * f);
        };
        switch (r % 7) {
            case 0:
                break;
            case 1:
                scale_all(1e-30f);
                break;
            case 2:
                scale_all(1e36f);
                break;
            case 3:
                for (int64_t b = 0; b < head_dim; b += block) {
                    const float f = std::ldexp(1.0f, ex(rng));
                    for (int64_t i = b; i < std::min(b + block, head_dim); ++i) row[i] = round_bf16(row[i] * f);
                }
                break;
            case 4:  // block 0: amax exactly 448·2^-3 (y is then a power of two: k must not round up)
                for (int64_t i = 0; i < block; ++i) row[i] = round_bf16(row[i] * 0.01f);
                row[block / 2] = -56.0f;
                break;
            case 5:  // block 0 all ±0 except one tiny value (floor), block 1 huge amax with tiny tail
                for (int64_t i = 0; i < block; ++i) row[i] = (i % 2) ? -0.0f : 0.0f;
                row[3] = 3e-7f;
                row[3] = round_bf16(row[3]);
                if (2 * block <= head_dim) {
                    for (int64_t i = block; i < 2 * block; ++i) row[i] = round_bf16(row[i] * 1e-4f);
                    row[block + 1] = 1000.0f;
                }
                break;
            default:
                scale_all(3.0f);
                break;
        }
    }
    return x;
}

// Writes n rows at dst offsets (some < 0) into a pattern-filled pool and compares the whole pool.
void check_kv_entries(int64_t head_dim, int64_t rope_dim, int64_t block, int64_t n, int64_t ld, bool odd_offsets,
                      uint32_t seed) {
    std::mt19937 rng(seed);
    const KvEntryFormat fmt = make_kv_entry_format(head_dim, rope_dim, block);
    const int64_t eb = fmt.entry_bytes();
    const int64_t ld_rows = ld ? ld : head_dim;
    const std::vector<float> x = varied_rows(rng, n, ld_rows, head_dim, block);

    // Slots in a shuffled order with a one-entry gap between used slots; every 5th row skipped.
    const int64_t n_slots = 2 * n + 1;
    std::vector<int64_t> slots(static_cast<size_t>(n_slots));
    std::iota(slots.begin(), slots.end(), 0);
    std::shuffle(slots.begin(), slots.end(), rng);
    const int64_t lead = odd_offsets ? 3 : 0;  // odd byte offsets: the kernel may not assume alignment
    std::vector<int64_t> dst(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) dst[i] = i % 5 == 2 ? -1 : lead + slots[i] * eb;
    const int64_t pool_bytes = lead + n_slots * eb + 16;

    std::vector<uint8_t> expect(static_cast<size_t>(pool_bytes), kPattern);
    for (int64_t i = 0; i < n; ++i)
        if (dst[i] >= 0) encode_kv_entry(fmt, x.data() + i * ld_rows, expect.data() + dst[i]);

    cuda::DeviceArena arena(size_t{32} << 20, "kv write test");
    auto* dx = test::upload(arena, test::to_bf16_bits(x), "rows");
    auto* ddst = test::upload(arena, dst, "dst");
    auto* dpool = test::upload(arena, std::vector<uint8_t>(static_cast<size_t>(pool_bytes), kPattern), "pool");
    cuda::KvEntryDims d;
    d.head_dim = head_dim;
    d.rope_dim = rope_dim;
    d.quant_block = block;
    d.entry_bytes = eb;
    cuda::Stream s;
    cuda::kv_write_entries(reinterpret_cast<const __nv_bfloat16*>(dx), ld, ddst, dpool, n, d, s.get());
    s.sync();
    const auto got = cuda::copy_to_host(dpool, static_cast<size_t>(pool_bytes));
    int64_t n_bad = 0;
    for (int64_t b = 0; b < pool_bytes; ++b) {
        if (got[b] == expect[b]) continue;
        if (++n_bad <= 8) {
            ADD_FAILURE() << "byte " << b << " (entry-relative " << (b - lead) % eb << ") got 0x" << std::hex
                          << int(got[b]) << " want 0x" << int(expect[b]) << std::dec << " [head_dim " << head_dim
                          << ", n " << n << "]";
        }
    }
    EXPECT_EQ(n_bad, 0);
}

TEST(CudaKvWrite, FlashEntriesMatchEncoderBytes) {
    ONECARD_REQUIRE_GPU();
    check_kv_entries(512, 64, 64, 37, 0, false, 1);
}

TEST(CudaKvWrite, SingleRowAndStridedRows) {
    ONECARD_REQUIRE_GPU();
    check_kv_entries(512, 64, 64, 1, 0, false, 2);    // n = 1
    check_kv_entries(512, 64, 64, 9, 640, false, 3);  // rows are a view of wider rows
}

TEST(CudaKvWrite, SmallFormatAtOddOffsets) {
    ONECARD_REQUIRE_GPU();
    // head_dim 128, rope 32, blocks of 32: 96 + 64 + 3 = 163 bytes, padded to 168 (5 pad bytes).
    check_kv_entries(128, 32, 32, 23, 0, true, 4);
    check_kv_entries(64, 0, 64, 11, 0, true, 5);  // no rope dims: one block, 1 scale byte, 7 pad bytes
}

void check_indexer_keys(int64_t dim, int64_t n, bool odd_offsets, uint32_t seed) {
    std::mt19937 rng(seed);
    const IndexerKeyFormat fmt = make_indexer_key_format(dim);
    const int64_t eb = fmt.entry_bytes();
    const std::vector<float> x = varied_rows(rng, n, dim, dim, dim);
    const int64_t lead = odd_offsets ? 1 : 0;
    std::vector<int64_t> dst(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) dst[i] = i % 4 == 1 ? -1 : lead + ((i * 7) % n) * (eb + 4);  // 4-byte gaps
    const int64_t pool_bytes = lead + n * (eb + 4);
    std::vector<uint8_t> expect(static_cast<size_t>(pool_bytes), kPattern);
    for (int64_t i = 0; i < n; ++i)
        if (dst[i] >= 0) encode_indexer_key(fmt, x.data() + i * dim, expect.data() + dst[i]);

    cuda::DeviceArena arena(size_t{16} << 20, "indexer key test");
    auto* dx = test::upload(arena, test::to_bf16_bits(x), "keys");
    auto* ddst = test::upload(arena, dst, "dst");
    auto* dpool = test::upload(arena, std::vector<uint8_t>(static_cast<size_t>(pool_bytes), kPattern), "pool");
    cuda::Stream s;
    cuda::indexer_key_write(reinterpret_cast<const __nv_bfloat16*>(dx), ddst, dpool, n, dim, s.get());
    s.sync();
    const auto got = cuda::copy_to_host(dpool, static_cast<size_t>(pool_bytes));
    int64_t n_bad = 0;
    for (int64_t b = 0; b < pool_bytes; ++b) {
        if (got[b] == expect[b]) continue;
        if (++n_bad <= 8)
            ADD_FAILURE() << "byte " << b << " got 0x" << std::hex << int(got[b]) << " want 0x" << int(expect[b]);
    }
    EXPECT_EQ(n_bad, 0);
}

TEST(CudaKvWrite, IndexerKeysMatchEncoderBytes) {
    ONECARD_REQUIRE_GPU();
    check_indexer_keys(128, 29, false, 11);  // Flash: 132-byte keys (i·7 mod 29 permutes the slots)
    check_indexer_keys(128, 1, false, 12);
    check_indexer_keys(64, 13, true, 13);  // odd offsets: the fp32 scale is written unaligned
}

// In-place Hadamard + FP4 on bf16 vectors x [n_vec, dim] vs the CPU functions on the same values;
// bf16 bits compared.
void check_hadamard_fp4_on(const std::vector<float>& x, int64_t dim, const char* what) {
    const int64_t n_vec = static_cast<int64_t>(x.size()) / dim;
    std::vector<float> ref = x;
    for (int64_t v = 0; v < n_vec; ++v) {
        cpu::hadamard_transform(ref.data() + v * dim, dim);
        cpu::fp4_quant_dequant(ref.data() + v * dim, dim, 32);
    }
    for (float r : ref) ASSERT_EQ(round_bf16(r), r) << "FP4 result not bf16-representable";

    cuda::DeviceArena arena(size_t{16} << 20, "hadamard test");
    auto* dx = test::upload(arena, test::to_bf16_bits(x), "x");
    cuda::Stream s;
    cuda::hadamard_fp4_sim(reinterpret_cast<__nv_bfloat16*>(dx), n_vec, dim, s.get());
    s.sync();
    const auto got = cuda::copy_to_host(dx, x.size());
    const auto want = test::to_bf16_bits(ref);
    int64_t n_bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        if (got[i] == want[i]) continue;
        if (++n_bad <= 8)
            ADD_FAILURE() << "vector " << i / dim << " dim " << i % dim << ": got " << bf16_to_f32(got[i]) << " want "
                          << ref[i] << " [" << what << ", dim " << dim << "]";
    }
    EXPECT_EQ(n_bad, 0) << what;
}

void check_hadamard_fp4(int64_t n_vec, int64_t dim, float sigma, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<float> x = test::random_bf16_values(rng, static_cast<size_t>(n_vec * dim), 1.0f);
    for (auto& v : x) v = round_bf16(v * sigma);
    check_hadamard_fp4_on(x, dim, "random");
}

TEST(CudaKvWrite, HadamardFp4MatchesCpuExactly) {
    ONECARD_REQUIRE_GPU();
    check_hadamard_fp4(67, 128, 1.0f, 21);  // indexer keys / queries (index_head_dim 128)
    check_hadamard_fp4(1, 128, 3.0f, 22);
    check_hadamard_fp4(5, 32, 1.0f, 23);
    check_hadamard_fp4(9, 512, 1.0f, 24);
    check_hadamard_fp4(3, 1024, 0.25f, 25);
    check_hadamard_fp4(4, 128, 1e30f, 26);   // large exponents
    check_hadamard_fp4(4, 128, 1e-37f, 27);  // scale at the 6·2^-126 floor: subnormal fp32 results
}

// Random data almost never lands on an E2M1 tie or on an amax that makes the scale an exact power of
// two, so build the Hadamard OUTPUT: at dim 64 the transform is exact (1/sqrt(64) = 1/8, sums of
// few multiples of 2^-5), and H·H = I, so x = H·y gives H·x = y bit for bit. Each block has amax 6
// (y = amax/6 = 1: the ceil must not round the scale up) and values on every rounding midpoint.
TEST(CudaKvWrite, HadamardFp4TiesAndPowerOfTwoScale) {
    ONECARD_REQUIRE_GPU();
    const int64_t dim = 64;
    std::vector<float> y(static_cast<size_t>(dim), 0.0f);
    const float block0[] = {6.0f, 0.25f, 2.5f, 5.0f, -0.75f, 0.5f};
    const float block1[] = {-6.0f, 0.75f, 1.25f, 1.75f, 3.5f, -5.0f, 1.5f};
    std::copy(std::begin(block0), std::end(block0), y.begin());
    std::copy(std::begin(block1), std::end(block1), y.begin() + 32);
    std::vector<float> x = y;
    cpu::hadamard_transform(x.data(), dim);
    for (float v : x) ASSERT_EQ(round_bf16(v), v) << "crafted input must be bf16-exact";
    std::vector<float> back = x;
    cpu::hadamard_transform(back.data(), dim);
    ASSERT_EQ(back, y) << "H·H·y must give y exactly at dim 64";
    // The reference itself: ties go to the even code (0.25 -> 0, 2.5 -> 2, 5 -> 4, 0.75 -> 1, 1.25 -> 1,
    // 1.75 -> 2, 3.5 -> 4) at scale 1.
    std::vector<float> ref = back;
    cpu::fp4_quant_dequant(ref.data(), dim, 32);
    // 0.5 and 1.5 are exact only at scale 1: a scale rounded up to 2 would turn them into 0 and 2.
    const std::vector<float> want0 = {6.0f, 0.0f, 2.0f, 4.0f, -1.0f, 0.5f};
    const std::vector<float> want1 = {-6.0f, 1.0f, 1.0f, 2.0f, 4.0f, -4.0f, 1.5f};
    ASSERT_EQ(std::vector<float>(ref.begin(), ref.begin() + 6), want0);
    ASSERT_EQ(std::vector<float>(ref.begin() + 32, ref.begin() + 39), want1);
    check_hadamard_fp4_on(x, dim, "ties");
}

// The indexer-query path fused (RoPE + Hadamard + FP4 in one launch) gives the bits of rope_bf16
// followed by hadamard_fp4_sim.
TEST(CudaHadamardFp4, FusedRopeEqualsTheTwoKernels) {
    ONECARD_REQUIRE_GPU();
    const int64_t n_tok = 5, nI = 8, dI = 128, n_rope = 64;
    std::mt19937 rng(24);
    const auto x = test::to_bf16_bits(test::random_bf16_values(rng, static_cast<size_t>(n_tok * nI * dI)));
    cpu::RopeParams rp;
    rp.theta = 160000.0;
    rp.yarn = true;
    const std::vector<float> inv = cpu::rope_inv_freqs(rp);
    const std::vector<int32_t> pos = {0, 3, 129, 65613, 1048575};
    cuda::DeviceArena arena(size_t{16} << 20, "rope hadamard test");
    auto* a = test::upload(arena, x, "two kernels");
    auto* b = test::upload(arena, x, "fused");
    auto* dinv = test::upload(arena, inv, "inv_freq");
    auto* dpos = test::upload(arena, pos, "positions");
    auto bf = [](uint16_t* p) { return reinterpret_cast<__nv_bfloat16*>(p); };
    cuda::Stream s;
    cuda::rope_bf16(bf(a), n_tok, nI, dI, {dinv, n_rope, dpos, cuda::RopeDirection::Forward}, s.get());
    cuda::hadamard_fp4_sim(bf(a), n_tok * nI, dI, s.get());
    cuda::rope_hadamard_fp4_sim(bf(b), n_tok, nI, dI, dinv, n_rope, dpos, s.get());
    s.sync();
    const auto ga = cuda::copy_to_host(a, x.size()), gb = cuda::copy_to_host(b, x.size());
    EXPECT_EQ(gb, ga);
    EXPECT_NE(ga, x);
}

}  // namespace
}  // namespace onecard

#else
TEST(CudaKvWrite, Unavailable) {
    GTEST_SKIP() << "built without CUDA (ONECARD_CUDA=OFF)";
}
#endif
