// Parsing and validation of DeepSeek-V4 config.json, in the official DeepSeek key names and the
// transformers key names (configuration_deepseek_v4.py). Every refusal names the offending key.
#include "model/config.h"

#include "core/error.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <map>

namespace onecard {

namespace {

using json = nlohmann::json;

// Keys that only DeepSeek-V4.1 (Engram) configs carry; their presence means a different model.
bool is_v41_key(const std::string& key) {
    return key.rfind("engram_", 0) == 0 || key == "candidate_topk_blocks" || key == "candidate_block_size" ||
           key == "dspark_n_routed_experts" || key == "dspark_num_experts_per_tok";
}

const json* find_key(const json& j, const char* key) {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
}

int64_t as_int(const json& v, const std::string& key) {
    if (v.is_number_integer() || v.is_number_unsigned()) return v.get<int64_t>();
    if (v.is_number_float()) {
        const double d = v.get<double>();
        ONECARD_CHECK(std::floor(d) == d && std::fabs(d) < 9.0e15, "config.json: key '{}' must be an integer, got {}",
                      key, v.dump());
        return static_cast<int64_t>(d);
    }
    fail("config.json: key '{}' must be an integer, got {}", key, v.dump());
}

double as_double(const json& v, const std::string& key) {
    ONECARD_CHECK(v.is_number(), "config.json: key '{}' must be a number, got {}", key, v.dump());
    return v.get<double>();
}

int64_t req_int(const json& j, const char* key) {
    const json* v = find_key(j, key);
    ONECARD_CHECK(v != nullptr, "config.json: missing required key '{}'", key);
    return as_int(*v, key);
}

int64_t opt_int(const json& j, const char* key, int64_t def) {
    const json* v = find_key(j, key);
    return v ? as_int(*v, key) : def;
}

double opt_double(const json& j, const char* key, double def) {
    const json* v = find_key(j, key);
    return v ? as_double(*v, key) : def;
}

std::string opt_string(const json& j, const char* key, const std::string& def) {
    const json* v = find_key(j, key);
    if (!v) return def;
    ONECARD_CHECK(v->is_string(), "config.json: key '{}' must be a string, got {}", key, v->dump());
    return v->get<std::string>();
}

bool opt_bool(const json& j, const char* key, bool def) {
    const json* v = find_key(j, key);
    if (!v) return def;
    ONECARD_CHECK(v->is_boolean(), "config.json: key '{}' must be true or false, got {}", key, v->dump());
    return v->get<bool>();
}

std::vector<int64_t> int_list(const json& v, const std::string& key) {
    ONECARD_CHECK(v.is_array(), "config.json: key '{}' must be a list of integers, got {}", key, v.dump());
    std::vector<int64_t> out;
    for (size_t i = 0; i < v.size(); ++i) out.push_back(as_int(v[i], fmt::format("{}[{}]", key, i)));
    return out;
}

// compress ratio of a transformers layer type, honouring `compress_rates` overrides.
int64_t ratio_of_layer_type(const std::string& type, const json* compress_rates, size_t il) {
    if (type == "sliding_attention") return 0;
    if (type != "compressed_sparse_attention" && type != "heavily_compressed_attention")
        fail(
            "config.json: layer_types[{}] = '{}' is not a DeepSeek-V4 layer type (sliding_attention, "
            "compressed_sparse_attention, heavily_compressed_attention)",
            il, type);
    const int64_t def = type == "compressed_sparse_attention" ? 4 : 128;
    if (compress_rates == nullptr) return def;
    ONECARD_CHECK(compress_rates->is_object(), "config.json: key 'compress_rates' must be an object");
    const json* r = find_key(*compress_rates, type.c_str());
    return r ? as_int(*r, "compress_rates." + type) : def;
}

std::vector<int64_t> parse_compress_ratios(const json& j, int64_t n_layers, int64_t n_mtp) {
    const json* official = find_key(j, "compress_ratios");
    const json* layer_types = find_key(j, "layer_types");
    std::vector<int64_t> ratios;
    if (official) ratios = int_list(*official, "compress_ratios");
    if (layer_types) {
        ONECARD_CHECK(layer_types->is_array(), "config.json: key 'layer_types' must be a list of strings");
        ONECARD_CHECK(static_cast<int64_t>(layer_types->size()) == n_layers,
                      "config.json: key 'layer_types' has {} entries, expected num_hidden_layers = {}",
                      layer_types->size(), n_layers);
        const json* rates = find_key(j, "compress_rates");
        std::vector<int64_t> from_types;
        for (size_t il = 0; il < layer_types->size(); ++il) {
            const json& t = (*layer_types)[il];
            ONECARD_CHECK(t.is_string(), "config.json: layer_types[{}] must be a string", il);
            from_types.push_back(ratio_of_layer_type(t.get<std::string>(), rates, il));
        }
        // transformers keeps only the main layers; the MTP/DSpark blocks are sliding-window.
        for (int64_t i = 0; i < n_mtp; ++i) from_types.push_back(0);
        if (official) {
            for (int64_t il = 0; il < n_layers && il < static_cast<int64_t>(ratios.size()); ++il)
                ONECARD_CHECK(ratios[il] == from_types[il],
                              "config.json: keys 'compress_ratios' and 'layer_types' disagree at layer {} ({} vs {})",
                              il, ratios[il], from_types[il]);
        } else {
            ratios = from_types;
        }
    }
    ONECARD_CHECK(official || layer_types, "config.json: missing required key 'compress_ratios' (or 'layer_types')");
    return ratios;
}

int64_t parse_num_hash_layers(const json& j, int64_t n_layers) {
    const json* official = find_key(j, "num_hash_layers");
    const json* mlp_types = find_key(j, "mlp_layer_types");
    int64_t n_hash = official ? as_int(*official, "num_hash_layers") : -1;
    if (mlp_types) {
        ONECARD_CHECK(mlp_types->is_array(), "config.json: key 'mlp_layer_types' must be a list of strings");
        ONECARD_CHECK(static_cast<int64_t>(mlp_types->size()) == n_layers,
                      "config.json: key 'mlp_layer_types' has {} entries, expected num_hidden_layers = {}",
                      mlp_types->size(), n_layers);
        int64_t count = 0;
        bool seen_moe = false;
        for (size_t il = 0; il < mlp_types->size(); ++il) {
            const json& t = (*mlp_types)[il];
            const std::string s = t.is_string() ? t.get<std::string>() : t.dump();
            if (s == "hash_moe") {
                // The checkpoint stores tid2eid for a prefix of layers only (layers [0, num_hash_layers)).
                ONECARD_CHECK(!seen_moe,
                              "config.json: mlp_layer_types[{}] = 'hash_moe' after a 'moe' layer: hash "
                              "layers must form a prefix",
                              il);
                ++count;
            } else if (s == "moe") {
                seen_moe = true;
            } else {
                fail("config.json: mlp_layer_types[{}] = '{}' is not 'hash_moe' or 'moe'", il, s);
            }
        }
        ONECARD_CHECK(n_hash < 0 || n_hash == count,
                      "config.json: keys 'num_hash_layers' ({}) and 'mlp_layer_types' ({} hash_moe) disagree", n_hash,
                      count);
        n_hash = count;
    }
    ONECARD_CHECK(n_hash >= 0, "config.json: missing required key 'num_hash_layers' (or 'mlp_layer_types')");
    return n_hash;
}

void parse_yarn(const json& r, const std::string& where, RopeScaling& out) {
    ONECARD_CHECK(r.is_object(), "config.json: key '{}' must be an object", where);
    for (const char* bad : {"mscale", "mscale_all_dim"})
        ONECARD_CHECK(!r.contains(bad),
                      "config.json: key '{}.{}' is present: DeepSeek-V4 YaRN has no mscale (attention scale unchanged)",
                      where, bad);
    if (const json* af = find_key(r, "attention_factor"))
        ONECARD_CHECK(as_double(*af, where + ".attention_factor") == 1.0,
                      "config.json: key '{}.attention_factor' must be 1.0 (DeepSeek-V4 YaRN has no mscale)", where);
    std::string type = opt_string(r, "type", "");
    if (type.empty()) type = opt_string(r, "rope_type", "");
    ONECARD_CHECK(type == "yarn", "config.json: key '{}.type' must be 'yarn', got '{}'", where, type);
    out.type = type;
    const json* factor = find_key(r, "factor");
    ONECARD_CHECK(factor != nullptr, "config.json: missing required key '{}.factor'", where);
    out.factor = as_double(*factor, where + ".factor");
    const json* orig = find_key(r, "original_max_position_embeddings");
    ONECARD_CHECK(orig != nullptr, "config.json: missing required key '{}.original_max_position_embeddings'", where);
    out.original_max_position_embeddings = as_int(*orig, where + ".original_max_position_embeddings");
    out.beta_fast = opt_double(r, "beta_fast", 32.0);
    out.beta_slow = opt_double(r, "beta_slow", 1.0);
    ONECARD_CHECK(out.factor >= 1.0, "config.json: key '{}.factor' must be >= 1, got {}", where, out.factor);
    ONECARD_CHECK(out.original_max_position_embeddings > 0,
                  "config.json: key '{}.original_max_position_embeddings' must be positive", where);
}

// RoPE: official rope_theta / compress_rope_theta / rope_scaling, or transformers rope_parameters
// ({main: {...}, compress: {...}} or a flat dict of the compress-layer YaRN parameters).
void parse_rope(const json& j, ModelConfig& c) {
    c.rope_theta = opt_double(j, "rope_theta", c.rope_theta);
    c.compress_rope_theta = opt_double(j, "compress_rope_theta", c.compress_rope_theta);
    const json* scaling = find_key(j, "rope_scaling");
    const json* params = find_key(j, "rope_parameters");
    bool have_yarn = false;
    if (scaling) {
        parse_yarn(*scaling, "rope_scaling", c.rope_scaling);
        have_yarn = true;
    }
    if (params) {
        ONECARD_CHECK(params->is_object(), "config.json: key 'rope_parameters' must be an object");
        const json* main = find_key(*params, "main");
        const json* compress = find_key(*params, "compress");
        RopeScaling rs;
        if (main || compress) {
            ONECARD_CHECK(main && compress, "config.json: key 'rope_parameters' must have both 'main' and 'compress'");
            if (const json* t = find_key(*main, "rope_theta"))
                c.rope_theta = as_double(*t, "rope_parameters.main.rope_theta");
            const std::string main_type = opt_string(*main, "rope_type", opt_string(*main, "type", "default"));
            ONECARD_CHECK(main_type == "default",
                          "config.json: key 'rope_parameters.main.rope_type' must be 'default' (sliding layers use "
                          "plain RoPE), got '{}'",
                          main_type);
            if (const json* t = find_key(*compress, "rope_theta"))
                c.compress_rope_theta = as_double(*t, "rope_parameters.compress.rope_theta");
            parse_yarn(*compress, "rope_parameters.compress", rs);
        } else {
            // Flat form: the YaRN parameters of the compressed layers (transformers folds rope_theta in).
            if (const json* t = find_key(*params, "rope_theta"))
                c.rope_theta = as_double(*t, "rope_parameters.rope_theta");
            parse_yarn(*params, "rope_parameters", rs);
        }
        if (have_yarn) {
            ONECARD_CHECK(rs.factor == c.rope_scaling.factor &&
                              rs.original_max_position_embeddings == c.rope_scaling.original_max_position_embeddings,
                          "config.json: keys 'rope_scaling' and 'rope_parameters' disagree");
        }
        c.rope_scaling = rs;
        have_yarn = true;
    }
    ONECARD_CHECK(have_yarn, "config.json: missing required key 'rope_scaling' (or 'rope_parameters')");
    ONECARD_CHECK(c.rope_theta > 0, "config.json: key 'rope_theta' must be positive");
    ONECARD_CHECK(c.compress_rope_theta > 0, "config.json: key 'compress_rope_theta' must be positive");
}

void parse_quantization(const json& j, ModelConfig& c) {
    const json* q = find_key(j, "quantization_config");
    ONECARD_CHECK(q != nullptr,
                  "config.json: missing required key 'quantization_config' (onecard reads the FP8 "
                  "checkpoint as DeepSeek ships it)");
    ONECARD_CHECK(q->is_object(), "config.json: key 'quantization_config' must be an object");
    const std::string method = opt_string(*q, "quant_method", "");
    ONECARD_CHECK(method == "fp8", "config.json: key 'quantization_config.quant_method' must be 'fp8', got '{}'",
                  method);
    const std::string fmt_name = opt_string(*q, "fmt", "e4m3");
    ONECARD_CHECK(fmt_name == "e4m3", "config.json: key 'quantization_config.fmt' must be 'e4m3', got '{}'", fmt_name);
    const std::string scale_fmt = opt_string(*q, "scale_fmt", "");
    ONECARD_CHECK(scale_fmt == "ue8m0", "config.json: key 'quantization_config.scale_fmt' must be 'ue8m0', got '{}'",
                  scale_fmt);
    const std::string act = opt_string(*q, "activation_scheme", "dynamic");
    ONECARD_CHECK(act == "dynamic",
                  "config.json: key 'quantization_config.activation_scheme' must be 'dynamic', got '{}'", act);
    const json* block = find_key(*q, "weight_block_size");
    ONECARD_CHECK(block != nullptr, "config.json: missing required key 'quantization_config.weight_block_size'");
    const auto b = int_list(*block, "quantization_config.weight_block_size");
    ONECARD_CHECK(b.size() == 2 && b[0] == 128 && b[1] == 128,
                  "config.json: key 'quantization_config.weight_block_size' must be [128, 128], got {}", block->dump());
    c.weight_block_size = 128;
}

void parse_dspark(const json& j, ModelConfig& c) {
    const bool any = j.contains("dspark_block_size") || j.contains("dspark_markov_rank") ||
                     j.contains("dspark_noise_token_id") || j.contains("dspark_target_layer_ids");
    if (!any) return;
    DSparkConfig d;
    d.block_size = req_int(j, "dspark_block_size");
    d.markov_rank = req_int(j, "dspark_markov_rank");
    d.noise_token_id = req_int(j, "dspark_noise_token_id");
    const json* ids = find_key(j, "dspark_target_layer_ids");
    ONECARD_CHECK(ids != nullptr, "config.json: missing required key 'dspark_target_layer_ids'");
    d.target_layer_ids = int_list(*ids, "dspark_target_layer_ids");
    ONECARD_CHECK(d.block_size > 0, "config.json: key 'dspark_block_size' must be positive");
    ONECARD_CHECK(d.markov_rank > 0, "config.json: key 'dspark_markov_rank' must be positive");
    ONECARD_CHECK(d.noise_token_id >= 0 && d.noise_token_id < c.vocab_size,
                  "config.json: key 'dspark_noise_token_id' = {} is outside the vocabulary [0, {})", d.noise_token_id,
                  c.vocab_size);
    ONECARD_CHECK(!d.target_layer_ids.empty(), "config.json: key 'dspark_target_layer_ids' must not be empty");
    for (int64_t id : d.target_layer_ids)
        ONECARD_CHECK(id >= 0 && id < c.num_hidden_layers,
                      "config.json: key 'dspark_target_layer_ids' entry {} is outside [0, num_hidden_layers = {})", id,
                      c.num_hidden_layers);
    // DeepSeek's inference/config.json spells the stage count n_mtp_layers; it must match the taps.
    if (const json* n = find_key(j, "n_mtp_layers"))
        ONECARD_CHECK(as_int(*n, "n_mtp_layers") == static_cast<int64_t>(d.target_layer_ids.size()),
                      "config.json: key 'n_mtp_layers' must equal len(dspark_target_layer_ids) = {}",
                      d.target_layer_ids.size());
    c.dspark = d;
}

bool divisible(int64_t a, int64_t b) {
    return b > 0 && a % b == 0;
}

void validate(const ModelConfig& c) {
    auto positive = [](int64_t v, const char* key) {
        ONECARD_CHECK(v > 0, "config.json: key '{}' must be positive, got {}", key, v);
    };
    positive(c.vocab_size, "vocab_size");
    positive(c.hidden_size, "hidden_size");
    positive(c.num_hidden_layers, "num_hidden_layers");
    positive(c.num_attention_heads, "num_attention_heads");
    positive(c.head_dim, "head_dim");
    positive(c.qk_rope_head_dim, "qk_rope_head_dim");
    positive(c.q_lora_rank, "q_lora_rank");
    positive(c.o_groups, "o_groups");
    positive(c.o_lora_rank, "o_lora_rank");
    positive(c.sliding_window, "sliding_window");
    positive(c.index_n_heads, "index_n_heads");
    positive(c.index_head_dim, "index_head_dim");
    positive(c.index_topk, "index_topk");
    positive(c.n_routed_experts, "n_routed_experts");
    positive(c.num_experts_per_tok, "num_experts_per_tok");
    positive(c.moe_intermediate_size, "moe_intermediate_size");
    positive(c.hc_mult, "hc_mult");
    positive(c.hc_sinkhorn_iters, "hc_sinkhorn_iters");
    positive(c.max_position_embeddings, "max_position_embeddings");
    ONECARD_CHECK(c.num_nextn_predict_layers >= 0, "config.json: key 'num_nextn_predict_layers' must be >= 0");

    ONECARD_CHECK(c.num_key_value_heads == 1,
                  "config.json: key 'num_key_value_heads' must be 1 (DeepSeek-V4 shares one K=V head), got {}",
                  c.num_key_value_heads);
    ONECARD_CHECK(c.n_shared_experts == 1,
                  "config.json: key 'n_shared_experts' must be 1 (one shared_experts module), "
                  "got {}",
                  c.n_shared_experts);
    ONECARD_CHECK(c.head_dim > c.qk_rope_head_dim,
                  "config.json: key 'head_dim' ({}) must be larger than 'qk_rope_head_dim' ({})", c.head_dim,
                  c.qk_rope_head_dim);
    ONECARD_CHECK(c.qk_rope_head_dim % 2 == 0, "config.json: key 'qk_rope_head_dim' must be even (RoPE pairs), got {}",
                  c.qk_rope_head_dim);
    // The KV QAT simulation quantises the non-RoPE dims in FP8 blocks of 64.
    ONECARD_CHECK(divisible(c.nope_head_dim(), 64),
                  "config.json: keys 'head_dim' - 'qk_rope_head_dim' = {} must be a multiple of 64 (FP8 KV blocks)",
                  c.nope_head_dim());
    ONECARD_CHECK(divisible(c.num_attention_heads, c.o_groups),
                  "config.json: key 'num_attention_heads' ({}) must be divisible by 'o_groups' ({})",
                  c.num_attention_heads, c.o_groups);
    ONECARD_CHECK(c.index_head_dim > c.qk_rope_head_dim,
                  "config.json: key 'index_head_dim' ({}) must be larger than 'qk_rope_head_dim' ({})",
                  c.index_head_dim, c.qk_rope_head_dim);
    // The indexer's Walsh-Hadamard transform needs a power-of-two width.
    ONECARD_CHECK((c.index_head_dim & (c.index_head_dim - 1)) == 0,
                  "config.json: key 'index_head_dim' must be a power of two (Hadamard transform), got {}",
                  c.index_head_dim);
    // Every FP8 GEMM quantises its activation in 1x128 blocks along K, so each K must be a multiple of 128.
    const int64_t blk = c.weight_block_size;
    ONECARD_CHECK(divisible(c.hidden_size, blk),
                  "config.json: key 'hidden_size' ({}) must be a multiple of {} (FP8 blocks)", c.hidden_size, blk);
    ONECARD_CHECK(divisible(c.q_lora_rank, blk),
                  "config.json: key 'q_lora_rank' ({}) must be a multiple of {} (FP8 blocks)", c.q_lora_rank, blk);
    ONECARD_CHECK(divisible(c.moe_intermediate_size, blk),
                  "config.json: key 'moe_intermediate_size' ({}) must be a multiple of {} (FP8 blocks)",
                  c.moe_intermediate_size, blk);
    ONECARD_CHECK(divisible(c.num_attention_heads / c.o_groups * c.head_dim, blk),
                  "config.json: keys 'num_attention_heads'/'o_groups'*'head_dim' = {} must be a multiple of {} "
                  "(wo_a input, FP8 blocks)",
                  c.num_attention_heads / c.o_groups * c.head_dim, blk);
    ONECARD_CHECK(divisible(c.o_groups * c.o_lora_rank, blk),
                  "config.json: keys 'o_groups'*'o_lora_rank' = {} must be a multiple of {} (wo_b input, FP8 blocks)",
                  c.o_groups * c.o_lora_rank, blk);
    ONECARD_CHECK(c.num_experts_per_tok <= c.n_routed_experts,
                  "config.json: key 'num_experts_per_tok' ({}) exceeds 'n_routed_experts' ({})", c.num_experts_per_tok,
                  c.n_routed_experts);
    ONECARD_CHECK(c.num_hash_layers >= 0 && c.num_hash_layers <= c.num_hidden_layers,
                  "config.json: key 'num_hash_layers' ({}) must be within [0, num_hidden_layers = {}]",
                  c.num_hash_layers, c.num_hidden_layers);
    ONECARD_CHECK(c.expert_dtype == "fp4" || c.expert_dtype == "fp8",
                  "config.json: key 'expert_dtype' must be 'fp4' or 'fp8', got '{}'", c.expert_dtype);
    ONECARD_CHECK(c.scoring_func == "sqrtsoftplus",
                  "config.json: key 'scoring_func' must be 'sqrtsoftplus' (DeepSeek-V4 router), got '{}'",
                  c.scoring_func);
    ONECARD_CHECK(c.topk_method == "noaux_tc", "config.json: key 'topk_method' must be 'noaux_tc', got '{}'",
                  c.topk_method);
    ONECARD_CHECK(!c.tie_word_embeddings,
                  "config.json: key 'tie_word_embeddings' must be false (DeepSeek-V4 stores head.weight separately)");
    ONECARD_CHECK(c.rms_norm_eps > 0, "config.json: key 'rms_norm_eps' must be positive");
    ONECARD_CHECK(c.hc_eps > 0, "config.json: key 'hc_eps' must be positive");

    const int64_t n_expected = c.num_hidden_layers + c.n_mtp_blocks();
    ONECARD_CHECK(
        static_cast<int64_t>(c.compress_ratios.size()) == n_expected,
        "config.json: key 'compress_ratios' has {} entries, expected num_hidden_layers + MTP blocks = {} + {} "
        "= {}",
        c.compress_ratios.size(), c.num_hidden_layers, c.n_mtp_blocks(), n_expected);
    for (size_t il = 0; il < c.compress_ratios.size(); ++il) {
        const int64_t r = c.compress_ratios[il];
        ONECARD_CHECK(r == 0 || r == 4 || r == 128, "config.json: key 'compress_ratios[{}]' = {} is not 0, 4 or 128",
                      il, r);
    }
}

}  // namespace

LayerKind ModelConfig::layer_kind(int64_t il) const {
    const int64_t r = compress_ratio(il);
    return r == 0 ? LayerKind::SWA : (r == 4 ? LayerKind::CSA : LayerKind::HCA);
}

ModelConfig parse_config(const json& j) {
    ONECARD_CHECK(j.is_object(), "config.json: top level must be a JSON object");
    const std::string model_type = opt_string(j, "model_type", "");
    ONECARD_CHECK(model_type == "deepseek_v4",
                  "config.json: key 'model_type' = '{}' is not supported (onecard serves 'deepseek_v4' only)",
                  model_type);
    for (const auto& [key, value] : j.items())
        ONECARD_CHECK(!is_v41_key(key),
                      "config.json: key '{}' belongs to DeepSeek-V4.1 (Engram), a different architecture that onecard "
                      "does not support",
                      key);
    if (const json* a = find_key(j, "architectures")) {
        ONECARD_CHECK(a->is_array(), "config.json: key 'architectures' must be a list");
        for (const auto& name : *a)
            ONECARD_CHECK(name == "DeepseekV4ForCausalLM",
                          "config.json: key 'architectures' lists {}, expected DeepseekV4ForCausalLM", name.dump());
    }

    ModelConfig c;
    c.vocab_size = req_int(j, "vocab_size");
    c.hidden_size = req_int(j, "hidden_size");
    c.num_hidden_layers = req_int(j, "num_hidden_layers");
    c.num_attention_heads = req_int(j, "num_attention_heads");
    c.num_key_value_heads = opt_int(j, "num_key_value_heads", 1);
    c.head_dim = req_int(j, "head_dim");
    if (const json* rope = find_key(j, "qk_rope_head_dim")) {
        c.qk_rope_head_dim = as_int(*rope, "qk_rope_head_dim");
    } else if (const json* prf = find_key(j, "partial_rotary_factor")) {
        // transformers: qk_rope_head_dim = int(head_dim * partial_rotary_factor)
        c.qk_rope_head_dim =
            static_cast<int64_t>(static_cast<double>(c.head_dim) * as_double(*prf, "partial_rotary_factor"));
    } else {
        fail("config.json: missing required key 'qk_rope_head_dim' (or 'partial_rotary_factor')");
    }
    c.q_lora_rank = req_int(j, "q_lora_rank");
    c.o_groups = req_int(j, "o_groups");
    c.o_lora_rank = req_int(j, "o_lora_rank");
    c.sliding_window = req_int(j, "sliding_window");
    c.max_position_embeddings = req_int(j, "max_position_embeddings");
    c.index_n_heads = req_int(j, "index_n_heads");
    c.index_head_dim = req_int(j, "index_head_dim");
    c.index_topk = req_int(j, "index_topk");
    c.n_routed_experts = req_int(j, "n_routed_experts");
    c.n_shared_experts = opt_int(j, "n_shared_experts", 1);
    c.num_experts_per_tok = req_int(j, "num_experts_per_tok");
    c.moe_intermediate_size = req_int(j, "moe_intermediate_size");
    c.scoring_func = opt_string(j, "scoring_func", c.scoring_func);
    c.topk_method = opt_string(j, "topk_method", c.topk_method);
    c.norm_topk_prob = opt_bool(j, "norm_topk_prob", c.norm_topk_prob);
    c.routed_scaling_factor = opt_double(j, "routed_scaling_factor", c.routed_scaling_factor);
    c.swiglu_limit = opt_double(j, "swiglu_limit", c.swiglu_limit);
    c.hc_mult = opt_int(j, "hc_mult", c.hc_mult);
    c.hc_sinkhorn_iters = opt_int(j, "hc_sinkhorn_iters", c.hc_sinkhorn_iters);
    c.hc_eps = opt_double(j, "hc_eps", c.hc_eps);
    c.rms_norm_eps = opt_double(j, "rms_norm_eps", c.rms_norm_eps);
    c.num_nextn_predict_layers = opt_int(j, "num_nextn_predict_layers", c.num_nextn_predict_layers);
    c.bos_token_id = opt_int(j, "bos_token_id", c.bos_token_id);
    if (const json* eos = find_key(j, "eos_token_id")) {
        // transformers allows a list; the first id is the model's end-of-sequence token.
        if (eos->is_array()) {
            ONECARD_CHECK(!eos->empty(), "config.json: key 'eos_token_id' is an empty list");
            c.eos_token_id = as_int((*eos)[0], "eos_token_id[0]");
        } else {
            c.eos_token_id = as_int(*eos, "eos_token_id");
        }
    }
    c.tie_word_embeddings = opt_bool(j, "tie_word_embeddings", false);
    // Absent in the initial Flash revision, whose routed experts were already MXFP4 (§0.1).
    c.expert_dtype = opt_string(j, "expert_dtype", "fp4");
    const std::string act = opt_string(j, "hidden_act", "silu");
    ONECARD_CHECK(act == "silu", "config.json: key 'hidden_act' must be 'silu', got '{}'", act);
    ONECARD_CHECK(!opt_bool(j, "attention_bias", false), "config.json: key 'attention_bias' must be false");
    ONECARD_CHECK(!j.contains("first_k_dense_replace"),
                  "config.json: key 'first_k_dense_replace' is present: DeepSeek-V4 has no dense layers (is this V3?)");

    parse_quantization(j, c);
    parse_rope(j, c);
    parse_dspark(j, c);
    c.num_hash_layers = parse_num_hash_layers(j, c.num_hidden_layers);
    c.compress_ratios = parse_compress_ratios(j, c.num_hidden_layers, c.n_mtp_blocks());

    if (c.dspark) {
        c.variant = ModelVariant::V4Flash0731;
    } else if (c.hidden_size == 7168) {
        c.variant = ModelVariant::V4Pro;
    } else {
        c.variant = ModelVariant::V4Flash;
    }
    validate(c);
    return c;
}

ModelConfig load_config(const std::filesystem::path& config_json) {
    std::ifstream in(config_json);
    ONECARD_CHECK(in.good(), "cannot open {}", config_json.string());
    json j;
    try {
        j = json::parse(in);
    } catch (const json::exception& e) {
        fail("{}: invalid JSON: {}", config_json.string(), e.what());
    }
    try {
        return parse_config(j);
    } catch (const Error& e) {
        fail("{}: {}", config_json.string(), e.what());
    }
}

namespace {
// Integers stay integers in the written file (the official config writes rope_theta: 10000).
json number(double v) {
    if (std::floor(v) == v && std::fabs(v) < 9.0e15) return static_cast<int64_t>(v);
    return v;
}
}  // namespace

json to_official_json(const ModelConfig& c) {
    json j;  // nlohmann::json objects are std::map-ordered: the dump is deterministic
    j["architectures"] = json::array({"DeepseekV4ForCausalLM"});
    j["attention_bias"] = false;
    j["attention_dropout"] = 0.0;
    j["bos_token_id"] = c.bos_token_id;
    j["compress_ratios"] = c.compress_ratios;
    j["compress_rope_theta"] = number(c.compress_rope_theta);
    j["eos_token_id"] = c.eos_token_id;
    j["expert_dtype"] = c.expert_dtype;
    j["hc_eps"] = c.hc_eps;
    j["hc_mult"] = c.hc_mult;
    j["hc_sinkhorn_iters"] = c.hc_sinkhorn_iters;
    j["head_dim"] = c.head_dim;
    j["hidden_act"] = "silu";
    j["hidden_size"] = c.hidden_size;
    j["index_head_dim"] = c.index_head_dim;
    j["index_n_heads"] = c.index_n_heads;
    j["index_topk"] = c.index_topk;
    j["initializer_range"] = 0.02;
    j["max_position_embeddings"] = c.max_position_embeddings;
    j["model_type"] = "deepseek_v4";
    j["moe_intermediate_size"] = c.moe_intermediate_size;
    j["n_routed_experts"] = c.n_routed_experts;
    j["n_shared_experts"] = c.n_shared_experts;
    j["norm_topk_prob"] = c.norm_topk_prob;
    j["num_attention_heads"] = c.num_attention_heads;
    j["num_experts_per_tok"] = c.num_experts_per_tok;
    j["num_hash_layers"] = c.num_hash_layers;
    j["num_hidden_layers"] = c.num_hidden_layers;
    j["num_key_value_heads"] = c.num_key_value_heads;
    j["num_nextn_predict_layers"] = c.num_nextn_predict_layers;
    j["o_groups"] = c.o_groups;
    j["o_lora_rank"] = c.o_lora_rank;
    j["q_lora_rank"] = c.q_lora_rank;
    j["qk_rope_head_dim"] = c.qk_rope_head_dim;
    j["quantization_config"] = {{"activation_scheme", "dynamic"},
                                {"fmt", "e4m3"},
                                {"quant_method", "fp8"},
                                {"scale_fmt", "ue8m0"},
                                {"weight_block_size", json::array({c.weight_block_size, c.weight_block_size})}};
    j["rms_norm_eps"] = c.rms_norm_eps;
    j["rope_scaling"] = {{"beta_fast", number(c.rope_scaling.beta_fast)},
                         {"beta_slow", number(c.rope_scaling.beta_slow)},
                         {"factor", number(c.rope_scaling.factor)},
                         {"original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings},
                         {"type", c.rope_scaling.type}};
    j["rope_theta"] = number(c.rope_theta);
    j["routed_scaling_factor"] = c.routed_scaling_factor;
    j["scoring_func"] = c.scoring_func;
    j["sliding_window"] = c.sliding_window;
    j["swiglu_limit"] = c.swiglu_limit;
    j["tie_word_embeddings"] = c.tie_word_embeddings;
    j["topk_method"] = c.topk_method;
    j["torch_dtype"] = "bfloat16";
    j["transformers_version"] = "4.57.1";
    j["use_cache"] = true;
    j["vocab_size"] = c.vocab_size;
    if (c.dspark) {
        j["dspark_block_size"] = c.dspark->block_size;
        j["dspark_markov_rank"] = c.dspark->markov_rank;
        j["dspark_noise_token_id"] = c.dspark->noise_token_id;
        j["dspark_target_layer_ids"] = c.dspark->target_layer_ids;
    }
    return j;
}

const char* layer_kind_name(LayerKind k) {
    switch (k) {
        case LayerKind::SWA:
            return "SWA";
        case LayerKind::CSA:
            return "CSA";
        case LayerKind::HCA:
            return "HCA";
    }
    return "?";
}

const char* variant_name(ModelVariant v) {
    switch (v) {
        case ModelVariant::V4Flash:
            return "DeepSeek-V4-Flash";
        case ModelVariant::V4Flash0731:
            return "DeepSeek-V4-Flash-0731 (DSpark)";
        case ModelVariant::V4Pro:
            return "DeepSeek-V4-Pro";
    }
    return "?";
}

}  // namespace onecard
