#include "model_cuda/host_expert_store.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops/host_moe.cuh"
#include "backend/cuda/ops/mxfp4_layout.cuh"
#include "backend/cuda/stream.h"
#include "core/error.h"
#include "model_cuda/gpu_synth.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

namespace onecard {
namespace {

using RecordLayout = cuda::MxExpertRecordLayout;

RecordLayout record_layout(int64_t D, int64_t I) {
    return cuda::mx_expert_record_layout(D, I);
}

// splitmix64: a counter-based generator, so each (seed, layer, expert, part, word) value is fixed.
uint64_t mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

}  // namespace

HostExpertStore::HostExpertStore(const ModelConfig& cfg, const ExpertPlacement& placement)
    : cfg_(cfg), placement_(placement) {
    placement_.check_integrity();
    ONECARD_CHECK(placement_.n_layers() == cfg.num_hidden_layers && placement_.n_experts == cfg.n_routed_experts,
                  "host experts: the placement is for {} layers x {} experts, the model has {} x {}",
                  placement_.n_layers(), placement_.n_experts, cfg.num_hidden_layers, cfg.n_routed_experts);
    ONECARD_CHECK(cfg.hidden_size % 128 == 0 && cfg.moe_intermediate_size % 128 == 0,
                  "host experts: hidden {} and moe_intermediate {} must be multiples of 128", cfg.hidden_size,
                  cfg.moe_intermediate_size);
    per_expert_ = record_layout(cfg.hidden_size, cfg.moe_intermediate_size).total;
    record_of_.assign(static_cast<size_t>(cfg.num_hidden_layers),
                      std::vector<int64_t>(static_cast<size_t>(cfg.n_routed_experts), -1));
    for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
        first_record_.push_back(n_records_);
        for (int32_t e : placement_.host_experts(l))
            record_of_[static_cast<size_t>(l)][static_cast<size_t>(e)] = n_records_++;
    }
    first_record_.push_back(n_records_);
    bytes_ = per_expert_ * static_cast<uint64_t>(n_records_);
    if (bytes_ > 0) {
        void* p = nullptr;
        const cudaError_t err = cudaHostAlloc(&p, bytes_, cudaHostAllocPortable);
        ONECARD_CHECK(err == cudaSuccess, "host experts: cannot pin {:.2f} GiB of host RAM for {} experts: {}",
                      bytes_ / double(1ull << 30), n_records_, cudaGetErrorString(err));
        base_ = static_cast<uint8_t*>(p);
    }
}

HostExpertStore::~HostExpertStore() {
    if (base_) cudaFreeHost(base_);
}

uint8_t* HostExpertStore::record(int64_t layer, int64_t expert) const {
    ONECARD_CHECK(
        layer >= 0 && layer < static_cast<int64_t>(record_of_.size()) && expert >= 0 && expert < cfg_.n_routed_experts,
        "host experts: (layer {}, expert {}) out of range", layer, expert);
    const int64_t r = record_of_[static_cast<size_t>(layer)][static_cast<size_t>(expert)];
    ONECARD_CHECK(r >= 0, "host experts: expert {} of layer {} is on the GPU, not in host RAM", expert, layer);
    return base_ + static_cast<uint64_t>(r) * per_expert_;
}

const uint8_t* HostExpertStore::layer_records(int64_t layer) const {
    ONECARD_CHECK(layer >= 0 && layer < static_cast<int64_t>(record_of_.size()), "host experts: layer {} out of range",
                  layer);
    return base_ + static_cast<uint64_t>(first_record_[static_cast<size_t>(layer)]) * per_expert_;
}

int64_t HostExpertStore::record_in_layer(int64_t layer, int64_t expert) const {
    ONECARD_CHECK(
        layer >= 0 && layer < static_cast<int64_t>(record_of_.size()) && expert >= 0 && expert < cfg_.n_routed_experts,
        "host experts: (layer {}, expert {}) out of range", layer, expert);
    const int64_t r = record_of_[static_cast<size_t>(layer)][static_cast<size_t>(expert)];
    return r < 0 ? -1 : r - first_record_[static_cast<size_t>(layer)];
}

cuda::MxHostExpert HostExpertStore::expert(int64_t layer, int64_t expert) const {
    const RecordLayout L = record_layout(cfg_.hidden_size, cfg_.moe_intermediate_size);
    const uint8_t* r = record(layer, expert);
    return {r + L.off[0], r + L.off[1], r + L.off[2], r + L.off[3], r + L.off[4], r + L.off[5]};
}

