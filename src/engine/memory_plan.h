// The memory planner, the one source of every memory decision (`onecard plan`, `bench` and `serve`
// call it): decides, before anything is allocated, whether a model fits one GPU (plus pinned host
// RAM for routed experts) and how its memory is split: weights (by component and by storage format,
// as stored: FP8 + UE8M0 scales, MXFP4 + scales, BF16, F32; GPU and host bytes), which (layer,
// expert) pairs stay in HBM when not all fit (model/expert_placement.h, ranked by an expert-use
// profile, model/expert_profile.h), the KV pool (token capacity from kvcache's byte format), the
// step workspace (the GPU side's exact figure, or an estimate), CUDA graphs, and a reserved
// headroom. When the plan does not fit it says by how much and which options would make it fit,
// instead of failing later in a cudaMalloc. Pure host arithmetic (no CUDA), so CI tests it.
//
// Backend-independent, hence in engine/: it reads ModelConfig's fields and takes the weight list
// from the caller (checkpoint headers or checkpoint_layout(cfg) for a synthetic shape, sized as the
// backend holds them: engine_cuda/gpu_plan.h).
#pragma once

#include "core/dtype.h"
#include "kvcache/kv_spec.h"
#include "model/config.h"
#include "model/expert_placement.h"

#include <cstdint>
#include <string>
#include <vector>

namespace onecard {

class ExpertUseProfile;  // model/expert_profile.h

// One stored tensor, as the planner needs it.
struct PlannedTensor {
    std::string name;  // checkpoint name, e.g. "layers.3.ffn.experts.17.w1.weight"
    DType dtype = DType::F32;
    uint64_t nbytes = 0;
};

struct MemoryPlanOptions {
    uint64_t device_bytes = 140'970'000'000ull;  // free HBM to plan against (H200, one process: h200-ceilings.md)
    // vLLM's --gpu-memory-utilization: the fraction of the card's TOTAL memory this instance may use.
    // > 0: the budget is device_total_bytes * it (refused when that exceeds the free device_bytes);
    // 0: the budget is device_bytes. Either way headroom_bytes is reserved inside the budget.
    double gpu_memory_utilization = 0;
    uint64_t device_total_bytes = 0;        // the card's total memory; 0 = take device_bytes
    uint64_t headroom_bytes = 2ull << 30;   // reserved, never planned (allocator slack, library handles)
    int64_t n_resident_experts = -1;        // routed experts per layer kept on the GPU; -1 = all
    bool include_mtp = true;                // the MTP block's weights (speculative decoding)
    int64_t kv_tokens = 0;                  // KV pool capacity in tokens; 0 = everything left over
    uint64_t kv_pool_bytes = 0;             // > 0: the KV pool's bytes instead (serve's --kv-cache-memory-bytes)
    int64_t max_num_seqs = 64;              // live sequences: one fixed KV slot each
    int64_t kv_block_size = 256;            // tokens per KV block (a multiple of every compress ratio)
    int64_t kv_ring_spare = 0;              // spare ring rows per slot (speculation; KvModelShape::ring_spare)
    int64_t max_num_batched_tokens = 8192;  // tokens per step (the largest prefill chunk): sizes the activations
    int64_t max_context = 1048576;          // longest sequence: sizes the indexer score tile
    std::vector<int64_t> graph_batches = {1, 2, 4, 8, 16, 32, 64};  // decode batch buckets captured as graphs
    // > 0: the exact step workspace the GPU side computed for these options; it replaces the
    // estimate (activation_bytes_for_step, the fallback for CPU-only builds). MemoryPlan says which.
    uint64_t workspace_bytes = 0;

    // Routed experts in pinned host RAM when the weights do not fit (computed on the CPU). Off by
    // default so that callers without a host expert path (the expert-parallel planner, plans that
    // must fit the GPU alone) keep the GPU-only plan and its refusal; `onecard plan` and `serve`
    // turn it on (--no-host-experts turns it off).
    bool allow_host_experts = false;
    // With host experts, the token embedding table (bf16 [vocab, D], ~1 GiB at the Flash shape) goes
    // to pinned host RAM first: a step reads only its tokens' rows (zero-copy over PCIe, µs per
    // decode step), and every GiB it frees holds ~80 more (layer, expert) pairs in HBM. Off: it stays.
    bool allow_host_embed = true;
    // The smallest KV pool the offload path keeps on the GPU, in tokens (kv_tokens > 0 replaces it);
    // -1: one sequence of max_context tokens.
    int64_t min_kv_tokens = -1;
    uint64_t host_ram_bytes = 0;  // pinned host RAM the experts may take; 0 = MemAvailable less the reserve
    uint64_t host_reserve_bytes = 8ull << 30;  // left to the OS and the process when reading MemAvailable
    // Use counts that rank (layer, expert) pairs for the GPU (shape num_hidden_layers x
    // n_routed_experts; not owned); nullptr: uniform placement.
    const ExpertUseProfile* expert_profile = nullptr;
};

struct PlanItem {
    std::string name;
    uint64_t bytes = 0;  // on the GPU
    std::string detail;
    uint64_t host_bytes = 0;  // in pinned host RAM (routed experts off the GPU)
};

struct MemoryPlan {
    std::vector<PlanItem> weight_components;      // embed, lm_head, attention, ... (resident only)
    std::vector<PlanItem> weight_formats;         // fp8 (+scales), mxfp4 (+scales), bf16, f32, int
    uint64_t weight_bytes = 0;                    // resident on the GPU
    uint64_t weight_bytes_not_resident = 0;       // routed experts left out (n_resident_experts < all), MTP if excluded
    uint64_t routed_expert_bytes_per_expert = 0;  // one expert id across all layers (the unit --experts trades)
    // When the plan does not fit: the most routed experts per layer that would (-1 if even top-k
    // experts per layer do not fit).
    int64_t max_resident_experts_that_fit = -1;
    int64_t n_routed_experts = 0;
    int64_t n_resident_experts = 0;

