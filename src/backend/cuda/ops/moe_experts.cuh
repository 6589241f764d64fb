// Routed experts for many tokens (prefill, large batches, and any shape the decode GEMV does not
// take): tokens are grouped by expert; each used expert's MXFP4 weights are dequantised to bf16 in
// scratch (E2M1 × 2^(s−127) is exact in bf16) and multiplied with cuBLAS (bf16 in, fp32 accumulation).
// The input rows are the FP8 1×128 quant-dequantised activations (fp8_round_1x128, exact in bf16),
// so the products equal REF's fp4_gemm up to fp32 summation order.
// Parity oracle: model/layer_moe.cpp's expert loop (cpu::matmul_nt over dequant_mxfp4 weights,
// cpu::swiglu_clamped, cpu::fp8_quant_dequant of both GEMM inputs).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

namespace onecard::cuda {

// All routed experts of one layer, MXFP4, one contiguous array per matrix (expert e's matrix at
// e·n·k/2 bytes, its scales at e·n·k/32 bytes).
struct MxExpertWeights {
    int64_t n_experts = 0;
    int64_t dim = 0;    // D (w1/w3 input, w2 output)
    int64_t inter = 0;  // moe_intermediate_size
    // Each expert's matrices in the tiled MXFP4 layout (mxfp4_layout.cuh), experts back to back.
    const uint8_t* w1 = nullptr;  // [E, inter, D/2] packed E2M1 (low nibble = even element), tiled
    const uint8_t* s1 = nullptr;  // [E, inter, D/32] UE8M0
    const uint8_t* w3 = nullptr;  // [E, inter, D/2]
    const uint8_t* s3 = nullptr;  // [E, inter, D/32]
    const uint8_t* w2 = nullptr;  // [E, D, inter/2]
    const uint8_t* s2 = nullptr;  // [E, D, inter/32]
};

// One routed expert held in host RAM in the checkpoint's own MXFP4 layout (pinned): codes [n, k/2]
// (element 2j = low nibble), UE8M0 scales [n, k/32]; w1/w3 are [inter, D], w2 is [D, inter].
struct MxHostExpert {
    const uint8_t *w1 = nullptr, *s1 = nullptr, *w3 = nullptr, *s3 = nullptr, *w2 = nullptr, *s2 = nullptr;
};

// A layer whose experts are split between HBM and host RAM (MoeExperts::run's hybrid form): the
// routing ids are global; slot_of maps each to its slot in MxExpertWeights or -1, and a host
// expert's weights are copied into `staging` (device, staging_bytes_for) and dequantised from there
// when a many-token step uses it: at prefill sizes moving an expert over PCIe is far cheaper than
// computing its hundreds of rows on the host CPU.
struct MxHybridExperts {
    int64_t n_global = 0;
    const int32_t* slot_of = nullptr;    // host [n_global]
    const MxHostExpert* host = nullptr;  // host [n_global], valid where slot_of < 0
    uint8_t* staging = nullptr;          // device, kStagingBuffers × staging_bytes_for(dim, inter)
    // Two buffers: the next host expert's copy (on MoeExperts' copy stream) overlaps the GEMMs of the
    // current one and of the GPU experts between them.
    static constexpr int kStagingBuffers = 2;
    static size_t staging_bytes_for(int64_t dim, int64_t inter);  // one buffer
};

// In place on x [rows, k] bf16 (row stride ld, 0 = k): each 1×128 block through FP8 E4M3 with its
// UE8M0 scale and back (cpu::fp8_quant_dequant(x, k, 128) on the bf16 values). k % 128 == 0.
void fp8_round_1x128(__nv_bfloat16* x, int64_t rows, int64_t k, cudaStream_t stream, int64_t ld = 0);

// Where a routing weight w_k enters an expert's output: BeforeW2 scales the hidden activation before
// its FP8 rounding and w2 (DeepSeek's reference code); AfterW2 scales the expert's output (transformers).
enum class ExpertWeighting { BeforeW2, AfterW2 };

class MoeExperts {
public:
    // scratch: device memory for the dequantised weights and the gathered rows; scratch_bytes of it.
    // It must hold at least one expert's three bf16 matrices (6·D·inter bytes) plus the row buffers
    // for max_rows (token, pick) pairs; run() throws onecard::Error naming the shortfall otherwise.
    MoeExperts(void* scratch, size_t scratch_bytes, int64_t max_rows);
    ~MoeExperts();

    // The scratch a run of up to max_rows (token, pick) pairs needs (alignment padding included).
    static size_t scratch_bytes_for(int64_t dim, int64_t inter, int64_t max_rows);
    MoeExperts(const MoeExperts&) = delete;
    MoeExperts& operator=(const MoeExperts&) = delete;

    // x [n, D] bf16 (already FP8-rounded), experts/weights [n, K] (device, from moe_route), shared
    // [n, D] bf16 or nullptr; out [n, D] bf16 = shared + Σ_k w_k · expert_k(x) (ExpertWeighting). expert(x) = w2 ·
    // fp8_round(bf16(swiglu_clamp(bf16(w1·x), bf16(w3·x)))), each expert output rounded to bf16 and the sum taken in
    // pick order: the rounding points of the decode GEMV path (mxfp4_grouped_gemv, swiglu_clamp_quant, moe_combine), so
    // a token's MoE output does not depend on which path its step took beyond fp32 summation order. Synchronises the
    // stream once to learn how many rows each expert got (not for use inside CUDA graph capture). hybrid != nullptr:
    // the ids in `experts` are global (hybrid->n_global of them) and host experts are staged from host RAM
    // (MxHybridExperts); the arithmetic is the same.
    void run(const __nv_bfloat16* x, const int32_t* experts, const float* weights, int64_t n, int64_t top_k,
             const MxExpertWeights& w, ExpertWeighting weighting, float swiglu_limit, const __nv_bfloat16* shared,
             __nv_bfloat16* out, cudaStream_t stream, const MxHybridExperts* hybrid = nullptr);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace onecard::cuda
