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

// How run() expects the scale tensors in memory. tests/ops/fp8_gemm_test.cpp probes every
// combination on the GPU and checks that this one (and only this one) matches the CPU.
struct Fp8GemmScaleLayout {
    ActScaleLayout act = ActScaleLayout::KBlockMajor;  // xs [k/128, m]: the m rows contiguous
    bool weight_transposed = false;                    // false: ws [ceil(n/128), k/128] as in the checkpoint
};
inline constexpr Fp8GemmScaleLayout kFp8GemmScaleLayout{};

class Fp8GemmLt {
public:
    // workspace: device scratch for cuBLASLt (from the arena), workspace_bytes of it (32 MiB is ample).
    Fp8GemmLt(void* workspace, size_t workspace_bytes);
    ~Fp8GemmLt();
    Fp8GemmLt(const Fp8GemmLt&) = delete;
    Fp8GemmLt& operator=(const Fp8GemmLt&) = delete;

    // xq [m, k] E4M3, xs and ws laid out as kFp8GemmScaleLayout says, w [n, k] E4M3, y [m, n] bf16. n and k multiples of 128 (DeepSeek's linears all are). Throws onecard::Error
    // naming the shape when cuBLASLt offers no algorithm.
    void run(const uint8_t* xq, const float* xs, const uint8_t* w, const float* ws, __nv_bfloat16* y, int64_t m,
             int64_t n, int64_t k, cudaStream_t stream);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace onecard::cuda
