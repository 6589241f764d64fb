// RMSNorm parity: GPU bf16 kernel vs cpu::rmsnorm on the same bf16-valued inputs.
// Tolerance: the GPU output is bf16, so each element may differ from the fp32 reference by half a
// bf16 ulp (≤ 2^-8·|ref|), plus slack for fp32-vs-double sums moving a value across a rounding edge.
#include "gpu_test_util.h"

#ifdef ONECARD_HAVE_CUDA

#include "backend/cpu/norm.h"
#include "backend/cuda/ops/rmsnorm.cuh"

namespace onecard {
namespace {

void check_rmsnorm(int64_t n_rows, int64_t dim, bool weighted, int64_t ld, uint32_t seed) {
    std::mt19937 rng(seed);
    const int64_t ld_x = ld ? ld : dim;
    std::vector<float> x = test::random_bf16_values(rng, static_cast<size_t>(n_rows * ld_x), 2.0f);
    std::vector<float> w;
    if (weighted) {
        std::uniform_real_distribution<float> u(0.25f, 1.75f);
        w.resize(static_cast<size_t>(dim));
        for (auto& v : w) v = round_bf16(u(rng));
    }
    std::vector<float> ref(static_cast<size_t>(n_rows * dim));
    cpu::rmsnorm(x.data(), weighted ? w.data() : nullptr, ref.data(), n_rows, dim, 1e-6f, ld_x, dim);

    cuda::DeviceArena arena(size_t{64} << 20, "rmsnorm test");
    auto* dx = test::upload(arena, test::to_bf16_bits(x), "x");
    auto* dw = weighted ? test::upload(arena, test::to_bf16_bits(w), "w") : nullptr;
    auto* dy = arena.alloc_n<uint16_t>(ref.size(), "y");
    cuda::fill_bytes(dy, 0xFF, ref.size() * 2);
    cuda::Stream s;
    cuda::rmsnorm_bf16(reinterpret_cast<const __nv_bfloat16*>(dx), reinterpret_cast<const __nv_bfloat16*>(dw),
                       reinterpret_cast<__nv_bfloat16*>(dy), n_rows, dim, 1e-6f, s.get(), ld_x, dim);
    s.sync();
    const auto y = test::from_bf16_bits(cuda::copy_to_host(dy, ref.size()));
    for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_TRUE(std::isfinite(y[i])) << "unwritten element " << i;
        ASSERT_LE(std::fabs(y[i] - ref[i]), std::ldexp(std::fabs(ref[i]), -8) * 1.01f + 1e-6f)
            << "element " << i << " rows " << n_rows << " dim " << dim;
    }
}

TEST(CudaRmsNorm, WeightedMatchesCpu) {
    ONECARD_REQUIRE_GPU();
    check_rmsnorm(7, 4096, true, 0, 1);
    check_rmsnorm(5, 1024, true, 0, 2);
    check_rmsnorm(3, 512, true, 0, 3);
}

TEST(CudaRmsNorm, UnweightedPerHeadMatchesCpu) {
    ONECARD_REQUIRE_GPU();
    check_rmsnorm(3 * 64, 512, false, 0, 4);  // per-head q norm: rows = tokens × heads
}

TEST(CudaRmsNorm, StridedRowsMatchCpu) {
    ONECARD_REQUIRE_GPU();
    check_rmsnorm(6, 448, true, 512, 5);  // a view of the first 448 dims of 512-wide rows
}

// The pair launch (q_norm and kv_norm of one wq_a|wkv row, as gpu_model uses it) against the CPU:
// rows of width ql + hd, the first ql columns normalised with w1 into y1, the rest with w2 into y2.
TEST(CudaRmsNorm, PairOfRowSetsMatchesCpu) {
    ONECARD_REQUIRE_GPU();
    const int64_t n = 5, ql = 1024, hd = 512, ld = ql + hd;
    std::mt19937 rng(6);
    const auto x = test::random_bf16_values(rng, static_cast<size_t>(n * ld), 2.0f);
    std::uniform_real_distribution<float> u(0.25f, 1.75f);
    std::vector<float> w1(static_cast<size_t>(ql)), w2(static_cast<size_t>(hd));
    for (auto& v : w1) v = round_bf16(u(rng));
    for (auto& v : w2) v = round_bf16(u(rng));
    std::vector<float> r1(static_cast<size_t>(n * ql)), r2(static_cast<size_t>(n * hd));
    cpu::rmsnorm(x.data(), w1.data(), r1.data(), n, ql, 1e-6f, ld, ql);
    cpu::rmsnorm(x.data() + ql, w2.data(), r2.data(), n, hd, 1e-6f, ld, hd);
    cuda::DeviceArena arena(size_t{16} << 20, "rmsnorm pair test");
    auto* dx = test::upload(arena, test::to_bf16_bits(x), "x");
    auto* dw1 = test::upload(arena, test::to_bf16_bits(w1), "w1");
    auto* dw2 = test::upload(arena, test::to_bf16_bits(w2), "w2");
    auto* dy1 = arena.alloc_n<uint16_t>(r1.size(), "y1");
    auto* dy2 = arena.alloc_n<uint16_t>(r2.size(), "y2");
    cuda::fill_bytes(dy1, 0xFF, r1.size() * 2);
    cuda::fill_bytes(dy2, 0xFF, r2.size() * 2);
    cuda::Stream s;
    const auto* bx = reinterpret_cast<const __nv_bfloat16*>(dx);
    cuda::RmsNormRows q;
    q.x = bx;
    q.w = reinterpret_cast<const __nv_bfloat16*>(dw1);
    q.y = reinterpret_cast<__nv_bfloat16*>(dy1);
    q.dim = ql;
    q.ld_x = ld;
    q.ld_y = ql;
    cuda::RmsNormRows kv;
    kv.x = bx + ql;
    kv.w = reinterpret_cast<const __nv_bfloat16*>(dw2);
    kv.y = reinterpret_cast<__nv_bfloat16*>(dy2);
    kv.dim = hd;
    kv.ld_x = ld;
    kv.ld_y = hd;
    cuda::rmsnorm_bf16_pair(q, kv, n, 1e-6f, s.get());
    s.sync();
    for (const auto& [dev_y, ref] : {std::pair{dy1, &r1}, std::pair{dy2, &r2}}) {
        const auto y = test::from_bf16_bits(cuda::copy_to_host(dev_y, ref->size()));
        for (size_t i = 0; i < y.size(); ++i) {
            ASSERT_TRUE(std::isfinite(y[i])) << "unwritten element " << i;
            ASSERT_LE(std::fabs(y[i] - (*ref)[i]), std::ldexp(std::fabs((*ref)[i]), -8) * 1.01f + 1e-6f) << i;
        }
    }
}

}  // namespace
}  // namespace onecard

#else
TEST(CudaRmsNorm, Unavailable) {
    GTEST_SKIP() << "built without CUDA (ONECARD_CUDA=OFF)";
}
#endif
