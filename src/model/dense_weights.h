// fp32 copies of every weight the forward pass multiplies, made once from the checkpoint views
// (FP8 128×128 blocks and MXFP4 expanded, BF16 widened). The CPU backend computes only in fp32;
// `quantized` remembers which linears DeepSeek's reference runs as FP8/FP4 GEMMs, because those
// get the 1×128 FP8 activation quantisation in Numerics::Reference.
#pragma once

#include "model/config.h"
#include "model/weights.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace onecard {

struct DenseLinear {
    std::vector<float> w;  // [n_out, n_in]
    int64_t n_out = 0;
    int64_t n_in = 0;
    bool quantized = false;  // FP8/FP4 in the checkpoint => FP8 activation quantisation in reference mode
};

struct DenseHC {
    std::vector<float> fn;     // [n_mix, hc*D]
    std::vector<float> base;   // [n_mix]
    std::vector<float> scale;  // [3] (head: [1])
};

struct DenseCompressor {
    int64_t ratio = 0;
    int64_t head_dim = 0;     // d: 512-like for the main stream, index_head_dim for the indexer
    DenseLinear wkv;          // [c*d, D]
    DenseLinear wgate;        // [c*d, D]
    std::vector<float> ape;   // [ratio, c*d]
    std::vector<float> norm;  // [d]
};

struct DenseIndexer {
    DenseLinear wq_b;          // [index_n_heads*index_head_dim, q_lora_rank]
    DenseLinear weights_proj;  // [index_n_heads, D]
    DenseCompressor compressor;
};

struct DenseAttention {
    DenseLinear wq_a;                           // [q_lora_rank, D]
    std::vector<float> q_norm;                  // [q_lora_rank]
    DenseLinear wq_b;                           // [H*head_dim, q_lora_rank]
    DenseLinear wkv;                            // [head_dim, D]
    std::vector<float> kv_norm;                 // [head_dim]
    DenseLinear wo_a;                           // [o_groups*o_lora_rank, H*head_dim/o_groups]
    DenseLinear wo_b;                           // [D, o_groups*o_lora_rank]
    std::vector<float> sink;                    // [H]
    std::optional<DenseCompressor> compressor;  // CSA, HCA
    std::optional<DenseIndexer> indexer;        // CSA
};

struct DenseExpert {
    DenseLinear w1;  // gate [moe_inter, D]
    DenseLinear w2;  // down [D, moe_inter]
    DenseLinear w3;  // up   [moe_inter, D]
};

struct DenseMoE {
    DenseLinear gate;              // [n_routed_experts, D]
    std::vector<float> bias;       // [n_routed_experts]; empty on hash layers
    std::vector<int32_t> tid2eid;  // [vocab, top_k]; empty on learned-routing layers
    std::vector<DenseExpert> experts;
    DenseExpert shared;
};

struct DenseBlock {
    int64_t layer_id = 0;          // index into compress_ratios (MTP blocks continue after the main layers)
    std::vector<float> attn_norm;  // [D]
    std::vector<float> ffn_norm;   // [D]
    DenseHC hc_attn;
    DenseHC hc_ffn;
    DenseAttention attn;
    DenseMoE ffn;
};

struct DenseMTP {
    DenseBlock block;
    std::vector<float> enorm, hnorm, norm;  // [D]
    DenseLinear e_proj, h_proj;             // [D, D]
    DenseHC hc_head;
};

// The 0731 DSpark drafter (docs/dspark.md): stages mtp.0..S-1 plus the glue of the first and last.
struct DenseDSpark {
    std::vector<DenseBlock> stages;  // sliding-window blocks, layer ids num_hidden_layers + s
    DenseLinear main_proj;           // [D, S*D] (FP8 in the checkpoint)
    std::vector<float> main_norm;    // [D]
    std::vector<float> norm;         // [D] last stage's final norm
    DenseHC hc_head;                 // last stage's: fn [hc, hc*D], base [hc], scale [1]
    std::vector<float> markov_w1;    // [vocab, r] embedding of the previous token
    std::vector<float> markov_w2;    // [vocab, r] projection r -> vocab
    std::vector<float> confidence;   // [D + r] confidence_head.proj (one output, no bias)
    int64_t rank = 0;                // r = dspark_markov_rank
};

struct DenseModel {
    std::vector<float> embed;  // [vocab, D]
    std::vector<float> head;   // [vocab, D]
    std::vector<float> norm;   // [D]
    DenseHC hc_head;
    std::vector<DenseBlock> layers;
    std::vector<DenseMTP> mtp;
    std::optional<DenseDSpark> dspark;  // 0731 only
};

// Expands every bound tensor to fp32 (throws onecard::Error naming a tensor whose dtype or shape
// cannot be used).
DenseModel densify(const ModelConfig& cfg, const ModelWeights& w);

}  // namespace onecard
