// Internal to the model library: one decoder block and its two sub-blocks, shared by the main
// layers and the MTP block. Not part of the public model API.
#pragma once

#include "backend/cpu/hyper_connection.h"
#include "model/deepseek_v4.h"
#include "model/storage_points.h"

#include <cstdint>
#include <functional>
#include <vector>

namespace onecard::detail {

struct BlockContext {
    const ModelConfig& cfg;
    Numerics numerics;
    const std::vector<float>& rope_freqs;     // this layer's q/kv frequencies (main or compress)
    const std::vector<float>& rope_compress;  // compressor / indexer frequencies
    bool bf16_linear_inputs = false;          // DeepSeekV4::set_bf16_linear_inputs
    StoragePoints storage{};                  // where to round to bf16 (DeepSeekV4::set_storage_points)
    ExpertUseProfile* expert_use = nullptr;   // DeepSeekV4::set_expert_use_sink: counts routing picks
};

// The hyper-connection parameters of `cfg`.
cpu::HCParams hc_params(const ModelConfig& cfg);

// y[n, n_out] = l(x[n, n_in]); in Numerics::Reference a quantised linear first rounds each row of x
// through FP8 in 1×128 blocks (what REF's act_quant + fp8/fp4 GEMM computes).
// bf16_inputs: round x to bf16 first (what REF's bf16 activation storage feeds its quantiser).
void apply_linear(const DenseLinear& l, const float* x, int64_t n, float* y, Numerics numerics,
                  bool bf16_inputs = false);

// The pieces of every attention kind, at positions pos0..pos0+n-1 (the DSpark drafter's block
// attention reuses them around its own key set):
// q path: xn [n, D] -> qr [n, q_lora_rank] (wq_a, q_norm; the indexer reads it) and q [n, H, head_dim]
// (wq_b, per-head unweighted RMSNorm, RoPE on the trailing dims).
void attention_q(const BlockContext& ctx, const DenseAttention& w, const float* xn, int64_t n, int64_t pos0,
                 std::vector<float>& qr, std::vector<float>& q);
// Shared KV head: xn [n, D] -> kv [n, head_dim] (wkv, kv_norm, RoPE); in reference numerics rounded
// to what the paged cache format holds.
void attention_kv(const BlockContext& ctx, const DenseAttention& w, const float* xn, int64_t n, int64_t pos0,
                  std::vector<float>& kv);
// Grouped low-rank output: o [n, H, head_dim] (inverse-roped) -> out [n, D] via wo_a per group, wo_b.
void attention_output(const BlockContext& ctx, const DenseAttention& w, const float* o, int64_t n, float* out);

// Attention sub-block: xn [n, D] (attn_norm output) at positions state.n_tokens.. -> out [n, D].
// Advances `state` (compressors, token count) by n tokens and writes the new window rows, entries
// and indexer keys to `store` (read back from it: attention sees what the store holds).
void attention_forward(const BlockContext& ctx, const DenseAttention& w, LayerState& state, SequenceKv& store,
                       const float* xn, int64_t n, float* out);

// MoE sub-block: xn [n, D] (ffn_norm output), token ids [n] (hash routing) -> out [n, D].
// ctx.expert_use (when set) gets every routing pick of the n tokens counted under `layer_id`.
void moe_forward(const BlockContext& ctx, const DenseMoE& w, bool hash_layer, int64_t layer_id, const int32_t* tokens,
                 const float* xn, int64_t n, float* out);

// Runs f (xn [n, D] -> out [n, D]) as a sub-block of X [n, hc, D] in place: HC pre (collapse) ->
// `norm` -> f -> HC post with the mixes of `hc`.
void hc_sub_block(const BlockContext& ctx, const DenseHC& hc, const std::vector<float>& norm, float* X, int64_t n,
                  const std::function<void(const float* xn, float* out)>& f);

// One sub-block through its hyper-connections on the residual streams X [n, hc, D] (updated in place):
// attention (advances `state`, reads and writes `store`) and MoE (token ids [n] for hash routing).
void attention_sub_block(const BlockContext& ctx, const DenseBlock& b, LayerState& state, SequenceKv& store, float* X,
                         int64_t n);
void moe_sub_block(const BlockContext& ctx, const DenseBlock& b, const int32_t* tokens, float* X, int64_t n);

// A whole block on the residual streams X [n, hc, D] (updated in place): the two sub-blocks in turn.
void block_forward(const BlockContext& ctx, const DenseBlock& b, LayerState& state, SequenceKv& store,
                   const int32_t* tokens, float* X, int64_t n);

}  // namespace onecard::detail
