#include "backend/cpu/linear.h"

#include "core/error.h"
#include "core/fp_formats.h"

#include <cblas.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <thread>
#include <vector>

namespace onecard::cpu {
namespace {

#define ONECARD_KERNEL_NAME matmul_nt_range_generic
#include "backend/cpu/matmul_kernel.inc"
#undef ONECARD_KERNEL_NAME

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define ONECARD_HAVE_AVX2_KERNEL 1
#pragma GCC push_options
#pragma GCC target("avx2")
#define ONECARD_KERNEL_NAME matmul_nt_range_avx2
#include "backend/cpu/matmul_kernel.inc"
#undef ONECARD_KERNEL_NAME
#pragma GCC pop_options
#endif

using RangeKernel = void (*)(const float*, const float*, float*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                             int64_t);

RangeKernel pick_kernel(bool allow_avx2) {
#ifdef ONECARD_HAVE_AVX2_KERNEL
    if (allow_avx2 && __builtin_cpu_supports("avx2")) return matmul_nt_range_avx2;
#endif
    (void)allow_avx2;
    return matmul_nt_range_generic;
}

void matmul_nt_impl(const float* x, const float* w, float* y, int64_t n, int64_t k, int64_t m, int64_t ldx, int64_t ldy,
                    bool allow_avx2) {
    if (n == 0 || m == 0) return;
    if (ldx == 0) ldx = k;
    if (ldy == 0) ldy = m;
    const RangeKernel kernel = pick_kernel(allow_avx2);
    // Starting threads costs tens of microseconds (far more under gVisor): only for big products.
    // Threads split the output columns; each element is still computed by exactly one fixed sequence.
    const int64_t work = n * m * k;
    const int64_t n_threads =
        work < (int64_t(1) << 24)
            ? 1
            : std::clamp<int64_t>(std::min<int64_t>(std::thread::hardware_concurrency(), work >> 24), 1, 8);
    if (n_threads == 1 || m < 8 * n_threads) {
        kernel(x, w, y, k, ldx, ldy, 0, n, 0, m);
        return;
    }
    std::vector<std::thread> threads;
    const int64_t per = ((m + n_threads - 1) / n_threads + 3) & ~int64_t(3);
    for (int64_t j0 = 0; j0 < m; j0 += per) {
        const int64_t j1 = std::min(m, j0 + per);
        threads.emplace_back([=] { kernel(x, w, y, k, ldx, ldy, 0, n, j0, j1); });
    }
    for (auto& t : threads) t.join();
}

}  // namespace

void matmul_nt(const float* x, const float* w, float* y, int64_t n, int64_t k, int64_t m, int64_t ldx, int64_t ldy) {
    matmul_nt_impl(x, w, y, n, k, m, ldx, ldy, /*allow_avx2=*/true);
}

void matmul_nt_portable(const float* x, const float* w, float* y, int64_t n, int64_t k, int64_t m) {
    matmul_nt_impl(x, w, y, n, k, m, 0, 0, /*allow_avx2=*/false);
}

void matmul_nt_blas(const float* x, const float* w, float* y, int64_t n, int64_t k, int64_t m) {
    if (n == 0 || m == 0) return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(n), static_cast<blasint>(m),
                static_cast<blasint>(k), 1.0f, x, static_cast<blasint>(k), w, static_cast<blasint>(k), 0.0f, y,
                static_cast<blasint>(m));
}

void matmul_nn(const float* a, const float* b, float* c, int64_t n, int64_t k, int64_t m) {
    if (n == 0 || m == 0) return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(n), static_cast<blasint>(m),
                static_cast<blasint>(k), 1.0f, a, static_cast<blasint>(k), b, static_cast<blasint>(m), 0.0f, c,
                static_cast<blasint>(m));
}

