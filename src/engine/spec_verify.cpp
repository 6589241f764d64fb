#include "engine/spec_verify.h"

#include "core/error.h"

#include <algorithm>
#include <cmath>

namespace onecard {

double spec_uniform(uint64_t seed, SpecStream stream, uint64_t counter) {
    // A distinct seed per stream (golden-ratio increments, then the sampler's mixing), so the three
    // streams and the sampler's own draws (seed, counter) never coincide.
    return sampler_uniform(seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(stream), counter);
}

std::vector<double> dense_distribution(const Candidates& c, int64_t vocab) {
    std::vector<double> d(static_cast<size_t>(vocab), 0.0);
    for (size_t i = 0; i < c.tokens.size(); ++i) {
        ONECARD_CHECK(c.tokens[i] >= 0 && c.tokens[i] < vocab, "spec: candidate token {} outside the vocabulary {}",
                      c.tokens[i], vocab);
        d[static_cast<size_t>(c.tokens[i])] = c.probs[i];
    }
    return d;
}

int32_t draw_token(std::span<const double> probs, double u) {
    double total = 0.0;
    for (double x : probs) total += x;
    ONECARD_CHECK(total > 0.0 && std::isfinite(total), "spec: drawing from a distribution of mass {}", total);
    const double target = u * total;
    double acc = 0.0;
    int32_t last = -1;
    for (size_t t = 0; t < probs.size(); ++t) {
        if (probs[t] <= 0.0) continue;
        acc += probs[t];
        last = static_cast<int32_t>(t);
        if (acc > target) return last;
    }
    return last;  // rounding left u * total at the very top: the last token with mass
}

SpecVerdict verify_drafts(std::span<const int32_t> drafts, std::span<const double> q, std::span<const double> p,
                          int64_t vocab, uint64_t seed, uint64_t counter) {
    const auto k = static_cast<int64_t>(drafts.size());
    const auto V = static_cast<size_t>(vocab);
    ONECARD_CHECK(static_cast<int64_t>(q.size()) == k * vocab && static_cast<int64_t>(p.size()) == (k + 1) * vocab,
                  "spec: {} drafts need q [{}, {}] and p [{}, {}], got {} and {} values", k, k, vocab, k + 1, vocab,
                  q.size(), p.size());
    for (int64_t i = 0; i < k; ++i) {
        const int32_t d = drafts[static_cast<size_t>(i)];
        ONECARD_CHECK(d >= 0 && d < vocab, "spec: draft token {} outside the vocabulary {}", d, vocab);
        const std::span<const double> pi = p.subspan(static_cast<size_t>(i) * V, V);
        const std::span<const double> qi = q.subspan(static_cast<size_t>(i) * V, V);
        const double pd = pi[static_cast<size_t>(d)], qd = qi[static_cast<size_t>(d)];
        ONECARD_CHECK(qd > 0.0, "spec: draft {} (token {}) has draft probability 0", i, d);
        // Accept with probability min(1, p/q): u < p/q, u in [0, 1) (p >= q always accepts).
        if (spec_uniform(seed, SpecStream::Accept, counter + static_cast<uint64_t>(i)) * qd < pd) continue;
        std::vector<double> residual(V);
        for (size_t t = 0; t < V; ++t) residual[t] = std::max(0.0, pi[t] - qi[t]);
        double mass = 0.0;
        for (double x : residual) mass += x;
        // mass is 0 only when p == q (then the rejection above has probability 0; rounding aside,
        // p itself is the right distribution to fall back on).
        const std::span<const double> from = mass > 0.0 ? std::span<const double>(residual) : pi;
        return {i, draw_token(from, spec_uniform(seed, SpecStream::Resample, counter + static_cast<uint64_t>(i)))};
    }
    const std::span<const double> pk = p.subspan(static_cast<size_t>(k) * V, V);
    return {k, draw_token(pk, spec_uniform(seed, SpecStream::Resample, counter + static_cast<uint64_t>(k)))};
}

}  // namespace onecard
