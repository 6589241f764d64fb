// Small-M bf16 GEMV for decode, for the linears DeepSeek's reference keeps unquantised (wo_a, the
// compressors' wkv/wgate, the indexer's weights_proj, the router gate, the LM head):
// y[m, n] = x[m, k] · W[n, k]ᵀ, bf16 in, fp32 accumulation, bf16 or fp32 out, up to 32 rows per
// weight pass. Same design as fp8_gemv (tensor cores, mma.m16n8k16 bf16, the weight bytes as stored
// are the A fragments, weights prefetched before the programmatic-launch wait), so at batch 1 these
// linears stream at bandwidth and take part in the step's launch overlap, which cuBLAS kernels do not.
// Grouped form (wo_a): row r of W belongs to group r / rows_per_group and multiplies columns
// [g·k, (g+1)·k) of x.
// FP8-stored form (wo_a, which REF dequantises to bf16): W as E4M3 bytes with 128×128 block scales;
// the kernel forms REF's bf16 weight values (E4M3 · 2^k is exact in bf16) in registers, so the
// products are the bf16 form's on the dequantised matrix while the weight stream is half as long.
// Parity oracle: cpu::matmul_nt on the same bf16-valued inputs (and bf16_gemm, cuBLAS).
#pragma once

#include "backend/cuda/ops/bf16_gemm.cuh"

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace onecard::cuda {

inline constexpr int64_t kBf16GemvMaxM = 32;
// The FP8-stored form converts each weight once per pass, so it takes up to 64 rows per pass.
inline constexpr int64_t kBf16GemvFp8wMaxM = 64;

// Whether bf16_gemv takes this shape: k % 64 == 0, x and its row stride 16-byte aligned.
bool bf16_gemv_ok(const __nv_bfloat16* x, int64_t ld_x, const __nv_bfloat16* w, int64_t k);

// The shape of y [m, n] = x [m, k·groups] · W [n, k]ᵀ for both forms below.
struct Bf16GemvShape {
    int64_t m = 0, n = 0, k = 0;
    int64_t ld_x = 0;  // x's row stride (0: k·groups)
    int64_t ld_y = 0;  // y's row stride (0: n)
    // 0: one group (x columns [0, k)); else n % rows_per_group == 0 and row r of W reads x columns
    // [(r / rows_per_group)·k, +k).
    int64_t rows_per_group = 0;
};

// x bf16; W [n, k] dense bf16; y of type `out`. alpha multiplies the fp32 sum before the store (the
// indexer's 1/sqrt(heads) on weights_proj). Any m (passes of 32 rows).
void bf16_gemv(const __nv_bfloat16* x, const __nv_bfloat16* w, void* y, GemmOut out, const Bf16GemvShape& shape,
               cudaStream_t stream, float alpha = 1.0f);

// The same with W [n, k] E4M3 and its fp32 block scales ws (fp8_gemm_prepare_weight_scales layout),
// multiplied as the bf16 values E4M3 · scale. k % 128 == 0; passes of 64 rows.
void bf16_gemv_fp8w(const __nv_bfloat16* x, const uint8_t* w, const float* ws, void* y, GemmOut out,
                    const Bf16GemvShape& shape, cudaStream_t stream);

// out [n, k] bf16 = E4M3 W · block scale (same layout), exact: the bf16 matrix for the GEMM path.
void fp8_weight_to_bf16(const uint8_t* w, const float* ws, __nv_bfloat16* out, int64_t n, int64_t k,
                        cudaStream_t stream);

}  // namespace onecard::cuda
