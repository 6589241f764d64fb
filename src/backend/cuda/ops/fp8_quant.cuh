// FP8 E4M3 activation quantisation in 1×128 blocks along K with UE8M0 (power-of-two) scales, the
// input side of every FP8/FP4 linear (dsv4-model.md §10.1): amax clamped at 1e-4,
// s = 2^ceil(log2(amax/448)), q = e4m3(clamp(x/s, ±448)) with round-to-nearest-even.
// Parity oracle: cpu::fp8_quant_dequant(x, n, 128) must equal e4m3(q)·s bit for bit.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace onecard::cuda {

// Where the scale of (row r, K-block b) is stored. cuBLASLt's VEC128_32F wants the rows contiguous
// ([n_kblocks, n_rows]); our GEMV kernels read a token's scales together ([n_rows, n_kblocks]).
enum class ActScaleLayout { RowMajor, KBlockMajor };

// x [n_rows, k] bf16 -> q [n_rows, k] E4M3 bytes + scales fp32 (n_rows·k/128 of them, in `layout`).
// k must be a multiple of 128.
void quantize_fp8_1x128(const __nv_bfloat16* x, uint8_t* q, float* scales, int64_t n_rows, int64_t k,
                        ActScaleLayout layout, cudaStream_t stream);

// UE8M0 bytes [rows, cols] -> fp32 2^(b-127), optionally transposed to [cols, rows] (weight block
// scales are converted once at load; the conversion is exact). ld_out: row stride of the output in
// floats (0 = dense); padding entries are left untouched.
void ue8m0_to_f32(const uint8_t* in, float* out, int64_t rows, int64_t cols, bool transpose, cudaStream_t stream,
                  int64_t ld_out = 0);

}  // namespace onecard::cuda
