// Bf16Gemm (cuBLAS) parity against cpu::matmul_nt on the same bf16-valued inputs. Every product of
// two bf16 values is exact in fp32, so the only difference is the fp32 accumulation order: over
// k ≤ 4096 terms of unit-variance products that is ~1e-7 relative, hence rel L2 ≤ 1e-5 for fp32
// output. bf16 output: each element within one bf16 rounding (2^-8 relative, +1% slack) of the fp32
// reference, plus 1e-5 of the largest output for sums that land next to a rounding boundary.
#include "gpu_test_util.h"

#ifdef ONECARD_HAVE_CUDA

#include "backend/cpu/linear.h"
#include "backend/cuda/ops/bf16_gemm.cuh"
#include "backend/cuda/ops/elementwise.cuh"

#include <string>

namespace onecard {
namespace {

constexpr size_t kWorkspace = size_t{32} << 20;

const __nv_bfloat16* bf(const uint16_t* p) {
    return reinterpret_cast<const __nv_bfloat16*>(p);
}

// `scale[i]` bounds the rounding error of element i (half a bf16 ulp is <= 2^-8 of the value): |ref|
// for a plain product; with beta != 0, |x·Wᵀ| + |beta·y0| + |ref|: measured on the H200, with a bf16 C
// cuBLAS rounds the product to bf16 before it adds beta·C and rounds again, so a result that cancels
// carries the rounding of its larger parts (3.4 ulps of the sum seen) and every result two roundings.
void expect_bf16_output(const std::vector<float>& got, const std::vector<float>& ref, const std::vector<float>& scale,
                        const std::string& what) {
    ASSERT_EQ(got.size(), ref.size());
    const double tol_abs = 1e-5 * test::max_abs(ref);
    for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_TRUE(std::isfinite(got[i])) << what << ": unwritten element " << i;
        ASSERT_LE(std::fabs(got[i] - ref[i]), std::ldexp(std::fabs(scale[i]), -8) * 1.01 + tol_abs)
            << what << " element " << i << " got " << got[i] << " ref " << ref[i];
    }
}

void expect_f32_output(const std::vector<float>& got, const std::vector<float>& ref, const std::string& what) {
    const double err = test::rel_l2(got, ref);
    EXPECT_LE(err, 1e-5) << what;
}

// x [m, k] inside a buffer of row stride ld_x (0 = k); y [m, n] inside a buffer of row stride ld_y
// (0 = n) whose padding columns must stay poisoned. beta = 1: y starts as random values and must
// accumulate onto them.
void check_gemm(int64_t m, int64_t n, int64_t k, cuda::GemmOut out, int64_t ld_x, int64_t ld_y, float beta,
                uint32_t seed) {
    const std::string what = "m " + std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k) +
                             (out == cuda::GemmOut::Bf16 ? " bf16" : " f32") + " ld_x " + std::to_string(ld_x) +
                             " ld_y " + std::to_string(ld_y) + " beta " + std::to_string(beta);
    SCOPED_TRACE(what);
    std::mt19937 rng(seed);
    const int64_t lx = ld_x ? ld_x : k, ly = ld_y ? ld_y : n;
    const auto xbuf = test::random_bf16_values(rng, static_cast<size_t>(m * lx));
    const auto w = test::random_bf16_values(rng, static_cast<size_t>(n * k), 0.05f);
    std::vector<float> y0 = test::random_bf16_values(rng, static_cast<size_t>(m * ly));

