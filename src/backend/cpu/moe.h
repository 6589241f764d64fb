// MoE routing and expert activation (dsv4-model.md §5), one token at a time.
#pragma once

#include <cstdint>

namespace onecard::cpu {

// scores[e] = sqrt(softplus(logits[e])) with PyTorch's softplus (linear above 20).
void sqrtsoftplus(const float* logits, int64_t n_experts, float* scores);

// Learned routing: picks the top_k experts by scores + bias (bias only selects; nullptr = none), ties to
// the lower expert id; weights = scores[picked] / (Σ scores[picked] + 1e-20) · route_scale. Writes
// expert ids (in descending biased-score order) and weights [top_k].
void route_topk(const float* scores, const float* bias, int64_t n_experts, int64_t top_k, float route_scale,
                int32_t* experts, float* weights);

// Hash routing: experts fixed per token id (a row of tid2eid); weights as in route_topk.
void route_hash(const float* scores, const int32_t* fixed_experts, int64_t top_k, float route_scale, int32_t* experts,
                float* weights);

// h[i] = silu(min(gate[i], limit)) · clamp(up[i], −limit, limit) (limit <= 0: no clamp).
void swiglu_clamped(const float* gate, const float* up, int64_t n, float limit, float* h);

}  // namespace onecard::cpu
