// Host experts (src/backend/host): every ISA's MXFP4 row-dot against the scalar definition and a
// double-precision reference; whole jobs against run_host_moe_reference (bit equality) and against a
// composition of the CPU backend's reference ops (tolerance); the pool's thread-count independence,
// handshake over many jobs, integrity check and input validation.
#include "backend/host/host_experts.h"
#include "backend/cpu/linear.h"
#include "backend/cpu/moe.h"
#include "backend/cpu/quant_sim.h"
#include "backend/host/mxfp4_dot.h"
#include "core/error.h"
#include "core/fp_formats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace onecard::host {
namespace {

using detail::DotKernel;

// ---- data --------------------------------------------------------------------------------------

struct MxMatrix {
    int64_t rows = 0, cols = 0;
    std::vector<uint8_t> packed;  // [rows, cols/2]
    std::vector<uint8_t> scale;   // [rows, cols/32]
    MxMatrixView view() const { return {packed.data(), scale.data()}; }
};

// Random codes over all 16 nibbles (negative zero included); scales uniform in [s_lo, s_hi].
MxMatrix random_matrix(int64_t rows, int64_t cols, std::mt19937_64& rng, int s_lo, int s_hi) {
    MxMatrix m{rows, cols, std::vector<uint8_t>(static_cast<size_t>(rows * cols / 2)),
               std::vector<uint8_t>(static_cast<size_t>(rows * cols / 32))};
    std::uniform_int_distribution<int> byte(0, 255), sc(s_lo, s_hi);
    for (uint8_t& b : m.packed) b = static_cast<uint8_t>(byte(rng));
    for (uint8_t& s : m.scale) s = static_cast<uint8_t>(sc(rng));
    return m;
}

// A random e4m3 value times 2^exp (exactly representable in bf16, like every FP8-dequantised vector).
std::vector<float> random_fp8_vector(int64_t n, std::mt19937_64& rng, int exp) {
    std::uniform_int_distribution<int> code(0, 255);
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) {
        int c = code(rng);
        while ((c & 0x7F) == 0x7F) c = code(rng);  // not NaN
        v = std::ldexp(e4m3fn_to_f32(static_cast<uint8_t>(c)), exp);
    }
    return x;
}

// Σ_k W[r, k] x[k] in double from the dequantised fp32 weights (exact for scales that keep W finite).
std::vector<double> dot_double(const MxMatrix& m, const std::vector<float>& x) {
    const std::vector<float> w = cpu::dequant_mxfp4(m.packed.data(), m.scale.data(), m.rows, m.cols);
    std::vector<double> out(static_cast<size_t>(m.rows), 0.0);
    for (int64_t r = 0; r < m.rows; ++r)
        for (int64_t k = 0; k < m.cols; ++k) out[r] += static_cast<double>(w[r * m.cols + k]) * x[k];
    return out;
}
// The same, with the weights decoded in double (for scales whose fp32 weights would overflow).
std::vector<double> dot_double_exact(const MxMatrix& m, const std::vector<float>& x) {
    std::vector<double> out(static_cast<size_t>(m.rows), 0.0);
    for (int64_t r = 0; r < m.rows; ++r)
        for (int64_t k = 0; k < m.cols; ++k) {
            const uint8_t byte = m.packed[(r * m.cols + k) / 2];
            const double w = e2m1_to_f32(k % 2 ? byte >> 4 : byte & 0xF) *
                             std::ldexp(1.0, m.scale[r * (m.cols / 32) + k / 32] - 127);
            out[r] += w * x[k];
        }
    return out;
}
std::vector<double> abs_dot(const MxMatrix& m, const std::vector<float>& x) {  // Σ |W x|: error scale
    MxMatrix a = m;
    for (uint8_t& b : a.packed) b &= 0x77;  // clear both sign bits
    std::vector<float> ax(x);
    for (float& v : ax) v = std::fabs(v);
    return dot_double_exact(a, ax);
}

std::vector<float> run_kernel(const DotKernel& k, const MxMatrix& m, const std::vector<float>& x) {
    std::vector<uint8_t> laid(detail::layout_bytes(k.layout, m.cols));
    detail::to_layout(k.layout, x.data(), m.cols, laid.data());
    std::vector<float> out(static_cast<size_t>(m.rows), -1.0f);
    k.fn(m.packed.data(), m.scale.data(), m.cols, m.rows, laid.data(), out.data());
    return out;
}

