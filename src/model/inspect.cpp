#include "model/inspect.h"

#include "core/error.h"
#include "loader/checkpoint.h"
#include "model/weights.h"

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <array>
#include <map>

namespace onecard {

namespace {

constexpr std::array<const char*, 11> kComponents = {
    "embeddings/head", "attention", "compressor", "indexer", "router", "routed experts",
    "shared expert",   "HC",        "norms",      "MTP",     "other"};

bool contains(const std::string& s, const char* part) {
    return s.find(part) != std::string::npos;
}

// Human-readable size in GB (10^9, what disk tools print) and GiB (what GPU memory is sold in).
std::string size_str(uint64_t bytes) {
    if (bytes < (1ull << 20)) return fmt::format("{:.1f} KiB", static_cast<double>(bytes) / 1024.0);
    if (bytes < (1ull << 30)) return fmt::format("{:.2f} MiB", static_cast<double>(bytes) / double(1ull << 20));
    return fmt::format("{:.2f} GiB ({:.2f} GB)", static_cast<double>(bytes) / double(1ull << 30),
                       static_cast<double>(bytes) / 1e9);
}

// One H200 as lent here: ~139 GiB visible to CUDA.
constexpr double kH200GiB = 139.0;

}  // namespace

const char* tensor_component(const std::string& n) {
    if (n.rfind("mtp.", 0) == 0) return "MTP";
    if (n == "embed.weight" || n == "head.weight") return "embeddings/head";
    if (contains(n, ".ffn.experts.")) return "routed experts";
    if (contains(n, ".ffn.shared_experts.")) return "shared expert";
    if (contains(n, ".ffn.gate.")) return "router";
    if (contains(n, ".attn.indexer.")) return "indexer";
    if (contains(n, ".attn.compressor.")) return "compressor";
    if (contains(n, "hc_")) return "HC";
    if (n.size() >= 11 && n.compare(n.size() - 11, 11, "norm.weight") == 0 && !contains(n, ".attn.")) return "norms";
    if (contains(n, ".attn.")) return "attention";
    return "other";
}

InspectReport inspect_checkpoint(const std::filesystem::path& dir) {
    InspectReport r;
    r.dir = dir;
    r.config = load_config(dir / "config.json");
    const Checkpoint ckpt = Checkpoint::open(dir);
    r.n_shards = ckpt.shard_paths().size();
    std::map<std::string, TensorGroupStats> dtypes;
    std::map<std::string, TensorGroupStats> comps;
    for (const TensorView& t : ckpt.tensors()) {
        ++r.n_tensors;
        r.n_bytes += t.nbytes;
        TensorGroupStats& d = dtypes[std::string(dtype_name(t.dtype))];
        ++d.n_tensors;
        d.n_bytes += t.nbytes;
        TensorGroupStats& c = comps[tensor_component(t.name)];
        ++c.n_tensors;
        c.n_bytes += t.nbytes;
    }
    for (auto& [name, s] : dtypes) {
        s.name = name;
        r.by_dtype.push_back(s);
    }
    for (const char* name : kComponents) {
        auto it = comps.find(name);
        if (it == comps.end()) continue;
        it->second.name = name;
        r.by_component.push_back(it->second);
    }
    try {
        bind_weights(r.config, ckpt);
        r.weights_ok = true;
    } catch (const Error& e) {
        r.weights_error = e.what();
    }

    const ModelConfig& c = r.config;
    const uint64_t nope = static_cast<uint64_t>(c.nope_head_dim()), rope = static_cast<uint64_t>(c.qk_rope_head_dim);
    const uint64_t entry = nope + 2 * rope + nope / 64 + 1;  // 584 B for Flash
    const uint64_t index_entry = static_cast<uint64_t>(c.index_head_dim) + 4;
    double per_token = 0;
    for (int64_t il = 0; il < c.num_hidden_layers; ++il) {
        const int64_t ratio = c.compress_ratio(il);
        if (ratio == 4) per_token += static_cast<double>(entry + index_entry) / 4.0;
        if (ratio == 128) per_token += static_cast<double>(entry) / 128.0;
    }
    r.kv_bytes_per_token = static_cast<uint64_t>(per_token + 0.5);
    r.kv_bytes_fixed_per_sequence =
        static_cast<uint64_t>(c.num_hidden_layers + c.n_mtp_blocks()) * static_cast<uint64_t>(c.sliding_window) * entry;
    return r;
}

std::string inspect_text(const InspectReport& r) {
    const ModelConfig& c = r.config;
    std::string s;
    s += fmt::format("checkpoint   {}\n", r.dir.string());
    s += fmt::format("model        {}\n", variant_name(c.variant));
    s += fmt::format("dims         vocab {}, hidden {}, {} heads x {} (rope {}), q_lora {}, o_groups {} x o_lora {}\n",
                     c.vocab_size, c.hidden_size, c.num_attention_heads, c.head_dim, c.qk_rope_head_dim, c.q_lora_rank,
                     c.o_groups, c.o_lora_rank);
    s += fmt::format("moe          {} routed experts (top-{}, {}), {} shared, inter {}, {} scoring, scale {}\n",
                     c.n_routed_experts, c.num_experts_per_tok, c.expert_dtype == "fp4" ? "MXFP4" : "FP8",
                     c.n_shared_experts, c.moe_intermediate_size, c.scoring_func, c.routed_scaling_factor);
    s += fmt::format("attention    window {}, indexer {} heads x {} top-{}, rope theta {} / {} (YaRN x{} over {})\n",
                     c.sliding_window, c.index_n_heads, c.index_head_dim, c.index_topk, c.rope_theta,
                     c.compress_rope_theta, c.rope_scaling.factor, c.rope_scaling.original_max_position_embeddings);
    s += fmt::format("hc           {} streams, {} Sinkhorn iterations\n", c.hc_mult, c.hc_sinkhorn_iters);
    if (c.dspark)
        s += fmt::format("dspark       block {}, markov rank {}, noise token {}, {} stages tapping layers {}\n",
                         c.dspark->block_size, c.dspark->markov_rank, c.dspark->noise_token_id, c.n_mtp_blocks(),
                         fmt::join(c.dspark->target_layer_ids, ","));

    int64_t n_kind[3] = {0, 0, 0};
    for (int64_t il = 0; il < c.num_hidden_layers; ++il) ++n_kind[static_cast<int>(c.layer_kind(il))];
    const std::string hash = c.num_hash_layers > 0 ? fmt::format("0..{}", c.num_hash_layers - 1) : "none";
    s += fmt::format("\nlayer schedule: {} layers ({} SWA, {} CSA, {} HCA), hash-routed layers {}, {} {} block(s)\n",
                     c.num_hidden_layers, n_kind[0], n_kind[1], n_kind[2], hash, c.n_mtp_blocks(),
                     c.dspark ? "DSpark" : "MTP");
    for (int64_t il = 0; il < c.num_hidden_layers + c.n_mtp_blocks(); ++il) {
        const bool mtp = il >= c.num_hidden_layers;
        const std::string label = mtp ? fmt::format("mtp.{}", il - c.num_hidden_layers) : fmt::format("{}", il);
        s += fmt::format("  {:>6} {}{}", label, layer_kind_name(c.layer_kind(il)),
                         c.is_hash_layer(il) && !mtp ? "#" : " ");
        if ((il + 1) % 8 == 0 || il + 1 == c.num_hidden_layers + c.n_mtp_blocks()) s += "\n";
    }
    s += "  (# = hash-routed by token id)\n";

    s += fmt::format("\ntensors: {} in {} shard(s), {}\n", r.n_tensors, r.n_shards, size_str(r.n_bytes));
    s += "  by dtype:\n";
    for (const auto& g : r.by_dtype)
        s += fmt::format("    {:<16} {:>8} tensors  {}\n", g.name, g.n_tensors, size_str(g.n_bytes));
    s += "  by component:\n";
    for (const auto& g : r.by_component)
        s += fmt::format("    {:<16} {:>8} tensors  {}\n", g.name, g.n_tensors, size_str(g.n_bytes));

    s += fmt::format("\nweights: {}\n",
                     r.weights_ok ? "all tensors bound, dtypes and shapes match the config" : r.weights_error);
    const double gib = static_cast<double>(r.n_bytes) / double(1ull << 30);
    s += fmt::format("\nGPU memory: weights as stored {}; {} one H200 (~{:.0f} GiB) by weights alone.\n",
                     size_str(r.n_bytes), gib < kH200GiB ? "fit on" : "do NOT fit on", kH200GiB);
    s += fmt::format("  Add the KV cache (~{} B/token, est.) + {} of sliding windows per sequence,\n",
                     r.kv_bytes_per_token, size_str(r.kv_bytes_fixed_per_sequence));
    s += "  compressor state, activations and CUDA workspace.\n";
    return s;
}

nlohmann::json inspect_json(const InspectReport& r) {
    const ModelConfig& c = r.config;
    nlohmann::json j;
    j["dir"] = r.dir.string();
    j["variant"] = variant_name(c.variant);
    j["config"] = to_official_json(c);
    nlohmann::json sched = nlohmann::json::array();
    for (int64_t il = 0; il < c.num_hidden_layers + c.n_mtp_blocks(); ++il) {
        const bool mtp = il >= c.num_hidden_layers;
        sched.push_back(
            {{"block", mtp ? fmt::format("mtp.{}", il - c.num_hidden_layers) : fmt::format("layers.{}", il)},
             {"kind", layer_kind_name(c.layer_kind(il))},
             {"compress_ratio", c.compress_ratio(il)},
             {"hash_routed", !mtp && c.is_hash_layer(il)}});
    }
    j["schedule"] = std::move(sched);
    j["n_shards"] = r.n_shards;
    j["n_tensors"] = r.n_tensors;
    j["n_bytes"] = r.n_bytes;
    auto groups = [](const std::vector<TensorGroupStats>& v) {
        nlohmann::json o = nlohmann::json::object();
        for (const auto& g : v) o[g.name] = {{"tensors", g.n_tensors}, {"bytes", g.n_bytes}};
        return o;
    };
    j["by_dtype"] = groups(r.by_dtype);
    j["by_component"] = groups(r.by_component);
    j["weights_ok"] = r.weights_ok;
    if (!r.weights_ok) j["weights_error"] = r.weights_error;
    j["memory"] = {{"weights_bytes", r.n_bytes},
                   {"kv_bytes_per_token_est", r.kv_bytes_per_token},
                   {"kv_bytes_fixed_per_sequence_est", r.kv_bytes_fixed_per_sequence},
                   {"note", "weights as stored; add KV cache, compressor state, activations and CUDA workspace"}};
    return j;
}

}  // namespace onecard