    // Reference: y = beta·y0 + x · Wᵀ over the valid columns (matmul_nt overwrites, so add after).
    std::vector<float> prod(static_cast<size_t>(m * n));
    cpu::matmul_nt(xbuf.data(), w.data(), prod.data(), m, k, n, lx, n);
    std::vector<float> ref(prod.size()), scale(prod.size());
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            const float add = beta != 0.0f ? beta * y0[i * ly + j] : 0.0f;
            ref[i * n + j] = prod[i * n + j] + add;
            scale[i * n + j] =
                beta != 0.0f ? std::fabs(prod[i * n + j]) + std::fabs(add) + std::fabs(ref[i * n + j]) : ref[i * n + j];
        }

    cuda::DeviceArena arena(size_t{256} << 20, "bf16 gemm test");
    void* ws = arena.alloc(kWorkspace, "cublas workspace");
    auto* dx = test::upload(arena, test::to_bf16_bits(xbuf), "x");
    auto* dw = test::upload(arena, test::to_bf16_bits(w), "w");
    cuda::Bf16Gemm gemm(ws, kWorkspace);
    cuda::Stream s;
    const size_t y_elems = static_cast<size_t>(m * ly);
    std::vector<float> got(ref.size());
    bool padding_intact = true;
    if (out == cuda::GemmOut::F32) {
        auto* dy = arena.alloc_n<float>(y_elems, "y");
        cuda::fill_bytes(dy, 0xFF, y_elems * sizeof(float));
        if (beta != 0.0f) {
            // Only the valid columns hold values; the padding stays poisoned to show it is never touched.
            std::vector<float> init(y_elems);
            std::memset(init.data(), 0xFF, init.size() * sizeof(float));
            for (int64_t i = 0; i < m; ++i)
                for (int64_t j = 0; j < n; ++j) init[i * ly + j] = y0[i * ly + j];
            cuda::copy_to_device(dy, init);
        }
        gemm.run(bf(dx), ld_x, bf(dw), dy, out, ld_y, m, n, k, s.get(), beta);
        s.sync();
        const auto h = cuda::copy_to_host(dy, y_elems);
        for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < ly; ++j) {
                if (j < n)
                    got[i * n + j] = h[i * ly + j];
                else if (!std::isnan(h[i * ly + j]))
                    padding_intact = false;
            }
        }
        expect_f32_output(got, ref, what);
    } else {
        auto* dy = arena.alloc_n<uint16_t>(y_elems, "y");
        cuda::fill_bytes(dy, 0xFF, y_elems * sizeof(uint16_t));
        if (beta != 0.0f) {
            std::vector<uint16_t> init(y_elems, 0xFFFF);
            for (int64_t i = 0; i < m; ++i)
                for (int64_t j = 0; j < n; ++j) init[i * ly + j] = f32_to_bf16(y0[i * ly + j]);
            cuda::copy_to_device(dy, init);
        }
        gemm.run(bf(dx), ld_x, bf(dw), dy, out, ld_y, m, n, k, s.get(), beta);
        s.sync();
        const auto h = cuda::copy_to_host(dy, y_elems);
        for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < ly; ++j) {
                if (j < n)
                    got[i * n + j] = bf16_to_f32(h[i * ly + j]);
                else if (h[i * ly + j] != 0xFFFF)
                    padding_intact = false;
            }
        }
        expect_bf16_output(got, ref, scale, what);
    }
    EXPECT_TRUE(padding_intact) << "wrote outside the [m, n] window of a strided y";
}

TEST(CudaBf16Gemm, F32OutputMatchesCpuAcrossShapes) {
    ONECARD_REQUIRE_GPU();
    uint32_t seed = 100;
    for (int64_t m : {1, 3, 64, 300})
        for (auto [n, k] : {std::pair<int64_t, int64_t>{128, 4096}, {1024, 512}, {4096, 1024}})
            check_gemm(m, n, k, cuda::GemmOut::F32, 0, 0, 0.0f, seed++);
}

TEST(CudaBf16Gemm, Bf16OutputMatchesCpuAcrossShapes) {
    ONECARD_REQUIRE_GPU();
    uint32_t seed = 200;
    for (int64_t m : {1, 3, 64, 300})
        for (auto [n, k] : {std::pair<int64_t, int64_t>{512, 4096}, {4096, 128}, {1024, 1024}})
            check_gemm(m, n, k, cuda::GemmOut::Bf16, 0, 0, 0.0f, seed++);
}

TEST(CudaBf16Gemm, LeadingDimensionsAndBetaAccumulate) {
    ONECARD_REQUIRE_GPU();
    // x is the first k columns of a wider matrix; y a window of a wider one (padding must survive).
    check_gemm(3, 1024, 512, cuda::GemmOut::F32, 512 + 128, 1024 + 64, 0.0f, 301);
    check_gemm(64, 128, 4096, cuda::GemmOut::Bf16, 4096 + 512, 128 + 8, 0.0f, 302);
    // beta = 1 accumulates onto what y holds (the residual-add use).
    check_gemm(1, 4096, 1024, cuda::GemmOut::F32, 0, 0, 1.0f, 303);
    check_gemm(33, 512, 4096, cuda::GemmOut::F32, 4096 + 256, 512 + 32, 1.0f, 304);
    check_gemm(7, 1024, 512, cuda::GemmOut::Bf16, 0, 0, 1.0f, 305);
}