    KvCacheSpec kv_spec;
    uint64_t kv_pool_bytes = 0;
    int64_t kv_blocks = 0;
    int64_t kv_slots = 0;
    int64_t kv_token_capacity = 0;  // tokens the paged pool holds (blocks × block_size)

    uint64_t activation_bytes = 0;  // the step workspace: exact (options.workspace_bytes) or estimated
    bool workspace_exact = false;
    uint64_t graph_bytes = 0;
    uint64_t headroom_bytes = 0;
    uint64_t device_bytes = 0;  // the GPU budget planned against (free memory, or utilization x total)
    std::string budget_source;  // how device_bytes was chosen, for the report
    double gpu_memory_utilization = 0;
    uint64_t planned_bytes = 0;  // weights + kv + activations + graphs + headroom (GPU only)

    // Routed experts of the main layers over [num_hidden_layers][n_resident_experts]: all on the GPU
    // unless the weights do not fit and options.allow_host_experts (then a planned placement).
    ExpertPlacement placement;
    uint64_t expert_pair_bytes = 0;  // one (layer, expert) pair's stored bytes (largest pair)
    uint64_t host_expert_bytes = 0;  // host pairs in their stored MXFP4 bytes
    // The embedding table in pinned host RAM (only when experts are offloaded and allow_host_embed).
    bool embed_on_host = false;
    uint64_t host_embed_bytes = 0;
    uint64_t host_ram_available_bytes = 0;  // what the host offers the experts (read only when offloading)
    std::string host_ram_source;            // "--host-ram" or "MemAvailable X GiB less Y GiB reserve"
    int64_t min_kv_tokens = 0;              // the KV floor the offload path kept
    bool has_profile = false;
    double host_pick_share = 0;  // picks landing on host pairs under the profile (has_profile)
    // Host experts per layer that large decode steps stage over PCIe into HBM (their staging
    // buffers are in the workspace above); set by the caller that sized the workspace with them.
    int64_t stream_experts = 0;
    bool host_experts() const { return host_expert_bytes > 0 || placement.total_host() > 0; }
    // Pinned host RAM the plan needs: host experts + the embedding table when it is there.
    uint64_t host_weight_bytes() const { return host_expert_bytes + host_embed_bytes; }

    bool fits = false;
    std::string refusal;  // why not, by how much, and what would fit (empty when fits)
};

// The KV shape of a config (SWA/CSA/HCA per layer incl. MTP blocks, from compress_ratios).
KvModelShape kv_model_shape_from_config(const ModelConfig& cfg);

// Activation/workspace bytes for a step of `n_tokens` (see memory_plan.cpp for the term list).
uint64_t activation_bytes_for_step(const ModelConfig& cfg, int64_t n_tokens, int64_t max_context,
                                   int64_t max_logit_rows);

// MemAvailable from /proc/meminfo in bytes (0 when it cannot be read).
uint64_t host_mem_available_bytes();

// Never throws for a plan that does not fit (fits = false, refusal says why); throws onecard::Error
// for inconsistent options (a block size that is not a multiple of the compress ratios, a profile
// of another model shape, ...).
MemoryPlan make_memory_plan(const ModelConfig& cfg, const std::vector<PlannedTensor>& tensors,
                            const MemoryPlanOptions& opt);
// Throws onecard::Error with plan.refusal when the plan does not fit.
void require_plan_fits(const MemoryPlan& plan);

// The default number of host experts per layer to stage over PCIe on large decode steps for a plan's
// placement: 0 when the host takes under kStreamMinHostShare of the picks (a profile-ranked placement
// covering nearly every pick: the host is not the bottleneck, the copies would be), else
// kStreamShareOfHost of the mean host experts per hybrid layer, at least 1. Why these numbers: on the
// H200 at batch 64, uniform routing, ~20.4 host experts per layer, staging 4 / 5 / 7 / 10 / 13 gave
// 427 / 435 / 582 / 520 / 404 tok/s (docs/results.md), and with a skewed placement covering 99.6% of
// picks staging 7 took 1,195 tok/s down to 744.
// The KV floor a server keeps when experts must leave the GPU (MemoryPlanOptions::min_kv_tokens):
// one request of the full model length, and room for every sequence slot to hold
// kServingKvTokensPerSequence tokens at once, so that a full batch of ordinary requests is not
// preempted. Why 2048: at the Flash shape a (layer, expert) pair is 12.8 MiB = ~3,500 tokens of paged
// KV, so 64 sequences x 2048 tokens cost 38 pairs (under one per layer), while a floor of one
// 8K-token request left a 64-stream serving sweep 9,216 tokens (docs/results.md).
constexpr int64_t kServingKvTokensPerSequence = 2048;
int64_t serving_kv_floor_tokens(int64_t max_model_len, int64_t max_num_seqs);

constexpr double kStreamMinHostShare = 0.02;
constexpr double kStreamShareOfHost = 0.35;
int64_t default_stream_experts(const MemoryPlan& plan);

// Startup report: one line per item, GiB with two decimals.
std::string memory_plan_report(const MemoryPlan& plan);
// One human line for a startup log: GPU and host bytes, experts on the GPU per layer, KV tokens.
std::string memory_plan_line(const MemoryPlan& plan);
// The same as one JSON object on one line (bytes exact, plus GiB for reading).
std::string memory_plan_json(const MemoryPlan& plan);

}  // namespace onecard
