// FP8 block-scaled GEMM through cuBLASLt (prefill and large batches): CUDA 13's cuBLASLt takes
// DeepSeek's scales directly on Hopper: VEC128_32F for the activations (1×128 along K) and
// BLK128x128_32F for the weights; UE8M0 scales convert to fp32 exactly (ue8m0_to_f32).
// y[m, n] = (xq ⊙ xs) · (W ⊙ ws)ᵀ, fp32 accumulation, bf16 out.
// Row-major operands map onto cuBLASLt's column-major "TN" form: A = W viewed [k, n] (op T),
// B = xq viewed [k, m] (op N), D = y viewed [n, m].
// Parity oracle: cpu::matmul_nt over cpu::dequant_fp8_block(W) and cpu::fp8_quant_dequant(x).
#pragma once

#include "backend/cuda/ops/fp8_quant.cuh"

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

namespace onecard::cuda {

// How run() expects the scale tensors in memory, as measured on the H200 (CUDA 13.0, driver 580;
// tests/ops/fp8_gemm_test.cpp probes it on every GPU run):
//  * activations: [k/128, m], the m rows contiguous (ActScaleLayout::KBlockMajor);
//  * weights: [ceil(n/128), k/128] as in the checkpoint, each row padded to a multiple of 4 floats
//    (16 bytes): with 3 × 5 blocks only the padded row stride 8 matched (rel. L2 1.7e-3, every other
//    order ~0.9); every DeepSeek-V4 linear has k/128 divisible by 4, so it is dense there;
//  * m (tokens) a multiple of 4: m = 37 has no algorithm, 36/40/48 do.
struct Fp8GemmScaleLayout {
    ActScaleLayout act = ActScaleLayout::KBlockMajor;
    bool weight_transposed = false;
};
inline constexpr Fp8GemmScaleLayout kFp8GemmScaleLayout{};
inline constexpr int64_t kFp8GemmRowMultiple = 4;

// Row stride (floats) of the fp32 weight-scale matrix run() reads, and its size in floats.
inline int64_t fp8_gemm_weight_scale_ld(int64_t k) {
    return (k / 128 + 3) / 4 * 4;
}
inline int64_t fp8_gemm_weight_scale_floats(int64_t n, int64_t k) {
    return (n + 127) / 128 * fp8_gemm_weight_scale_ld(k);
}
// The checkpoint's UE8M0 block scales [ceil(n/128), k/128] -> the fp32 layout above (once, at load).
void fp8_gemm_prepare_weight_scales(const uint8_t* ue8m0, float* out, int64_t n, int64_t k, cudaStream_t stream);

class Fp8GemmLt {
public:
    // workspace: device scratch for cuBLASLt (from the arena), workspace_bytes of it (32 MiB is ample).
    Fp8GemmLt(void* workspace, size_t workspace_bytes);
    ~Fp8GemmLt();
    Fp8GemmLt(const Fp8GemmLt&) = delete;
    Fp8GemmLt& operator=(const Fp8GemmLt&) = delete;

    // xq [m, k] E4M3, xs [k/128, m], w [n, k] E4M3, ws from fp8_gemm_prepare_weight_scales, y [m, n]
    // bf16. m a multiple of kFp8GemmRowMultiple (pad the token rows). n and k multiples of 128 (DeepSeek's linears all
    // are). Throws onecard::Error naming the shape when cuBLASLt offers no algorithm.
    void run(const uint8_t* xq, const float* xs, const uint8_t* w, const float* ws, __nv_bfloat16* y, int64_t m,
             int64_t n, int64_t k, cudaStream_t stream);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace onecard::cuda
