#include "backend/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace onecard::cpu {
namespace {

void normalise_weights(const float* scores, const int32_t* experts, int64_t top_k, float route_scale, float* w) {
    float sum = 0.0f;
    for (int64_t i = 0; i < top_k; ++i) sum += scores[experts[i]];
    // HF adds 1e-20 to the denominator; REF does not. Invisible unless every score is 0.
    for (int64_t i = 0; i < top_k; ++i) w[i] = scores[experts[i]] / (sum + 1e-20f) * route_scale;
}

}  // namespace

void sqrtsoftplus(const float* logits, int64_t n_experts, float* scores) {
    for (int64_t e = 0; e < n_experts; ++e) {
        const float x = logits[e];
        const float sp = x > 20.0f ? x : std::log1p(std::exp(x));
        scores[e] = std::sqrt(sp);
    }
}

void route_topk(const float* scores, const float* bias, int64_t n_experts, int64_t top_k, float route_scale,
                int32_t* experts, float* weights) {
    std::vector<float> biased(scores, scores + n_experts);
    if (bias)
        for (int64_t e = 0; e < n_experts; ++e) biased[e] += bias[e];
    std::vector<int32_t> idx(static_cast<size_t>(n_experts));
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + top_k, idx.end(),
                      [&](int32_t a, int32_t b) { return biased[a] > biased[b] || (biased[a] == biased[b] && a < b); });
    std::copy(idx.begin(), idx.begin() + top_k, experts);
    normalise_weights(scores, experts, top_k, route_scale, weights);
}

void route_hash(const float* scores, const int32_t* fixed_experts, int64_t top_k, float route_scale, int32_t* experts,
                float* weights) {
    std::copy(fixed_experts, fixed_experts + top_k, experts);
    normalise_weights(scores, experts, top_k, route_scale, weights);
}

void swiglu_clamped(const float* gate, const float* up, int64_t n, float limit, float* h) {
    for (int64_t i = 0; i < n; ++i) {
        float g = gate[i], u = up[i];
        if (limit > 0.0f) {
            g = std::min(g, limit);
            u = std::clamp(u, -limit, limit);
        }
        h[i] = g / (1.0f + std::exp(-g)) * u;
    }
}

}  // namespace onecard::cpu
