// Large decode steps on hybrid weights: a share of each layer's host experts staged over PCIe into
// HBM and computed by the GPU's decode GEMV, while the host computes the rest.
//
// Why: at batch 64 most host experts of a layer have picks (1 - (1 - 6/256)^64 ≈ 78% under uniform
// routing), so the host streams nearly all of them every step and its read bandwidth bounds the step.
// The DMA engine's reads of host RAM come on top of the CPU's (measured on the H200 host: 84.5 GB/s
// of CPU reads and 51.1 GB/s of pinned copies at the same time), so copying a fixed share of each
// layer's host records into HBM and running them on the GPU takes that share off the host.
//
// How, per step (inside the decode graph; nothing synchronises the host):
//   copy stream:  fork ─ stage(0) ─ stage(1) ─ wait free[0] ─ stage(2) ─ wait free[1] ─ stage(3) … ─ join
//   main stream:  … layer 0 MoE: wait ready[0], GEMV on buffer 0, record free[0] … layer 1 …
// stage(j) copies streamed layer j's records (contiguous in pinned RAM, GpuMoE::stream_records) into
// one raw buffer and tiles them into tiled buffer j % 2 (tile_expert_records), so the copy of the
// next layer overlaps this layer's compute. The records staged are fixed; which expert each holds is
// the device map GpuMoE::expert_stream_slot (a swap moves experts between records), so the captured
// copies stay valid.
#pragma once

#include "backend/cuda/ops/moe_experts.cuh"
#include "model/config.h"
#include "model_cuda/gpu_weights.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace onecard {

class HostExpertStreamer {
public:
    // Device bytes for up to `per_layer` staged experts: one raw buffer and two tiled buffers.
    static size_t staging_bytes(int64_t dim, int64_t inter, int64_t per_layer);
    // `weights` must outlive the streamer and stage at most `per_layer` experts in any layer;
    // `staging` is staging_bytes(D, I, per_layer) of device memory. Steps of fewer than min_tokens
    // tokens do not stream (active()).
    HostExpertStreamer(const ModelConfig& cfg, const GpuModelWeights& weights, int64_t per_layer, int64_t min_tokens,
                       uint8_t* staging);
    ~HostExpertStreamer();
    HostExpertStreamer(const HostExpertStreamer&) = delete;
    HostExpertStreamer& operator=(const HostExpertStreamer&) = delete;

    // Whether a decode step of n tokens stages experts (n >= min_tokens and some layer streams).
    bool active(int64_t n_tokens) const { return !layers_.empty() && n_tokens >= min_tokens_; }
    // Before the first layer of an active step: forks the copy stream from `s` and stages the first
    // two streamed layers.
    void begin_step(cudaStream_t s);
    // At `layer`'s MoE (every streamed layer in order, once per active step): makes `s` wait for the
    // layer's staged experts and returns them as GEMV weights (slots = GpuMoE::expert_stream_slot).
    const cuda::MxExpertWeights& acquire(int64_t layer, cudaStream_t s);
    // After `s`'s last read of the layer's staged experts: frees the buffer and stages the layer two
    // streamed layers on into it.
    void release(int64_t layer, cudaStream_t s);
    // After the last layer: `s` waits for the copy stream (graph capture needs the fork joined).
    void end_step(cudaStream_t s);
    // Streamed layers and experts staged per step (for reports).
    int64_t n_layers() const { return static_cast<int64_t>(layers_.size()); }
    int64_t experts_per_step() const;
    void check_integrity() const;

private:
    void stage(size_t j);
    int64_t ordinal(int64_t layer) const;

    const GpuModelWeights& w_;
    int64_t per_layer_ = 0, min_tokens_ = 0;
    uint64_t record_bytes_ = 0;
    std::vector<int64_t> layers_;      // streamed layers, in forward order
    std::vector<int64_t> ordinal_of_;  // [num_hidden_layers]: index into layers_, or -1
    uint8_t* raw_ = nullptr;
    cuda::MxExpertWeights tiled_[2];
    cudaStream_t copy_ = nullptr;  // highest priority: its tiling kernel must not queue behind the step's GEMVs
    cudaEvent_t fork_ = nullptr, join_ = nullptr, ready_[2] = {}, free_[2] = {};
    size_t next_acquire_ = 0;  // the streamed layer the current step reaches next
};

}  // namespace onecard
