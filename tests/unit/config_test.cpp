// Config parsing: the official Flash config gives the dsv4-model.md §1 values; the transformers
// spelling gives the same config; 0731 and Pro shapes are accepted; V4.1 and inconsistent configs
// are refused with the offending key named.
#include "model/config.h"
#include "core/error.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <functional>

#include <unistd.h>

namespace onecard {
namespace {

using json = nlohmann::json;

// The same model in transformers' spelling (configuration_deepseek_v4.py): layer_types for the 43
// main layers only, mlp_layer_types instead of num_hash_layers, partial_rotary_factor instead of
// qk_rope_head_dim, and nested rope_parameters.
json flash_transformers() {
    json j = test::flash_official_config_json();
    for (const char* k : {"compress_ratios", "num_hash_layers", "qk_rope_head_dim", "rope_scaling", "rope_theta",
                          "compress_rope_theta"})
        j.erase(k);
    json types = json::array({"sliding_attention", "sliding_attention"});
    for (int i = 0; i < 20; ++i) {
        types.push_back("compressed_sparse_attention");
        types.push_back("heavily_compressed_attention");
    }
    types.push_back("compressed_sparse_attention");
    j["layer_types"] = types;
    json mlp = json::array();
    for (int i = 0; i < 43; ++i) mlp.push_back(i < 3 ? "hash_moe" : "moe");
    j["mlp_layer_types"] = mlp;
    j["compress_rates"] = {{"compressed_sparse_attention", 4}, {"heavily_compressed_attention", 128}};
    j["partial_rotary_factor"] = 0.125;
    j["rope_parameters"] = {
        {"main", {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 0.125}}},
        {"compress",
         {{"rope_type", "yarn"},
          {"rope_theta", 160000.0},
          {"factor", 16.0},
          {"original_max_position_embeddings", 65536},
          {"beta_fast", 32.0},
          {"beta_slow", 1.0},
          {"attention_factor", 1.0},
          {"partial_rotary_factor", 0.125}}}};
    return j;
}

json flash_0731() {
    return test::flash_0731_config_json();
}

json pro() {
    json j = test::flash_official_config_json();
    j["hidden_size"] = 7168;
    j["num_hidden_layers"] = 61;
    j["num_attention_heads"] = 128;
    j["q_lora_rank"] = 1536;
    j["o_groups"] = 16;
    j["n_routed_experts"] = 384;
    j["moe_intermediate_size"] = 3072;
    j["routed_scaling_factor"] = 2.5;
    j["index_topk"] = 1024;
    json ratios = json::array({128, 128});
    for (int i = 0; i < 29; ++i) {
        ratios.push_back(4);
        ratios.push_back(128);
    }
    ratios.push_back(4);
    ratios.push_back(0);
    j["compress_ratios"] = ratios;
    return j;
}

// Expects parse_config to refuse `j` with a message that contains every string in `needles`.
void expect_refused(const json& j, std::initializer_list<const char*> needles) {
    try {
        parse_config(j);
        ADD_FAILURE() << "config accepted, expected a refusal mentioning " << *needles.begin();
    } catch (const Error& e) {
        const std::string msg = e.what();
        for (const char* n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "message: " << msg;
    }
}

json with(json j, const std::function<void(json&)>& edit) {
    edit(j);
    return j;
}

TEST(Config, OfficialFlashHasSpecValues) {
    const ModelConfig c = parse_config(test::flash_official_config_json());
    EXPECT_EQ(c.variant, ModelVariant::V4Flash);
    EXPECT_EQ(c.vocab_size, 129280);
    EXPECT_EQ(c.hidden_size, 4096);
    EXPECT_EQ(c.num_hidden_layers, 43);
    EXPECT_EQ(c.num_attention_heads, 64);
    EXPECT_EQ(c.num_key_value_heads, 1);
    EXPECT_EQ(c.head_dim, 512);
    EXPECT_EQ(c.qk_rope_head_dim, 64);
    EXPECT_EQ(c.nope_head_dim(), 448);
    EXPECT_EQ(c.q_lora_rank, 1024);
    EXPECT_EQ(c.o_groups, 8);
    EXPECT_EQ(c.o_lora_rank, 1024);
    EXPECT_EQ(c.sliding_window, 128);
    EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
    EXPECT_DOUBLE_EQ(c.compress_rope_theta, 160000.0);
    EXPECT_EQ(c.rope_scaling.type, "yarn");
    EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 16.0);
    EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 65536);
    EXPECT_DOUBLE_EQ(c.rope_scaling.beta_fast, 32.0);
    EXPECT_DOUBLE_EQ(c.rope_scaling.beta_slow, 1.0);
    EXPECT_EQ(c.max_position_embeddings, 1048576);
    EXPECT_EQ(c.index_n_heads, 64);
    EXPECT_EQ(c.index_head_dim, 128);
    EXPECT_EQ(c.index_topk, 512);
    EXPECT_EQ(c.n_routed_experts, 256);
    EXPECT_EQ(c.n_shared_experts, 1);
    EXPECT_EQ(c.num_experts_per_tok, 6);
    EXPECT_EQ(c.moe_intermediate_size, 2048);
    EXPECT_EQ(c.scoring_func, "sqrtsoftplus");
    EXPECT_EQ(c.topk_method, "noaux_tc");
    EXPECT_TRUE(c.norm_topk_prob);
    EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 1.5);
    EXPECT_DOUBLE_EQ(c.swiglu_limit, 10.0);
    EXPECT_EQ(c.num_hash_layers, 3);
    EXPECT_EQ(c.hc_mult, 4);
    EXPECT_EQ(c.hc_sinkhorn_iters, 20);
    EXPECT_DOUBLE_EQ(c.hc_eps, 1e-6);
    EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
    EXPECT_EQ(c.num_nextn_predict_layers, 1);
    EXPECT_EQ(c.n_mtp_blocks(), 1);
    EXPECT_EQ(c.bos_token_id, 0);
    EXPECT_EQ(c.eos_token_id, 1);
    EXPECT_FALSE(c.tie_word_embeddings);
    EXPECT_EQ(c.expert_dtype, "fp4");
    EXPECT_EQ(c.weight_block_size, 128);
    EXPECT_FALSE(c.dspark.has_value());

    // §1.1 schedule: layers 0,1 SWA; even 2..42 CSA (21); odd 3..41 HCA (20); MTP (index 43) SWA.
    ASSERT_EQ(c.compress_ratios.size(), 44u);
    int n_swa = 0, n_csa = 0, n_hca = 0;
    for (int il = 0; il < 43; ++il) {
        const LayerKind k = c.layer_kind(il);
        if (il < 2)
            EXPECT_EQ(k, LayerKind::SWA) << il;
        else if (il % 2 == 0)
            EXPECT_EQ(k, LayerKind::CSA) << il;
        else
            EXPECT_EQ(k, LayerKind::HCA) << il;
        n_swa += k == LayerKind::SWA;
        n_csa += k == LayerKind::CSA;
        n_hca += k == LayerKind::HCA;
    }
    EXPECT_EQ(n_swa, 2);
    EXPECT_EQ(n_csa, 21);
    EXPECT_EQ(n_hca, 20);
    EXPECT_EQ(c.layer_kind(43), LayerKind::SWA);
    EXPECT_TRUE(c.is_hash_layer(2));
    EXPECT_FALSE(c.is_hash_layer(3));
    EXPECT_STREQ(layer_kind_name(LayerKind::CSA), "CSA");
}

