// Internal to the model library: one decoder block and its two sub-blocks, shared by the main
// layers and the MTP block. Not part of the public model API.
#pragma once

#include "model/deepseek_v4.h"
#include "model/storage_points.h"

#include <cstdint>

namespace onecard::detail {

struct BlockContext {
    const ModelConfig& cfg;
    Numerics numerics;
    const std::vector<float>& rope_freqs;     // this layer's q/kv frequencies (main or compress)
    const std::vector<float>& rope_compress;  // compressor / indexer frequencies
    bool bf16_linear_inputs = false;          // DeepSeekV4::set_bf16_linear_inputs
    StoragePoints storage;                    // where to round to bf16 (DeepSeekV4::set_storage_points)
    ExpertUseProfile* expert_use = nullptr;   // DeepSeekV4::set_expert_use_sink: counts routing picks
};

// y[n, n_out] = l(x[n, n_in]); in Numerics::Reference a quantised linear first rounds each row of x
// through FP8 in 1×128 blocks (what REF's act_quant + fp8/fp4 GEMM computes).
// bf16_inputs: round x to bf16 first (what REF's bf16 activation storage feeds its quantiser).
void apply_linear(const DenseLinear& l, const float* x, int64_t n, float* y, Numerics numerics,
                  bool bf16_inputs = false);

// Attention sub-block: xn [n, D] (attn_norm output) at positions state.n_tokens.. -> out [n, D].
// Advances `state` (compressors, token count) by n tokens and writes the new window rows, entries
// and indexer keys to `store` (read back from it: attention sees what the store holds).
void attention_forward(const BlockContext& ctx, const DenseAttention& w, LayerState& state, SequenceKv& store,
                       const float* xn, int64_t n, float* out);

// MoE sub-block: xn [n, D] (ffn_norm output), token ids [n] (hash routing) -> out [n, D].
// ctx.expert_use (when set) gets every routing pick of the n tokens counted under `layer_id`.
void moe_forward(const BlockContext& ctx, const DenseMoE& w, bool hash_layer, int64_t layer_id, const int32_t* tokens,
                 const float* xn, int64_t n, float* out);

// One sub-block through its hyper-connections on the residual streams X [n, hc, D] (updated in place):
// attention (advances `state`, reads and writes `store`) and MoE (token ids [n] for hash routing).
void attention_sub_block(const BlockContext& ctx, const DenseBlock& b, LayerState& state, SequenceKv& store, float* X,
                         int64_t n);
void moe_sub_block(const BlockContext& ctx, const DenseBlock& b, const int32_t* tokens, float* X, int64_t n);

// A whole block on the residual streams X [n, hc, D] (updated in place): the two sub-blocks in turn.
void block_forward(const BlockContext& ctx, const DenseBlock& b, LayerState& state, SequenceKv& store,
                   const int32_t* tokens, float* X, int64_t n);

}  // namespace onecard::detail
