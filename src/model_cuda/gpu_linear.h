// The linears of the GPU forward pass, one entry point per weight kind, choosing the kernel by shape:
//  * FP8 linears: x [m, k] bf16 -> FP8 1×128 quantisation (REF's act_quant) -> decode GEMV when
//    m <= 32, else the cuBLASLt block-scaled GEMM (rows padded to a multiple of 4);
//  * bf16 linears: the tensor-core bf16 GEMV when m <= 32, else cuBLAS's bf16 GEMM (fp32 accumulation
//    both), bf16 or fp32 out.
// Scratch for the quantised activations comes from the caller's workspace arena (mark/release per
// call), so nothing allocates during a step.
#pragma once

#include "backend/cuda/arena.h"
#include "backend/cuda/ops/bf16_gemm.cuh"
#include "backend/cuda/ops/fp8_gemm.cuh"
#include "model_cuda/gpu_weights.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace onecard {

class GpuLinears {
public:
    // `workspace` provides cuBLAS workspaces (taken once here) and per-call scratch.
    explicit GpuLinears(cuda::DeviceArena& workspace);

    // y [m, n_out] bf16 (row stride ld_y, 0 = n_out) = FP8-quantised x [m, n_in] · Wᵀ.
    void fp8(const GpuFp8Linear& l, const __nv_bfloat16* x, int64_t m, __nv_bfloat16* y, cudaStream_t s,
             int64_t ld_y = 0);
    // Whether fp8() takes the GEMV path for m rows (then an input quantised once with
    // quantize_rows() can feed several linears through fp8_quantized()).
    // The tensor-core GEMV reads each weight once for up to 32 rows; beyond that cuBLASLt's GEMM.
    bool gemv_ok(const GpuFp8Linear& l, int64_t m) const { return gemv_ && m <= kGemvMaxRows && l.n_in % 128 == 0; }
    // xq [m, n_in] E4M3 + xs [m, n_in/128] (ActScaleLayout::RowMajor) -> y; only where gemv_ok().
    void fp8_quantized(const GpuFp8Linear& l, const uint8_t* xq, const float* xs, int64_t m, __nv_bfloat16* y,
                       cudaStream_t s, int64_t ld_y = 0);
    // y [m, n_out] = scale · x [m, n_in] (row stride ld_x, 0 = n_in) · Wᵀ in bf16 x bf16 -> fp32
    // accumulation (scale != 1 needs fp32 out).
    void bf16(const GpuBf16Linear& l, const __nv_bfloat16* x, int64_t m, void* y, cuda::GemmOut out, cudaStream_t s,
              int64_t ld_x = 0, float scale = 1.0f);
    // y [m, n_out] fp32 = x [m, n_in] fp32 · Wᵀ (bf16 W) for the output head: x goes through the bf16
    // path as its hi and lo halves (cuda::split_bf16: 2m rows, one read of W), and the two fp32 results are
    // summed, so x's fp32 value counts to ~2^-17 relative (not one bf16 rounding: the logits are the
    // end of the forward pass, and one rounding there is what parity tests would measure). Per-call
    // scratch: bf16_f32_scratch_bytes (the 2m bf16 rows and their 2m fp32 outputs).
    void bf16_f32(const GpuBf16Linear& l, const float* x, int64_t m, float* y, cudaStream_t s);
    static int64_t bf16_f32_scratch_bytes(int64_t m, int64_t k, int64_t n) { return 2 * m * (k * 2 + n * 4) + 512; }
    // wo_a: o [m, G·k] -> z [m, G·r], group g = o[:, g·k:(g+1)·k] · W_gᵀ, in bf16 x bf16 -> fp32 with W's
    // bf16 values E4M3 · scale (REF dequantises wo_a; no activation quantisation). Up to 64 rows the GEMV
    // forms them in registers; beyond, the GEMM path dequantises one group at a time into scratch
    // (group_scratch_bytes).
    void grouped(const GpuFp8Linear& l, int64_t groups, const __nv_bfloat16* x, int64_t m, __nv_bfloat16* z,
                 cudaStream_t s);
    // Per-call scratch grouped() needs on its GEMM path: one group's bf16 weights.
    static int64_t group_scratch_bytes(int64_t rows_per_group, int64_t k) { return rows_per_group * k * 2; }

    // The cuBLAS handle of the bf16 linears, for the one fp32 GEMM outside them: hc_pre's mixes at prefill
    // sizes (HcPreArgs::gemm).
    cuda::Bf16Gemm& dense_gemm() { return bf16_gemm_; }

    // Rows up to which the GEMV path is used (beyond it the GEMM wins).
    static constexpr int64_t kGemvMaxRows = 32;
    // Tests: false sends every linear through the GEMMs (to check the two paths against each other).
    void set_gemv(bool on) { gemv_ = on; }

private:
    cuda::DeviceArena& ws_;
    bool gemv_ = true;
    cuda::Fp8GemmLt fp8_gemm_;
    cuda::Bf16Gemm bf16_gemm_;
};

}  // namespace onecard
