#include "backend/cpu/linear.h"

#include "core/error.h"
#include "core/fp_formats.h"

#include <cblas.h>

#include <array>

namespace onecard::cpu {

void matmul_nt(const float* x, const float* w, float* y, int64_t n, int64_t k, int64_t m, int64_t ldx,
               int64_t ldy) {
    if (n == 0 || m == 0) return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(n), static_cast<blasint>(m),
                static_cast<blasint>(k), 1.0f, x, static_cast<blasint>(ldx ? ldx : k), w, static_cast<blasint>(k),
                0.0f, y, static_cast<blasint>(ldy ? ldy : m));
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
        for (int64_t c = 0; c < n_in; ++c) {
            out[r * n_in + c] = lut[w[r * n_in + c]] * ue8m0_to_f32(srow[c / block]);
        }
    }
    return out;
}

std::vector<float> dequant_mxfp4(const uint8_t* packed, const uint8_t* scale, int64_t n_out, int64_t n_in) {
    const int64_t n_scale_cols = n_in / 32;
    std::vector<float> out(static_cast<size_t>(n_out * n_in));
    for (int64_t r = 0; r < n_out; ++r) {
        for (int64_t c = 0; c < n_in; c += 2) {
            uint8_t byte = packed[r * (n_in / 2) + c / 2];
            float s = ue8m0_to_f32(scale[r * n_scale_cols + c / 32]);
            out[r * n_in + c] = e2m1_to_f32(byte & 0xF) * s;
            out[r * n_in + c + 1] = e2m1_to_f32(byte >> 4) * s;
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
