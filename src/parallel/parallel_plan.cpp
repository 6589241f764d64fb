#include "parallel/parallel_plan.h"

#include "core/error.h"
#include "parallel/expert_partition.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>

namespace onecard::parallel {
namespace {

constexpr double kGiB = 1073741824.0;
double gib(uint64_t b) {
    return static_cast<double>(b) / kGiB;
}

constexpr std::string_view kExpertTag = ".ffn.experts.";

// Expert id of "….ffn.experts.<e>.…" and where its digits are, or id -1.
struct ExpertName {
    int64_t id = -1;
    size_t digits_at = 0;
    size_t digits_len = 0;
};
ExpertName parse_expert(const std::string& n) {
    const auto p = n.find(kExpertTag);
    if (p == std::string::npos) return {};
    const size_t at = p + kExpertTag.size();
    size_t end = at;
    while (end < n.size() && n[end] >= '0' && n[end] <= '9') ++end;
    if (end == at) return {};
    return {std::stoll(n.substr(at, end - at)), at, end - at};
}

// One GPU's plan with a given KV size (kv_tokens 0 = what is left).
GpuMemoryPlan plan_gpu(const ModelConfig& cfg, const std::vector<PlannedTensor>& tensors, const ExpertPartition& part,
                       int rank, const MemoryPlanOptions& opt, int64_t kv_tokens) {
    const auto range = part.experts_of(rank);
    GpuMemoryPlan g;
    g.rank = rank;
    g.first_expert = range.begin;
    g.end_expert = range.end;
    // This GPU's tensor list: the replicated tensors as they are, its experts renumbered 0..E/N-1 so
    // the single-GPU planner (which keeps ids < n_resident_experts) counts them all.
    std::vector<PlannedTensor> mine;
    mine.reserve(tensors.size());
    for (const auto& t : tensors) {
        const ExpertName en = parse_expert(t.name);
        const bool counted = en.id < 0 || opt.include_mtp || t.name.rfind("mtp.", 0) != 0;
        if (en.id < 0) {
            mine.push_back(t);
            if (counted) g.replicated_weight_bytes += t.nbytes;
            continue;
        }
        if (!range.contains(en.id)) continue;  // on another GPU
        PlannedTensor local = t;
        local.name.replace(en.digits_at, en.digits_len, std::to_string(en.id - range.begin));
        mine.push_back(std::move(local));
        if (counted) g.routed_expert_bytes += t.nbytes;
    }
    // The planner's view of one GPU: E/N experts per layer; a token computes at most min(K, E/N)
    // of its picks here (the activation terms scale with that).
    ModelConfig local_cfg = cfg;
    local_cfg.n_routed_experts = part.experts_per_rank();
    local_cfg.num_experts_per_tok = std::min(cfg.num_experts_per_tok, part.experts_per_rank());
    MemoryPlanOptions o = opt;
    o.n_resident_experts = -1;
    o.kv_tokens = kv_tokens;
    g.ep_buffer_bytes = ep_buffer_bytes_for_step(cfg, opt.max_num_batched_tokens);
    o.headroom_bytes = opt.headroom_bytes + g.ep_buffer_bytes;
    g.plan = make_memory_plan(local_cfg, mine, o);
    for (auto& c : g.plan.weight_components)
        if (c.name == "routed_experts")
            c.detail = fmt::format("experts [{}, {}) of {} per layer", range.begin, range.end, cfg.n_routed_experts);
    return g;
}

// The plan without a refusal text (the refusal tries other GPU counts through this).
ParallelMemoryPlan plan_all(const ModelConfig& cfg, const std::vector<PlannedTensor>& tensors, int n_gpus,
                            const MemoryPlanOptions& opt) {
    const ExpertPartition part(cfg.n_routed_experts, n_gpus);
    ParallelMemoryPlan p;
    p.n_gpus = n_gpus;
    p.n_routed_experts = cfg.n_routed_experts;
    p.experts_per_gpu = part.experts_per_rank();
    int64_t kv_tokens = opt.kv_tokens;
    if (kv_tokens == 0) {
        // KV is replicated: every GPU gets the pool the fullest one can hold.
        int64_t cap = -1;
        for (int r = 0; r < n_gpus; ++r) {
            const int64_t c = plan_gpu(cfg, tensors, part, r, opt, 0).plan.kv_token_capacity;
            cap = cap < 0 ? c : std::min(cap, c);
        }
        kv_tokens = std::max<int64_t>(cap, 0);
    }
    p.fits = true;
    for (int r = 0; r < n_gpus; ++r) {
        p.gpus.push_back(plan_gpu(cfg, tensors, part, r, opt, kv_tokens));
        p.fits = p.fits && p.gpus.back().plan.fits;
    }
    p.kv_token_capacity = p.gpus.front().plan.kv_token_capacity;
    if (kv_tokens == 0) p.fits = false;  // not even the minimum KV pool fits
    return p;
}

}  // namespace

uint64_t ep_buffer_bytes_for_step(const ModelConfig& cfg, int64_t n_tokens) {
    const auto pairs = static_cast<uint64_t>(n_tokens) * static_cast<uint64_t>(cfg.num_experts_per_tok);
    return pairs * static_cast<uint64_t>(cfg.hidden_size) * 4 + pairs * 32;
}

ParallelMemoryPlan make_parallel_memory_plan(const ModelConfig& cfg, const std::vector<PlannedTensor>& tensors,
                                             int n_gpus, const MemoryPlanOptions& opt) {
    ONECARD_CHECK(n_gpus >= 1, "parallel plan: --gpus {} must be at least 1", n_gpus);
    ONECARD_CHECK(opt.n_resident_experts < 0 || opt.n_resident_experts == cfg.n_routed_experts,
                  "parallel plan: --experts {} with --gpus {}: with expert parallelism every routed expert is "
                  "resident on exactly one GPU; add GPUs instead",
                  opt.n_resident_experts, n_gpus);
    ParallelMemoryPlan p = plan_all(cfg, tensors, n_gpus, opt);
    if (p.fits) return p;

    const GpuMemoryPlan* worst = &p.gpus.front();
    for (const auto& g : p.gpus)
        if (g.plan.planned_bytes > worst->plan.planned_bytes) worst = &g;
    const MemoryPlan& w = worst->plan;
    const uint64_t short_by = w.planned_bytes > w.device_bytes ? w.planned_bytes - w.device_bytes : 0;
    std::string options;
    // More GPUs of this host (at most 8) that split the experts evenly.
    for (int n = n_gpus + 1; n <= 8; ++n) {
        if (cfg.n_routed_experts % n != 0) continue;
        if (plan_all(cfg, tensors, n, opt).fits) {
            options += fmt::format("\n  - use {} GPUs (--gpus {}: {} experts per layer on each)", n, n,
                                   cfg.n_routed_experts / n);
            break;
        }
    }
    if (opt.kv_tokens > 0)
        options +=
            fmt::format("\n  - a smaller KV pool (--kv-tokens; now {} tokens, replicated on every GPU)", opt.kv_tokens);
    if (opt.include_mtp) options += "\n  - leave out the MTP block (--no-mtp)";
    options += fmt::format(
        "\n  - fewer tokens per step (--max-num-batched-tokens; now {}: activations {:.2f} GiB and "
        "exchange buffers {:.2f} GiB per GPU)",
        opt.max_num_batched_tokens, gib(w.activation_bytes), gib(worst->ep_buffer_bytes));
    p.refusal = fmt::format(
        "memory plan does not fit on {} GPUs: GPU {} needs {:.2f} GiB (weights {:.2f} = replicated {:.2f} + routed "
        "experts {:.2f}; KV pool {:.2f}; activations {:.2f}; exchange buffers {:.2f}; graphs {:.2f}; headroom {:.2f}) "
        "but has {:.2f} GiB free: short by {:.2f} GiB. Options:{}",
        n_gpus, worst->rank, gib(w.planned_bytes), gib(w.weight_bytes), gib(worst->replicated_weight_bytes),
        gib(worst->routed_expert_bytes), gib(w.kv_pool_bytes), gib(w.activation_bytes), gib(worst->ep_buffer_bytes),
        gib(w.graph_bytes), gib(w.headroom_bytes - worst->ep_buffer_bytes), gib(w.device_bytes), gib(short_by),
        options);
    return p;
}

void require_parallel_plan_fits(const ParallelMemoryPlan& plan) {
    if (!plan.fits) throw Error(plan.refusal);
}

std::string parallel_memory_plan_report(const ParallelMemoryPlan& p) {
    std::string out = fmt::format(
        "expert-parallel memory plan: {} GPUs, {} of {} routed experts per layer on each; attention, shared "
        "experts and the KV pool replicated ({} KV tokens per GPU)\n",
        p.n_gpus, p.experts_per_gpu, p.n_routed_experts, p.kv_token_capacity);
    for (const auto& g : p.gpus) {
        const MemoryPlan& m = g.plan;
        out += fmt::format(
            "  GPU {}: experts [{}, {})  weights {:.2f} GiB (replicated {:.2f} + routed {:.2f})  KV pool {:.2f} GiB  "
            "activations {:.2f}  exchange {:.2f}  total {:.2f} of {:.2f} GiB: {}\n",
            g.rank, g.first_expert, g.end_expert, gib(m.weight_bytes), gib(g.replicated_weight_bytes),
            gib(g.routed_expert_bytes), gib(m.kv_pool_bytes), gib(m.activation_bytes), gib(g.ep_buffer_bytes),
            gib(m.planned_bytes), gib(m.device_bytes), m.fits ? "fits" : "DOES NOT FIT");
    }
    out += "GPU 0 in detail (headroom includes the exchange buffers):\n";
    out += memory_plan_report(p.gpus.front().plan);
    return out;
}

std::string parallel_memory_plan_json(const ParallelMemoryPlan& p) {
    nlohmann::ordered_json j;
    j["fits"] = p.fits;
    j["n_gpus"] = p.n_gpus;
    j["routed_experts"] = p.n_routed_experts;
    j["experts_per_gpu"] = p.experts_per_gpu;
    j["kv_token_capacity"] = p.kv_token_capacity;
    nlohmann::ordered_json gpus = nlohmann::ordered_json::array();
    for (const auto& g : p.gpus) {
        nlohmann::ordered_json o;
        o["rank"] = g.rank;
        o["first_expert"] = g.first_expert;
        o["end_expert"] = g.end_expert;
        o["weights_bytes"] = g.plan.weight_bytes;
        o["weights_gib"] = gib(g.plan.weight_bytes);
        o["replicated_weight_bytes"] = g.replicated_weight_bytes;
        o["routed_expert_bytes"] = g.routed_expert_bytes;
        o["kv_pool_bytes"] = g.plan.kv_pool_bytes;
        o["kv_pool_gib"] = gib(g.plan.kv_pool_bytes);
        o["kv_token_capacity"] = g.plan.kv_token_capacity;
        o["activation_bytes"] = g.plan.activation_bytes;
        o["ep_buffer_bytes"] = g.ep_buffer_bytes;
        o["planned_bytes"] = g.plan.planned_bytes;
        o["device_bytes"] = g.plan.device_bytes;
        o["fits"] = g.plan.fits;
        gpus.push_back(o);
    }
    j["gpus"] = gpus;
    if (!p.fits) j["refusal"] = p.refusal;
    return j.dump();
}

}  // namespace onecard::parallel
