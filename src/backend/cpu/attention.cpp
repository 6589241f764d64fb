#include "backend/cpu/attention.h"

#include "backend/cpu/linear.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace onecard::cpu {

void attention_with_sink(const float* q, const float* kv, int64_t n_kv, const float* sink, int64_t n_heads,
                         int64_t head_dim, float scale, float* out) {
    std::vector<float> p(static_cast<size_t>(n_heads * n_kv));  // [n_heads, n_kv]
    matmul_nt(q, kv, p.data(), n_heads, head_dim, n_kv);
    for (int64_t h = 0; h < n_heads; ++h) {
        float* row = p.data() + h * n_kv;
        float mx = sink[h];
        for (int64_t j = 0; j < n_kv; ++j) {
            row[j] *= scale;
            mx = std::max(mx, row[j]);
        }
        float sum = std::exp(sink[h] - mx);
        for (int64_t j = 0; j < n_kv; ++j) {
            row[j] = std::exp(row[j] - mx);
            sum += row[j];
        }
        for (int64_t j = 0; j < n_kv; ++j) row[j] /= sum;
    }
    matmul_nn(p.data(), kv, out, n_heads, n_kv, head_dim);
}

}  // namespace onecard::cpu
