// Helpers shared by the test executables (header-only; every test links the module libraries).
// Kept here so each test file states only what it checks.
#pragma once

#include "loader/checkpoint.h"
#include "model/config.h"
#include "model/deepseek_v4.h"
#include "model/synth.h"
#include "model/weights.h"

#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace onecard::test {

// A fresh directory under the system temp dir, removed (with its contents) on destruction.
class TempDir {
public:
    explicit TempDir(const std::string& tag = "onecard") {
        std::random_device rd;
        path_ = std::filesystem::temp_directory_path() /
                (tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(rd()) + "_" + std::to_string(rd()));
        std::filesystem::create_directories(path_);
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const std::filesystem::path& path() const { return path_; }
    std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

private:
    std::filesystem::path path_;
};

struct CommandResult {
    int rc = -1;      // pclose() status: 0 on success
    std::string out;  // what the command printed (redirect stderr in `cmd` to capture it too)
};

// Runs a shell command and captures its standard output.
inline CommandResult run_command(const std::string& cmd) {
    CommandResult r;
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return r;
    std::array<char, 4096> buf{};
    size_t n = 0;
    while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
    r.rc = pclose(p);
    return r;
}

// Path of the built `onecard` binary.
inline std::filesystem::path onecard_binary() {
    return std::filesystem::path(ONECARD_BINARY_DIR) / "onecard";
}

// The official root config.json of deepseek-ai/DeepSeek-V4-Flash (current revision), typed in
// from dsv4-model.md §1.
inline nlohmann::json flash_official_config_json() {
    using json = nlohmann::json;
    json ratios = json::array({0, 0});
    for (int i = 0; i < 20; ++i) {
        ratios.push_back(4);
        ratios.push_back(128);
    }
    ratios.push_back(4);
    ratios.push_back(0);
    return json{
        {"architectures", {"DeepseekV4ForCausalLM"}},
        {"attention_bias", false},
        {"attention_dropout", 0.0},
        {"bos_token_id", 0},
        {"compress_ratios", ratios},
        {"compress_rope_theta", 160000},
        {"eos_token_id", 1},
        {"expert_dtype", "fp4"},
        {"hc_eps", 1e-6},
        {"hc_mult", 4},
        {"hc_sinkhorn_iters", 20},
        {"head_dim", 512},
        {"hidden_act", "silu"},
        {"hidden_size", 4096},
        {"index_head_dim", 128},
        {"index_n_heads", 64},
        {"index_topk", 512},
        {"initializer_range", 0.02},
        {"max_position_embeddings", 1048576},
        {"model_type", "deepseek_v4"},
        {"moe_intermediate_size", 2048},
        {"n_routed_experts", 256},
        {"n_shared_experts", 1},
        {"norm_topk_prob", true},
        {"num_attention_heads", 64},
        {"num_experts_per_tok", 6},
        {"num_hash_layers", 3},
        {"num_hidden_layers", 43},
        {"num_key_value_heads", 1},
        {"num_nextn_predict_layers", 1},
        {"o_groups", 8},
        {"o_lora_rank", 1024},
        {"q_lora_rank", 1024},
        {"qk_rope_head_dim", 64},
        {"quantization_config",
         {{"activation_scheme", "dynamic"},
          {"fmt", "e4m3"},
          {"quant_method", "fp8"},
          {"scale_fmt", "ue8m0"},
          {"weight_block_size", {128, 128}}}},
        {"rms_norm_eps", 1e-6},
        {"rope_scaling",
         {{"beta_fast", 32},
          {"beta_slow", 1},
          {"factor", 16},
          {"original_max_position_embeddings", 65536},
          {"type", "yarn"}}},
        {"rope_theta", 10000},
        {"routed_scaling_factor", 1.5},
        {"scoring_func", "sqrtsoftplus"},
        {"sliding_window", 128},
        {"swiglu_limit", 10.0},
        {"tie_word_embeddings", false},
        {"topk_method", "noaux_tc"},
        {"torch_dtype", "bfloat16"},
        {"transformers_version", "4.57.1"},
        {"use_cache", true},
        {"vocab_size", 129280},
    };
}

// DeepSeek-V4-Flash-0731's config: the Flash one plus the DSpark drafter (three stages stored as
// mtp.0..2 after the 43 layers, their compress ratios 0).
inline nlohmann::json flash_0731_config_json() {
    nlohmann::json j = flash_official_config_json();
    j["compress_ratios"].push_back(0);
    j["compress_ratios"].push_back(0);  // 46 entries: 43 layers + 3 DSpark stages
    j["dspark_block_size"] = 5;
    j["dspark_markov_rank"] = 256;
    j["dspark_noise_token_id"] = 128799;
    j["dspark_target_layer_ids"] = {40, 41, 42};
    return j;
}

inline SynthOptions tiny_options(uint64_t seed) {
    SynthOptions opt;
    opt.preset = SynthPreset::Tiny;
    opt.seed = seed;
    return opt;
}

// Bit-for-bit equality of two fp32 arrays (NaNs with the same bits compare equal).
inline bool bitwise_equal(std::span<const float> a, std::span<const float> b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// n token ids drawn uniformly from [0, vocab) by an mt19937 seeded with `seed`.
inline std::vector<int32_t> random_tokens(int64_t n, uint32_t seed, int64_t vocab) {
    std::mt19937 rng(seed);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
    return t;
}

// A synthesised tiny checkpoint (every layer kind, hash layers) loaded in both numerics modes.
struct TinyModel {
    TempDir dir;
    ModelConfig cfg;
    std::unique_ptr<Checkpoint> ckpt;
    ModelWeights weights;
    std::unique_ptr<DeepSeekV4> exact, reference;

    TinyModel(uint64_t seed, const std::string& tag) : TinyModel(tiny_options(seed), tag) {}
    // Other synth options (a window, the DSpark drafter, ...) over opt.preset's shape.
    TinyModel(const SynthOptions& opt, const std::string& tag) : dir(tag) {
        synth_write(synth_config(opt), opt.seed, dir.path(), synth_default_shard_bytes(opt.preset), false);
        cfg = load_config(dir / "config.json");
        ckpt = std::make_unique<Checkpoint>(Checkpoint::open(dir.path()));
        weights = bind_weights(cfg, *ckpt);
        exact = std::make_unique<DeepSeekV4>(cfg, weights, Numerics::Exact);
        reference = std::make_unique<DeepSeekV4>(cfg, weights, Numerics::Reference);
    }
};

// The same weights with every hyper-connection bias (hc_attn_base, hc_ffn_base of each layer) moved by
// one fp32 ulp towards +inf: every pre/post/comb weight, so every element of every sub-block input,
// changes by ~1e-7 relative — the size of a summation-order difference, far below any bf16 rounding.
// It measures how far the model's numerics carry the smallest possible difference. `storage` keeps
// the nudged values alive for as long as the returned views are used.
inline ModelWeights nudge_hc_bases(const ModelWeights& w, std::vector<std::vector<float>>& storage) {
    ModelWeights out = w;
    storage.assign(2 * out.layers.size(), {});
    size_t k = 0;
    for (BlockWeights& b : out.layers) {
        for (TensorView* t : {&b.hc_attn.base, &b.hc_ffn.base}) {
            if (t->dtype != DType::F32) throw std::runtime_error("nudge_hc_bases: " + t->name + " is not F32");
            std::vector<float>& v = storage[k++];
            v.resize(static_cast<size_t>(t->numel()));
            std::memcpy(v.data(), t->data, v.size() * 4);
            for (float& x : v) x = std::nextafter(x, INFINITY);
            t->data = reinterpret_cast<const std::byte*>(v.data());
        }
    }
    return out;
}

// Per-row agreement of two logits arrays [rows, vocab]: rows [0, n) of `a` against rows [row0, row0 + n)
// of `b` (the reference). Relative L2 per row in double (‖a − b‖ / ‖b‖; a non-finite value gives +inf),
// its median and worst, and how many rows have the same argmax.
struct LogitsAgreement {
    double median = 0.0, worst = 0.0;
    int64_t argmax_same = 0, n = 0;
    std::vector<double> per_row;  // [n]
    double argmax_share() const { return n ? static_cast<double>(argmax_same) / static_cast<double>(n) : 1.0; }
};

inline LogitsAgreement compare_logits(const std::vector<float>& a, const std::vector<float>& b, int64_t row0, int64_t n,
                                      int64_t vocab) {
    if (n <= 0 || static_cast<int64_t>(a.size()) < n * vocab || static_cast<int64_t>(b.size()) < (row0 + n) * vocab)
        throw std::runtime_error("compare_logits: rows out of range");
    LogitsAgreement g;
    g.n = n;
    for (int64_t i = 0; i < n; ++i) {
        const float* x = a.data() + i * vocab;
        const float* y = b.data() + (row0 + i) * vocab;
        double num = 0.0, den = 0.0;
        bool finite = true;
        for (int64_t j = 0; j < vocab; ++j) {
            finite = finite && std::isfinite(x[j]) && std::isfinite(y[j]);
            const double d = static_cast<double>(x[j]) - y[j];
            num += d * d;
            den += static_cast<double>(y[j]) * y[j];
        }
        g.per_row.push_back(finite ? std::sqrt(num / (den > 0 ? den : 1.0)) : INFINITY);
        g.argmax_same += std::max_element(x, x + vocab) - x == std::max_element(y, y + vocab) - y;
    }
    std::vector<double> s = g.per_row;
    std::sort(s.begin(), s.end());
    g.median = s[s.size() / 2];
    g.worst = s.back();
    return g;
}

}  // namespace onecard::test
