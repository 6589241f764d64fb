// Small-M FP8 block-scaled GEMV for decode: y[m, n] = Σ_k (xq[m,k]·xs[m,k/128]) · (W[n,k]·ws[n/128,k/128]),
// fp32 accumulation, bf16 out. Weight-bandwidth bound: each warp streams one weight row with
// 16-byte loads, several in flight per lane before the first use, and reuses it for all m rows.
// Parity oracle: cpu::matmul_nt over cpu::dequant_fp8_block(W) and cpu::fp8_quant_dequant(x).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace onecard::cuda {

// Largest m one launch handles per weight pass (larger m is split into passes; beyond ~16 rows the
// cuBLASLt GEMM is the better path).
inline constexpr int64_t kFp8GemvMaxM = 8;

// xq [m, k] E4M3, xs [m, k/128] fp32 (ActScaleLayout::RowMajor), w [n, k] E4M3,
// ws [ceil(n/128), k/128] fp32 (the checkpoint's UE8M0 block scales converted by ue8m0_to_f32),
// y [m, n] bf16 (row stride ld_y, 0 = n). k must be a multiple of 512 (one warp pass of 16-byte loads).
void fp8_gemv(const uint8_t* xq, const float* xs, const uint8_t* w, const float* ws, __nv_bfloat16* y, int64_t m,
              int64_t n, int64_t k, cudaStream_t stream, int64_t ld_y = 0);

}  // namespace onecard::cuda