void HostExpertStore::fill_from(const ModelWeights& w) {
    const int64_t D = cfg_.hidden_size, I = cfg_.moe_intermediate_size;
    const RecordLayout L = record_layout(D, I);
    for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
        const MoEWeights& m = w.layers.at(static_cast<size_t>(l)).ffn;
        for (int32_t e : placement_.host_experts(l)) {
            const ExpertWeights& ex = m.experts.at(static_cast<size_t>(e));
            const QuantLinear* mats[3] = {&ex.w1, &ex.w3, &ex.w2};
            const int64_t rows[3] = {I, I, D}, cols[3] = {D, D, I};
            uint8_t* r = record(l, e);
            for (int i = 0; i < 3; ++i) {
                const QuantLinear& q = *mats[i];
                ONECARD_CHECK(q.is_mxfp4() && q.scale.dtype == DType::F8_E8M0 &&
                                  q.weight.nbytes == static_cast<size_t>(rows[i] * cols[i] / 2) &&
                                  q.scale.nbytes == static_cast<size_t>(rows[i] * cols[i] / 32),
                              "tensor {}: a host expert must be MXFP4 [{}, {}] with UE8M0 scales [{}, {}]",
                              q.weight.name, rows[i], cols[i] / 2, rows[i], cols[i] / 32);
                std::memcpy(r + L.off[2 * i], q.weight.data, L.len[2 * i]);
                std::memcpy(r + L.off[2 * i + 1], q.scale.data, L.len[2 * i + 1]);
            }
        }
    }
}

void HostExpertStore::fill_synthetic(uint64_t seed, int n_threads) {
    const int64_t D = cfg_.hidden_size, I = cfg_.moe_intermediate_size;
    const RecordLayout L = record_layout(D, I);
    std::vector<std::pair<int64_t, int32_t>> todo;
    for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l)
        for (int32_t e : placement_.host_experts(l)) todo.emplace_back(l, e);
    auto work = [&](size_t begin, size_t end) {
        for (size_t t = begin; t < end; ++t) {
            const auto [l, e] = todo[t];
            uint8_t* r = record(l, e);
            const uint64_t key = mix(seed ^ mix(static_cast<uint64_t>(l) * 1024 + static_cast<uint64_t>(e)));
            for (int i = 0; i < 6; ++i) {
                uint8_t* dst = r + L.off[i];
                const uint64_t part = mix(key + static_cast<uint64_t>(i));
                if (i % 2 == 0) {  // codes: uniform bytes
                    for (uint64_t wd = 0; wd < L.len[i] / 8; ++wd) {
                        const uint64_t v = mix(part + wd);
                        std::memcpy(dst + 8 * wd, &v, 8);
                    }
                } else {
                    int base = 0;
                    double p = 0;
                    synth_mx_scale_rule(i == 5 ? I : D, base, p);
                    const uint64_t thr = static_cast<uint64_t>(p * 18446744073709551615.0);
                    for (uint64_t j = 0; j < L.len[i]; ++j)
                        dst[j] = static_cast<uint8_t>(base + (mix(part + j) < thr ? 1 : 0));
                }
            }
        }
    };
    const int nt = std::max(1, n_threads);
    std::vector<std::thread> threads;
    const size_t per = (todo.size() + static_cast<size_t>(nt) - 1) / static_cast<size_t>(nt);
    for (int t = 0; t < nt; ++t) {
        const size_t b = std::min(todo.size(), per * static_cast<size_t>(t));
        const size_t e = std::min(todo.size(), b + per);
        if (b < e) threads.emplace_back(work, b, e);
    }
    for (auto& th : threads) th.join();
}

void HostExpertStore::reassign(int64_t layer, int64_t from, int64_t to) {
    ONECARD_CHECK(!placement_.is_on_gpu(layer, from) && placement_.is_on_gpu(layer, to),
                  "host experts: cannot swap expert {} (host) with {} (GPU) in layer {}: wrong sides", from, to, layer);
    auto& row = record_of_[static_cast<size_t>(layer)];
    row[static_cast<size_t>(to)] = row[static_cast<size_t>(from)];
    row[static_cast<size_t>(from)] = -1;
    placement_.on_gpu[static_cast<size_t>(layer)][static_cast<size_t>(from)] = 1;
    placement_.on_gpu[static_cast<size_t>(layer)][static_cast<size_t>(to)] = 0;
}

