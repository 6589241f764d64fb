// fp32 dense linear algebra and weight dequantisation for the CPU backend. Everything the model
// multiplies is fp32: quantised checkpoint weights are expanded once, at model construction.
#pragma once

#include "core/tensor.h"

#include <cstdint>
#include <vector>

namespace onecard::cpu {

// y[n, m] = x[n, k] · w[m, k]^T (row-major, fp32). `ldx`/`ldy` are the row strides of x and y in
// elements (0 = dense: k and m). y is overwritten.
// ROW-STABLE: every y[i, j] is computed by the same fixed sequence of fp32 operations on row x[i]
// and row w[j], whatever n, m, the tiling or the thread count. So a token's result never depends
// on how many other rows (chunk tokens, other sequences) share the call — bit for bit. OpenBLAS
// does not give this (its small-matrix and gemv paths reassociate), and the reference numerics'
// FP8 rounding turns 1-ulp differences into visible ones, so the model's linears use this kernel.
void matmul_nt(const float* x, const float* w, float* y, int64_t n, int64_t k, int64_t m, int64_t ldx = 0,
               int64_t ldy = 0);

// matmul_nt without the AVX2 code path (baseline ISA only). Bit-identical to matmul_nt by
// construction; exists so tests can prove that on machines that take the AVX2 path.
void matmul_nt_portable(const float* x, const float* w, float* y, int64_t n, int64_t k, int64_t m);

// The same product through OpenBLAS cblas_sgemm: faster for big shapes, but a row's bits may depend
// on n. For benchmarks and cross-checks only.
void matmul_nt_blas(const float* x, const float* w, float* y, int64_t n, int64_t k, int64_t m);

// c[n, m] = a[n, k] · b[k, m] (row-major, fp32, OpenBLAS); c is overwritten. Used where the shapes
// depend only on one query (attention P·V), so results are still independent of batching.
void matmul_nn(const float* a, const float* b, float* c, int64_t n, int64_t k, int64_t m);

// FP8 E4M3 weight [out, in] with UE8M0 block scales [ceil(out/b), ceil(in/b)] -> fp32 [out, in].
std::vector<float> dequant_fp8_block(const uint8_t* w, const uint8_t* scale, int64_t n_out, int64_t n_in,
                                     int64_t block = 128);
// MXFP4 weight packed [out, in/2] (element 2j = low nibble) with UE8M0 scales [out, in/32] -> fp32 [out, in].
std::vector<float> dequant_mxfp4(const uint8_t* packed, const uint8_t* scale, int64_t n_out, int64_t n_in);

// Any plain float tensor (F32, BF16, F16) -> fp32 copy. Throws onecard::Error naming the tensor otherwise.
std::vector<float> to_f32(const TensorView& t);
// A quantised linear (FP8 + block scale, or MXFP4 + scale; F32/BF16 weights with an empty scale view
// are also accepted) -> fp32 [out, in]. Throws onecard::Error naming the tensor on inconsistent shapes.
std::vector<float> dequant_linear(const TensorView& weight, const TensorView& scale);

}  // namespace onecard::cpu
