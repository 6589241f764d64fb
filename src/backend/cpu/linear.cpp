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

// Four fp32 lanes (one SSE register on baseline x86-64; GCC/Clang vector extension).
typedef float V4 __attribute__((vector_size(16)));

inline V4 load4(const float* p) {
    V4 v;
    std::memcpy(&v, p, sizeof(v));
    return v;
}

// The fixed tail of every dot product: lanes reduced pairwise, then the k % 4 leftovers in order.
inline float finish_dot(V4 acc, const float* x, const float* w, int64_t k4, int64_t k) {
    float s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    for (int64_t t = k4; t < k; ++t) s += x[t] * w[t];
    return s;
}

// y[i, j] for rows [i0, i1) and columns [j0, j1). Tiles of 2 rows x 4 columns share loads; edge
// rows/columns use the 1 x 1 path. Both perform, per element, lane l += x[4q+l] * w[4q+l] for
// q = 0, 1, ... (multiply then add, no fused multiply-add on the baseline ISA) and finish_dot.
void matmul_nt_range(const float* x, const float* w, float* y, int64_t k, int64_t ldx, int64_t ldy, int64_t i0,
                     int64_t i1, int64_t j0, int64_t j1) {
    const int64_t k4 = k & ~int64_t(3);
    constexpr int64_t kRowBlock = 32;  // keeps a block of x rows cache-resident while w streams by
    for (int64_t ib = i0; ib < i1; ib += kRowBlock) {
        const int64_t ie = std::min(i1, ib + kRowBlock);
        int64_t j = j0;
        for (; j + 4 <= j1; j += 4) {
            const float* w0 = w + (j + 0) * k;
            const float* w1 = w + (j + 1) * k;
            const float* w2 = w + (j + 2) * k;
            const float* w3 = w + (j + 3) * k;
            int64_t i = ib;
            for (; i + 2 <= ie; i += 2) {
                const float* xa = x + i * ldx;
                const float* xb = x + (i + 1) * ldx;
                V4 a0{}, a1{}, a2{}, a3{}, b0{}, b1{}, b2{}, b3{};
                for (int64_t t = 0; t < k4; t += 4) {
                    const V4 va = load4(xa + t), vb = load4(xb + t);
                    const V4 u0 = load4(w0 + t), u1 = load4(w1 + t), u2 = load4(w2 + t), u3 = load4(w3 + t);
                    a0 += va * u0;
                    a1 += va * u1;
                    a2 += va * u2;
                    a3 += va * u3;
                    b0 += vb * u0;
                    b1 += vb * u1;
                    b2 += vb * u2;
                    b3 += vb * u3;
                }
                float* ya = y + i * ldy + j;
                float* yb = y + (i + 1) * ldy + j;
                ya[0] = finish_dot(a0, xa, w0, k4, k);
                ya[1] = finish_dot(a1, xa, w1, k4, k);
                ya[2] = finish_dot(a2, xa, w2, k4, k);
                ya[3] = finish_dot(a3, xa, w3, k4, k);
                yb[0] = finish_dot(b0, xb, w0, k4, k);
                yb[1] = finish_dot(b1, xb, w1, k4, k);
                yb[2] = finish_dot(b2, xb, w2, k4, k);
                yb[3] = finish_dot(b3, xb, w3, k4, k);
            }
            for (; i < ie; ++i) {
                const float* xa = x + i * ldx;
                for (int64_t jj = j; jj < j + 4; ++jj) {
                    const float* wj = w + jj * k;
                    V4 acc{};
                    for (int64_t t = 0; t < k4; t += 4) acc += load4(xa + t) * load4(wj + t);
                    y[i * ldy + jj] = finish_dot(acc, xa, wj, k4, k);
                }
            }
        }
        for (; j < j1; ++j) {
            const float* wj = w + j * k;
            for (int64_t i = ib; i < ie; ++i) {
                const float* xa = x + i * ldx;
                V4 acc{};
                for (int64_t t = 0; t < k4; t += 4) acc += load4(xa + t) * load4(wj + t);
                y[i * ldy + j] = finish_dot(acc, xa, wj, k4, k);
            }
        }
    }
}

}  // namespace

void matmul_nt(const float* x, const float* w, float* y, int64_t n, int64_t k, int64_t m, int64_t ldx,
               int64_t ldy) {
    if (n == 0 || m == 0) return;
    if (ldx == 0) ldx = k;
    if (ldy == 0) ldy = m;
    // Threads split the output columns; each element is still computed by exactly one fixed sequence.
    // Starting threads costs tens of microseconds (far more under gVisor): only for big products.
    const int64_t work = n * m * k;
    const int64_t n_threads =
        work < (int64_t(1) << 24) ? 1 : std::clamp<int64_t>(std::min<int64_t>(std::thread::hardware_concurrency(), work >> 24), 1, 8);
    if (n_threads == 1 || m < 8 * n_threads) {
        matmul_nt_range(x, w, y, k, ldx, ldy, 0, n, 0, m);
        return;
    }
    std::vector<std::thread> threads;
    const int64_t per = ((m + n_threads - 1) / n_threads + 3) & ~int64_t(3);
    for (int64_t j0 = 0; j0 < m; j0 += per) {
        const int64_t j1 = std::min(m, j0 + per);
        threads.emplace_back([=] { matmul_nt_range(x, w, y, k, ldx, ldy, 0, n, j0, j1); });
    }
    for (auto& t : threads) t.join();
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
        case DType::F32:
            for (int64_t i = 0; i < n; ++i) out[i] = t.as<float>()[i];
            break;
        case DType::BF16:
            for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(t.as<uint16_t>()[i]);
            break;
        case DType::F16:
            for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(t.as<uint16_t>()[i]);
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
                      "tensor {}: FP8 block scale must be F8_E8M0 [{}, {}], got {} {}", scale.name,
                      (n_out + 127) / 128, (n_in + 127) / 128, dtype_name(scale.dtype), shape_str(scale.shape));
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
