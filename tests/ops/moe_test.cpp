// MoE routing, SwiGLU and combine parity: GPU ops (backend/cuda/ops/moe.cuh) vs the CPU backend
// (cpu::sqrtsoftplus + cpu::route_topk / cpu::route_hash, cpu::swiglu_clamped).
// Tolerances: expert ids exact (the selection is a comparison of identical fp32 sums; ties are
// constructed on purpose); routing weights relative 1e-6 (CUDA's expf/log1pf may differ from glibc by
// an ulp or two, the normalisation itself is the same fp32 operation sequence); bf16 outputs within
// half a bf16 ulp of the fp32 reference (≤ 2^-8·|ref|) with 1% slack for an ulp-level fp32 difference
// moving a value across a rounding edge.
#include "gpu_test_util.h"

#ifdef ONECARD_HAVE_CUDA

#include "backend/cpu/moe.h"
#include "backend/cuda/ops/fp8_quant.cuh"
#include "backend/cuda/ops/moe.cuh"

#include <algorithm>

namespace onecard {
namespace {

struct RouteCase {
    int64_t n = 0, n_experts = 0, top_k = 0;
    bool use_bias = true;
    bool hash = false;
    bool make_ties = false;  // copy the winning expert's logit to others with the same bias
    uint32_t seed = 0;
};

void check_route(const RouteCase& c) {
    std::mt19937 rng(c.seed);
    const int64_t n = c.n, E = c.n_experts, K = c.top_k, vocab = 97;
    const float route_scale = 1.5f;
    std::normal_distribution<float> logit_dist(0.0f, 3.0f);  // reaches the linear branch above 20 rarely; forced below
    std::vector<float> logits(static_cast<size_t>(n * E));
    for (auto& v : logits) v = logit_dist(rng);
    for (int64_t t = 0; t < n; t += 5) logits[t * E + (t % E)] = 21.0f + static_cast<float>(t % 3);  // softplus linear
    std::vector<float> bias;
    if (c.use_bias) {
        // A few distinct values, so that equal logits give exactly equal biased scores.
        std::uniform_int_distribution<int> cls(0, 3);
        bias.resize(static_cast<size_t>(E));
        for (auto& b : bias) b = 0.125f * static_cast<float>(cls(rng));
    }
    if (c.make_ties) {
        std::uniform_int_distribution<int64_t> pick(0, E - 1);
        for (int64_t t = 0; t < n; ++t) {
            float* lt = logits.data() + t * E;
            const int64_t a = std::max_element(lt, lt + E) - lt;
            // Up to 3 other experts with a's bias get a's logit: a tie at the very top.
            for (int tries = 0, made = 0; tries < 64 && made < 3; ++tries) {
                const int64_t b = pick(rng);
                if (b == a || (c.use_bias && bias[b] != bias[a])) continue;
                lt[b] = lt[a];
                ++made;
            }
            // And one tie in the middle of the pack (ids past the top-K boundary in some tokens).
            lt[(a + 1) % E] = lt[(a + 2) % E];
        }
        if (E <= 8)  // a token with every expert tied: the picks are 0..K-1
            for (int64_t e = 0; e < E; ++e) {
                logits[e] = 0.5f;
                if (c.use_bias) bias[e] = 0.0f;
            }
    }
    std::vector<int32_t> tid2eid, tokens;
    if (c.hash) {
        std::uniform_int_distribution<int32_t> eid(0, static_cast<int32_t>(E - 1)), tok(0, vocab - 1);
        tid2eid.resize(static_cast<size_t>(vocab * K));
        for (int64_t v = 0; v < vocab; ++v) {
            std::vector<int32_t> row;
            while (static_cast<int64_t>(row.size()) < K) {
                const int32_t e = eid(rng);
                if (std::find(row.begin(), row.end(), e) == row.end()) row.push_back(e);
            }
            std::copy(row.begin(), row.end(), tid2eid.begin() + v * K);
        }
        tokens.resize(static_cast<size_t>(n));
        for (auto& t : tokens) t = tok(rng);
    }

    std::vector<int32_t> ref_ids(static_cast<size_t>(n * K));
    std::vector<float> ref_w(static_cast<size_t>(n * K)), scores(static_cast<size_t>(E));
    for (int64_t t = 0; t < n; ++t) {
        cpu::sqrtsoftplus(logits.data() + t * E, E, scores.data());
        if (c.hash)
            cpu::route_hash(scores.data(), tid2eid.data() + int64_t(tokens[t]) * K, K, route_scale,
                            ref_ids.data() + t * K, ref_w.data() + t * K);
        else
            cpu::route_topk(scores.data(), c.use_bias ? bias.data() : nullptr, E, K, route_scale,
                            ref_ids.data() + t * K, ref_w.data() + t * K);
    }

    cuda::DeviceArena arena(size_t{16} << 20, "moe route test");
    auto* dl = test::upload(arena, logits, "logits");
    float* db = c.use_bias ? test::upload(arena, bias, "bias") : nullptr;
    int32_t* dt = c.hash ? test::upload(arena, tid2eid, "tid2eid") : nullptr;
    int32_t* dtok = c.hash ? test::upload(arena, tokens, "tokens") : nullptr;
    auto* de = arena.alloc_n<int32_t>(ref_ids.size(), "experts");
    auto* dw = arena.alloc_n<float>(ref_w.size(), "weights");
    cuda::fill_bytes(de, 0xFF, ref_ids.size() * 4);
    cuda::fill_bytes(dw, 0xFF, ref_w.size() * 4);
    cuda::Stream s;
    cuda::moe_route(dl, db, dt, dtok, n, {E, K, route_scale}, de, dw, s.get());
    s.sync();
    const auto ids = cuda::copy_to_host(de, ref_ids.size());
    const auto w = cuda::copy_to_host(dw, ref_w.size());
    for (size_t i = 0; i < ids.size(); ++i) {
        ASSERT_EQ(ids[i], ref_ids[i]) << "token " << i / K << " pick " << i % K << " E " << E << " K " << K;
        ASSERT_TRUE(std::isfinite(w[i])) << "unwritten weight " << i;
        ASSERT_LE(std::fabs(w[i] - ref_w[i]), 1e-6f * std::fabs(ref_w[i])) << "weight " << i;
    }
}

TEST(CudaMoeRoute, FlashShapeWithBias) {
    ONECARD_REQUIRE_GPU();
    check_route({.n = 37, .n_experts = 256, .top_k = 6, .use_bias = true, .seed = 1});
}

TEST(CudaMoeRoute, TiesGoToTheLowerExpertId) {
    ONECARD_REQUIRE_GPU();
    check_route({.n = 29, .n_experts = 256, .top_k = 6, .use_bias = true, .make_ties = true, .seed = 2});
    check_route({.n = 11, .n_experts = 8, .top_k = 2, .use_bias = true, .make_ties = true, .seed = 3});
    check_route({.n = 11, .n_experts = 8, .top_k = 2, .use_bias = false, .make_ties = true, .seed = 4});
}

TEST(CudaMoeRoute, SmallNoBiasAndSingleToken) {
    ONECARD_REQUIRE_GPU();
    check_route({.n = 17, .n_experts = 8, .top_k = 2, .use_bias = false, .seed = 5});
    check_route({.n = 1, .n_experts = 256, .top_k = 6, .use_bias = true, .seed = 6});
    check_route({.n = 3, .n_experts = 1024, .top_k = 8, .use_bias = true, .seed = 7});  // the E limit
}

TEST(CudaMoeRoute, HashRouting) {
    ONECARD_REQUIRE_GPU();
    check_route({.n = 37, .n_experts = 256, .top_k = 6, .use_bias = false, .hash = true, .seed = 8});
    check_route({.n = 5, .n_experts = 8, .top_k = 2, .use_bias = false, .hash = true, .seed = 9});
}

// |gpu − ref| ≤ half a bf16 ulp of ref (+1%) + abs_floor. The floor covers sums that cancel to
// nearly zero, where an fp32 rounding difference of the O(1) terms (the host compiler may fuse
// v·w + acc into an FMA, the GPU kernel does not) exceeds half an ulp of the tiny result.
void expect_bf16_close(const std::vector<float>& y, const std::vector<float>& ref, const char* what,
                       float abs_floor = 1e-30f) {
    ASSERT_EQ(y.size(), ref.size());
    for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_TRUE(std::isfinite(y[i])) << what << ": unwritten element " << i;
        ASSERT_LE(std::fabs(y[i] - ref[i]), std::ldexp(std::fabs(ref[i]), -8) * 1.01f + abs_floor)
            << what << ": element " << i << " gpu " << y[i] << " ref " << ref[i];
    }
}

void check_swiglu(int64_t rows, int64_t inter, float limit, bool scaled, uint32_t seed) {
    std::mt19937 rng(seed);
    const int64_t ld = 2 * inter;  // gate | up halves of one buffer, as the GEMM of w1;w3 writes them
    const auto gu = test::random_bf16_values(rng, static_cast<size_t>(rows * ld), 5.0f);  // |x| > 10 often enough
    std::vector<float> row_scale;
    if (scaled) {
        std::uniform_real_distribution<float> u(0.05f, 1.5f);
        row_scale.resize(static_cast<size_t>(rows));
        for (auto& v : row_scale) v = u(rng);
    }
    std::vector<float> ref(static_cast<size_t>(rows * inter));
    for (int64_t r = 0; r < rows; ++r) {
        float* hr = ref.data() + r * inter;
        cpu::swiglu_clamped(gu.data() + r * ld, gu.data() + r * ld + inter, inter, limit, hr);
        if (scaled)
            for (int64_t j = 0; j < inter; ++j) hr[j] *= row_scale[r];  // layer_moe.cpp's REF placement
    }

    cuda::DeviceArena arena(size_t{16} << 20, "swiglu test");
    auto* dgu = test::upload(arena, test::to_bf16_bits(gu), "gate|up");
    float* ds = scaled ? test::upload(arena, row_scale, "row scale") : nullptr;
    auto* dh = arena.alloc_n<uint16_t>(ref.size(), "h");
    cuda::fill_bytes(dh, 0xFF, ref.size() * 2);
    cuda::Stream s;
    const auto* g = reinterpret_cast<const __nv_bfloat16*>(dgu);
    cuda::swiglu_clamp(g, g + inter, ld, ds, reinterpret_cast<__nv_bfloat16*>(dh), rows, inter, limit, s.get());
    s.sync();
    expect_bf16_close(test::from_bf16_bits(cuda::copy_to_host(dh, ref.size())), ref, "swiglu_clamp");

    // The fused SwiGLU + FP8 quantisation gives exactly the bytes of the two kernels back to back.
    if (inter % 128 == 0) {
        const size_t nq = ref.size(), ns = static_cast<size_t>(rows * inter / 128);
        auto* q1 = arena.alloc_n<uint8_t>(nq, "q unfused");
        auto* q2 = arena.alloc_n<uint8_t>(nq, "q fused");
        auto* s1 = arena.alloc_n<float>(ns, "scales unfused");
        auto* s2 = arena.alloc_n<float>(ns, "scales fused");
        cuda::fill_bytes(q2, 0xAB, nq);
        cuda::fill_bytes(s2, 0xFF, ns * 4);
        cuda::quantize_fp8_1x128(reinterpret_cast<const __nv_bfloat16*>(dh), q1, s1, rows, inter,
                                 cuda::ActScaleLayout::RowMajor, s.get());
        cuda::swiglu_clamp_quant(g, g + inter, ld, ds, q2, s2, rows, inter, limit, s.get());
        s.sync();
        EXPECT_EQ(cuda::copy_to_host(q2, nq), cuda::copy_to_host(q1, nq)) << "fused E4M3 bytes";
        const auto a = cuda::copy_to_host(s1, ns), b = cuda::copy_to_host(s2, ns);
        for (size_t i = 0; i < ns; ++i) ASSERT_EQ(a[i], b[i]) << "fused scale " << i;
    }
}

TEST(CudaSwiglu, ClampedMatchesCpu) {
    ONECARD_REQUIRE_GPU();
    check_swiglu(37, 256, 10.0f, false, 11);
    check_swiglu(1, 2048, 10.0f, false, 12);
}

TEST(CudaSwiglu, UnclampedAndRowScaledMatchCpu) {
    ONECARD_REQUIRE_GPU();
    check_swiglu(19, 384, 0.0f, false, 13);  // limit <= 0: no clamp
    check_swiglu(37, 256, 10.0f, true, 14);  // the routing weight multiplied in before w2
}

void check_combine(int64_t n, int64_t K, int64_t D, bool weighted, uint32_t seed) {
    std::mt19937 rng(seed);
    const auto routed = test::random_bf16_values(rng, static_cast<size_t>(n * K * D));
    const auto shared = test::random_bf16_values(rng, static_cast<size_t>(n * D), 0.5f);
    std::vector<float> w;
    if (weighted) {
        std::uniform_real_distribution<float> u(0.01f, 0.8f);
        w.resize(static_cast<size_t>(n * K));
        for (auto& v : w) v = u(rng);
    }
    std::vector<float> ref(static_cast<size_t>(n * D));
    for (int64_t t = 0; t < n; ++t)
        for (int64_t d = 0; d < D; ++d) {
            float acc = 0.0f;
            for (int64_t k = 0; k < K; ++k) {
                const float v = routed[(t * K + k) * D + d];
                acc += weighted ? v * w[t * K + k] : v;
            }
            ref[t * D + d] = shared[t * D + d] + acc;
        }

    cuda::DeviceArena arena(size_t{32} << 20, "combine test");
    auto* dr = test::upload(arena, test::to_bf16_bits(routed), "routed");
    auto* dsh = test::upload(arena, test::to_bf16_bits(shared), "shared");
    float* dw = weighted ? test::upload(arena, w, "weights") : nullptr;
    auto* dout = arena.alloc_n<uint16_t>(ref.size(), "out");
    cuda::fill_bytes(dout, 0xFF, ref.size() * 2);
    cuda::Stream s;
    cuda::moe_combine(reinterpret_cast<const __nv_bfloat16*>(dr), dw, reinterpret_cast<const __nv_bfloat16*>(dsh),
                      reinterpret_cast<__nv_bfloat16*>(dout), n, K, D, s.get());
    s.sync();
    expect_bf16_close(test::from_bf16_bits(cuda::copy_to_host(dout, ref.size())), ref, "moe_combine", 1e-6f);
}

TEST(CudaMoeCombine, WeightedSumPlusSharedMatchesCpu) {
    ONECARD_REQUIRE_GPU();
    check_combine(37, 6, 512, true, 21);
    check_combine(1, 6, 4096, true, 22);
    check_combine(5, 2, 256, false, 23);  // weights already applied (nullptr)
}

}  // namespace
}  // namespace onecard

#else
TEST(CudaMoe, Unavailable) {
    GTEST_SKIP() << "built without CUDA (ONECARD_CUDA=OFF)";
}
#endif
