// Core attention with a per-head sink (dsv4-model.md §4.7), for one query token over a gathered
// key set. K = V (single shared head, the stored 512-d vector).
#pragma once

#include <cstdint>

namespace onecard::cpu {

// q [n_heads, head_dim], kv [n_kv, head_dim] (keys = values), sink [n_heads].
// out[h] = Σ_j p_j · kv_j with p_j = exp(ℓ_j) / (exp(sink_h) + Σ exp(ℓ)), ℓ_j = scale · q[h]·kv_j.
// The sink is a logit that is NOT multiplied by `scale` and carries a zero value vector.
// out [n_heads, head_dim] is overwritten. n_kv >= 1 (the window always holds the query itself).
void attention_with_sink(const float* q, const float* kv, int64_t n_kv, const float* sink, int64_t n_heads,
                         int64_t head_dim, float scale, float* out);

}  // namespace onecard::cpu
