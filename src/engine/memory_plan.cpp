#include "engine/memory_plan.h"

#include "core/error.h"
#include "model/expert_profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>

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

namespace {

// (layer, expert) of a main layer's routed-expert tensor "layers.<L>.ffn.experts.<E>.…"; false for
// every other tensor (the MTP block's experts stay with the MTP weights).
bool main_expert_pair(const std::string& n, int64_t& layer, int64_t& expert) {
    if (!starts_with(n, "layers.")) return false;
    const auto p = n.find(".ffn.experts.");
    if (p == std::string::npos) return false;
    char* end = nullptr;
    layer = std::strtoll(n.c_str() + 7, &end, 10);
    if (end == n.c_str() + 7) return false;
    const char* at = n.c_str() + p + 13;
    expert = std::strtoll(at, &end, 10);
    return end != at;
}

}  // namespace

uint64_t host_mem_available_bytes() {
    std::ifstream in("/proc/meminfo");
    std::string key;
    uint64_t value = 0;
    std::string unit;
    while (in >> key >> value) {
        std::getline(in, unit);  // " kB"
        if (key == "MemAvailable:") return value * 1024;
    }
    return 0;
}

MemoryPlan make_memory_plan(const ModelConfig& cfg, const std::vector<PlannedTensor>& tensors,
                            const MemoryPlanOptions& opt) {
    ONECARD_CHECK(opt.max_num_seqs > 0 && opt.max_num_batched_tokens > 0 && opt.kv_tokens >= 0,
                  "memory plan: max_num_seqs {}, max_num_batched_tokens {}, kv_tokens {} must be positive",
                  opt.max_num_seqs, opt.max_num_batched_tokens, opt.kv_tokens);
    ONECARD_CHECK(opt.kv_tokens == 0 || opt.kv_pool_bytes == 0,
                  "memory plan: give kv_tokens or kv_pool_bytes, not both");
    ONECARD_CHECK(opt.gpu_memory_utilization >= 0 && opt.gpu_memory_utilization <= 1,
                  "memory plan: gpu_memory_utilization {} must be in (0, 1] (a fraction of the card's total memory)",
                  opt.gpu_memory_utilization);
    MemoryPlan plan;
    plan.n_routed_experts = cfg.n_routed_experts;
    plan.n_resident_experts =
        opt.n_resident_experts < 0 ? cfg.n_routed_experts : std::min(opt.n_resident_experts, cfg.n_routed_experts);
    ONECARD_CHECK(plan.n_resident_experts >= cfg.num_experts_per_tok,
                  "memory plan: {} resident experts per layer is fewer than the {} each token uses",
                  plan.n_resident_experts, cfg.num_experts_per_tok);
    const int64_t L = cfg.num_hidden_layers, E = plan.n_resident_experts;

    // ---- the GPU budget -----------------------------------------------------------------------
    plan.gpu_memory_utilization = opt.gpu_memory_utilization;
    const uint64_t card_total = opt.device_total_bytes > 0 ? opt.device_total_bytes : opt.device_bytes;
    if (opt.gpu_memory_utilization > 0) {
        plan.device_bytes = static_cast<uint64_t>(static_cast<double>(card_total) * opt.gpu_memory_utilization);
        plan.budget_source =
            fmt::format("gpu_memory_utilization {:.3g} of {:.2f} GiB", opt.gpu_memory_utilization, gib(card_total));
    } else {
        plan.device_bytes = opt.device_bytes;
        plan.budget_source = "free memory";
    }
    const uint64_t budget = plan.device_bytes;

    // ---- the expert-use profile (ranks pairs for the GPU) ---------------------------------------
    std::optional<ExpertUseProfile> profile;  // over the resident experts
    if (opt.expert_profile != nullptr) {
        const ExpertUseProfile& p = *opt.expert_profile;
        ONECARD_CHECK(p.n_layers() == L && p.n_experts() == cfg.n_routed_experts,
                      "memory plan: the expert profile is for {} layers x {} experts, the model has {} layers x {} "
                      "experts",
                      p.n_layers(), p.n_experts(), L, cfg.n_routed_experts);
        profile = E == p.n_experts() ? p : p.first_experts(E);
    }

    // ---- fixed-size items ---------------------------------------------------------------------
    plan.workspace_exact = opt.workspace_bytes > 0;
    plan.activation_bytes = plan.workspace_exact
                                ? opt.workspace_bytes
                                : activation_bytes_for_step(cfg, opt.max_num_batched_tokens, opt.max_context,
                                                            std::max<int64_t>(opt.max_num_seqs, 1));
    // A captured decode graph holds its kernel nodes and parameters (a few MB at most); 32 MiB per
    // bucket is a deliberate over-estimate until measured on the device.
    plan.graph_bytes = static_cast<uint64_t>(opt.graph_batches.size()) * (32ull << 20);
    plan.headroom_bytes = opt.headroom_bytes;
    KvModelShape kv_shape = kv_model_shape_from_config(cfg);
    kv_shape.ring_spare = opt.kv_ring_spare;
    plan.kv_spec = make_kv_cache_spec(kv_shape, opt.kv_block_size);
    const auto& spec = plan.kv_spec;
    plan.kv_slots = opt.max_num_seqs;
    const uint64_t slots_bytes = static_cast<uint64_t>(plan.kv_slots) * static_cast<uint64_t>(spec.slot_bytes);
    const auto block_bytes = static_cast<uint64_t>(spec.block_bytes);
    const uint64_t others = plan.activation_bytes + plan.graph_bytes + plan.headroom_bytes;
    // A KV pool given in bytes holds what the engine's plan_kv_pool makes of them: the slots, then
    // whole blocks (one spare per sequence, as below).
    int64_t kv_tokens = opt.kv_tokens;
    if (opt.kv_pool_bytes > 0) {
        const int64_t blocks =
            opt.kv_pool_bytes > slots_bytes ? static_cast<int64_t>((opt.kv_pool_bytes - slots_bytes) / block_bytes) : 0;
        ONECARD_CHECK(
            blocks > plan.kv_slots,
            "memory plan: a KV pool of {} bytes cannot hold {} sequence slots ({} B each) plus their {} spare "
            "blocks and one more ({} B each)",
            opt.kv_pool_bytes, plan.kv_slots, spec.slot_bytes, plan.kv_slots, spec.block_bytes);
        kv_tokens = (blocks - plan.kv_slots) * spec.block_size;
    }

    // ---- what would be resident, and each main-layer (layer, expert) pair's bytes ---------------
    auto resident = [&](const PlannedTensor& t) {
        if (starts_with(t.name, "mtp.") && !opt.include_mtp) return false;
        return expert_id(t.name) < plan.n_resident_experts;
    };
    std::vector<uint64_t> pair_bytes(static_cast<size_t>(L * E), 0);
    uint64_t resident_all = 0, pairs_all = 0, embed_bytes = 0;
    for (const auto& t : tensors) {
        if (!resident(t)) continue;
        resident_all += t.nbytes;
        if (std::string_view(component_of(t.name)) == "embed") embed_bytes += t.nbytes;
        int64_t l = 0, e = 0;
        if (main_expert_pair(t.name, l, e) && l < L && e < E) {
            pair_bytes[static_cast<size_t>(l * E + e)] += t.nbytes;
            pairs_all += t.nbytes;
        }
    }
    for (uint64_t b : pair_bytes) plan.expert_pair_bytes = std::max(plan.expert_pair_bytes, b);

    // ---- placement: the pairs that fit beside everything else, when not all do ------------------
    plan.min_kv_tokens = kv_tokens > 0 ? kv_tokens : (opt.min_kv_tokens >= 0 ? opt.min_kv_tokens : opt.max_context);
    const uint64_t kv_floor =
        slots_bytes + static_cast<uint64_t>(spec.blocks_for_tokens(plan.min_kv_tokens) + plan.kv_slots) * block_bytes;
    plan.placement = ExpertPlacement::all_on_gpu(L, E);
    std::vector<std::string> reasons;
    bool gpu_short_without_experts = false;  // offloading every pair would not be enough
    const bool offload =
        opt.allow_host_experts && plan.expert_pair_bytes > 0 && resident_all + others + kv_floor > budget;
    // The embedding table leaves the GPU before any expert does (allow_host_embed says why).
    plan.embed_on_host = offload && opt.allow_host_embed && embed_bytes > 0;
    const uint64_t gpu_non_expert_weights = resident_all - pairs_all - (plan.embed_on_host ? embed_bytes : 0);
    const uint64_t gpu_without_experts = gpu_non_expert_weights + others + kv_floor;
    if (offload) {
        // Sized with the largest pair, so whichever pairs the profile picks fit.
        const int64_t gpu_pairs = gpu_without_experts > budget
                                      ? 0
                                      : static_cast<int64_t>((budget - gpu_without_experts) / plan.expert_pair_bytes);
        plan.placement = place_experts(L, E, gpu_pairs, profile ? &*profile : nullptr);
        if (gpu_without_experts > budget) {
            gpu_short_without_experts = true;
            std::string options = fmt::format("\n  - a smaller KV floor (--kv-tokens; now {} tokens, {:.2f} GiB)",
                                              plan.min_kv_tokens, gib(kv_floor));
            if (!plan.workspace_exact)
                options += fmt::format(
                    "\n  - fewer tokens per step (--max-num-batched-tokens; workspace now {:.2f} GiB for {})",
                    gib(plan.activation_bytes), opt.max_num_batched_tokens);
            if (opt.include_mtp) options += "\n  - leave out the MTP block";
            reasons.push_back(fmt::format(
                "memory plan does not fit even with every routed expert in host RAM: the GPU needs {:.2f} GiB "
                "(non-expert weights {:.2f}{} + KV floor {:.2f} for {} tokens + workspace {:.2f} + graphs {:.2f} + "
                "headroom {:.2f}) but the budget is {:.2f} GiB ({}): short by {:.2f} GiB. Options:{}",
                gib(gpu_without_experts), gib(gpu_non_expert_weights),
                plan.embed_on_host ? " (the embedding table in host RAM)" : "", gib(kv_floor), plan.min_kv_tokens,
                gib(plan.activation_bytes), gib(plan.graph_bytes), gib(plan.headroom_bytes), gib(budget),
                plan.budget_source, gib(gpu_without_experts - budget), options));
        }
    }
    plan.has_profile = profile.has_value();
    if (profile) plan.host_pick_share = 1.0 - profile->coverage(plan.placement);

    // ---- weights, by component and format (GPU) and host experts ---------------------------------
    std::map<std::string, uint64_t> by_component, by_format, host_by_component;
    uint64_t routed_all = 0;
    for (const auto& t : tensors) {
        const std::string comp = component_of(t.name);
        const bool in_mtp = comp == "mtp";
        const int64_t eid = expert_id(t.name);  // routed experts of the main layers and of the MTP block
        if (eid >= 0 && (!in_mtp || opt.include_mtp)) routed_all += t.nbytes;
        if (!resident(t)) {
            plan.weight_bytes_not_resident += t.nbytes;
            continue;
        }
        if (plan.embed_on_host && comp == "embed") {
            host_by_component[comp] += t.nbytes;
            plan.host_embed_bytes += t.nbytes;
            continue;
        }
        int64_t l = 0, e = 0;
        if (main_expert_pair(t.name, l, e) && l < L && e < E && !plan.placement.is_on_gpu(l, e)) {
            host_by_component[comp] += t.nbytes;
            plan.host_expert_bytes += t.nbytes;
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
        if (!by_component.count(c) && !host_by_component.count(c)) continue;
        std::string detail;
        if (std::string(c) == "routed_experts") {
            detail = fmt::format("{} of {} experts per layer", plan.n_resident_experts, cfg.n_routed_experts);
        }
        plan.weight_components.push_back({c, by_component[c], detail, host_by_component[c]});
    }
    for (const auto& [f, b] : by_format) plan.weight_formats.push_back({f, b, ""});

    // ---- host RAM for the host experts ---------------------------------------------------------
    if (plan.host_experts()) {
        if (opt.host_ram_bytes > 0) {
            plan.host_ram_available_bytes = opt.host_ram_bytes;
            plan.host_ram_source = "given";
        } else {
            const uint64_t avail = host_mem_available_bytes();
            plan.host_ram_available_bytes = avail > opt.host_reserve_bytes ? avail - opt.host_reserve_bytes : 0;
            plan.host_ram_source = fmt::format("MemAvailable {:.2f} GiB less {:.2f} GiB for the OS", gib(avail),
                                               gib(opt.host_reserve_bytes));
        }
    }

    // ---- KV pool: what is left of the GPU budget ------------------------------------------------
    const uint64_t fixed = plan.weight_bytes + others;
    // Each live sequence can leave its last block partly empty: one spare block per sequence.
    const int64_t min_blocks = plan.kv_slots;
    if (kv_tokens > 0) {
        plan.kv_blocks = spec.blocks_for_tokens(kv_tokens) + plan.kv_slots;
    } else {
        const uint64_t left = budget > fixed + slots_bytes ? budget - fixed - slots_bytes : 0;
        plan.kv_blocks = std::max<int64_t>(static_cast<int64_t>(left / block_bytes), min_blocks);
    }
    plan.kv_pool_bytes = slots_bytes + static_cast<uint64_t>(plan.kv_blocks) * block_bytes;
    plan.kv_token_capacity = (plan.kv_blocks - plan.kv_slots) * spec.block_size;
    plan.planned_bytes = fixed + plan.kv_pool_bytes;

    // ---- refusals, each with its numbers --------------------------------------------------------
    if (opt.gpu_memory_utilization > 0 && budget > opt.device_bytes) {
        reasons.insert(reasons.begin(),
                       fmt::format("gpu_memory_utilization {:.3g} asks for {:.2f} GiB of the card's {:.2f} GiB, but "
                                   "only {:.2f} GiB are free (another process holds the rest): use at most {:.3f}",
                                   opt.gpu_memory_utilization, gib(budget), gib(card_total), gib(opt.device_bytes),
                                   static_cast<double>(opt.device_bytes) / static_cast<double>(card_total)));
    }
    if (plan.host_experts() && !gpu_short_without_experts && plan.host_weight_bytes() > plan.host_ram_available_bytes) {
        reasons.push_back(fmt::format(
            "memory plan does not fit GPU + host RAM: {} of {} routed (layer, expert) pairs fit on the GPU (budget "
            "{:.2f} GiB ({}): weights {:.2f} incl. {:.2f} of experts + KV pool {:.2f} for {} tokens (floor {}) + "
            "workspace {:.2f} + graphs {:.2f} + headroom {:.2f}); the other {} pairs need {:.2f} GiB of pinned host "
            "RAM ({:.1f} MiB each){} but {:.2f} GiB is available ({}): short by {:.2f} GiB. Options:"
            "\n  - more host RAM (--host-ram-gib)\n  - a larger GPU budget (--gpu-memory-utilization)"
            "\n  - fewer routed experts per layer (--experts N)\n  - a smaller KV floor (--kv-tokens)",
            plan.placement.total_gpu(), L * E, gib(budget), plan.budget_source, gib(plan.weight_bytes),
            gib(plan.weight_bytes - gpu_non_expert_weights), gib(plan.kv_pool_bytes), plan.kv_token_capacity,
            plan.min_kv_tokens, gib(plan.activation_bytes), gib(plan.graph_bytes), gib(plan.headroom_bytes),
            plan.placement.total_host(), gib(plan.host_expert_bytes), plan.expert_pair_bytes / 1048576.0,
            plan.embed_on_host ? fmt::format(", the embedding table {:.2f} GiB more", gib(plan.host_embed_bytes)) : "",
            gib(plan.host_ram_available_bytes), plan.host_ram_source,
            gib(plan.host_weight_bytes() - plan.host_ram_available_bytes)));
    }
    if (plan.planned_bytes > budget && !gpu_short_without_experts) {
        const uint64_t short_by = plan.planned_bytes - budget;
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
        if (kv_tokens > 0 && plan.kv_pool_bytes > slots_bytes) {
            const uint64_t paged = plan.kv_pool_bytes - slots_bytes;
            if (paged > short_by) {
                const uint64_t blocks_ok = (paged - short_by) / block_bytes;
                const int64_t tokens_ok = (static_cast<int64_t>(blocks_ok) - plan.kv_slots) * spec.block_size;
                if (tokens_ok > 0)
                    options += fmt::format("\n  - shrink the KV pool to at most {} tokens (--kv-tokens; now {})",
                                           tokens_ok, kv_tokens);
            }
        }
        if (opt.include_mtp && by_component.count("mtp") && by_component["mtp"] > 0)
            options += fmt::format("\n  - leave out the MTP block ({:.2f} GiB; no speculative decoding)",
                                   gib(by_component["mtp"]));
        options +=
            fmt::format("\n  - fewer tokens per step (--max-num-batched-tokens; activations now {:.2f} GiB for {})",
                        gib(plan.activation_bytes), opt.max_num_batched_tokens);
        if (!opt.allow_host_experts && plan.expert_pair_bytes > 0)
            options += "\n  - keep the routed experts that do not fit in host RAM (allow host experts)";
        reasons.push_back(fmt::format(
            "memory plan does not fit: needs {:.2f} GiB (weights {:.2f} + KV pool {:.2f} + activations {:.2f} + "
            "graphs {:.2f} + headroom {:.2f}) but the device has {:.2f} GiB ({}): short by {:.2f} GiB. Options:{}",
            gib(plan.planned_bytes), gib(plan.weight_bytes), gib(plan.kv_pool_bytes), gib(plan.activation_bytes),
            gib(plan.graph_bytes), gib(plan.headroom_bytes), gib(budget), plan.budget_source, gib(short_by), options));
    }
    plan.fits = reasons.empty();
    for (const auto& r : reasons) plan.refusal += (plan.refusal.empty() ? "" : "\n") + r;
    return plan;
}

void require_plan_fits(const MemoryPlan& plan) {
    if (!plan.fits) throw Error(plan.refusal);
}

int64_t serving_kv_floor_tokens(int64_t max_model_len, int64_t max_num_seqs) {
    ONECARD_CHECK(max_model_len > 0 && max_num_seqs > 0,
                  "memory plan: max_model_len {} and max_num_seqs {} must be positive", max_model_len, max_num_seqs);
    return std::max(max_model_len, max_num_seqs * std::min(max_model_len, kServingKvTokensPerSequence));
}

int64_t default_stream_experts(const MemoryPlan& plan) {
    const ExpertPlacement& p = plan.placement;
    if (p.n_layers() == 0 || p.total_host() == 0) return 0;
    // Without a profile the placement is uniform and so, for planning, is routing: the host's share
    // of picks is its share of pairs.
    const double share = plan.has_profile
                             ? plan.host_pick_share
                             : static_cast<double>(p.total_host()) / static_cast<double>(p.n_layers() * p.n_experts);
    if (share < kStreamMinHostShare) return 0;
    int64_t hybrid_layers = 0;
    for (int64_t l = 0; l < p.n_layers(); ++l) hybrid_layers += p.n_host(l) > 0;
    const double mean_host = static_cast<double>(p.total_host()) / static_cast<double>(hybrid_layers);
    return std::max<int64_t>(1, std::llround(kStreamShareOfHost * mean_host));
}

}  // namespace onecard