// wo_a's grouped projection: group g multiplies columns [g·k, (g+1)·k) of x by its own W_g and writes
// columns [g·n, (g+1)·n) of y. Oracle: matmul_nt per group with the row strides of the whole matrices.
void check_grouped(int64_t m, int64_t n, int64_t k, int64_t groups, cuda::GemmOut out, uint32_t seed) {
    SCOPED_TRACE("grouped m " + std::to_string(m) + (out == cuda::GemmOut::Bf16 ? " bf16" : " f32"));
    std::mt19937 rng(seed);
    const auto x = test::random_bf16_values(rng, static_cast<size_t>(m * groups * k));
    const auto w = test::random_bf16_values(rng, static_cast<size_t>(groups * n * k), 0.02f);
    std::vector<float> ref(static_cast<size_t>(m * groups * n));
    for (int64_t g = 0; g < groups; ++g)
        cpu::matmul_nt(x.data() + g * k, w.data() + g * n * k, ref.data() + g * n, m, k, n, groups * k, groups * n);

    cuda::DeviceArena arena(size_t{256} << 20, "grouped gemm test");
    void* ws = arena.alloc(kWorkspace, "cublas workspace");
    auto* dx = test::upload(arena, test::to_bf16_bits(x), "x");
    auto* dw = test::upload(arena, test::to_bf16_bits(w), "w");
    cuda::Bf16Gemm gemm(ws, kWorkspace);
    cuda::Stream s;
    if (out == cuda::GemmOut::F32) {
        auto* dy = arena.alloc_n<float>(ref.size(), "y");
        cuda::fill_bytes(dy, 0xFF, ref.size() * sizeof(float));
        gemm.run_grouped_columns(bf(dx), bf(dw), dy, out, m, n, k, groups, s.get());
        s.sync();
        expect_f32_output(cuda::copy_to_host(dy, ref.size()), ref, "grouped f32");
    } else {
        auto* dy = arena.alloc_n<uint16_t>(ref.size(), "y");
        cuda::fill_bytes(dy, 0xFF, ref.size() * sizeof(uint16_t));
        gemm.run_grouped_columns(bf(dx), bf(dw), dy, out, m, n, k, groups, s.get());
        s.sync();
        expect_bf16_output(test::from_bf16_bits(cuda::copy_to_host(dy, ref.size())), ref, ref, "grouped bf16");
    }
}

TEST(CudaBf16Gemm, GroupedColumnsMatchPerGroupCpu) {
    ONECARD_REQUIRE_GPU();
    check_grouped(1, 1024, 4096, 8, cuda::GemmOut::F32, 401);
    check_grouped(33, 1024, 4096, 8, cuda::GemmOut::F32, 402);
    check_grouped(33, 1024, 4096, 8, cuda::GemmOut::Bf16, 403);
    check_grouped(5, 128, 512, 3, cuda::GemmOut::Bf16, 404);
}

TEST(CudaBf16Gemm, ZeroRowsIsANoOp) {
    ONECARD_REQUIRE_GPU();
    cuda::DeviceArena arena(size_t{40} << 20, "gemm m=0");
    void* ws = arena.alloc(kWorkspace, "ws");
    auto* y = arena.alloc_n<float>(16, "y");
    cuda::fill_bytes(y, 0xFF, 16 * sizeof(float));
    cuda::Bf16Gemm gemm(ws, kWorkspace);
    cuda::Stream s;
    gemm.run(nullptr, 0, nullptr, y, cuda::GemmOut::F32, 0, 0, 16, 128, s.get());
    gemm.run_grouped_columns(nullptr, nullptr, y, cuda::GemmOut::F32, 0, 16, 128, 4, s.get());
    s.sync();
    for (float v : cuda::copy_to_host(y, 16)) EXPECT_TRUE(std::isnan(v));
}

}  // namespace
}  // namespace onecard

#else
TEST(CudaBf16Gemm, Unavailable) {
    GTEST_SKIP() << "built without CUDA (ONECARD_CUDA=OFF)";
}
#endif
