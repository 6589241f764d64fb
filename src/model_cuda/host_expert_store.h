// The routed experts an ExpertPlacement keeps off the GPU, in pinned host RAM, in the checkpoint's
// own MXFP4 bytes (no requantisation): per (layer, host expert) one contiguous record
// w1 codes | w1 scales | w3 codes | w3 scales | w2 codes | w2 scales, which is also the order the
// many-token path stages an expert in (MxHybridExperts) and what the host expert pool reads.
// Pinned (cudaHostAlloc, portable) so host-to-device copies run at full PCIe rate.
#pragma once

#include "backend/cuda/ops/moe_experts.cuh"
#include "model/config.h"
#include "model/expert_placement.h"
#include "model/weights.h"
#include "model_cuda/gpu_weights.h"

#include <cstdint>
#include <vector>

namespace onecard {

class HostExpertStore {
public:
    // Takes the pinned memory for every host (layer, expert) pair of `placement`; nothing is written yet.
    HostExpertStore(const ModelConfig& cfg, const ExpertPlacement& placement);
    ~HostExpertStore();
    HostExpertStore(const HostExpertStore&) = delete;
    HostExpertStore& operator=(const HostExpertStore&) = delete;

    // The checkpoint's bytes of each host expert (throws onecard::Error naming a tensor whose dtype or
    // shape is not MXFP4 [n, k/2] + UE8M0 [n, k/32]).
    void fill_from(const ModelWeights& w);
    // Random experts with gpu_synth.h's distribution (uniform E2M1 codes, block exponents giving
    // E[w²] = 1/fan_in), from (seed, layer, expert) only, on `n_threads` threads.
    void fill_synthetic(uint64_t seed, int n_threads);

    // Pinned pointers of a host expert; throws if (layer, expert) is on the GPU.
    cuda::MxHostExpert expert(int64_t layer, int64_t expert) const;
    // The records of a layer's host experts, back to back (stride bytes_per_expert()), and the index
    // of an expert's record among them (-1 on the GPU). A swap moves experts between records; the
    // records themselves stay where they are.
    const uint8_t* layer_records(int64_t layer) const;
    int64_t record_in_layer(int64_t layer, int64_t expert) const;
    uint64_t bytes() const { return bytes_; }
    uint64_t bytes_per_expert() const { return per_expert_; }
    const ExpertPlacement& placement() const { return placement_; }
    // The record of host expert `from` now holds expert `to` of the same layer (a swap: `to` came
    // off the GPU, `from` went onto it); the placement follows. The caller rewrites the bytes.
    void reassign(int64_t layer, int64_t from, int64_t to);
    void check_integrity() const;

private:
    uint8_t* record(int64_t layer, int64_t expert) const;

    ModelConfig cfg_;
    ExpertPlacement placement_;
    std::vector<std::vector<int64_t>> record_of_;  // [layer][expert]: record index, or -1 on the GPU
    std::vector<int64_t> first_record_;            // [layers + 1]: layer l's records are [first[l], first[l + 1])
    int64_t n_records_ = 0;
    uint64_t per_expert_ = 0, bytes_ = 0;
    uint8_t* base_ = nullptr;  // pinned
};

// Re-placement while serving: host expert `host_expert` of `layer` moves into the GPU slot of
// `gpu_expert`, which moves into host RAM in its place (its tiled HBM bytes untiled back to the
// checkpoint layout, so the record holds exactly what the checkpoint shipped). One swap, between
// steps: it synchronises `stream`, and the next step must not have been queued. `staging` is a device
// buffer of MxHybridExperts::staging_bytes_for(D, I) bytes. The slot maps change in place (device and
// host), so captured graphs stay valid; the GPU and the host compute an expert with the same rounding
// points, so outputs do not depend on where it lives beyond fp32 summation order.
void swap_host_expert(GpuModelWeights& w, HostExpertStore& store, int64_t layer, int32_t host_expert,
                      int32_t gpu_expert, uint8_t* staging, cudaStream_t stream);

// Makes `w`'s MoE layers hybrid where `store` holds experts of theirs: the slot maps (device and
// host) and the host experts' pointers. `w` must have been made with the same placement
// (upload_weights / synth_weights_on_device). The slot maps come from `arena`. stream_per_layer:
// up to that many of each layer's host records are staged over PCIe into HBM on large decode steps
// instead of computed by the host (GpuMoE::n_stream; GpuModelOptions::host_experts must allow as many).
void attach_host_experts(GpuModelWeights& w, const HostExpertStore& store, cuda::DeviceArena& arena,
                         int64_t stream_per_layer = 0);

}  // namespace onecard
