#include "model/dspark_heads.h"

#include "backend/cpu/linear.h"
#include "core/error.h"

#include <algorithm>
#include <cmath>

namespace onecard {

void markov_step(std::span<const float> w1, std::span<const float> w2, int64_t rank, int32_t prev, float* m,
                 float* bias) {
    ONECARD_CHECK(rank > 0 && w1.size() % static_cast<size_t>(rank) == 0 && w2.size() == w1.size(),
                  "markov head: w1 of {} and w2 of {} floats at rank {}", w1.size(), w2.size(), rank);
    const auto vocab = static_cast<int64_t>(w1.size()) / rank;
    ONECARD_CHECK(prev >= 0 && prev < vocab, "markov head: previous token {} outside [0, {})", prev, vocab);
    const float* row = w1.data() + int64_t(prev) * rank;
    std::copy(row, row + rank, m);
    cpu::matmul_nt(m, w2.data(), bias, 1, rank, vocab);  // bias[v] = sum_k w2[v, k] m[k]
}

float confidence_logit(std::span<const float> w, std::span<const float> h, std::span<const float> m) {
    ONECARD_CHECK(w.size() == h.size() + m.size(), "confidence head: {} weights for a hidden of {} and {} markov",
                  w.size(), h.size(), m.size());
    float c = 0.0f;
    for (size_t i = 0; i < h.size(); ++i) c += w[i] * h[i];
    for (size_t i = 0; i < m.size(); ++i) c += w[h.size() + i] * m[i];
    return c;
}

double sigmoid(double x) {
    return 1.0 / (1.0 + std::exp(-x));
}

int64_t confident_prefix_length(std::span<const float> conf_logits, double threshold) {
    const auto n = static_cast<int64_t>(conf_logits.size());
    if (threshold <= 0.0) return n;
    for (int64_t j = 0; j < n; ++j)
        if (sigmoid(conf_logits[static_cast<size_t>(j)]) < threshold) return j;
    return n;
}

std::vector<double> prefix_survival(std::span<const float> conf_logits) {
    std::vector<double> out;
    double s = 1.0;
    for (float c : conf_logits) {
        s *= sigmoid(c);
        out.push_back(s);
    }
    return out;
}

}  // namespace onecard
