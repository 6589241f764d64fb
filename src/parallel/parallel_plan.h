// Memory plan per GPU for expert parallelism over N GPUs of one host (docs/PARALLEL.md): every GPU
// holds the replicated part (embedding, head, attention, compressor/indexer, hyper-connections,
// router, shared experts, norms, the MTP block's non-expert weights), its E/N routed experts of every
// layer (contiguous ids, ExpertPartition), the whole KV pool (attention is replicated, so each GPU
// keeps every sequence's KV), the activations of a step, and the expert-parallel exchange buffers.
// Each GPU is planned by the single-GPU planner (engine/memory_plan.h) on its own tensor list, so the
// two planners never disagree about a byte. Pure host arithmetic: CI tests it.
#pragma once

#include "engine/memory_plan.h"
#include "model/config.h"

#include <cstdint>
#include <string>
#include <vector>

namespace onecard::parallel {

struct GpuMemoryPlan {
    int rank = 0;
    int64_t first_expert = 0;  // routed experts [first_expert, end_expert) of every layer
    int64_t end_expert = 0;
    uint64_t replicated_weight_bytes = 0;  // everything but routed experts (the same on every GPU)
    uint64_t routed_expert_bytes = 0;      // this GPU's routed experts, all layers (incl. MTP when kept)
    uint64_t ep_buffer_bytes = 0;          // exchange buffers (planned inside plan.headroom_bytes)
    // The single-GPU planner's plan of this GPU's tensors (experts numbered locally 0..E/N-1;
    // plan.headroom_bytes = the requested headroom + ep_buffer_bytes).
    MemoryPlan plan;
};

struct ParallelMemoryPlan {
    int n_gpus = 1;
    int64_t n_routed_experts = 0;
    int64_t experts_per_gpu = 0;
    int64_t kv_token_capacity = 0;  // the same on every GPU (the KV pool is replicated)
    std::vector<GpuMemoryPlan> gpus;
    bool fits = false;
    std::string refusal;  // which GPU is short, by how much, and what would fit (empty when fits)
};

// Exchange buffers of one step of n_tokens on one GPU: the gathered per-pair expert outputs
// [n_tokens·K, D] that the combine reads (each GPU writes its own pairs' rows in place, the others
// arrive by all-gather), sized as fp32 (the GPU path's per-pair rows are bf16 today: an over-estimate
// by 2x until the expert-parallel path exists and is measured), plus the dispatch plan on the device
// (pairs, combine index, counts): 32 B per pair.
uint64_t ep_buffer_bytes_for_step(const ModelConfig& cfg, int64_t n_tokens);

// opt is the per-GPU option set (device_bytes = one GPU's free memory). opt.n_resident_experts must
// be -1 or E: with N GPUs every expert is resident on exactly one of them. opt.kv_tokens = 0 sizes
// the KV pool from the memory left on the fullest GPU (all GPUs then get that size). Throws
// onecard::Error when E % n_gpus != 0 or the options are inconsistent; a plan that does not fit
// comes back with fits = false and a refusal.
ParallelMemoryPlan make_parallel_memory_plan(const ModelConfig& cfg, const std::vector<PlannedTensor>& tensors,
                                             int n_gpus, const MemoryPlanOptions& opt);
void require_parallel_plan_fits(const ParallelMemoryPlan& plan);

// Startup report: one line per GPU (experts, weights split replicated/routed, KV pool and tokens,
// exchange buffers, total) and GPU 0's full single-GPU report.
std::string parallel_memory_plan_report(const ParallelMemoryPlan& plan);
// One JSON object on one line.
std::string parallel_memory_plan_json(const ParallelMemoryPlan& plan);

}  // namespace onecard::parallel