void expect_same(const ModelConfig& a, const ModelConfig& b) {
    EXPECT_EQ(a.variant, b.variant);
    EXPECT_EQ(a.vocab_size, b.vocab_size);
    EXPECT_EQ(a.hidden_size, b.hidden_size);
    EXPECT_EQ(a.num_hidden_layers, b.num_hidden_layers);
    EXPECT_EQ(a.num_attention_heads, b.num_attention_heads);
    EXPECT_EQ(a.head_dim, b.head_dim);
    EXPECT_EQ(a.qk_rope_head_dim, b.qk_rope_head_dim);
    EXPECT_EQ(a.q_lora_rank, b.q_lora_rank);
    EXPECT_EQ(a.o_groups, b.o_groups);
    EXPECT_EQ(a.o_lora_rank, b.o_lora_rank);
    EXPECT_EQ(a.sliding_window, b.sliding_window);
    EXPECT_EQ(a.compress_ratios, b.compress_ratios);
    EXPECT_DOUBLE_EQ(a.rope_theta, b.rope_theta);
    EXPECT_DOUBLE_EQ(a.compress_rope_theta, b.compress_rope_theta);
    EXPECT_EQ(a.rope_scaling.type, b.rope_scaling.type);
    EXPECT_DOUBLE_EQ(a.rope_scaling.factor, b.rope_scaling.factor);
    EXPECT_EQ(a.rope_scaling.original_max_position_embeddings, b.rope_scaling.original_max_position_embeddings);
    EXPECT_DOUBLE_EQ(a.rope_scaling.beta_fast, b.rope_scaling.beta_fast);
    EXPECT_DOUBLE_EQ(a.rope_scaling.beta_slow, b.rope_scaling.beta_slow);
    EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings);
    EXPECT_EQ(a.index_n_heads, b.index_n_heads);
    EXPECT_EQ(a.index_head_dim, b.index_head_dim);
    EXPECT_EQ(a.index_topk, b.index_topk);
    EXPECT_EQ(a.n_routed_experts, b.n_routed_experts);
    EXPECT_EQ(a.num_experts_per_tok, b.num_experts_per_tok);
    EXPECT_EQ(a.moe_intermediate_size, b.moe_intermediate_size);
    EXPECT_DOUBLE_EQ(a.routed_scaling_factor, b.routed_scaling_factor);
    EXPECT_EQ(a.num_hash_layers, b.num_hash_layers);
    EXPECT_EQ(a.hc_mult, b.hc_mult);
    EXPECT_EQ(a.num_nextn_predict_layers, b.num_nextn_predict_layers);
    EXPECT_EQ(a.expert_dtype, b.expert_dtype);
    EXPECT_EQ(a.dspark.has_value(), b.dspark.has_value());
    EXPECT_EQ(a.n_mtp_blocks(), b.n_mtp_blocks());
}

