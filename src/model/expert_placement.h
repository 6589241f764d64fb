// Where each routed expert of each main layer lives when the whole model does not fit the GPU:
// in HBM (computed by the GPU's expert kernels) or in pinned host RAM in its shipped MXFP4 bytes
// (computed by the host expert pool, backend/host). The memory planner decides it
// (engine/memory_plan.h, from an expert-use profile); the GPU weights and the MoE step read it.
// Pure data, no CUDA: the planner, the CPU tests and the CUDA side share this one description.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace onecard {

class ExpertUseProfile;  // model/expert_profile.h

struct ExpertPlacement {
    int64_t n_experts = 0;  // routed experts per layer
    // on_gpu[layer][expert] != 0: that (layer, expert) pair is resident in HBM. Main layers only
    // (the MTP block keeps its experts wherever the MTP weights go).
    std::vector<std::vector<uint8_t>> on_gpu;

    static ExpertPlacement all_on_gpu(int64_t n_layers, int64_t n_experts);
    int64_t n_layers() const { return static_cast<int64_t>(on_gpu.size()); }
    bool is_on_gpu(int64_t layer, int64_t expert) const;
    int64_t n_gpu(int64_t layer) const;
    int64_t n_host(int64_t layer) const { return n_experts - n_gpu(layer); }
    int64_t total_gpu() const;
    int64_t min_gpu() const;  // fewest GPU experts of any layer (n_experts when there are no layers)
    int64_t max_gpu() const;
    int64_t total_host() const { return n_layers() * n_experts - total_gpu(); }
    bool all_gpu() const { return total_host() == 0; }
    std::vector<int32_t> gpu_experts(int64_t layer) const;   // ascending ids
    std::vector<int32_t> host_experts(int64_t layer) const;  // ascending ids
    // One line: "GPU experts per layer: 216 x 43 (host 1720 pairs)" or min/max when they differ.
    std::string summary() const;
    // Throws onecard::Error if a layer's row has the wrong length.
    void check_integrity() const;
};

// Keeps exactly `gpu_pairs` (layer, expert) pairs on the GPU (clamped to [0, n_layers*n_experts]).
// With a profile (its shape must be n_layers x n_experts): the globally most-picked pairs, ties
// broken by lower layer, then lower expert id, so the same profile always gives the same placement.
// Without one: uniform, the same count per layer (the remainder one each over the first layers),
// the lowest expert ids of each layer.
ExpertPlacement place_experts(int64_t n_layers, int64_t n_experts, int64_t gpu_pairs, const ExpertUseProfile* profile);

}  // namespace onecard