std::vector<float> dequant_fp8_block(const uint8_t* w, const uint8_t* scale, int64_t n_out, int64_t n_in,
                                     int64_t block) {
    // Decoding through a 256-entry table keeps this linear in the weight size.
    std::array<float, 256> lut{};
    for (int i = 0; i < 256; ++i) lut[i] = e4m3fn_to_f32(static_cast<uint8_t>(i));
    const int64_t n_scale_cols = (n_in + block - 1) / block;
    std::vector<float> out(static_cast<size_t>(n_out * n_in));
    for (int64_t r = 0; r < n_out; ++r) {
        const uint8_t* srow = scale + (r / block) * n_scale_cols;
        const uint8_t* wrow = w + r * n_in;
        float* orow = out.data() + r * n_in;
        for (int64_t cb = 0; cb < n_in; cb += block) {
            const float s = ue8m0_to_f32(srow[cb / block]);
            const int64_t ce = std::min(n_in, cb + block);
            for (int64_t c = cb; c < ce; ++c) orow[c] = lut[wrow[c]] * s;
        }
    }
    return out;
}

std::vector<float> dequant_mxfp4(const uint8_t* packed, const uint8_t* scale, int64_t n_out, int64_t n_in) {
    std::array<float, 16> lut{};
    for (int i = 0; i < 16; ++i) lut[i] = e2m1_to_f32(static_cast<uint8_t>(i));
    const int64_t n_scale_cols = n_in / 32;
    std::vector<float> out(static_cast<size_t>(n_out * n_in));
    for (int64_t r = 0; r < n_out; ++r) {
        const uint8_t* prow = packed + r * (n_in / 2);
        float* orow = out.data() + r * n_in;
        for (int64_t cb = 0; cb < n_in; cb += 32) {
            const float s = ue8m0_to_f32(scale[r * n_scale_cols + cb / 32]);
            for (int64_t c = cb; c < cb + 32; c += 2) {
                const uint8_t byte = prow[c / 2];
                orow[c] = lut[byte & 0xF] * s;
                orow[c + 1] = lut[byte >> 4] * s;
            }
        }
    }
    return out;
}

std::vector<float> to_f32(const TensorView& t) {
    const int64_t n = t.numel();
    std::vector<float> out(static_cast<size_t>(n));
    switch (t.dtype) {
        // Bytes copied, not read through a float pointer: a mapped tensor can start at an odd address
        // (core/tensor.h).
        case DType::F32:
            std::memcpy(out.data(), t.data, static_cast<size_t>(n) * sizeof(float));
            break;
        case DType::BF16:
        case DType::F16:
            for (int64_t i = 0; i < n; ++i) {
                const uint16_t h = tensor_element<uint16_t>(t, i);
                out[i] = t.dtype == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
            }
            break;
        default:
            fail("tensor {}: dtype {} is not a plain float type", t.name, dtype_name(t.dtype));
    }
    return out;
}

std::vector<float> dequant_linear(const TensorView& weight, const TensorView& scale) {
    ONECARD_CHECK(weight.shape.size() == 2, "tensor {}: a linear weight must be 2-D, got {}", weight.name,
                  shape_str(weight.shape));
    const int64_t n_out = weight.shape[0];
    if (weight.dtype == DType::F8_E4M3) {
        const int64_t n_in = weight.shape[1];
        ONECARD_CHECK(scale.dtype == DType::F8_E8M0 && scale.shape.size() == 2 &&
                          scale.shape[0] == (n_out + 127) / 128 && scale.shape[1] == (n_in + 127) / 128,
                      "tensor {}: FP8 block scale must be F8_E8M0 [{}, {}], got {} {}", scale.name, (n_out + 127) / 128,
                      (n_in + 127) / 128, dtype_name(scale.dtype), shape_str(scale.shape));
        return dequant_fp8_block(weight.as<uint8_t>(), scale.as<uint8_t>(), n_out, n_in, 128);
    }
    if (weight.dtype == DType::I8 || weight.dtype == DType::U8) {
        const int64_t n_in = weight.shape[1] * 2;
        ONECARD_CHECK(n_in % 32 == 0 && scale.dtype == DType::F8_E8M0 && scale.shape.size() == 2 &&
                          scale.shape[0] == n_out && scale.shape[1] == n_in / 32,
                      "tensor {}: MXFP4 scale must be F8_E8M0 [{}, {}], got {} {}", scale.name, n_out, n_in / 32,
                      dtype_name(scale.dtype), shape_str(scale.shape));
        return dequant_mxfp4(weight.as<uint8_t>(), scale.as<uint8_t>(), n_out, n_in);
    }
    return to_f32(weight);
}

}  // namespace onecard::cpu
