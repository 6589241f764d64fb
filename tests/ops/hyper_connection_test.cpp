// Hyper-connection parity: hc_pre (mixes + Sinkhorn + collapse) and hc_post on the GPU vs the CPU
// functions on the same bf16-valued streams. Tolerances: pre/post/comb are fp32 results of a
// 16384-long reduction in another order: |Δ| ≤ 1e-4 (they are O(1)); the bf16 outputs within half a
// bf16 ulp of the fp32 reference plus 1e-3 absolute.
#include "gpu_test_util.h"

#ifdef ONECARD_HAVE_CUDA

#include "backend/cpu/hyper_connection.h"
#include "backend/cuda/ops/hyper_connection.cuh"

namespace onecard {
namespace {

constexpr int64_t kHc = 4;

void expect_bf16_close(const std::vector<float>& got, const std::vector<float>& ref, const char* what) {
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_TRUE(std::isfinite(got[i])) << what << ": unwritten element " << i;
        ASSERT_LE(std::fabs(got[i] - ref[i]), std::ldexp(std::fabs(ref[i]), -8) * 1.01f + 1e-3f) << what << " " << i;
    }
}

void check_hc(int64_t n_tok, int64_t dim, uint32_t seed) {
    std::mt19937 rng(seed);
    const int64_t flat = kHc * dim, n_mix = (2 + kHc) * kHc;
    const auto X = test::random_bf16_values(rng, static_cast<size_t>(n_tok * flat));
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> fn(static_cast<size_t>(n_mix * flat)), base(static_cast<size_t>(n_mix));
    for (auto& v : fn) v = nd(rng) * 2.0f / std::sqrt(static_cast<float>(flat));
    for (auto& v : base) v = nd(rng);
    const std::vector<float> scale = {0.8f, 1.3f, 2.1f};
    cpu::HCParams p;
    p.hc = kHc;
    p.dim = dim;

    std::vector<float> mixes(static_cast<size_t>(n_tok * n_mix));
    cpu::hc_mixes(X.data(), fn.data(), n_tok, n_mix, p, mixes.data());
    std::vector<float> pre(static_cast<size_t>(n_tok * kHc)), post(pre.size()), comb(static_cast<size_t>(n_tok * 16));
    std::vector<float> x_ref(static_cast<size_t>(n_tok * dim));
    for (int64_t t = 0; t < n_tok; ++t) {
        cpu::hc_split_sinkhorn(mixes.data() + t * n_mix, scale.data(), base.data(), p, pre.data() + t * kHc,
                               post.data() + t * kHc, comb.data() + t * 16);
        cpu::hc_collapse(X.data() + t * flat, pre.data() + t * kHc, p, x_ref.data() + t * dim);
    }

    cuda::DeviceArena arena(size_t{64} << 20, "hc test");
    auto* dX = test::upload(arena, test::to_bf16_bits(X), "X");
    auto* dfn = test::upload(arena, fn, "fn");
    auto* dscale = test::upload(arena, scale, "scale");
    auto* dbase = test::upload(arena, base, "base");
    auto* dx = arena.alloc_n<uint16_t>(x_ref.size(), "x");
    auto* dpre = arena.alloc_n<float>(pre.size(), "pre");
    auto* dpost = arena.alloc_n<float>(post.size(), "post");
    auto* dcomb = arena.alloc_n<float>(comb.size(), "comb");
    auto* da = arena.alloc_n<uint16_t>(static_cast<size_t>(n_tok * dim), "a");
    for (auto [ptr, bytes] : {std::pair<void*, size_t>{dx, x_ref.size() * 2}, {dpre, pre.size() * 4},
                              {dpost, post.size() * 4}, {dcomb, comb.size() * 4}})
        cuda::fill_bytes(ptr, 0xFF, bytes);
    cuda::Stream s;
    cuda::HcDims hd;
    hd.dim = dim;
    cuda::hc_pre_bf16(reinterpret_cast<const __nv_bfloat16*>(dX), dfn, dscale, dbase,
                      reinterpret_cast<__nv_bfloat16*>(dx), dpre, dpost, dcomb, n_tok, hd, s.get());
    s.sync();
    const auto g_pre = cuda::copy_to_host(dpre, pre.size());
    const auto g_post = cuda::copy_to_host(dpost, post.size());
    const auto g_comb = cuda::copy_to_host(dcomb, comb.size());
    for (size_t i = 0; i < pre.size(); ++i) {
        EXPECT_NEAR(g_pre[i], pre[i], 1e-4) << "pre " << i;
        EXPECT_NEAR(g_post[i], post[i], 1e-4) << "post " << i;
    }
    for (size_t i = 0; i < comb.size(); ++i) EXPECT_NEAR(g_comb[i], comb[i], 1e-4) << "comb " << i;
    expect_bf16_close(test::from_bf16_bits(cuda::copy_to_host(dx, x_ref.size())), x_ref, "collapsed x");

    // hc_post in place on the GPU streams, with the CPU's post/comb uploaded so the check isolates the op.
    const auto a = test::random_bf16_values(rng, static_cast<size_t>(n_tok * dim));
    cuda::copy_to_device(da, test::to_bf16_bits(a));
    cuda::copy_to_device(dpost, post);
    cuda::copy_to_device(dcomb, comb);
    cuda::hc_post_bf16(reinterpret_cast<const __nv_bfloat16*>(da), reinterpret_cast<const __nv_bfloat16*>(dX), dpost,
                       dcomb, reinterpret_cast<__nv_bfloat16*>(dX), n_tok, hd, s.get());
    s.sync();
    std::vector<float> X_ref = X;
    for (int64_t t = 0; t < n_tok; ++t)
        cpu::hc_post(a.data() + t * dim, post.data() + t * kHc, comb.data() + t * 16, p, X_ref.data() + t * flat);
    expect_bf16_close(test::from_bf16_bits(cuda::copy_to_host(dX, X.size())), X_ref, "hc_post streams");
}

TEST(CudaHyperConnection, FlashWidthMatchesCpu) {
    ONECARD_REQUIRE_GPU();
    check_hc(3, 4096, 61);
}

TEST(CudaHyperConnection, SmallWidthManyTokensMatchesCpu) {
    ONECARD_REQUIRE_GPU();
    check_hc(17, 320, 62);
}

}  // namespace
}  // namespace onecard

#else
TEST(CudaHyperConnection, Unavailable) { GTEST_SKIP() << "built without CUDA (ONECARD_CUDA=OFF)"; }
#endif