uint32_t bits(float f) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
}

class RowDot : public ::testing::TestWithParam<int> {
protected:
    const DotKernel& kernel() const { return detail::dot_kernels()[static_cast<size_t>(GetParam())]; }
    void SetUp() override {
        if (!detail::kernel_supported(kernel()))
            GTEST_SKIP() << "this CPU lacks " << kernel().name << " (needs " << isa_name(kernel().isa)
                         << (kernel().needs_bf16 ? " + avx512_bf16)" : ")");
    }
};

TEST_P(RowDot, MatchesScalarBitsAndDoubleReference) {
    std::mt19937_64 rng(1234 + GetParam());
    const DotKernel& scalar = detail::dot_kernels()[0];
    // Rows not a multiple of the kernels' 4 rows per pass; k from one group to the real hidden size.
    const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 32},  {3, 96},   {5, 160}, {7, 4096},
                                                             {9, 224}, {2, 2048}, {13, 64}, {4, 128}};
    for (auto [rows, cols] : shapes) {
        SCOPED_TRACE(::testing::Message() << kernel().name << " rows " << rows << " k " << cols);
        const MxMatrix m = random_matrix(rows, cols, rng, 110, 140);
        const std::vector<float> x = random_fp8_vector(cols, rng, -6);
        const std::vector<float> got = run_kernel(kernel(), m, x), want = run_kernel(scalar, m, x);
        const std::vector<double> ref = dot_double(m, x), mag = abs_dot(m, x);
        for (int64_t r = 0; r < rows; ++r) {
            EXPECT_EQ(bits(got[r]), bits(want[r])) << "row " << r << ": " << got[r] << " vs scalar " << want[r];
            // fp32 accumulation over k terms: well inside k·2^-24·Σ|terms|.
            EXPECT_NEAR(got[r], ref[r], 1e-6 * static_cast<double>(cols) * mag[r] + 1e-30) << "row " << r;
        }
    }
}

TEST_P(RowDot, ExtremeScales) {
    std::mt19937_64 rng(99 + GetParam());
    const DotKernel& scalar = detail::dot_kernels()[0];
    // Largest finite scale (2^127, weights up to 6·2^127 would overflow fp32) with tiny x, and the
    // smallest (2^-127, subnormal) with huge x: both stay finite and exact up to rounding.
    for (auto [scale, exp] : {std::pair{254, -60}, std::pair{0, 50}}) {
        SCOPED_TRACE(::testing::Message() << kernel().name << " scale " << scale);
        MxMatrix m = random_matrix(6, 320, rng, scale, scale);
        const std::vector<float> x = random_fp8_vector(320, rng, exp);
        const std::vector<float> got = run_kernel(kernel(), m, x), want = run_kernel(scalar, m, x);
        const std::vector<double> ref = dot_double_exact(m, x), mag = abs_dot(m, x);
        for (int64_t r = 0; r < m.rows; ++r) {
            EXPECT_EQ(bits(got[r]), bits(want[r])) << "row " << r;
            EXPECT_TRUE(std::isfinite(got[r])) << "row " << r;
            EXPECT_NEAR(got[r], ref[r], 1e-6 * 320 * mag[r]) << "row " << r;
        }
    }
    // Every scale code 0..254 mixed in a row: results may overflow to inf, but identically.
    MxMatrix m = random_matrix(5, 255 * 32, rng, 0, 0);
    for (int64_t r = 0; r < m.rows; ++r)
        for (int g = 0; g < 255; ++g) m.scale[r * 255 + g] = static_cast<uint8_t>((g + 37 * r) % 255);
    const std::vector<float> x = random_fp8_vector(m.cols, rng, -100);
    const std::vector<float> got = run_kernel(kernel(), m, x), want = run_kernel(scalar, m, x);
    for (int64_t r = 0; r < m.rows; ++r) EXPECT_EQ(bits(got[r]), bits(want[r])) << "mixed scales row " << r;
}

