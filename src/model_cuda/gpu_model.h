// The DeepSeek-V4 forward pass on the GPU, in reference numerics (what DeepSeek's reference code
// computes, QAT simulations included; the CPU's Numerics::Reference is its oracle): one step runs
// any mix of sequences and token counts (decode rows, prefill chunks, multi-token verification)
// through every main layer, reading and writing the engine's paged KV pool (GpuKvPool), and returns
// the logits of the rows asked for.
//
// Differences from the CPU reference, all inside the parity tolerance (rel. L2 <= 2e-2):
//  * activations and the residual streams are bf16 between ops (as REF stores them), math in fp32;
//  * the window rows of a step are read back from their FP8 entries like every other stored vector.
#pragma once

#include "backend/cuda/arena.h"
#include "backend/cuda/ops/moe_experts.cuh"
#include "model/config.h"
#include "model_cuda/gpu_kv_pool.h"
#include "model_cuda/gpu_linear.h"
#include "model_cuda/gpu_step.h"
#include "model_cuda/gpu_weights.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace onecard {

struct GpuModelOptions {
    int64_t max_step_tokens = 2048;   // tokens per step (the scheduler's budget)
    int64_t max_seqs = 64;            // sequences per step
    int64_t max_model_len = 65536;    // longest sequence (sizes key lists and indexer scratch)
    size_t moe_scratch_bytes = size_t{2} << 30;  // many-token expert path (dequantised experts + rows)
};

class GpuModel {
public:
    // `weights` (device) and `pool` must outlive the model. Workspace buffers are carved from `arena`.
    GpuModel(const ModelConfig& cfg, const GpuModelWeights& weights, GpuKvPool& pool, const GpuModelOptions& opt,
             cuda::DeviceArena& arena);
    ~GpuModel();

    // Runs one step on `stream`. Returns the device logits [n_out, vocab] fp32 (valid until the next
    // step): one row per sequence with want_logits (its last token), or every token's row when
    // all_rows. Sequences starting at position 0 start fresh state in their slot.
    const float* step(std::span<const GpuStepSeq> seqs, bool all_rows, cudaStream_t stream);
    int64_t n_out_rows() const { return meta_.n_out; }
    // Greedy tokens [n_out] of the last step's logits, on the device.
    const int32_t* argmax_last(cudaStream_t stream);

    const ModelConfig& config() const { return cfg_; }
    // Bytes of the workspace (activations, scratch) this model took from the arena.
    int64_t workspace_bytes() const { return workspace_bytes_; }

private:
    struct Buffers;
    void attention(const GpuBlock& b, const __nv_bfloat16* xn, __nv_bfloat16* out, cudaStream_t s);
    void moe(const GpuBlock& b, const __nv_bfloat16* xn, __nv_bfloat16* out, cudaStream_t s);

    ModelConfig cfg_;
    const GpuModelWeights& w_;
    GpuKvPool& pool_;
    GpuModelOptions opt_;
    cuda::DeviceArena ws_;  // step scratch (a region of the caller's arena)
    GpuStepMeta meta_;
    std::unique_ptr<GpuLinears> lin_;
    std::unique_ptr<cuda::MoeExperts> experts_;
    std::unique_ptr<Buffers> buf_;
    int64_t workspace_bytes_ = 0;
};

}  // namespace onecard
