#include "engine/memory_plan.h"

#include "core/error.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <map>

namespace onecard {
namespace {

constexpr double kGiB = 1073741824.0;

double gib(uint64_t b) {
    return static_cast<double>(b) / kGiB;
}

bool starts_with(const std::string& s, std::string_view p) {
    return s.rfind(p, 0) == 0;
}
bool contains(const std::string& s, std::string_view p) {
    return s.find(p) != std::string::npos;
}

// Component of a checkpoint tensor, by its DeepSeek-native name (dsv4-model.md §7.2). MTP blocks are
// one component whatever their tensor is, so they can be left out as a unit.
const char* component_of(const std::string& n) {
    if (starts_with(n, "mtp.")) return "mtp";
    if (n == "embed.weight") return "embed";
    if (n == "head.weight") return "lm_head";
    if (contains(n, ".ffn.experts.")) return "routed_experts";
    if (contains(n, ".ffn.shared_experts.")) return "shared_experts";
    if (contains(n, ".ffn.gate.")) return "router";
    if (contains(n, ".attn.compressor.") || contains(n, ".attn.indexer.")) return "compressor_indexer";
    if (contains(n, ".attn.")) return "attention";
    if (contains(n, "hc_")) return "hyper_connections";
    return "norms";
}

// Storage format: a `.scale` belongs to its weight's format (UE8M0 block scales of FP8 linears,
// UE8M0 group scales of MXFP4 experts).
const char* format_of(const PlannedTensor& t) {
    const bool expert = contains(t.name, ".ffn.experts.");
    switch (t.dtype) {
        case DType::F8_E4M3:
            return "fp8+scales";
        case DType::F8_E8M0:
            return expert ? "mxfp4+scales" : "fp8+scales";
        case DType::I8:
        case DType::U8:
            return "mxfp4+scales";
        case DType::BF16:
            return "bf16";
        case DType::F32:
            return "f32";
        default:
            return "int";
    }
}

// Expert id of "….ffn.experts.<e>.…", or -1.
int64_t expert_id(const std::string& n) {
    const auto p = n.find(".ffn.experts.");
    if (p == std::string::npos) return -1;
    return std::stoll(n.substr(p + 13));
}

}  // namespace

KvModelShape kv_model_shape_from_config(const ModelConfig& cfg) {
    KvModelShape s;
    s.head_dim = cfg.head_dim;
    s.rope_dim = cfg.qk_rope_head_dim;
    s.index_head_dim = cfg.index_head_dim;
    s.sliding_window = cfg.sliding_window;
    s.n_main_layers = cfg.num_hidden_layers;
    const int64_t n_layers = cfg.num_hidden_layers + cfg.n_mtp_blocks();
    ONECARD_CHECK(static_cast<int64_t>(cfg.compress_ratios.size()) >= n_layers,
                  "memory plan: compress_ratios has {} entries, the model has {} blocks incl. MTP",
                  cfg.compress_ratios.size(), n_layers);
    for (int64_t il = 0; il < n_layers; ++il) {
        const int64_t r = cfg.compress_ratio(il);
        s.compress_ratios.push_back(r);
        s.kinds.push_back(r == 0 ? KvLayerKind::SWA : r == 4 ? KvLayerKind::CSA : KvLayerKind::HCA);
    }
    return s;
}

// Activations of one step of T tokens, every buffer counted as live at once (conservative: v1 does
// not model liveness). Per token, with D = hidden, H = heads, hd = head_dim, I = moe_intermediate,
// k = experts per token:
//   hyper-connection streams in + out   2 · hc·D · 2 B      collapsed + normed input  2 · D · 2 B
//   q low-rank + q + attention output   (q_lora + 2·H·hd) · 2 B
//   grouped output low-rank             o_groups·o_lora · 2 B       kv vector  hd · 2 B
//   compressor kv + gate (fp32)         2·(2·hd + 2·index_hd) · 4 B
//   indexer q                           index_heads · index_hd · 2 B
//   MoE gate/up (fp32), SwiGLU, out     k·I·2·4 B + k·I·2 B + k·D·4 B   (+ shared expert, same)
//   FP8 activation copy + scales        max_in · (1 + 4/128) B, max_in = max(D, H·hd/o_groups, I)
// Per step: logits for the rows that are sampled (fp32 vocab), the indexer scores of a 256-query
// tile over max_context/4 entries (fp32), and 64 MiB of library workspace (cuBLASLt).
uint64_t activation_bytes_for_step(const ModelConfig& cfg, int64_t n_tokens, int64_t max_context,
                                   int64_t max_logit_rows) {
    const int64_t D = cfg.hidden_size, hd = cfg.head_dim, H = cfg.num_attention_heads;
    const int64_t I = cfg.moe_intermediate_size, k = cfg.num_experts_per_tok + cfg.n_shared_experts;
    const int64_t max_in = std::max({D, H * hd / std::max<int64_t>(cfg.o_groups, 1), I});
    int64_t per_tok = 2 * cfg.hc_mult * D * 2 + 2 * D * 2;
    per_tok += (cfg.q_lora_rank + 2 * H * hd) * 2;
    per_tok += cfg.o_groups * cfg.o_lora_rank * 2 + hd * 2;
    per_tok += 2 * (2 * hd + 2 * cfg.index_head_dim) * 4;
    per_tok += cfg.index_n_heads * cfg.index_head_dim * 2;
    per_tok += k * I * 2 * 4 + k * I * 2 + k * D * 4;
    per_tok += max_in + max_in * 4 / 128;
    const int64_t q_tile = std::min<int64_t>(n_tokens, 256);
    const int64_t per_step = max_logit_rows * cfg.vocab_size * 4 + q_tile * (max_context / 4) * 4 + (int64_t{64} << 20);
    return static_cast<uint64_t>(n_tokens * per_tok + per_step);
}

MemoryPlan make_memory_plan(const ModelConfig& cfg, const std::vector<PlannedTensor>& tensors,
                            const MemoryPlanOptions& opt) {
    ONECARD_CHECK(opt.max_sequences > 0 && opt.max_step_tokens > 0 && opt.kv_tokens >= 0,
                  "memory plan: max_sequences {}, max_step_tokens {}, kv_tokens {} must be positive", opt.max_sequences,
                  opt.max_step_tokens, opt.kv_tokens);
    MemoryPlan plan;
    plan.n_routed_experts = cfg.n_routed_experts;
    plan.n_resident_experts =
        opt.n_resident_experts < 0 ? cfg.n_routed_experts : std::min(opt.n_resident_experts, cfg.n_routed_experts);
    ONECARD_CHECK(plan.n_resident_experts >= cfg.num_experts_per_tok,
                  "memory plan: {} resident experts per layer is fewer than the {} each token uses",
                  plan.n_resident_experts, cfg.num_experts_per_tok);

    // ---- weights ------------------------------------------------------------------------------
    std::map<std::string, uint64_t> by_component, by_format;
    uint64_t routed_all = 0;
    for (const auto& t : tensors) {
        const std::string comp = component_of(t.name);
        const bool in_mtp = comp == "mtp";
        const int64_t eid = expert_id(t.name);  // routed experts of the main layers and of the MTP block
        if (eid >= 0 && (!in_mtp || opt.include_mtp)) routed_all += t.nbytes;
        bool resident = true;
        if (in_mtp && !opt.include_mtp) resident = false;
        if (eid >= plan.n_resident_experts) resident = false;
        if (!resident) {
            plan.weight_bytes_not_resident += t.nbytes;
            continue;
        }
        by_component[comp] += t.nbytes;
        by_format[format_of(t)] += t.nbytes;
        plan.weight_bytes += t.nbytes;
    }
    plan.routed_expert_bytes_per_expert =
        cfg.n_routed_experts > 0 ? routed_all / static_cast<uint64_t>(cfg.n_routed_experts) : 0;
    static constexpr std::array kComponentOrder = {
        "embed",          "lm_head", "attention", "compressor_indexer", "hyper_connections", "router", "shared_experts",
        "routed_experts", "norms",   "mtp"};
    for (const char* c : kComponentOrder) {
        if (!by_component.count(c)) continue;
        std::string detail;
        if (std::string(c) == "routed_experts")
            detail = fmt::format("{} of {} experts per layer", plan.n_resident_experts, cfg.n_routed_experts);
        plan.weight_components.push_back({c, by_component[c], detail});
    }
    for (const auto& [f, b] : by_format) plan.weight_formats.push_back({f, b, ""});

    // ---- fixed-size items ---------------------------------------------------------------------
    plan.activation_bytes =
        activation_bytes_for_step(cfg, opt.max_step_tokens, opt.max_context, std::max<int64_t>(opt.max_sequences, 1));
    // A captured decode graph holds its kernel nodes and parameters (a few MB at most); 32 MiB per
    // bucket is a deliberate over-estimate until measured on the device.
    plan.graph_bytes = static_cast<uint64_t>(opt.graph_batches.size()) * (32ull << 20);
    plan.headroom_bytes = opt.headroom_bytes;
    plan.device_bytes = opt.device_bytes;

    // ---- KV pool ------------------------------------------------------------------------------
    plan.kv_spec = make_kv_cache_spec(kv_model_shape_from_config(cfg), opt.kv_block_size);
    const auto& spec = plan.kv_spec;
    plan.kv_slots = opt.max_sequences;
    const uint64_t slots_bytes = static_cast<uint64_t>(plan.kv_slots) * static_cast<uint64_t>(spec.slot_bytes);
    const uint64_t fixed = plan.weight_bytes + plan.activation_bytes + plan.graph_bytes + plan.headroom_bytes;
    // Each live sequence can leave its last block partly empty: one spare block per sequence.
    const int64_t min_blocks = plan.kv_slots;
    if (opt.kv_tokens > 0) {
        plan.kv_blocks = spec.blocks_for_tokens(opt.kv_tokens) + plan.kv_slots;
    } else {
        const uint64_t left = opt.device_bytes > fixed + slots_bytes ? opt.device_bytes - fixed - slots_bytes : 0;
        plan.kv_blocks =
            std::max<int64_t>(static_cast<int64_t>(left / static_cast<uint64_t>(spec.block_bytes)), min_blocks);
    }
    plan.kv_pool_bytes = slots_bytes + static_cast<uint64_t>(plan.kv_blocks) * static_cast<uint64_t>(spec.block_bytes);
    plan.kv_token_capacity = (plan.kv_blocks - plan.kv_slots) * spec.block_size;
    plan.planned_bytes = fixed + plan.kv_pool_bytes;
    plan.fits = plan.planned_bytes <= opt.device_bytes;

    if (!plan.fits) {
        const uint64_t short_by = plan.planned_bytes - opt.device_bytes;
        std::string options;
        const uint64_t per_expert = plan.routed_expert_bytes_per_expert;
        if (per_expert > 0) {
            const uint64_t n_drop = (short_by + per_expert - 1) / per_expert;
            const int64_t n_fit = plan.n_resident_experts - static_cast<int64_t>(n_drop);
            if (n_fit >= cfg.num_experts_per_tok) {
                plan.max_resident_experts_that_fit = n_fit;
                options += fmt::format(
                    "\n  - keep at most {} of {} routed experts per layer resident (--experts {}; "
                    "each expert id is {:.2f} GiB across all layers)",
                    n_fit, cfg.n_routed_experts, n_fit, gib(per_expert));
            }
        }
        if (opt.kv_tokens > 0 && plan.kv_pool_bytes > slots_bytes) {
            const uint64_t paged = plan.kv_pool_bytes - slots_bytes;
            if (paged > short_by) {
                const uint64_t blocks_ok = (paged - short_by) / static_cast<uint64_t>(spec.block_bytes);
                const int64_t tokens_ok = (static_cast<int64_t>(blocks_ok) - plan.kv_slots) * spec.block_size;
                if (tokens_ok > 0)
                    options += fmt::format("\n  - shrink the KV pool to at most {} tokens (--kv-tokens; now {})",
                                           tokens_ok, opt.kv_tokens);
            }
        }
        if (opt.include_mtp && by_component.count("mtp") && by_component["mtp"] > 0)
            options += fmt::format("\n  - leave out the MTP block ({:.2f} GiB; no speculative decoding)",
                                   gib(by_component["mtp"]));
        options += fmt::format("\n  - fewer tokens per step (--max-step-tokens; activations now {:.2f} GiB for {})",
                               gib(plan.activation_bytes), opt.max_step_tokens);
        plan.refusal = fmt::format(
            "memory plan does not fit: needs {:.2f} GiB (weights {:.2f} + KV pool {:.2f} + activations {:.2f} + "
            "graphs {:.2f} + headroom {:.2f}) but the device has {:.2f} GiB free: short by {:.2f} GiB. Options:{}",
            gib(plan.planned_bytes), gib(plan.weight_bytes), gib(plan.kv_pool_bytes), gib(plan.activation_bytes),
            gib(plan.graph_bytes), gib(plan.headroom_bytes), gib(opt.device_bytes), gib(short_by), options);
    }
    return plan;
}

void require_plan_fits(const MemoryPlan& plan) {
    if (!plan.fits) throw Error(plan.refusal);
}

std::string memory_plan_report(const MemoryPlan& p) {
    std::string out = fmt::format("memory plan ({:.2f} GiB device):\n", gib(p.device_bytes));
    out += fmt::format("  weights            {:8.2f} GiB resident", gib(p.weight_bytes));
    if (p.weight_bytes_not_resident) out += fmt::format(" ({:.2f} GiB not resident)", gib(p.weight_bytes_not_resident));
    out += "\n";
    for (const auto& c : p.weight_components)
        out += fmt::format("    {:<20} {:8.2f} GiB{}\n", c.name, gib(c.bytes), c.detail.empty() ? "" : "  " + c.detail);
    for (const auto& f : p.weight_formats) out += fmt::format("    as {:<17} {:8.2f} GiB\n", f.name, gib(f.bytes));
    out += fmt::format(
        "  KV pool            {:8.2f} GiB  {} tokens in {} blocks of {}, {} sequence slots "
        "({:.1f} B/token, {:.1f} MB/sequence fixed)\n",
        gib(p.kv_pool_bytes), p.kv_token_capacity, p.kv_blocks, p.kv_spec.block_size, p.kv_slots,
        kv_bytes_per_token(p.kv_spec), kv_fixed_bytes_per_sequence(p.kv_spec) / 1e6);
    out += fmt::format("  activations        {:8.2f} GiB\n", gib(p.activation_bytes));
    out += fmt::format("  cuda graphs        {:8.2f} GiB\n", gib(p.graph_bytes));
    out += fmt::format("  headroom           {:8.2f} GiB\n", gib(p.headroom_bytes));
    out += fmt::format("  total              {:8.2f} GiB of {:.2f}: {}\n", gib(p.planned_bytes), gib(p.device_bytes),
                       p.fits ? "fits" : "DOES NOT FIT");
    return out;
}

std::string memory_plan_json(const MemoryPlan& p) {
    nlohmann::ordered_json j;
    j["fits"] = p.fits;
    j["device_bytes"] = p.device_bytes;
    j["planned_bytes"] = p.planned_bytes;
    j["weights_bytes"] = p.weight_bytes;
    j["weights_gib"] = gib(p.weight_bytes);
    j["weights_not_resident_bytes"] = p.weight_bytes_not_resident;
    j["resident_experts"] = p.n_resident_experts;
    j["routed_experts"] = p.n_routed_experts;
    nlohmann::ordered_json comp = nlohmann::ordered_json::object(), fmts = nlohmann::ordered_json::object();
    for (const auto& c : p.weight_components) comp[c.name] = c.bytes;
    for (const auto& f : p.weight_formats) fmts[f.name] = f.bytes;
    j["weights_by_component"] = comp;
    j["weights_by_format"] = fmts;
    j["kv_pool_bytes"] = p.kv_pool_bytes;
    j["kv_pool_gib"] = gib(p.kv_pool_bytes);
    j["kv_token_capacity"] = p.kv_token_capacity;
    j["kv_blocks"] = p.kv_blocks;
    j["kv_block_size"] = p.kv_spec.block_size;
    j["kv_slots"] = p.kv_slots;
    j["activation_bytes"] = p.activation_bytes;
    j["graph_bytes"] = p.graph_bytes;
    j["headroom_bytes"] = p.headroom_bytes;
    if (!p.fits) j["refusal"] = p.refusal;
    return j.dump();
}

}  // namespace onecard
