// `onecard bench`'s routing helpers for the hybrid (host expert) measurements: the host's share of
// picks, the published coverage curve, and skewed routing aimed at a coverage. CUDA builds only.
#pragma once

#include "backend/cuda/cuda_check.h"
#include "model/config.h"
#include "model/expert_placement.h"
#include "model/expert_profile.h"
#include "model_cuda/gpu_weights.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace onecard::cli {

// Share of the counted picks ([layers · E], the GPU's pick counters) that went to host experts.
inline double host_share(const std::vector<uint64_t>& counts, const ExpertPlacement& p) {
    return 1.0 - ExpertUseProfile::from_counts(p.n_layers(), p.n_experts, counts).coverage(p);
}

// Share of routing picks that the most-used `gpu_pairs` (layer, expert) pairs take under the
// published V4.1-Flash coverage curve (model/expert_profile.h's synthetic_skewed_profile is its one
// model here): the coverage of the best placement of that many pairs under that profile.
inline double published_coverage(int64_t n_layers, int64_t n_experts, int64_t gpu_pairs) {
    const ExpertUseProfile skewed = synthetic_skewed_profile(n_layers, n_experts, 1);
    return skewed.coverage(place_experts(n_layers, n_experts, gpu_pairs, &skewed));
}

// Skewed routing for the hybrid benchmark, aimed at `coverage` of all picks on GPU-resident experts:
// each hash layer's tid2eid keeps a host pick with probability (1 − coverage)/(host share of
// uniform picks) and otherwise swaps it for a random GPU expert not already in the row; each learned
// layer's router bias gains +delta on its GPU experts (the bias only selects, so the routing
// weights keep their form), delta found by bisection on the picks measured by `measure` (a few
// steps). Returns delta.
template <typename Measure>
double apply_skewed_routing(const ModelConfig& cfg, GpuModelWeights& w, const ExpertPlacement& p, double coverage,
                            uint64_t seed, Measure measure) {
    const int64_t E = cfg.n_routed_experts, K = cfg.num_experts_per_tok, V = cfg.vocab_size;
    std::mt19937_64 rng(seed ^ 0x5EEDull);
    std::vector<std::vector<float>> bias0(w.layers.size());
    for (GpuBlock& b : w.layers) {
        const int64_t l = b.layer_id;
        const std::vector<int32_t> gpu = p.gpu_experts(l);
        if (b.ffn.tid2eid) {
            std::vector<int32_t> t(static_cast<size_t>(V * K));
            CUDA_CHECK(cudaMemcpy(t.data(), b.ffn.tid2eid, t.size() * 4, cudaMemcpyDeviceToHost));
            const double uniform_host = static_cast<double>(p.n_host(l)) / static_cast<double>(E);
            const double keep = uniform_host > 0 ? std::min(1.0, (1.0 - coverage) / uniform_host) : 1.0;
            std::uniform_real_distribution<double> u01(0.0, 1.0);
            for (int64_t v = 0; v < V; ++v) {
                int32_t* row = t.data() + v * K;
                for (int64_t k = 0; k < K; ++k) {
                    if (p.is_on_gpu(l, row[k]) || u01(rng) < keep || gpu.empty()) continue;
                    for (;;) {  // a GPU expert the row does not have yet
                        const int32_t c = gpu[rng() % gpu.size()];
                        if (std::find(row, row + K, c) == row + K) {
                            row[k] = c;
                            break;
                        }
                    }
                }
            }
            CUDA_CHECK(cudaMemcpy(const_cast<int32_t*>(b.ffn.tid2eid), t.data(), t.size() * 4, cudaMemcpyHostToDevice));
        } else if (b.ffn.bias) {
            bias0[static_cast<size_t>(l)].resize(static_cast<size_t>(E));
            CUDA_CHECK(cudaMemcpy(bias0[static_cast<size_t>(l)].data(), b.ffn.bias, E * 4, cudaMemcpyDeviceToHost));
        }
    }
    auto set_delta = [&](double delta) {
        for (GpuBlock& b : w.layers) {
            const auto& b0 = bias0[static_cast<size_t>(b.layer_id)];
            if (b0.empty()) continue;
            std::vector<float> nb = b0;
            for (int64_t e = 0; e < E; ++e)
                if (p.is_on_gpu(b.layer_id, e)) nb[static_cast<size_t>(e)] += static_cast<float>(delta);
            CUDA_CHECK(cudaMemcpy(const_cast<float*>(b.ffn.bias), nb.data(), E * 4, cudaMemcpyHostToDevice));
        }
    };
    double lo = 0.0, hi = 4.0;
    for (int it = 0; it < 8; ++it) {
        const double mid = 0.5 * (lo + hi);
        set_delta(mid);
        const double cov = 1.0 - measure();
        (cov < coverage ? lo : hi) = mid;
    }
    set_delta(hi);  // the smallest tried delta that reached the coverage
    return hi;
}

}  // namespace onecard::cli
