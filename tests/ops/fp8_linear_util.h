// Random FP8 block-scaled linears and their CPU reference products, shared by the FP8 GEMV and
// GEMM parity tests.
#pragma once

#include "gpu_test_util.h"

#ifdef ONECARD_HAVE_CUDA

#include "backend/cpu/linear.h"
#include "backend/cpu/quant_sim.h"

namespace onecard::test {

struct Fp8LinearCase {
    int64_t m = 0, n = 0, k = 0;
    std::vector<float> x;          // [m, k] bf16 values
    std::vector<uint8_t> w;        // [n, k] E4M3 bytes (no NaN codes)
    std::vector<uint8_t> w_scale;  // [ceil(n/128), k/128] UE8M0 bytes
    std::vector<float> ref;        // [m, n] = fp8_quant_dequant(x) · dequant(w)ᵀ, fp32
};

inline Fp8LinearCase make_fp8_linear_case(int64_t m, int64_t n, int64_t k, uint32_t seed) {
    std::mt19937 rng(seed);
    Fp8LinearCase c;
    c.m = m;
    c.n = n;
    c.k = k;
    c.x = random_bf16_values(rng, static_cast<size_t>(m * k));
    std::uniform_int_distribution<int> byte(0, 255);
    c.w.resize(static_cast<size_t>(n * k));
    for (auto& b : c.w) {
        do {
            b = static_cast<uint8_t>(byte(rng));
        } while ((b & 0x7F) == 0x7F || b == 0 || b == 0x80);  // no NaN, no zeros
    }
    // Scales spread over 2^-12 .. 2^4 so a wrong scale layout cannot pass by accident.
    std::uniform_int_distribution<int> sc(115, 131);
    c.w_scale.resize(static_cast<size_t>((n + 127) / 128 * (k / 128)));
    for (auto& b : c.w_scale) b = static_cast<uint8_t>(sc(rng));
    std::vector<float> xd = c.x;
    for (int64_t r = 0; r < m; ++r) cpu::fp8_quant_dequant(xd.data() + r * k, k, 128);
    const std::vector<float> wd = cpu::dequant_fp8_block(c.w.data(), c.w_scale.data(), n, k, 128);
    c.ref.resize(static_cast<size_t>(m * n));
    cpu::matmul_nt(xd.data(), wd.data(), c.ref.data(), m, k, n);
    return c;
}

}  // namespace onecard::test

#endif  // ONECARD_HAVE_CUDA