TEST(Config, TransformersNamesGiveTheSameConfig) {
    const ModelConfig official = parse_config(test::flash_official_config_json());
    expect_same(parse_config(flash_transformers()), official);

    // Flat rope_parameters (the YaRN parameters of compressed layers) + top-level thetas.
    json flat = flash_transformers();
    flat["rope_parameters"] = {{"rope_type", "yarn"},
                               {"factor", 16},
                               {"original_max_position_embeddings", 65536},
                               {"beta_fast", 32},
                               {"beta_slow", 1}};
    flat["rope_theta"] = 10000;
    flat["compress_rope_theta"] = 160000;
    expect_same(parse_config(flat), official);

    // Both spellings present and consistent is fine too.
    json both = test::flash_official_config_json();
    both["layer_types"] = flash_transformers()["layer_types"];
    both["mlp_layer_types"] = flash_transformers()["mlp_layer_types"];
    expect_same(parse_config(both), official);

    // compress_rates overrides the per-type rate: a CSA rate of 128 makes those layers HCA.
    json rates = flash_transformers();
    rates["compress_rates"]["compressed_sparse_attention"] = 128;
    EXPECT_EQ(parse_config(rates).layer_kind(2), LayerKind::HCA);
}

TEST(Config, OfficialJsonRoundTrips) {
    for (const json& src : {test::flash_official_config_json(), flash_0731(), pro(), flash_transformers()}) {
        const ModelConfig a = parse_config(src);
        const json written = to_official_json(a);
        EXPECT_TRUE(written.contains("compress_ratios"));
        EXPECT_TRUE(written.contains("num_hash_layers"));
        EXPECT_FALSE(written.contains("layer_types"));
        expect_same(parse_config(written), a);
    }
    // The official config written back has the official values (integers stay integers).
    const json w = to_official_json(parse_config(test::flash_official_config_json()));
    EXPECT_EQ(w["rope_theta"].dump(), "10000");
    EXPECT_EQ(w["quantization_config"]["weight_block_size"], json({128, 128}));
    EXPECT_EQ(w["compress_ratios"], test::flash_official_config_json()["compress_ratios"]);
}

