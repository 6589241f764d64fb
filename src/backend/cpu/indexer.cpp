#include "backend/cpu/indexer.h"

#include "backend/cpu/linear.h"

#include <algorithm>
#include <numeric>

namespace onecard::cpu {

void indexer_scores(const float* q, const float* weights, const float* keys, int64_t n_keys, int64_t n_heads,
                    int64_t head_dim, float softmax_scale, float* scores) {
    if (n_keys == 0) return;
    std::vector<float> dots(static_cast<size_t>(n_heads * n_keys));  // [n_heads, n_keys]
    matmul_nt(q, keys, dots.data(), n_heads, head_dim, n_keys);
    for (int64_t s = 0; s < n_keys; ++s) {
        float acc = 0.0f;
        for (int64_t h = 0; h < n_heads; ++h) {
            const float d = dots[h * n_keys + s];
            acc += (d > 0.0f ? d * softmax_scale : 0.0f) * weights[h];
        }
        scores[s] = acc;
    }
}

std::vector<int32_t> indexer_topk(const float* scores, int64_t n_visible, int64_t k) {
    const int64_t n = std::min(k, n_visible);
    if (n <= 0) return {};
    std::vector<int32_t> idx(static_cast<size_t>(n_visible));
    std::iota(idx.begin(), idx.end(), 0);
    auto better = [&](int32_t a, int32_t b) { return scores[a] > scores[b] || (scores[a] == scores[b] && a < b); };
    std::partial_sort(idx.begin(), idx.begin() + n, idx.end(), better);
    idx.resize(static_cast<size_t>(n));
    std::sort(idx.begin(), idx.end());
    return idx;
}

}  // namespace onecard::cpu
