#include "engine/spec_policy.h"

#include "core/error.h"

#include <algorithm>
#include <cmath>

namespace onecard {

namespace {

// The acceptance a row starts from before any is measured: per-position shares like those seen on
// real traffic (DeepSeek's 0731 drafter was reported at 0.74, 0.48, 0.26, ... for positions 1, 2, 3),
// rounded down, so a model that drafts worse is found out within a few dozen rows.
double prior_acceptance(int64_t j) {
    return 0.7 * std::pow(0.65, static_cast<double>(j - 1));
}

int bucket_of(int64_t n) {
    int b = 0;
    while ((int64_t{1} << b) < n && b < 62) ++b;
    return b;
}

}  // namespace

SpecPolicy::SpecPolicy(SpecPolicyConfig config) : config_(config), buckets_(64) {
    ONECARD_CHECK(config_.max_drafts >= 1 && config_.max_drafts <= 16,
                  "speculation: max_drafts must be in [1, 16], got {}", config_.max_drafts);
    ONECARD_CHECK(config_.disable_by_batch_size >= 0, "speculation: disable_by_batch_size {} is negative",
                  config_.disable_by_batch_size);
    for (int64_t j = 1; j <= config_.max_drafts; ++j) {
        offered_.push_back(kPriorWeight);
        reached_.push_back(kPriorWeight * prior_acceptance(j));
    }
}

std::vector<double> SpecPolicy::acceptance() const {
    std::vector<double> p(offered_.size());
    for (size_t j = 0; j < p.size(); ++j) p[j] = offered_[j] > 0 ? reached_[j] / offered_[j] : 0.0;
    return p;
}

double SpecPolicy::expected_tokens(int64_t k) const {
    // Called for every k of every step: summed in place, no vector.
    double e = 1.0;
    for (size_t j = 0; j < std::min(static_cast<size_t>(std::max<int64_t>(k, 0)), offered_.size()); ++j)
        e += offered_[j] > 0 ? reached_[j] / offered_[j] : 0.0;
    return e;
}

double SpecPolicy::step_seconds(int64_t n_tokens) const {
    // Observed points (mean tokens, mean seconds) in token order; buckets hold increasing counts.
    double prev_n = 0, prev_t = 0;
    bool have_prev = false;
    for (const Bucket& b : buckets_) {
        if (b.weight <= 0) continue;
        const double n = b.tokens / b.weight, t = b.seconds / b.weight;
        if (static_cast<double>(n_tokens) <= n) {
            if (!have_prev) return t;  // below every observation: the smallest step's cost
            const double f = (static_cast<double>(n_tokens) - prev_n) / std::max(n - prev_n, 1e-9);
            return prev_t + f * (t - prev_t);
        }
        prev_n = n;
        prev_t = t;
        have_prev = true;
    }
    return prev_t;  // past every observation (or none: 0)
}

double SpecPolicy::gain(int64_t decode_rows, int64_t k) const {
    if (k <= 0) return 1.0;
    const int64_t b = std::max<int64_t>(decode_rows, 1);
    const double t1 = step_seconds(b), tk = step_seconds(b * (k + 1));
    const double cost = t1 > 0 && tk > 0 ? tk / t1 : 1.0;  // unmeasured: as cheap as plain decode
    return expected_tokens(k) / std::max(cost, 1e-9);
}

int64_t SpecPolicy::drafts_for_step(int64_t decode_rows, int64_t live) {
    if (config_.disable_by_batch_size > 0 && live > config_.disable_by_batch_size) return 0;
    if (config_.length == DraftLength::Fixed) return config_.max_drafts;
    int64_t best = 0;
    double best_gain = kMinGain;
    for (int64_t k = 1; k <= config_.max_drafts; ++k) {
        const double g = gain(decode_rows, k);
        if (g > best_gain) {
            best_gain = g;
            best = k;
        }
    }
    if (best > 0) {
        steps_off_ = 0;
        return best;
    }
    return ++steps_off_ % kProbeEvery == 0 ? 1 : 0;
}

void SpecPolicy::record_verify(int64_t n_drafts, int64_t n_accepted) {
    ONECARD_CHECK(n_drafts >= 0 && n_accepted >= 0 && n_accepted <= n_drafts,
                  "speculation: a row accepted {} of {} drafts", n_accepted, n_drafts);
    const auto k = std::min<int64_t>(n_drafts, static_cast<int64_t>(offered_.size()));
    for (int64_t j = 0; j < k; ++j) {
        auto& o = offered_[static_cast<size_t>(j)];
        auto& r = reached_[static_cast<size_t>(j)];
        o = o * (1 - kDecay) + 1;
        r = r * (1 - kDecay) + (j < n_accepted ? 1 : 0);
    }
}

void SpecPolicy::record_step(int64_t n_tokens, double seconds) {
    if (n_tokens <= 0 || !(seconds >= 0) || !std::isfinite(seconds)) return;
    Bucket& b = buckets_[static_cast<size_t>(bucket_of(n_tokens))];
    b.weight = b.weight * (1 - kDecay) + 1;
    b.tokens = b.tokens * (1 - kDecay) + static_cast<double>(n_tokens);
    b.seconds = b.seconds * (1 - kDecay) + seconds;
}

void SpecPolicy::check_integrity() const {
    ONECARD_CHECK(offered_.size() == static_cast<size_t>(config_.max_drafts) && reached_.size() == offered_.size(),
                  "speculation: {} / {} acceptance counters for {} drafts", offered_.size(), reached_.size(),
                  config_.max_drafts);
    for (size_t j = 0; j < offered_.size(); ++j)
        ONECARD_CHECK(std::isfinite(offered_[j]) && reached_[j] >= 0 && reached_[j] <= offered_[j] + 1e-9,
                      "speculation: position {} reached {} of {} offered", j + 1, reached_[j], offered_[j]);
    for (const Bucket& b : buckets_)
        ONECARD_CHECK(b.weight >= 0 && b.tokens >= 0 && b.seconds >= 0 && std::isfinite(b.seconds),
                      "speculation: a step-cost bucket holds weight {}, tokens {}, seconds {}", b.weight, b.tokens,
                      b.seconds);
}

}  // namespace onecard
