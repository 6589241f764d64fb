// bf16 GEMM through cuBLAS for the linears DeepSeek's reference keeps unquantised (wo_a, the
// compressors' wkv/wgate, the indexer's weights_proj, the router gate, the LM head) and for the
// dequantised expert matrices: y[m, n] = x[m, k] · W[n, k]ᵀ, bf16 inputs, fp32 accumulation
// (CUBLAS_COMPUTE_32F, no TF32 or reduced-precision reductions), bf16 or fp32 output. The same
// handle also runs one plain fp32 GEMM: the hyper-connections' mixes at prefill sizes (run_f32).
// Parity oracle: cpu::matmul_nt on the same bf16-valued inputs; run_f32: cpu::hc_mixes through hc_pre.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <library_types.h>

#include <cstdint>
#include <memory>

namespace onecard::cuda {

enum class GemmOut { Bf16, F32 };

class Bf16Gemm {
public:
    // workspace: device scratch for cuBLAS (32 MiB is ample).
    Bf16Gemm(void* workspace, size_t workspace_bytes);
    ~Bf16Gemm();
    Bf16Gemm(const Bf16Gemm&) = delete;
    Bf16Gemm& operator=(const Bf16Gemm&) = delete;

    // x [m, k] (row stride ld_x, 0 = k), W [n, k] dense, y [m, n] (row stride ld_y, 0 = n) of type `out`.
    // beta = 1 accumulates into y (y must then hold valid values), 0 overwrites.
    void run(const __nv_bfloat16* x, int64_t ld_x, const __nv_bfloat16* w, void* y, GemmOut out, int64_t ld_y,
             int64_t m, int64_t n, int64_t k, cudaStream_t stream, float beta = 0.0f);

    // Grouped form for wo_a: for g < groups, y_g = x_g · W_gᵀ with x_g = x + g·k (columns [g·k, (g+1)·k)
    // of x [m, groups·k]), W_g = w + g·n·k ([n, k] each), y_g = y + g·n (columns of y [m, groups·n]).
    void run_grouped_columns(const __nv_bfloat16* x, const __nv_bfloat16* w, void* y, GemmOut out, int64_t m, int64_t n,
                             int64_t k, int64_t groups, cudaStream_t stream);

    // y [m, n] fp32 = x [m, k] fp32 · W [n, k]ᵀ fp32, dense rows, fp32 products and sums.
    void run_f32(const float* x, const float* w, float* y, int64_t m, int64_t n, int64_t k, cudaStream_t stream);

private:
    // The one cublasGemmEx call both forms make: y = x · Wᵀ in the layout described at its definition.
    void gemm_nt(const void* x, int64_t ld_x, const void* w, cudaDataType_t in_type, void* y, cudaDataType_t y_type,
                 int64_t ld_y, int64_t m, int64_t n, int64_t k, cudaStream_t stream, float beta);

    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace onecard::cuda
