// Small-M FP8 block-scaled GEMV for decode: y[m, n] = Σ_k (xq[m,k]·xs[m,k/128]) · (W[n,k]·ws[n/128,k/128]),
// bf16 out. Weight-bandwidth bound by design: the weights are streamed once per call with 16-byte
// loads and multiplied on the tensor cores (mma.m16n8k32 E4M3: the weight bytes are the A fragments
// as stored, the activation rows the B columns, up to 32 rows per weight pass), so no element is
// converted on the CUDA cores. fp32 accumulation inside each 128-wide k block (the tensor core's),
// then across blocks with the two scales.
// Parity oracle: cpu::matmul_nt over cpu::dequant_fp8_block(W) and cpu::fp8_quant_dequant(x).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace onecard::cuda {

// Largest m one launch handles per weight pass (larger m is split into passes; beyond that the
// cuBLASLt GEMM is the better path).
inline constexpr int64_t kFp8GemvMaxM = 32;

// xq [m, k] E4M3, xs [m, k/128] fp32 (ActScaleLayout::RowMajor), w [n, k] E4M3,
// ws: fp32 block scales in the same layout the cuBLASLt GEMM reads (fp8_gemm_prepare_weight_scales:
// [ceil(n/128), k/128] with rows padded to 4 floats), so one prepared tensor serves both paths,
// y [m, n] bf16 (row stride ld_y, 0 = n). k must be a multiple of 128.
void fp8_gemv(const uint8_t* xq, const float* xs, const uint8_t* w, const float* ws, __nv_bfloat16* y, int64_t m,
              int64_t n, int64_t k, cudaStream_t stream, int64_t ld_y = 0);

}  // namespace onecard::cuda
