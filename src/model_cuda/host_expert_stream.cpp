#include "model_cuda/host_expert_stream.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops/host_moe.cuh"
#include "core/error.h"

#include <cuda_runtime.h>

#include <algorithm>

namespace onecard {
namespace {

uint64_t align256(uint64_t b) {
    return (b + 255) / 256 * 256;
}

// One tiled buffer of `slots` experts: w1, s1, w3, s3, w2, s2 arrays, each 256-byte aligned.
uint64_t tiled_bytes(int64_t D, int64_t I, int64_t slots) {
    const uint64_t codes = static_cast<uint64_t>(slots * D * I / 2), scales = static_cast<uint64_t>(slots * D * I / 32);
    return 3 * (align256(codes) + align256(scales));
}

cuda::MxExpertWeights carve_tiled(uint8_t* base, int64_t D, int64_t I, int64_t slots) {
    const uint64_t codes = align256(static_cast<uint64_t>(slots * D * I / 2));
    const uint64_t scales = align256(static_cast<uint64_t>(slots * D * I / 32));
    cuda::MxExpertWeights t;
    t.n_experts = slots;
    t.dim = D;
    t.inter = I;
    t.w1 = base;
    t.s1 = base + codes;
    t.w3 = base + codes + scales;
    t.s3 = base + 2 * codes + scales;
    t.w2 = base + 2 * codes + 2 * scales;
    t.s2 = base + 3 * codes + 2 * scales;
    return t;
}

}  // namespace

size_t HostExpertStreamer::staging_bytes(int64_t dim, int64_t inter, int64_t per_layer) {
    if (per_layer <= 0) return 0;
    const uint64_t raw = align256(cuda::mx_expert_record_layout(dim, inter).total * static_cast<uint64_t>(per_layer));
    return static_cast<size_t>(raw + 2 * tiled_bytes(dim, inter, per_layer));
}

HostExpertStreamer::HostExpertStreamer(const ModelConfig& cfg, const GpuModelWeights& weights, int64_t per_layer,
                                       int64_t min_tokens, uint8_t* staging)
    : w_(weights), per_layer_(per_layer), min_tokens_(min_tokens) {
    const int64_t D = cfg.hidden_size, I = cfg.moe_intermediate_size;
    ONECARD_CHECK(per_layer > 0 && min_tokens > 0 && staging != nullptr,
                  "host expert streaming: {} experts per layer from steps of {} tokens (staging {})", per_layer,
                  min_tokens, staging ? "set" : "missing");
    record_bytes_ = cuda::mx_expert_record_layout(D, I).total;
    ordinal_of_.assign(static_cast<size_t>(cfg.num_hidden_layers), -1);
    for (const GpuBlock& b : weights.layers) {
        const GpuMoE& m = b.ffn;
        if (!m.hybrid() || m.n_stream == 0) continue;
        ONECARD_CHECK(m.n_stream <= per_layer && m.stream_records && m.expert_stream_slot &&
                          static_cast<int64_t>(m.expert_stream_slot_host.size()) == cfg.n_routed_experts,
                      "host expert streaming: layer {} stages {} experts, room for {}", b.layer_id, m.n_stream,
                      per_layer);
        ordinal_of_[static_cast<size_t>(b.layer_id)] = static_cast<int64_t>(layers_.size());
        layers_.push_back(b.layer_id);
    }
    raw_ = staging;
    uint8_t* t = staging + align256(record_bytes_ * static_cast<uint64_t>(per_layer));
    tiled_[0] = carve_tiled(t, D, I, per_layer);
    tiled_[1] = carve_tiled(t + tiled_bytes(D, I, per_layer), D, I, per_layer);
    for (cudaEvent_t* e : {&fork_, &join_, &ready_[0], &ready_[1], &free_[0], &free_[1]})
        CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
    int least = 0, greatest = 0;
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    CUDA_CHECK(cudaStreamCreateWithPriority(&copy_, cudaStreamNonBlocking, greatest));
}

HostExpertStreamer::~HostExpertStreamer() {
    for (cudaEvent_t e : {fork_, join_, ready_[0], ready_[1], free_[0], free_[1]})
        if (e) cudaEventDestroy(e);
    if (copy_) cudaStreamDestroy(copy_);
}

int64_t HostExpertStreamer::experts_per_step() const {
    int64_t n = 0;
    for (int64_t l : layers_) n += w_.layers[static_cast<size_t>(l)].ffn.n_stream;
    return n;
}

int64_t HostExpertStreamer::ordinal(int64_t layer) const {
    ONECARD_CHECK(
        layer >= 0 && layer < static_cast<int64_t>(ordinal_of_.size()) && ordinal_of_[static_cast<size_t>(layer)] >= 0,
        "host expert streaming: layer {} stages no experts", layer);
    return ordinal_of_[static_cast<size_t>(layer)];
}

void HostExpertStreamer::stage(size_t j) {
    const GpuMoE& m = w_.layers[static_cast<size_t>(layers_[j])].ffn;
    const cudaStream_t c = copy_;
    CUDA_CHECK(cudaMemcpyAsync(raw_, m.stream_records, record_bytes_ * static_cast<uint64_t>(m.n_stream),
                               cudaMemcpyHostToDevice, c));
    cuda::MxExpertWeights dst = tiled_[j % 2];
    cuda::tile_expert_records(raw_, m.n_stream, dst, c);
    CUDA_CHECK(cudaEventRecord(ready_[j % 2], c));
}

void HostExpertStreamer::begin_step(cudaStream_t s) {
    ONECARD_CHECK(!layers_.empty(), "host expert streaming: no layer stages experts");
    CUDA_CHECK(cudaEventRecord(fork_, s));
    CUDA_CHECK(cudaStreamWaitEvent(copy_, fork_, 0));
    for (size_t j = 0; j < std::min<size_t>(2, layers_.size()); ++j) stage(j);
    next_acquire_ = 0;
}

const cuda::MxExpertWeights& HostExpertStreamer::acquire(int64_t layer, cudaStream_t s) {
    const size_t j = static_cast<size_t>(ordinal(layer));
    ONECARD_CHECK(j == next_acquire_,
                  "host expert streaming: layer {} reached out of order (expected streamed layer {})", layer,
                  next_acquire_);
    CUDA_CHECK(cudaStreamWaitEvent(s, ready_[j % 2], 0));
    tiled_[j % 2].n_experts = w_.layers[static_cast<size_t>(layer)].ffn.n_stream;
    return tiled_[j % 2];
}

void HostExpertStreamer::release(int64_t layer, cudaStream_t s) {
    const size_t j = static_cast<size_t>(ordinal(layer));
    ONECARD_CHECK(j == next_acquire_, "host expert streaming: layer {} released out of order", layer);
    CUDA_CHECK(cudaEventRecord(free_[j % 2], s));
    if (j + 2 < layers_.size()) {
        CUDA_CHECK(cudaStreamWaitEvent(copy_, free_[j % 2], 0));
        stage(j + 2);
    }
    ++next_acquire_;
}

void HostExpertStreamer::end_step(cudaStream_t s) {
    ONECARD_CHECK(next_acquire_ == layers_.size(), "host expert streaming: the step reached {} of {} streamed layers",
                  next_acquire_, layers_.size());
    CUDA_CHECK(cudaEventRecord(join_, copy_));
    CUDA_CHECK(cudaStreamWaitEvent(s, join_, 0));
}

void HostExpertStreamer::check_integrity() const {
    ONECARD_CHECK(raw_ && copy_ && fork_ && join_ && per_layer_ > 0, "host expert streaming: not set up");
    for (size_t j = 0; j < layers_.size(); ++j) {
        const GpuMoE& m = w_.layers[static_cast<size_t>(layers_[j])].ffn;
        ONECARD_CHECK(m.n_stream > 0 && m.n_stream <= per_layer_ &&
                          ordinal_of_[static_cast<size_t>(layers_[j])] == static_cast<int64_t>(j),
                      "host expert streaming: layer {} stages {} experts (room for {})", layers_[j], m.n_stream,
                      per_layer_);
        int64_t staged = 0;
        for (size_t e = 0; e < m.expert_stream_slot_host.size(); ++e) {
            const int32_t v = m.expert_stream_slot_host[e];
            if (v < 0) continue;
            ++staged;
            ONECARD_CHECK(v < m.n_stream && m.expert_slot_host[e] < 0,
                          "host expert streaming: layer {} expert {} has stream slot {} of {} (GPU slot {})",
                          layers_[j], e, v, m.n_stream, m.expert_slot_host[e]);
        }
        ONECARD_CHECK(staged == m.n_stream, "host expert streaming: layer {} maps {} experts to {} stream slots",
                      layers_[j], staged, m.n_stream);
    }
}

}  // namespace onecard
