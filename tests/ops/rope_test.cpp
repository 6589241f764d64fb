// RoPE parity: GPU bf16 kernel vs cpu::apply_rope_rows, forward and inverse, with and without YaRN,
// at positions up to 1M (large angles). Tolerance: half a bf16 ulp of the result plus 1e-4 absolute
// (sincosf is within 2 fp32 ulp of the double-evaluated CPU cos/sin). The non-rope dims must come
// back bit-identical.
#include "gpu_test_util.h"

#ifdef ONECARD_HAVE_CUDA

#include "backend/cpu/rope.h"
#include "backend/cuda/ops/rope.cuh"

namespace onecard {
namespace {

void check_rope(bool yarn, bool inverse, uint32_t seed) {
    std::mt19937 rng(seed);
    const int64_t n_tok = 6, n_vec = 8, dim = 512, n_rope = 64;
    cpu::RopeParams rp;
    rp.theta = yarn ? 160000.0 : 10000.0;
    rp.yarn = yarn;
    const std::vector<float> inv = cpu::rope_inv_freqs(rp);
    const std::vector<int32_t> pos = {0, 1, 127, 4097, 65535 + 77, 1048575};
    std::vector<float> x = test::random_bf16_values(rng, static_cast<size_t>(n_tok * n_vec * dim));
    std::vector<float> ref = x;
    for (int64_t t = 0; t < n_tok; ++t)
        cpu::apply_rope_rows(ref.data() + t * n_vec * dim, n_vec, dim, inv.data(), n_rope, pos[t], inverse);

    cuda::DeviceArena arena(size_t{16} << 20, "rope test");
    auto* dx = test::upload(arena, test::to_bf16_bits(x), "x");
    auto* dinv = test::upload(arena, inv, "inv_freq");
    auto* dpos = test::upload(arena, pos, "positions");
    cuda::Stream s;
    cuda::rope_bf16(reinterpret_cast<__nv_bfloat16*>(dx), n_tok, n_vec, dim,
                    {dinv, n_rope, dpos, inverse ? cuda::RopeDirection::Inverse : cuda::RopeDirection::Forward},
                    s.get());
    s.sync();
    const auto y = test::from_bf16_bits(cuda::copy_to_host(dx, x.size()));
    for (size_t i = 0; i < y.size(); ++i) {
        const bool rope_dim = static_cast<int64_t>(i % dim) >= dim - n_rope;
        if (!rope_dim) {
            ASSERT_EQ(y[i], x[i]) << "non-rope dim " << i << " changed";
        } else {
            ASSERT_LE(std::fabs(y[i] - ref[i]), std::ldexp(std::fabs(ref[i]), -8) * 1.01f + 1e-4f)
                << "element " << i << " token " << i / (n_vec * dim) << " yarn " << yarn << " inverse " << inverse;
        }
    }
}

TEST(CudaRope, PlainMatchesCpu) {
    ONECARD_REQUIRE_GPU();
    check_rope(false, false, 11);
    check_rope(false, true, 12);
}

TEST(CudaRope, YarnMatchesCpu) {
    ONECARD_REQUIRE_GPU();
    check_rope(true, false, 13);
    check_rope(true, true, 14);
}

// The pair launch (q with 8 heads and the single KV head, as gpu_model uses it) gives exactly the
// bytes of two rope_bf16 calls.
TEST(CudaRope, PairLaunchEqualsTwoCalls) {
    ONECARD_REQUIRE_GPU();
    std::mt19937 rng(15);
    const int64_t n_tok = 6, dim = 512, n_rope = 64;
    cpu::RopeParams rp;
    rp.yarn = true;
    rp.theta = 160000.0;
    const std::vector<float> inv = cpu::rope_inv_freqs(rp);
    const std::vector<int32_t> pos = {0, 1, 127, 4097, 65535 + 77, 1048575};
    const auto q = test::to_bf16_bits(test::random_bf16_values(rng, static_cast<size_t>(n_tok * 8 * dim)));
    const auto kv = test::to_bf16_bits(test::random_bf16_values(rng, static_cast<size_t>(n_tok * dim)));
    cuda::DeviceArena arena(size_t{16} << 20, "rope pair test");
    auto* q1 = test::upload(arena, q, "q1");
    auto* q2 = test::upload(arena, q, "q2");
    auto* k1 = test::upload(arena, kv, "kv1");
    auto* k2 = test::upload(arena, kv, "kv2");
    auto* dinv = test::upload(arena, inv, "inv_freq");
    auto* dpos = test::upload(arena, pos, "positions");
    auto bf = [](uint16_t* p) { return reinterpret_cast<__nv_bfloat16*>(p); };
    cuda::Stream s;
    const cuda::RopeRotation rot{dinv, n_rope, dpos, cuda::RopeDirection::Forward};
    cuda::rope_bf16(bf(q1), n_tok, 8, dim, rot, s.get());
    cuda::rope_bf16(bf(k1), n_tok, 1, dim, rot, s.get());
    cuda::rope_bf16_pair(bf(q2), 8, bf(k2), 1, n_tok, dim, rot, s.get());
    s.sync();
    EXPECT_EQ(cuda::copy_to_host(q2, q.size()), cuda::copy_to_host(q1, q.size()));
    EXPECT_EQ(cuda::copy_to_host(k2, kv.size()), cuda::copy_to_host(k1, kv.size()));
    EXPECT_NE(cuda::copy_to_host(q2, q.size()), q);  // it did rotate
}

}  // namespace
}  // namespace onecard

#else
TEST(CudaRope, Unavailable) {
    GTEST_SKIP() << "built without CUDA (ONECARD_CUDA=OFF)";
}
#endif