TEST_P(RowDot, ArbitraryFp32VectorMatchesScalarOnFp32Kernels) {
    if (kernel().layout == detail::VecLayout::Bf16Natural)
        GTEST_SKIP() << "the bf16 kernel reads x in bf16: equal to the others only for bf16-exact x (tested above)";
    std::mt19937_64 rng(7 + GetParam());
    std::normal_distribution<float> nd(0.0f, 3.0f);
    const MxMatrix m = random_matrix(11, 512, rng, 120, 130);
    std::vector<float> x(512);
    for (float& v : x) v = nd(rng);  // full 24-bit significands: products are not exact
    const std::vector<float> got = run_kernel(kernel(), m, x), want = run_kernel(detail::dot_kernels()[0], m, x);
    for (int64_t r = 0; r < m.rows; ++r) EXPECT_EQ(bits(got[r]), bits(want[r])) << "row " << r;
}

// The multi-vector row-dot: each vector's bits equal the scalar single-vector kernel's, for every
// vector count (each picks its own rows per pass) and row counts that leave remainders.
TEST_P(RowDot, MultiVectorMatchesSingleVectorBits) {
    std::mt19937_64 rng(555 + GetParam());
    const DotKernel& scalar = detail::dot_kernels()[0];
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{7, 256}, {16, 4096}, {5, 96}, {33, 2048}}) {
        const MxMatrix m = random_matrix(rows, cols, rng, 112, 136);
        for (int nv = 1; nv <= detail::kMaxVecs; ++nv) {
            SCOPED_TRACE(::testing::Message()
                         << kernel().name << " rows " << rows << " k " << cols << " vectors " << nv);
            std::vector<std::vector<float>> xs;
            std::vector<std::vector<uint8_t>> laid;
            std::vector<std::vector<float>> outs(static_cast<size_t>(nv),
                                                 std::vector<float>(static_cast<size_t>(rows), -1.0f));
            std::vector<const void*> xp;
            std::vector<float*> op;
            for (int v = 0; v < nv; ++v) {
                xs.push_back(random_fp8_vector(cols, rng, -4 - v));
                laid.emplace_back(detail::layout_bytes(kernel().layout, cols));
                detail::to_layout(kernel().layout, xs.back().data(), cols, laid.back().data());
            }
            for (int v = 0; v < nv; ++v) {
                xp.push_back(laid[static_cast<size_t>(v)].data());
                op.push_back(outs[static_cast<size_t>(v)].data());
            }
            kernel().multi(m.packed.data(), m.scale.data(), cols, rows, xp.data(), nv, op.data());
            for (int v = 0; v < nv; ++v) {
                const std::vector<float> want = run_kernel(scalar, m, xs[static_cast<size_t>(v)]);
                for (int64_t r = 0; r < rows; ++r)
                    EXPECT_EQ(bits(outs[static_cast<size_t>(v)][r]), bits(want[r])) << "vector " << v << " row " << r;
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Kernels, RowDot, ::testing::Range(0, static_cast<int>(detail::dot_kernels().size())),
                         [](const ::testing::TestParamInfo<int>& i) {
                             return std::string(detail::dot_kernels()[static_cast<size_t>(i.param)].name);
                         });

// ---- whole jobs ----------------------------------------------------------------------------------

struct Expert {
    MxMatrix w1, w3, w2;
    MxExpertView view() const { return {w1.view(), w3.view(), w2.view()}; }
};
Expert random_expert(int64_t D, int64_t I, std::mt19937_64& rng, int s_lo = 121, int s_hi = 124) {
    return {random_matrix(I, D, rng, s_lo, s_hi), random_matrix(I, D, rng, s_lo, s_hi),
            random_matrix(D, I, rng, s_lo, s_hi)};
}

struct Acts {
    int64_t n_tokens = 0, dim = 0;
    std::vector<uint8_t> xq;  // [n_tokens, dim]
    std::vector<float> xs;    // [n_tokens, dim/128]
};
Acts random_acts(int64_t n_tokens, int64_t D, std::mt19937_64& rng) {
    Acts a{n_tokens, D, std::vector<uint8_t>(static_cast<size_t>(n_tokens * D)),
           std::vector<float>(static_cast<size_t>(n_tokens * D / 128))};
    std::uniform_int_distribution<int> code(0, 255), e(-9, -6);
    for (uint8_t& c : a.xq) {
        int v = code(rng);
        while ((v & 0x7F) == 0x7F) v = code(rng);
        c = static_cast<uint8_t>(v);
    }
    for (float& s : a.xs) s = std::ldexp(1.0f, e(rng));
    return a;
}

// A job over `experts` with picks (token, expert index, weight); outputs are owned here.
struct Job {
    Acts acts;
    std::vector<HostExpertPair> pairs;
    std::vector<std::vector<uint16_t>> outs;
    HostMoeJob job;
    Job(Acts a, const std::vector<Expert>& experts, const std::vector<std::tuple<int, int, float>>& picks,
        int64_t inter, float limit)
        : acts(std::move(a)) {
        outs.assign(picks.size(), std::vector<uint16_t>(static_cast<size_t>(acts.dim), 0xFFFF));
        for (size_t i = 0; i < picks.size(); ++i) {
            const auto [t, e, w] = picks[i];
            pairs.push_back({t, w, experts[static_cast<size_t>(e)].view(), outs[i].data()});
        }
        job.dim = acts.dim;
        job.inter = inter;
        job.swiglu_limit = limit;
        job.xq = acts.xq.data();
        job.xs = acts.xs.data();
        job.n_tokens = acts.n_tokens;
        job.pairs = pairs.data();
        job.n_pairs = static_cast<int64_t>(pairs.size());
    }
    void clear() {
        for (auto& o : outs) std::fill(o.begin(), o.end(), 0xFFFF);
    }
};

// Tokens with several pairs, pairs sharing an expert, an unused token (3).
std::vector<std::tuple<int, int, float>> standard_picks() {
    return {{0, 0, 0.7f}, {0, 1, 0.3f}, {1, 0, 1.0f}, {2, 1, 0.25f}, {2, 2, 0.5f}, {2, 0, 0.125f}, {4, 2, 0.9f}};
}

struct Composition {
    std::vector<std::vector<uint16_t>> y;  // per pair [dim] bf16 bits
    int64_t gate_clamped = 0, up_clamped_hi = 0, up_clamped_lo = 0;
};
// The same math from the CPU backend's reference ops (its own decode, matmul and quantiser).
Composition compose_with_cpu_ops(const Job& j, float limit) {
    Composition c;
    const int64_t D = j.job.dim, I = j.job.inter;
    for (const HostExpertPair& p : j.pairs) {
        std::vector<float> x(static_cast<size_t>(D));
        for (int64_t k = 0; k < D; ++k)
            x[k] = e4m3fn_to_f32(j.acts.xq[p.token * D + k]) * j.acts.xs[p.token * (D / 128) + k / 128];
        const auto w1 = cpu::dequant_mxfp4(p.expert.w1.packed, p.expert.w1.scale, I, D);
        const auto w3 = cpu::dequant_mxfp4(p.expert.w3.packed, p.expert.w3.scale, I, D);
        const auto w2 = cpu::dequant_mxfp4(p.expert.w2.packed, p.expert.w2.scale, D, I);
        std::vector<float> g(I), u(I), h(I), y(D);
        cpu::matmul_nt(x.data(), w1.data(), g.data(), 1, D, I);
        cpu::matmul_nt(x.data(), w3.data(), u.data(), 1, D, I);
        for (int64_t r = 0; r < I; ++r) {
            g[r] = round_bf16(g[r]);
            u[r] = round_bf16(u[r]);
            c.gate_clamped += g[r] > limit;
            c.up_clamped_hi += u[r] > limit;
            c.up_clamped_lo += u[r] < -limit;
        }
        cpu::swiglu_clamped(g.data(), u.data(), I, limit, h.data());
        for (float& v : h) v = round_bf16(v * p.weight);
        cpu::fp8_quant_dequant(h.data(), I, 128);
        cpu::matmul_nt(h.data(), w2.data(), y.data(), 1, I, D);
        std::vector<uint16_t> yb(static_cast<size_t>(D));
        for (int64_t d = 0; d < D; ++d) yb[d] = f32_to_bf16(y[d]);
        c.y.push_back(std::move(yb));
    }
    return c;
}

void expect_outputs_equal(const Job& a, const std::vector<std::vector<uint16_t>>& want, const std::string& what) {
    for (size_t i = 0; i < want.size(); ++i) {
        int64_t diff = 0, first = -1;
        for (size_t d = 0; d < want[i].size(); ++d)
            if (a.outs[i][d] != want[i][d] && diff++ == 0) first = static_cast<int64_t>(d);
        EXPECT_EQ(diff, 0) << what << ": pair " << i << " has " << diff << " elements differing, first at " << first;
    }
}

std::vector<Isa> all_isas() {
    return {Isa::Scalar, Isa::Avx2, Isa::Avx512};
}

TEST(HostMoe, EveryIsaMatchesReferenceBits) {
    std::mt19937_64 rng(42);
    const int64_t D = 384, I = 256;
    const float limit = 7.0f;
    std::vector<Expert> experts;
    for (int e = 0; e < 3; ++e) experts.push_back(random_expert(D, I, rng));
    Job j(random_acts(5, D, rng), experts, standard_picks(), I, limit);
    run_host_moe_reference(j.job);
    const auto want = j.outs;
    int ran = 0;
    for (Isa isa : all_isas()) {
        if (!isa_supported(isa)) continue;
        for (bool bf16 : {false, true}) {  // on Avx512: the fp32 and the avx512_bf16 kernel
            HostExpertPool pool(3, isa, false, 100, bf16);
            j.clear();
            pool.run(j.job);
            expect_outputs_equal(j, want, std::string(isa_name(isa)) + "/" + pool.kernel_name());
            pool.check_integrity();
            ++ran;
        }
    }
    EXPECT_GE(ran, 2);
    if (!isa_supported(Isa::Avx512)) GTEST_SKIP() << "this CPU lacks AVX-512: only " << ran / 2 << " ISAs checked";
}

TEST(HostMoe, ReferenceMatchesCpuOpsComposition) {
    std::mt19937_64 rng(5);
    const int64_t D = 384, I = 256;
    const float limit = 7.0f;
    std::vector<Expert> experts;
    for (int e = 0; e < 3; ++e) experts.push_back(random_expert(D, I, rng));
    Job j(random_acts(5, D, rng), experts, standard_picks(), I, limit);
    run_host_moe_reference(j.job);
    const Composition c = compose_with_cpu_ops(j, limit);
    // The clamp must be exercised on both sides, or this test would not check it.
    EXPECT_GT(c.gate_clamped, 0);
    EXPECT_GT(c.up_clamped_hi, 0);
    EXPECT_GT(c.up_clamped_lo, 0);
    // Only the fp32 summation order differs (matmul_nt vs the 16-lane group order), so gate/up rarely
    // land on another bf16 value, and an FP8 code of h moves by one step only then. Bound: nearly all
    // outputs identical, every output within 1/64 of the row's largest magnitude.
    int64_t equal = 0, total = 0;
    for (size_t i = 0; i < c.y.size(); ++i) {
        float row_max = 0.0f;
        for (uint16_t b : c.y[i]) row_max = std::max(row_max, std::fabs(bf16_to_f32(b)));
        for (int64_t d = 0; d < D; ++d) {
            const float got = bf16_to_f32(j.outs[i][d]), want = bf16_to_f32(c.y[i][d]);
            equal += j.outs[i][d] == c.y[i][d];
            ++total;
            EXPECT_NEAR(got, want, row_max / 64.0f) << "pair " << i << " d " << d;
        }
    }
    EXPECT_GE(static_cast<double>(equal), 0.97 * static_cast<double>(total)) << equal << " of " << total << " equal";
}

TEST(HostMoe, NoClampWhenLimitIsZero) {
    std::mt19937_64 rng(6);
    const int64_t D = 256, I = 128;
    std::vector<Expert> experts = {random_expert(D, I, rng)};
    Job j(random_acts(2, D, rng), experts, {{0, 0, 1.0f}, {1, 0, 0.5f}}, I, 0.0f);
    run_host_moe_reference(j.job);
    const Composition c = compose_with_cpu_ops(j, 0.0f);
    int64_t equal = 0;
    for (size_t i = 0; i < c.y.size(); ++i)
        for (int64_t d = 0; d < D; ++d) equal += j.outs[i][d] == c.y[i][d];
    EXPECT_GE(equal, 2 * D * 97 / 100);
}

TEST(HostMoe, RealShapeMatchesReference) {
    std::mt19937_64 rng(11);
    const int64_t D = 4096, I = 2048;
    std::vector<Expert> experts = {random_expert(D, I, rng, 118, 121)};
    Job j(random_acts(2, D, rng), experts, {{0, 0, 0.6f}, {1, 0, 0.4f}}, I, 10.0f);
    run_host_moe_reference(j.job);
    const auto want = j.outs;
    HostExpertPool pool(2, best_isa(), true);
    j.clear();
    pool.run(j.job);
    expect_outputs_equal(j, want, std::string("real shape ") + pool.kernel_name());
    pool.check_integrity();
}

TEST(HostExpertPool, ThreadCountDoesNotChangeBits) {
    std::mt19937_64 rng(77);
    const int64_t D = 512, I = 384;
    std::vector<Expert> experts;
    for (int e = 0; e < 4; ++e) experts.push_back(random_expert(D, I, rng));
    std::vector<std::tuple<int, int, float>> picks;
    for (int t = 0; t < 4; ++t)
        for (int k = 0; k < 3; ++k) picks.emplace_back(t, (t + k) % 4, 0.2f + 0.1f * k);
    Job j(random_acts(4, D, rng), experts, picks, I, 6.0f);
    HostExpertPool one(1, best_isa(), false);
    one.run(j.job);
    const auto want = j.outs;
    for (int n : {1, 2, 3, 7}) {
        HostExpertPool pool(n, best_isa(), n <= 2, 200);
        for (int rep = 0; rep < 3; ++rep) {
            j.clear();
            pool.run(j.job);
            expect_outputs_equal(j, want, std::to_string(n) + " threads, rep " + std::to_string(rep));
        }
        pool.check_integrity();
        EXPECT_EQ(pool.jobs_run(), 3u);
    }
}

// Many pairs sharing few experts (a batch-64 decode step: 64 tokens x 6 picks over 8 experts, so each
// expert has ~48 pairs, split into groups of at most kMaxVecs): bit-equal to the reference, and to the
// same pairs run one job each (no grouping), for every ISA kernel and several thread counts.
TEST(HostExpertPool, GroupedPairsMatchReferenceAndPerPairRuns) {
    std::mt19937_64 rng(64);
    const int64_t D = 256, I = 384;
    std::vector<Expert> experts;
    for (int e = 0; e < 8; ++e) experts.push_back(random_expert(D, I, rng));
    std::vector<std::tuple<int, int, float>> picks;
    std::uniform_real_distribution<float> weight(0.05f, 1.0f);
    for (int t = 0; t < 64; ++t)
        for (int k = 0; k < 6; ++k) picks.emplace_back(t, (t * 3 + k * (1 + t % 2)) % 8, weight(rng));
    // One expert picked by a single pair only, and one token repeating an expert (two pairs, same row).
    experts.push_back(random_expert(D, I, rng));
    picks.emplace_back(5, 8, 0.5f);
    picks.emplace_back(7, std::get<1>(picks[7 * 6]), 0.3f);
    Job j(random_acts(64, D, rng), experts, picks, I, 6.0f);
    run_host_moe_reference(j.job);
    const auto want = j.outs;
    int kernels = 0;
    for (Isa isa : all_isas()) {
        if (!isa_supported(isa)) continue;
        for (bool bf16 : {false, true}) {
            for (int n : {1, 3}) {
                HostExpertPool pool(n, isa, false, 200, bf16);
                const std::string what = std::string(pool.kernel_name()) + ", " + std::to_string(n) + " threads";
                j.clear();
                pool.run(j.job);
                expect_outputs_equal(j, want, what + ", grouped");
                pool.check_integrity();
                if (n != 3) continue;
                j.clear();
                for (size_t i = 0; i < j.pairs.size(); ++i) {  // one pair per job: nothing to group
                    HostMoeJob single = j.job;
                    single.pairs = &j.pairs[i];
                    single.n_pairs = 1;
                    pool.run(single);
                }
                expect_outputs_equal(j, want, what + ", per pair");
                pool.check_integrity();
            }
            ++kernels;
            if (isa != Isa::Avx512) break;  // bf16 only changes the kernel on Avx512
        }
    }
    EXPECT_GE(kernels, 2);
}

TEST(HostExpertPool, ManyConsecutiveJobs) {
    std::mt19937_64 rng(2024);
    const int64_t D = 256, I = 256;
    std::vector<Expert> experts;
    for (int e = 0; e < 5; ++e) experts.push_back(random_expert(D, I, rng));
    // A spinning pool (the decode case) and one whose workers sleep between jobs (spin 0).
    HostExpertPool spinning(3, best_isa(), false, 5000), sleeping(3, best_isa(), false, 0);
    std::uniform_int_distribution<int> n_tok(1, 4), n_pick(0, 3), expert(0, 4);
    std::uniform_real_distribution<float> weight(0.05f, 1.0f);
    uint64_t non_empty = 0;  // empty jobs return before the handshake
    for (int it = 0; it < 200; ++it) {
        const int tokens = n_tok(rng);
        std::vector<std::tuple<int, int, float>> picks;
        for (int t = 0; t < tokens; ++t)
            for (int k = n_pick(rng); k > 0; --k) picks.emplace_back(t, expert(rng), weight(rng));
        Job j(random_acts(tokens, D, rng), experts, picks, I, 8.0f);
        non_empty += !picks.empty();
        run_host_moe_reference(j.job);
        const auto want = j.outs;
        HostExpertPool& pool = it % 2 ? spinning : sleeping;
        j.clear();
        pool.run(j.job);
        expect_outputs_equal(j, want, "job " + std::to_string(it));
        if (::testing::Test::HasFailure()) break;
        if (it % 50 == 0) pool.check_integrity();
    }
    spinning.check_integrity();
    sleeping.check_integrity();
    EXPECT_EQ(spinning.jobs_run() + sleeping.jobs_run(), non_empty);
}

void expect_error(const std::function<void()>& fn, const std::string& needle) {
    try {
        fn();
        ADD_FAILURE() << "no onecard::Error; expected one mentioning '" << needle << "'";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
}

TEST(HostExpertPool, BadJobsThrowClearErrors) {
    std::mt19937_64 rng(3);
    const int64_t D = 256, I = 128;
    std::vector<Expert> experts = {random_expert(D, I, rng)};
    HostExpertPool pool(2, best_isa(), false);
    auto bad = [&](const std::function<void(Job&)>& spoil, const std::string& needle) {
        Job j(random_acts(2, D, rng), experts, {{0, 0, 1.0f}, {1, 0, 1.0f}}, I, 5.0f);
        spoil(j);
        expect_error([&] { pool.run(j.job); }, needle);
        expect_error([&] { run_host_moe_reference(j.job); }, needle);
    };
    bad([](Job& j) { j.job.dim = 200; }, "dim 200 is not a positive multiple of 128");
    bad([](Job& j) { j.job.inter = 100; }, "inter 100 is not a positive multiple of 128");
    bad([](Job& j) { j.job.xq = nullptr; }, "activations missing");
    bad([](Job& j) { j.job.xs = nullptr; }, "activations missing");
    bad([](Job& j) { j.job.pairs = nullptr; }, "pairs is null");
    bad([](Job& j) { j.pairs[1].out = nullptr; }, "pair 1 output is null");
    bad([](Job& j) { j.pairs[0].expert.w2.scale = nullptr; }, "pair 0 expert w2 has a null");
    bad([](Job& j) { j.pairs[1].token = 2; }, "pair 1 token 2 outside [0, 2)");
    bad([](Job& j) { j.pairs[0].weight = NAN; }, "pair 0 weight is not finite");
    pool.check_integrity();  // a rejected job leaves the pool usable
    Job ok(random_acts(1, D, rng), experts, {{0, 0, 1.0f}}, I, 5.0f);
    pool.run(ok.job);
    pool.check_integrity();
    expect_error([] { HostExpertPool p(0, Isa::Scalar, false); }, "n_threads 0");
    for (Isa isa : all_isas())
        if (!isa_supported(isa)) expect_error([isa] { HostExpertPool p(1, isa, false); }, "not supported");
}

TEST(HostExpertPool, EmptyJobIsANoOp) {
    HostExpertPool pool(2, best_isa(), false);
    HostMoeJob job;
    job.dim = 128;
    job.inter = 128;
    pool.run(job);
    pool.check_integrity();
}

TEST(HostIsa, NamesAndDetection) {
    EXPECT_STREQ(isa_name(Isa::Scalar), "scalar");
    EXPECT_STREQ(isa_name(Isa::Avx2), "avx2");
    EXPECT_STREQ(isa_name(Isa::Avx512), "avx512");
    EXPECT_TRUE(isa_supported(Isa::Scalar));
    EXPECT_TRUE(isa_supported(best_isa()));
    if (best_isa() == Isa::Avx512) {
        EXPECT_TRUE(isa_supported(Isa::Avx2));
    }
}

TEST(HostBandwidth, MeasuresSomething) {
    const double bw = measure_host_read_bandwidth(2, size_t{16} << 20, 3);
    EXPECT_GT(bw, 1e8);  // > 0.1 GB/s on anything that runs this
    EXPECT_LT(bw, 1e13);
    expect_error([] { measure_host_read_bandwidth(0, 1 << 20, 1); }, "bad arguments");
}

}  // namespace
}  // namespace onecard::host
