// DeepSeek-V4 model configuration: every dimension the code uses comes from here, never from
// constants. Parsed from the official config.json (DeepSeek key names) or the transformers key
// names (layer_types, mlp_layer_types, rope_parameters, compress_rates). See dsv4-model.md §1.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace onecard {

// Attention kind of a layer, from compress_ratios[il]: 0 -> SWA, 4 -> CSA, 128 -> HCA.
enum class LayerKind { SWA, CSA, HCA };

enum class ModelVariant {
    V4Flash,      // deepseek-ai/DeepSeek-V4-Flash (one MTP block mtp.0)
    V4Flash0731,  // DeepSeek-V4-Flash-0731 (DSpark drafter in mtp.0..2, dspark_* keys)
    V4Pro,        // DeepSeek-V4-Pro shape (hidden 7168, 61 layers, ...)
};

struct RopeScaling {
    std::string type = "yarn";
    double factor = 16.0;
    int64_t original_max_position_embeddings = 65536;
    double beta_fast = 32.0;
    double beta_slow = 1.0;
};

// 0731 DSpark drafter fields (parsed and validated; running it comes with speculative decoding).
struct DSparkConfig {
    int64_t block_size = 0;
    int64_t markov_rank = 0;
    int64_t noise_token_id = 0;
    std::vector<int64_t> target_layer_ids;
};

struct ModelConfig {
    ModelVariant variant = ModelVariant::V4Flash;
    int64_t vocab_size = 0;
    int64_t hidden_size = 0;          // D
    int64_t num_hidden_layers = 0;    // main decoder blocks (MTP blocks not counted)
    int64_t num_attention_heads = 0;  // H
    int64_t num_key_value_heads = 1;  // must be 1: single shared K=V head
    int64_t head_dim = 0;             // 512
    int64_t qk_rope_head_dim = 0;     // trailing RoPE'd dims of every head (64)
    int64_t q_lora_rank = 0;
    int64_t o_groups = 0;
    int64_t o_lora_rank = 0;
    int64_t sliding_window = 0;             // window incl. the current token
    std::vector<int64_t> compress_ratios;   // num_hidden_layers + MTP entries; 0, 4 or 128
    double rope_theta = 10000.0;            // SWA layers (and MTP)
    double compress_rope_theta = 160000.0;  // CSA/HCA layers, with YaRN
    RopeScaling rope_scaling;
    int64_t max_position_embeddings = 0;
    int64_t index_n_heads = 0;
    int64_t index_head_dim = 0;
    int64_t index_topk = 0;
    int64_t n_routed_experts = 0;
    int64_t n_shared_experts = 1;
    int64_t num_experts_per_tok = 0;
    int64_t moe_intermediate_size = 0;
    std::string scoring_func = "sqrtsoftplus";
    std::string topk_method = "noaux_tc";
    bool norm_topk_prob = true;
    double routed_scaling_factor = 1.5;
    double swiglu_limit = 10.0;
    int64_t num_hash_layers = 0;  // layers [0, num_hash_layers) route by token id (tid2eid)
    int64_t hc_mult = 4;          // hyper-connection streams
    int64_t hc_sinkhorn_iters = 20;
    double hc_eps = 1e-6;
    double rms_norm_eps = 1e-6;
    int64_t num_nextn_predict_layers = 1;  // MTP blocks (mtp.N)
    int64_t bos_token_id = 0;
    int64_t eos_token_id = 1;
    bool tie_word_embeddings = false;
    std::string expert_dtype = "fp4";  // "fp4" (MXFP4 routed experts) or "fp8"
    int64_t weight_block_size = 128;   // FP8 128x128 block scales
    std::optional<DSparkConfig> dspark;

    int64_t compress_ratio(int64_t il) const { return compress_ratios.at(static_cast<size_t>(il)); }
    // il may index an MTP/DSpark block too (il >= num_hidden_layers): compress_ratios covers them.
    LayerKind layer_kind(int64_t il) const;
    // Blocks stored as mtp.N: the DSpark stage count (len(dspark_target_layer_ids)) for 0731, whose
    // config still says num_nextn_predict_layers = 1; num_nextn_predict_layers otherwise.
    int64_t n_mtp_blocks() const {
        return dspark ? static_cast<int64_t>(dspark->target_layer_ids.size()) : num_nextn_predict_layers;
    }
    bool is_hash_layer(int64_t il) const { return il < num_hash_layers; }
    int64_t nope_head_dim() const { return head_dim - qk_rope_head_dim; }
};

// Parse and validate (throws onecard::Error naming the key on any inconsistency, and refusing
// architectures other than deepseek_v4, e.g. V4.1).
ModelConfig parse_config(const nlohmann::json& j);
ModelConfig load_config(const std::filesystem::path& config_json);
// Official DeepSeek-style config.json for this config (what `onecard synth` writes).
nlohmann::json to_official_json(const ModelConfig& cfg);

const char* layer_kind_name(LayerKind k);  // "SWA", "CSA", "HCA"
const char* variant_name(ModelVariant v);

}  // namespace onecard
