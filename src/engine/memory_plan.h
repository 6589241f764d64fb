// Memory planner v1: decides, before anything is allocated, whether a model fits one GPU and how
// its memory is split: weights (by component and by storage format, as stored: FP8 + UE8M0 scales,
// MXFP4 + scales, BF16, F32), the KV pool (token capacity from kvcache's byte format), activations
// and workspaces for the largest step, CUDA graphs, and a reserved headroom. When the plan does not
// fit it says by how much and which options would make it fit, instead of failing later in a
// cudaMalloc. Pure host arithmetic (no CUDA), so CI tests it.
//
// Backend-independent, hence in engine/: it reads ModelConfig's fields (header only; the engine does
// not link the model library) and takes the weight list from the caller (checkpoint headers or
// checkpoint_layout(cfg) for a synthetic shape).
#pragma once

#include "core/dtype.h"
#include "kvcache/kv_spec.h"
#include "model/config.h"

#include <cstdint>
#include <string>
#include <vector>

namespace onecard {

// One stored tensor, as the planner needs it.
struct PlannedTensor {
    std::string name;  // checkpoint name, e.g. "layers.3.ffn.experts.17.w1.weight"
    DType dtype = DType::F32;
    uint64_t nbytes = 0;
};

struct MemoryPlanOptions {
    uint64_t device_bytes = 140'970'000'000ull;  // free HBM to plan against (H200, one process: h200-ceilings.md)
    uint64_t headroom_bytes = 2ull << 30;        // reserved, never planned (allocator slack, library handles)
    int64_t n_resident_experts = -1;             // routed experts per layer kept on the GPU; -1 = all
    bool include_mtp = true;                     // the MTP block's weights (speculative decoding)
    int64_t kv_tokens = 0;                       // KV pool capacity in tokens; 0 = everything left over
    int64_t max_sequences = 64;                  // live sequences: one fixed KV slot each
    int64_t kv_block_size = 256;                 // tokens per KV block (a multiple of every compress ratio)
    int64_t max_step_tokens = 8192;              // largest step (prefill chunk): sizes the activations
    int64_t max_context = 1048576;               // longest sequence: sizes the indexer score tile
    std::vector<int64_t> graph_batches = {1, 2, 4, 8, 16, 32, 64};  // decode batch buckets captured as graphs
};

struct PlanItem {
    std::string name;
    uint64_t bytes = 0;
    std::string detail;
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

    uint64_t activation_bytes = 0;
    uint64_t graph_bytes = 0;
    uint64_t headroom_bytes = 0;
    uint64_t device_bytes = 0;
    uint64_t planned_bytes = 0;  // weights + kv + activations + graphs + headroom

    bool fits = false;
    std::string refusal;  // why not, by how much, and what would fit (empty when fits)
};

// The KV shape of a config (SWA/CSA/HCA per layer incl. MTP blocks, from compress_ratios).
KvModelShape kv_model_shape_from_config(const ModelConfig& cfg);

// Activation/workspace bytes for a step of `n_tokens` (see memory_plan.cpp for the term list).
uint64_t activation_bytes_for_step(const ModelConfig& cfg, int64_t n_tokens, int64_t max_context,
                                   int64_t max_logit_rows);

// Never throws for a plan that does not fit (fits = false, refusal says why); throws onecard::Error
// for inconsistent options (a block size that is not a multiple of the compress ratios, ...).
MemoryPlan make_memory_plan(const ModelConfig& cfg, const std::vector<PlannedTensor>& tensors,
                            const MemoryPlanOptions& opt);
// Throws onecard::Error with plan.refusal when the plan does not fit.
void require_plan_fits(const MemoryPlan& plan);

// Startup report: one line per item, GiB with two decimals.
std::string memory_plan_report(const MemoryPlan& plan);
// The same as one JSON object on one line (bytes exact, plus GiB for reading).
std::string memory_plan_json(const MemoryPlan& plan);

}  // namespace onecard
