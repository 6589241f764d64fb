// Small-M FP8 block-scaled GEMV for decode: y[m, n] = Σ_k (xq[m,k]·xs[m,k/128]) · (W[n,k]·ws[n/128,k/128]),
// fp32 accumulation, bf16 out. Meant to be weight-bandwidth bound: warps stream weight rows with
// 16-byte loads, several in flight per lane, reused for all m rows. Two paths: when m·k·4 bytes fit
// in 48 KB (batch 1 at every Flash shape) the activations are dequantised once per block into shared
// memory and two rows per warp are software-pipelined; otherwise a register path converts the
// activations per weight byte. Measured on the H200: 36–42% of copy bandwidth on 32 MB matrices,
// launch/latency bound on the small ones (docs/results.md).
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
// ws: fp32 block scales in the same layout the cuBLASLt GEMM reads (fp8_gemm_prepare_weight_scales:
// [ceil(n/128), k/128] with rows padded to 4 floats; k % 512 == 0 makes that dense here), so one
// prepared tensor serves both paths,
// y [m, n] bf16 (row stride ld_y, 0 = n). k must be a multiple of 512 (one warp pass of 16-byte loads).
void fp8_gemv(const uint8_t* xq, const float* xs, const uint8_t* w, const float* ws, __nv_bfloat16* y, int64_t m,
              int64_t n, int64_t k, cudaStream_t stream, int64_t ld_y = 0);

}  // namespace onecard::cuda
