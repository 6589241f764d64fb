// `onecard serve`'s memory plan on the GPU, made before any weight is loaded (engine/memory_plan.h):
// the tensor list from the checkpoint's headers, sized as the CUDA backend holds them
// (engine_cuda/gpu_plan.h), against GPU 0's free (or, with --gpu-memory-utilization, total) memory.
#pragma once

#include "engine/memory_plan.h"
#include "loader/checkpoint.h"
#include "model/config.h"
#include "model/expert_profile.h"
#include "onecard/engine.h"

#include <cstdint>

namespace onecard::cli {

struct ServePlanInputs {
    int64_t max_model_len = 8192;
    int64_t max_num_seqs = 16;
    int64_t max_num_batched_tokens = 2048;
    int64_t moe_gemv_max_tokens = 0;  // CudaRunnerOptions::moe_gemv_max_tokens (0: auto)
    int64_t kv_block_size = 128;      // the engine's (EngineConfig::kv_block_size)
    int64_t kv_cache_bytes = 0;       // > 0: the KV pool the user asked for; 0 = what is left
    double gpu_memory_utilization = 0;
    double headroom_gib = 2.0;
    const ExpertUseProfile* profile = nullptr;  // not owned
    bool count_expert_picks = false;            // the runner keeps pick counts (a few KB of workspace)
    bool count_picks_if_hybrid = false;         // ... also when some experts end up in host RAM (re-placement)
    int64_t stream_experts =
        -1;  // host experts per layer staged over PCIe on large decode steps (-1: default_stream_experts)
    // Speculative decoding: method "mtp" loads the MTP block (its weights, buffers, the KV rings' spare
    // rows and a verify step's logits rows are planned); other methods plan nothing (the GPU runner
    // refuses them).
    SpeculativeConfig speculative;
};

#ifdef ONECARD_HAVE_CUDA
// Throws onecard::Error for a checkpoint the planner cannot read; a plan that does not fit comes
// back with fits = false and its refusal (the caller prints and refuses it). ckpt == nullptr:
// dummy weights (--load-format dummy), planned from the config's official layout.
MemoryPlan plan_serve_on_gpu(const ModelConfig& cfg, const Checkpoint* ckpt, const ServePlanInputs& in);
#endif

}  // namespace onecard::cli