TEST(Config, Flash0731Accepted) {
    const ModelConfig c = parse_config(flash_0731());
    EXPECT_EQ(c.variant, ModelVariant::V4Flash0731);
    ASSERT_TRUE(c.dspark.has_value());
    EXPECT_EQ(c.dspark->block_size, 5);
    EXPECT_EQ(c.dspark->markov_rank, 256);
    EXPECT_EQ(c.dspark->noise_token_id, 128799);
    EXPECT_EQ(c.dspark->target_layer_ids, (std::vector<int64_t>{40, 41, 42}));
    // 0731 still says num_nextn_predict_layers = 1; the drafter has 3 stages (mtp.0..2).
    EXPECT_EQ(c.num_nextn_predict_layers, 1);
    EXPECT_EQ(c.n_mtp_blocks(), 3);
    EXPECT_EQ(c.compress_ratios.size(), 46u);
    EXPECT_EQ(c.layer_kind(45), LayerKind::SWA);

    // 44 entries (the V4-Flash length) is wrong for a 3-stage drafter.
    expect_refused(with(flash_0731(),
                        [](json& j) {
                            j["compress_ratios"].erase(45);
                            j["compress_ratios"].erase(44);
                        }),
                   {"compress_ratios", "46"});
    expect_refused(with(flash_0731(),
                        [](json& j) {
                            j["dspark_target_layer_ids"] = {40, 41, 43};
                        }),
                   {"dspark_target_layer_ids"});
    expect_refused(with(flash_0731(), [](json& j) { j.erase("dspark_markov_rank"); }), {"dspark_markov_rank"});
}

TEST(Config, ProShapeAccepted) {
    const ModelConfig c = parse_config(pro());
    EXPECT_EQ(c.variant, ModelVariant::V4Pro);
    EXPECT_EQ(c.hidden_size, 7168);
    EXPECT_EQ(c.num_hidden_layers, 61);
    EXPECT_EQ(c.compress_ratios.size(), 62u);
    EXPECT_EQ(c.layer_kind(0), LayerKind::HCA);
    EXPECT_EQ(c.layer_kind(2), LayerKind::CSA);
    EXPECT_EQ(c.layer_kind(61), LayerKind::SWA);
    EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 2.5);
}

TEST(Config, RefusesOtherArchitectures) {
    expect_refused(with(test::flash_official_config_json(),
                        [](json& j) {
                            j["engram_layer_ids"] = {1, 15};
                        }),
                   {"engram_layer_ids", "V4.1"});
    expect_refused(with(test::flash_official_config_json(), [](json& j) { j["model_type"] = "deepseek_v41"; }),
                   {"model_type"});
    expect_refused(with(test::flash_official_config_json(), [](json& j) { j["model_type"] = "deepseek_v32"; }),
                   {"model_type"});
    expect_refused(
        with(test::flash_official_config_json(), [](json& j) { j["architectures"] = {"DeepseekV32ForCausalLM"}; }),
        {"architectures"});
    expect_refused(with(test::flash_official_config_json(), [](json& j) { j["first_k_dense_replace"] = 3; }),
                   {"first_k_dense_replace"});
}

