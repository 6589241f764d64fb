// The memory plan as people and programs read it: the startup report (`onecard plan`, `serve`)
// and one JSON object (the plan command's last line, the `ready` line of `serve`).
#include "engine/memory_plan.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>

namespace onecard {
namespace {

double gib(uint64_t b) {
    return static_cast<double>(b) / 1073741824.0;
}

// Fewest and most GPU experts over the main layers (0, 0 without layers).
std::pair<int64_t, int64_t> gpu_experts_per_layer(const ExpertPlacement& p) {
    if (p.n_layers() == 0) return {0, 0};
    return {p.min_gpu(), p.max_gpu()};
}

}  // namespace

std::string memory_plan_report(const MemoryPlan& p) {
    std::string out = fmt::format("memory plan ({:.2f} GiB device, {}):\n", gib(p.device_bytes), p.budget_source);
    out += fmt::format("  weights            {:8.2f} GiB on the GPU", gib(p.weight_bytes));
    if (p.host_weight_bytes()) out += fmt::format(", {:.2f} GiB in host RAM", gib(p.host_weight_bytes()));
    if (p.weight_bytes_not_resident) out += fmt::format(" ({:.2f} GiB not resident)", gib(p.weight_bytes_not_resident));
    out += "\n";
    for (const auto& c : p.weight_components) {
        out += fmt::format("    {:<20} {:8.2f} GiB", c.name, gib(c.bytes));
        if (c.host_bytes) out += fmt::format(" + {:.2f} GiB host", gib(c.host_bytes));
        out += c.detail.empty() ? "\n" : "  " + c.detail + "\n";
    }
    for (const auto& f : p.weight_formats) out += fmt::format("    as {:<17} {:8.2f} GiB\n", f.name, gib(f.bytes));
    const auto [lo, hi] = gpu_experts_per_layer(p.placement);
    out += fmt::format("  experts on GPU     {} of {} per layer",
                       lo == hi ? fmt::format("{}", lo) : fmt::format("{}-{}", lo, hi), p.placement.n_experts);
    if (p.host_experts()) {
        out += fmt::format("; {} (layer, expert) pairs in host RAM: {:.2f} GiB pinned of {:.2f} GiB available ({})",
                           p.placement.total_host(), gib(p.host_expert_bytes), gib(p.host_ram_available_bytes),
                           p.host_ram_source);
        if (p.has_profile)
            out += fmt::format("; host share of picks {:.2f}% (profile)", 100.0 * p.host_pick_share);
        else
            out += "; placement uniform (no profile)";
        if (p.stream_experts > 0)
            out += fmt::format("; {} host experts per layer staged over PCIe on large decode steps", p.stream_experts);
    }
    out += "\n";
    if (p.embed_on_host)
        out += fmt::format(
            "  embedding table    in pinned host RAM ({:.2f} GiB; each step reads its tokens' rows over "
            "PCIe), so more experts fit on the GPU\n",
            gib(p.host_embed_bytes));
    out += fmt::format(
        "  KV pool            {:8.2f} GiB  {} tokens in {} blocks of {}, {} sequence slots "
        "({:.1f} B/token, {:.1f} MB/sequence fixed)\n",
        gib(p.kv_pool_bytes), p.kv_token_capacity, p.kv_blocks, p.kv_spec.block_size, p.kv_slots,
        kv_bytes_per_token(p.kv_spec), kv_fixed_bytes_per_sequence(p.kv_spec) / 1e6);
    out += fmt::format("  activations        {:8.2f} GiB  step workspace, {}\n", gib(p.activation_bytes),
                       p.workspace_exact ? "exact (computed by the GPU side)" : "estimated");
    out += fmt::format("  cuda graphs        {:8.2f} GiB\n", gib(p.graph_bytes));
    out += fmt::format("  headroom           {:8.2f} GiB\n", gib(p.headroom_bytes));
    out += fmt::format("  total              {:8.2f} GiB of {:.2f}: {}\n", gib(p.planned_bytes), gib(p.device_bytes),
                       p.fits ? "fits" : "DOES NOT FIT");
    return out;
}

std::string memory_plan_line(const MemoryPlan& p) {
    const auto [lo, hi] = gpu_experts_per_layer(p.placement);
    std::string experts =
        fmt::format("experts on GPU {} of {} per layer",
                    lo == hi ? fmt::format("{}", lo) : fmt::format("{}-{}", lo, hi), p.placement.n_experts);
    if (p.host_experts()) {
        experts += fmt::format(" ({} pairs, {:.2f} GiB in pinned host RAM", p.placement.total_host(),
                               gib(p.host_expert_bytes));
        experts += p.has_profile ? fmt::format(", {:.1f}% of picks there)", 100.0 * p.host_pick_share) : ", uniform)";
    }
    if (p.embed_on_host) experts += "; embedding table in host RAM";
    return fmt::format(
        "memory plan: {:.2f} of {:.2f} GiB GPU ({}): weights {:.2f} GiB, KV pool {:.2f} GiB ({} tokens), workspace "
        "{:.2f} GiB ({}), graphs {:.2f}, headroom {:.2f}; host {:.2f} GiB; {}: {}",
        gib(p.planned_bytes), gib(p.device_bytes), p.budget_source, gib(p.weight_bytes), gib(p.kv_pool_bytes),
        p.kv_token_capacity, gib(p.activation_bytes), p.workspace_exact ? "exact" : "estimate", gib(p.graph_bytes),
        gib(p.headroom_bytes), gib(p.host_weight_bytes()), experts, p.fits ? "fits" : "DOES NOT FIT");
}

std::string memory_plan_json(const MemoryPlan& p) {
    nlohmann::ordered_json j;
    j["fits"] = p.fits;
    j["device_bytes"] = p.device_bytes;
    j["budget_source"] = p.budget_source;
    if (p.gpu_memory_utilization > 0) j["gpu_memory_utilization"] = p.gpu_memory_utilization;
    j["planned_bytes"] = p.planned_bytes;
    j["weights_bytes"] = p.weight_bytes;
    j["weights_gib"] = gib(p.weight_bytes);
    j["weights_host_bytes"] = p.host_weight_bytes();
    j["embed_on_host"] = p.embed_on_host;
    j["weights_not_resident_bytes"] = p.weight_bytes_not_resident;
    j["resident_experts"] = p.n_resident_experts;
    j["routed_experts"] = p.n_routed_experts;
    nlohmann::ordered_json comp = nlohmann::ordered_json::object(), host = nlohmann::ordered_json::object(),
                           fmts = nlohmann::ordered_json::object();
    for (const auto& c : p.weight_components) {
        comp[c.name] = c.bytes;
        if (c.host_bytes) host[c.name] = c.host_bytes;
    }
    for (const auto& f : p.weight_formats) fmts[f.name] = f.bytes;
    j["weights_by_component"] = comp;
    j["weights_host_by_component"] = host;
    j["weights_by_format"] = fmts;
    const auto [lo, hi] = gpu_experts_per_layer(p.placement);
    nlohmann::ordered_json pl;
    pl["gpu_pairs"] = p.placement.total_gpu();
    pl["host_pairs"] = p.placement.total_host();
    pl["gpu_per_layer_min"] = lo;
    pl["gpu_per_layer_max"] = hi;
    std::vector<int64_t> per_layer;
    for (int64_t l = 0; l < p.placement.n_layers(); ++l) per_layer.push_back(p.placement.n_gpu(l));
    pl["gpu_per_layer"] = per_layer;
    pl["pair_bytes"] = p.expert_pair_bytes;
    pl["host_bytes"] = p.host_expert_bytes;
    pl["host_ram_available_bytes"] = p.host_ram_available_bytes;
    if (p.has_profile) pl["host_pick_share"] = p.host_pick_share;
    pl["stream_experts_per_layer"] = p.stream_experts;
    pl["summary"] = p.placement.summary();
    j["expert_placement"] = pl;
    j["kv_pool_bytes"] = p.kv_pool_bytes;
    j["kv_pool_gib"] = gib(p.kv_pool_bytes);
    j["kv_token_capacity"] = p.kv_token_capacity;
    j["kv_blocks"] = p.kv_blocks;
    j["kv_block_size"] = p.kv_spec.block_size;
    j["kv_slots"] = p.kv_slots;
    j["activation_bytes"] = p.activation_bytes;
    j["workspace_exact"] = p.workspace_exact;
    j["graph_bytes"] = p.graph_bytes;
    j["headroom_bytes"] = p.headroom_bytes;
    if (!p.fits) j["refusal"] = p.refusal;
    return j.dump();
}

}  // namespace onecard