void HostExpertStore::check_integrity() const {
    placement_.check_integrity();
    int64_t n = 0;
    for (int64_t l = 0; l < placement_.n_layers(); ++l)
        for (int64_t e = 0; e < placement_.n_experts; ++e) {
            const int64_t r = record_of_[static_cast<size_t>(l)][static_cast<size_t>(e)];
            ONECARD_CHECK((r >= 0) == !placement_.is_on_gpu(l, e),
                          "host experts: record map disagrees with the placement at (layer {}, expert {})", l, e);
            if (r >= 0) ++n;
            ONECARD_CHECK(
                r < 0 || (r >= first_record_[static_cast<size_t>(l)] && r < first_record_[static_cast<size_t>(l) + 1]),
                "host experts: record {} of (layer {}, expert {}) is outside the layer's records", r, l, e);
        }
    ONECARD_CHECK(n == n_records_ && bytes_ == per_expert_ * static_cast<uint64_t>(n_records_) &&
                      (bytes_ == 0) == (base_ == nullptr),
                  "host experts: {} records counted, {} recorded, {} bytes", n, n_records_, bytes_);
}

void swap_host_expert(GpuModelWeights& w, HostExpertStore& store, int64_t layer, int32_t host_expert,
                      int32_t gpu_expert, uint8_t* staging, cudaStream_t stream) {
    ONECARD_CHECK(layer >= 0 && layer < static_cast<int64_t>(w.layers.size()) && staging != nullptr,
                  "host experts: swap in layer {} of {} (staging {})", layer, w.layers.size(),
                  staging ? "set" : "missing");
    GpuMoE& m = w.layers[static_cast<size_t>(layer)].ffn;
    const int64_t E = static_cast<int64_t>(m.expert_slot_host.size());
    ONECARD_CHECK(m.hybrid() && host_expert >= 0 && host_expert < E && gpu_expert >= 0 && gpu_expert < E,
                  "host experts: layer {} is not hybrid or experts {} / {} are out of range", layer, host_expert,
                  gpu_expert);
    const int32_t slot = m.expert_slot_host[static_cast<size_t>(gpu_expert)];
    ONECARD_CHECK(slot >= 0 && m.expert_slot_host[static_cast<size_t>(host_expert)] < 0,
                  "host experts: expert {} must be on the host and {} on the GPU in layer {}", host_expert, gpu_expert,
                  layer);
    const cuda::MxExpertWeights& x = m.experts;
    const int64_t D = x.dim, I = x.inter;
    const cuda::MxHostExpert h = store.expert(layer, host_expert);
    // (codes, scales) of w1, w3, w2: the host record's parts, the GPU slot's tiled arrays, and shapes.
    const uint8_t* host_part[6] = {h.w1, h.s1, h.w3, h.s3, h.w2, h.s2};
    const uint8_t* gpu_base[6] = {x.w1, x.s1, x.w3, x.s3, x.w2, x.s2};
    const int64_t rows[3] = {I, I, D}, cols[3] = {D, D, I};
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<uint8_t> tiled_c, tiled_s, plain_c[3], plain_s[3];
    size_t staged = 0;
    for (int i = 0; i < 3; ++i) {
        const size_t cb = static_cast<size_t>(rows[i] * cols[i] / 2), sb = static_cast<size_t>(rows[i] * cols[i] / 32);
        auto* dst_c = const_cast<uint8_t*>(gpu_base[2 * i]) + cb * static_cast<size_t>(slot);
        auto* dst_s = const_cast<uint8_t*>(gpu_base[2 * i + 1]) + sb * static_cast<size_t>(slot);
        // The GPU expert leaves: its tiled bytes back to the checkpoint layout on the host.
        tiled_c.resize(cb);
        tiled_s.resize(sb);
        CUDA_CHECK(cudaMemcpy(tiled_c.data(), dst_c, cb, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(tiled_s.data(), dst_s, sb, cudaMemcpyDeviceToHost));
        plain_c[i].resize(cb);
        plain_s[i].resize(sb);
        cuda::mxfp4_untile_host(tiled_c.data(), tiled_s.data(), rows[i], cols[i], plain_c[i].data(), plain_s[i].data());
        // The host expert arrives: staged, then tiled into the slot.
        CUDA_CHECK(cudaMemcpy(staging + staged, host_part[2 * i], cb, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(staging + staged + cb, host_part[2 * i + 1], sb, cudaMemcpyHostToDevice));
        cuda::mxfp4_tile_device(staging + staged, staging + staged + cb, rows[i], cols[i], dst_c, dst_s, stream);
        staged += cb + sb;
    }
    CUDA_CHECK(cudaStreamSynchronize(stream));
    // The record that held host_expert now holds gpu_expert, in the checkpoint's bytes.
    store.reassign(layer, host_expert, gpu_expert);
    const cuda::MxHostExpert g = store.expert(layer, gpu_expert);
    uint8_t* parts[6] = {const_cast<uint8_t*>(g.w1), const_cast<uint8_t*>(g.s1), const_cast<uint8_t*>(g.w3),
                         const_cast<uint8_t*>(g.s3), const_cast<uint8_t*>(g.w2), const_cast<uint8_t*>(g.s2)};
    for (int i = 0; i < 3; ++i) {
        std::memcpy(parts[2 * i], plain_c[i].data(), plain_c[i].size());
        std::memcpy(parts[2 * i + 1], plain_s[i].data(), plain_s[i].size());
    }
    m.expert_slot_host[static_cast<size_t>(host_expert)] = slot;
    m.expert_slot_host[static_cast<size_t>(gpu_expert)] = -1;
    if (m.expert_stream_slot) {  // a staged record stays staged: its new expert takes its stream slot
        m.expert_stream_slot_host[static_cast<size_t>(gpu_expert)] =
            m.expert_stream_slot_host[static_cast<size_t>(host_expert)];
        m.expert_stream_slot_host[static_cast<size_t>(host_expert)] = -1;
        CUDA_CHECK(cudaMemcpy(const_cast<int32_t*>(m.expert_stream_slot), m.expert_stream_slot_host.data(),
                              m.expert_stream_slot_host.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    }
    m.host_experts[static_cast<size_t>(host_expert)] = cuda::MxHostExpert{};
    m.host_experts[static_cast<size_t>(gpu_expert)] = g;
    CUDA_CHECK(cudaMemcpy(const_cast<int32_t*>(m.expert_slot), m.expert_slot_host.data(),
                          m.expert_slot_host.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
}

void attach_host_experts(GpuModelWeights& w, const HostExpertStore& store, cuda::DeviceArena& arena,
                         int64_t stream_per_layer) {
    ONECARD_CHECK(stream_per_layer >= 0, "host experts: {} streamed experts per layer", stream_per_layer);
    const ExpertPlacement& p = store.placement();
    ONECARD_CHECK(static_cast<int64_t>(w.layers.size()) == p.n_layers(),
                  "host experts: the weights have {} layers, the placement {}", w.layers.size(), p.n_layers());
    for (GpuBlock& b : w.layers) {
        const int64_t l = b.layer_id;
        GpuMoE& m = b.ffn;
        ONECARD_CHECK(m.experts.n_experts == p.n_gpu(l),
                      "host experts: layer {} holds {} GPU experts but the placement puts {} there", l,
                      m.experts.n_experts, p.n_gpu(l));
        if (p.n_host(l) == 0) continue;  // stays an all-GPU layer
        m.expert_slot_host.assign(static_cast<size_t>(p.n_experts), -1);
        m.host_experts.assign(static_cast<size_t>(p.n_experts), cuda::MxHostExpert{});
        int32_t slot = 0;
        for (int64_t e = 0; e < p.n_experts; ++e) {
            if (p.is_on_gpu(l, e))
                m.expert_slot_host[static_cast<size_t>(e)] = slot++;
            else
                m.host_experts[static_cast<size_t>(e)] = store.expert(l, e);
        }
        auto* d = arena.alloc_n<int32_t>(m.expert_slot_host.size(), "layers." + std::to_string(l) + ".expert_slot");
        cuda::copy_to_device(d, m.expert_slot_host);
        m.expert_slot = d;
        // The layer's first records are staged into HBM on large decode steps (HostExpertStreamer):
        // which expert a record holds may change (swaps), the records copied do not.
        m.n_stream = std::min(stream_per_layer, p.n_host(l));
        if (m.n_stream == 0) continue;
        m.stream_records = store.layer_records(l);
        m.expert_stream_slot_host.assign(static_cast<size_t>(p.n_experts), -1);
        for (int64_t e = 0; e < p.n_experts; ++e) {
            const int64_t r = store.record_in_layer(l, e);
            if (r >= 0 && r < m.n_stream) m.expert_stream_slot_host[static_cast<size_t>(e)] = static_cast<int32_t>(r);
        }
        auto* ds = arena.alloc_n<int32_t>(m.expert_stream_slot_host.size(),
                                          "layers." + std::to_string(l) + ".expert_stream_slot");
        cuda::copy_to_device(ds, m.expert_stream_slot_host);
        m.expert_stream_slot = ds;
    }
}

}  // namespace onecard
