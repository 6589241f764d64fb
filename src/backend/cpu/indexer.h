// Lightning indexer of CSA layers (dsv4-model.md §4.6): scores every visible compressed entry for a
// query token and keeps the top k; the picks address the main compressed KV stream.
#pragma once

#include <cstdint>
#include <vector>

namespace onecard::cpu {

// scores[s] = Σ_h weights[h] · ReLU(q[h] · keys[s]) · softmax_scale for s < n_keys.
// q [n_heads, head_dim], weights [n_heads] (already × n_heads^-½), keys [n_keys, head_dim].
void indexer_scores(const float* q, const float* weights, const float* keys, int64_t n_keys, int64_t n_heads,
                    int64_t head_dim, float softmax_scale, float* scores);

// Entries a query at `pos` may see: w < floor((pos + 1) / ratio) (causal mask on compressed entries).
inline int64_t n_visible_entries(int64_t pos, int64_t ratio) {
    return (pos + 1) / ratio;
}

// Indices of the min(k, n_visible) highest scores among scores[0, n_visible), in ascending index
// order. Ties go to the lower index, so the choice is deterministic.
std::vector<int32_t> indexer_topk(const float* scores, int64_t n_visible, int64_t k);

}  // namespace onecard::cpu