TEST(Config, RefusesInconsistentConfigs) {
    const json base = test::flash_official_config_json();
    expect_refused(with(base, [](json& j) { j["compress_ratios"][5] = 8; }), {"compress_ratios[5]"});
    expect_refused(with(base, [](json& j) { j["compress_ratios"].push_back(0); }), {"compress_ratios", "45", "44"});
    expect_refused(with(base, [](json& j) { j["num_nextn_predict_layers"] = 2; }), {"compress_ratios"});
    expect_refused(with(base, [](json& j) { j.erase("hidden_size"); }), {"hidden_size"});
    expect_refused(with(base, [](json& j) { j.erase("compress_ratios"); }), {"compress_ratios"});
    expect_refused(with(base, [](json& j) { j.erase("quantization_config"); }), {"quantization_config"});
    expect_refused(with(base, [](json& j) { j["head_dim"] = 64; }), {"head_dim", "qk_rope_head_dim"});
    expect_refused(with(base, [](json& j) { j["o_groups"] = 7; }), {"o_groups"});
    expect_refused(with(base, [](json& j) { j["num_key_value_heads"] = 8; }), {"num_key_value_heads"});
    expect_refused(with(base, [](json& j) { j["quantization_config"]["fmt"] = "e5m2"; }), {"quantization_config.fmt"});
    expect_refused(with(base,
                        [](json& j) {
                            j["quantization_config"]["weight_block_size"] = {64, 64};
                        }),
                   {"weight_block_size"});
    expect_refused(with(base, [](json& j) { j["quantization_config"]["scale_fmt"] = "fp32"; }), {"scale_fmt"});
    expect_refused(with(base, [](json& j) { j["hidden_size"] = 4000; }), {"hidden_size", "128"});
    expect_refused(with(base, [](json& j) { j["moe_intermediate_size"] = 2000; }), {"moe_intermediate_size"});
    expect_refused(with(base, [](json& j) { j["num_experts_per_tok"] = 300; }),
                   {"num_experts_per_tok", "n_routed_experts"});
    expect_refused(with(base, [](json& j) { j["rope_scaling"]["mscale"] = 1.0; }), {"rope_scaling.mscale"});
    expect_refused(with(base, [](json& j) { j["rope_scaling"]["type"] = "linear"; }), {"rope_scaling.type"});
    expect_refused(with(base, [](json& j) { j["num_hash_layers"] = 44; }), {"num_hash_layers"});
    expect_refused(with(base, [](json& j) { j["expert_dtype"] = "int4"; }), {"expert_dtype"});
    expect_refused(with(base, [](json& j) { j["scoring_func"] = "softmax"; }), {"scoring_func"});
    expect_refused(with(base, [](json& j) { j["vocab_size"] = "129280"; }), {"vocab_size"});
    expect_refused(with(base, [](json& j) { j["index_head_dim"] = 96; }), {"index_head_dim"});

    const json tf = flash_transformers();
    expect_refused(with(tf, [](json& j) { j["layer_types"][7] = "full_attention"; }), {"layer_types[7]"});
    expect_refused(with(tf, [](json& j) { j["layer_types"].erase(0); }), {"layer_types", "43"});
    expect_refused(with(tf, [](json& j) { j["mlp_layer_types"][10] = "hash_moe"; }), {"mlp_layer_types[10]"});
    expect_refused(with(tf, [](json& j) { j["rope_parameters"]["compress"]["attention_factor"] = 1.277; }),
                   {"attention_factor"});
    expect_refused(with(tf, [](json& j) { j.erase("partial_rotary_factor"); }), {"qk_rope_head_dim"});
    // Both spellings present but disagreeing.
    json both = test::flash_official_config_json();
    both["layer_types"] = tf["layer_types"];
    both["layer_types"][3] = "compressed_sparse_attention";
    expect_refused(both, {"compress_ratios", "layer_types", "layer 3"});
}

TEST(Config, LoadConfigNamesTheFile) {
    const auto dir = std::filesystem::temp_directory_path() / ("onecard_config_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const auto path = dir / "config.json";
    {
        std::ofstream(path) << with(test::flash_official_config_json(), [](json& j) { j["o_groups"] = 5; }).dump();
    }
    try {
        load_config(path);
        ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("o_groups"), std::string::npos) << e.what();
    }
    { std::ofstream(path) << "{ \"model_type\": "; }
    EXPECT_THROW(load_config(path), Error);
    { std::ofstream(path) << test::flash_official_config_json().dump(); }
    EXPECT_EQ(load_config(path).num_hidden_layers, 43);
    std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace onecard
