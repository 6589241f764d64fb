// Typed views of a DeepSeek-V4 checkpoint's tensors, bound by name and checked against the
// config (dsv4-model.md §7.2). Views point into the mmap'd checkpoint; nothing is copied.
#pragma once

#include "core/tensor.h"
#include "loader/safetensors_writer.h"
#include "model/config.h"

#include <optional>
#include <vector>

namespace onecard {

class Checkpoint;

// A linear layer as stored: FP8 E4M3 [out, in] + UE8M0 scale [ceil(out/128), ceil(in/128)], or
// MXFP4 I8 [out, in/2] (low nibble first) + UE8M0 scale [out, in/32]. y = W x.
struct QuantLinear {
    TensorView weight;
    TensorView scale;
    bool is_mxfp4() const { return weight.dtype == DType::I8 || weight.dtype == DType::U8; }
    int64_t out_features() const { return weight.shape.at(0); }
    int64_t in_features() const { return is_mxfp4() ? weight.shape.at(1) * 2 : weight.shape.at(1); }
};

struct HCWeights {
    TensorView fn;     // F32 [(2+hc)*hc, hc*D] (head: [hc, hc*D])
    TensorView base;   // F32 [(2+hc)*hc]       (head: [hc])
    TensorView scale;  // F32 [3]               (head: [1])
};

struct CompressorWeights {
    TensorView wkv;    // BF16 [c*d, D], c = 2 if ratio == 4 else 1
    TensorView wgate;  // BF16 [c*d, D]
    TensorView ape;    // F32 [ratio, c*d]
    TensorView norm;   // BF16 [d]
};

struct IndexerWeights {
    QuantLinear wq_b;              // FP8 [index_n_heads*index_head_dim, q_lora_rank]
    TensorView weights_proj;       // BF16 [index_n_heads, D]
    CompressorWeights compressor;  // d = index_head_dim
};

struct AttentionWeights {
    QuantLinear wq_a;                             // [q_lora_rank, D]
    TensorView q_norm;                            // BF16 [q_lora_rank]
    QuantLinear wq_b;                             // [H*head_dim, q_lora_rank]
    QuantLinear wkv;                              // [head_dim, D]
    TensorView kv_norm;                           // BF16 [head_dim]
    QuantLinear wo_a;                             // [o_groups*o_lora_rank, H*head_dim/o_groups]
    QuantLinear wo_b;                             // [D, o_groups*o_lora_rank]
    TensorView attn_sink;                         // F32 [H]
    std::optional<CompressorWeights> compressor;  // ratio != 0
    std::optional<IndexerWeights> indexer;        // ratio == 4
};

struct ExpertWeights {
    QuantLinear w1;  // gate [moe_inter, D]
    QuantLinear w2;  // down [D, moe_inter]
    QuantLinear w3;  // up   [moe_inter, D]
};

struct MoEWeights {
    TensorView gate_weight;               // BF16 [n_routed_experts, D]
    std::optional<TensorView> gate_bias;  // F32 [n_routed_experts]     (non-hash layers)
    std::optional<TensorView> tid2eid;    // I64/I32 [vocab, top_k]     (hash layers)
    std::vector<ExpertWeights> experts;   // routed, MXFP4 (or FP8 when expert_dtype == fp8)
    ExpertWeights shared;                 // FP8
};

struct BlockWeights {
    TensorView attn_norm;  // BF16 [D]
    TensorView ffn_norm;   // BF16 [D]
    HCWeights hc_attn;
    HCWeights hc_ffn;
    AttentionWeights attn;
    MoEWeights ffn;
};

// V4-Flash MTP block mtp.N: a decoder block plus the glue of dsv4-model.md §6.2.
struct MTPWeights {
    BlockWeights block;
    TensorView enorm;    // BF16 [D]
    TensorView hnorm;    // BF16 [D]
    TensorView norm;     // BF16 [D]
    QuantLinear e_proj;  // FP8 [D, D]
    QuantLinear h_proj;  // FP8 [D, D]
    HCWeights hc_head;
};

// DeepSeek-V4-Flash-0731 DSpark drafter (mtp.0..n-1, n = len(dspark_target_layer_ids)). Names,
// dtypes and shapes confirmed from the 0731 safetensors headers; the drafter math is not implemented yet.
struct DSparkWeights {
    std::vector<BlockWeights> stages;  // mtp.i: full decoder blocks (SWA attention, non-hash MoE)
    QuantLinear main_proj;             // mtp.0.main_proj: FP8 [D, n_taps*D] (concatenated target-layer taps)
    TensorView main_norm;              // mtp.0.main_norm.weight: BF16 [D]
    TensorView norm;                   // mtp.{n-1}.norm.weight: BF16 [D]
    HCWeights hc_head;                 // mtp.{n-1}.hc_head_*: fn [hc, hc*D], base [hc], scale [1]
    TensorView markov_w1;              // mtp.{n-1}.markov_head.markov_w1.weight: BF16 [vocab, markov_rank]
    TensorView markov_w2;              // mtp.{n-1}.markov_head.markov_w2.weight: BF16 [vocab, markov_rank]
    TensorView confidence_proj;        // mtp.{n-1}.confidence_head.proj.weight: BF16 [1, D + markov_rank]
};

struct ModelWeights {
    TensorView embed;   // BF16 [vocab, D]
    TensorView head;    // BF16 [vocab, D]
    TensorView norm;    // BF16 [D]
    HCWeights hc_head;  // fn [hc, hc*D], base [hc], scale [1]
    std::vector<BlockWeights> layers;
    std::vector<MTPWeights> mtp;          // V4-Flash: mtp.0 (empty for 0731)
    std::optional<DSparkWeights> dspark;  // 0731 only
};

// A hash layer's routing table (tid2eid, I64 or I32 [vocab, top_k]) as int32 expert ids, each checked
// to lie in [0, n_routed_experts): the CPU model and the GPU upload both read it through here.
std::vector<int32_t> hash_routing_table(const TensorView& tid2eid, int64_t n_routed_experts);

// Bind every tensor; throws onecard::Error listing ALL missing, unexpected and mis-shaped tensors
// (the first ~20 problems, then a count).
ModelWeights bind_weights(const ModelConfig& cfg, const Checkpoint& ckpt);

// Every tensor an official-format checkpoint for `cfg` holds, with its dtype and shape, in the
// order `onecard synth` writes them (each `.weight` directly before its `.scale`). Built by the
// same code that binds, so the writer and the binder cannot disagree.
std::vector<TensorSpec> checkpoint_layout(const ModelConfig& cfg);

}  // namespace onecard
