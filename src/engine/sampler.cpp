#include "engine/sampler.h"

#include "core/error.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_map>

namespace onecard {

namespace {
uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

// NaN compares false with everything, which would make max_element's answer depend on where the
// NaNs sit and break the strict weak order std::sort needs: NaN ranks below every number here.
float rank_key(float x) {
    return std::isnan(x) ? -std::numeric_limits<float>::infinity() : x;
}

int32_t argmax(std::span<const float> v) {
    // The first maximum: ties go to the lowest token id; NaN never wins (all NaN -> token 0).
    size_t best = 0;
    for (size_t i = 1; i < v.size(); ++i)
        if (rank_key(v[i]) > rank_key(v[best])) best = i;
    return static_cast<int32_t>(best);
}

TokenLogprobs raw_logprobs(std::span<const float> logits, int32_t sampled, int32_t n_top) {
    const float mx = rank_key(logits[static_cast<size_t>(argmax(logits))]);
    double sum = 0.0;
    for (float x : logits) sum += std::exp(static_cast<double>(x) - mx);
    const double lse = mx + std::log(sum);
    auto lp = [&](int32_t t) { return static_cast<float>(logits[static_cast<size_t>(t)] - lse); };
    TokenLogprobs out;
    out.sampled = {sampled, lp(sampled)};
    const auto n = std::min<size_t>(static_cast<size_t>(n_top), logits.size());
    std::vector<int32_t> idx(logits.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + static_cast<long>(n), idx.end(), [&](int32_t a, int32_t b) {
        const float la = rank_key(logits[static_cast<size_t>(a)]), lb = rank_key(logits[static_cast<size_t>(b)]);
        return la > lb || (la == lb && a < b);
    });
    for (size_t i = 0; i < n; ++i) out.top.push_back({idx[i], lp(idx[i])});
    return out;
}
}  // namespace

double sampler_uniform(uint64_t seed, uint64_t counter) {
    const uint64_t bits = splitmix64(splitmix64(seed) ^ splitmix64(counter + 0x632BE59BD9B4E019ULL));
    return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

void apply_penalties(std::span<float> logits, const SamplingParams& p, std::span<const int32_t> prompt,
                     std::span<const int32_t> output) {
    const bool rep = p.repetition_penalty != 1.0f;
    if (rep) {
        std::vector<int8_t> seen(logits.size(), 0);
        for (int32_t t : prompt) seen[static_cast<size_t>(t)] = 1;
        for (int32_t t : output) seen[static_cast<size_t>(t)] = 1;
        for (size_t t = 0; t < logits.size(); ++t) {
            if (!seen[t]) continue;
            logits[t] = logits[t] > 0 ? logits[t] / p.repetition_penalty : logits[t] * p.repetition_penalty;
        }
    }
    if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
        std::unordered_map<int32_t, int32_t> counts;
        for (int32_t t : output) ++counts[t];
        for (auto [t, c] : counts)
            logits[static_cast<size_t>(t)] -= p.frequency_penalty * static_cast<float>(c) + p.presence_penalty;
    }
}

void apply_logit_bias(std::span<float> logits, const SamplingParams& p) {
    for (const LogitBias& b : p.logit_bias) logits[static_cast<size_t>(b.token)] += b.bias;
}

bool needs_host_sampling(const SamplingParams& p) {
    return p.logprobs >= 0 || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f ||
           p.repetition_penalty != 1.0f || !p.logit_bias.empty();
}

Candidates truncate_distribution(std::span<const double> probs, const SamplingParams& p) {
    if (probs.empty()) return {};
    std::vector<int32_t> idx;
    idx.reserve(probs.size());
    // The most probable token; NaN and non-positive entries are never candidates.
    size_t best = 0;
    for (size_t t = 1; t < probs.size(); ++t)
        if (probs[t] > probs[best] || std::isnan(probs[best])) best = t;
    const double p_max = probs[best];
    if (!(p_max > 0.0) || !std::isfinite(p_max)) {
        // Nothing usable to draw from (all zero, NaN or inf): still one candidate, so the caller
        // never sees an empty set. The engine refuses such rows before they get here.
        return Candidates{{static_cast<int32_t>(best)}, {1.0}};
    }
    const double min_keep = p.min_p > 0.0f ? static_cast<double>(p.min_p) * p_max : 0.0;
    for (size_t t = 0; t < probs.size(); ++t)
        if (probs[t] > 0.0 && std::isfinite(probs[t]) && probs[t] >= min_keep) idx.push_back(static_cast<int32_t>(t));
    if (idx.empty()) idx.push_back(static_cast<int32_t>(best));  // min_p rounding: keep the mode
    auto by_prob = [&](int32_t a, int32_t b) {
        return probs[static_cast<size_t>(a)] > probs[static_cast<size_t>(b)] ||
               (probs[static_cast<size_t>(a)] == probs[static_cast<size_t>(b)] && a < b);
    };
    double mass = 0.0;  // of the survivors so far: top-p applies to the renormalised distribution
    for (int32_t t : idx) mass += probs[static_cast<size_t>(t)];
    if (p.top_k > 0 && static_cast<size_t>(p.top_k) < idx.size()) {
        std::partial_sort(idx.begin(), idx.begin() + p.top_k, idx.end(), by_prob);
        idx.resize(static_cast<size_t>(p.top_k));
        mass = 0.0;
        for (int32_t t : idx) mass += probs[static_cast<size_t>(t)];
    } else if (p.top_p < 1.0f) {
        // Only the nucleus needs ordering: sort a growing head (nth_element + sort) until it holds
        // top_p of the mass. Same result as a full sort (by_prob is a strict total order), without
        // sorting the whole vocabulary for every token.
        size_t head = std::min<size_t>(idx.size(), 256);
        for (;;) {
            const auto mid = idx.begin() + static_cast<long>(head);
            if (head < idx.size()) std::nth_element(idx.begin(), mid, idx.end(), by_prob);
            std::sort(idx.begin(), mid, by_prob);
            double cum = 0.0;
            for (size_t i = 0; i < head; ++i) cum += probs[static_cast<size_t>(idx[i])];
            if (head == idx.size() || cum >= static_cast<double>(p.top_p) * mass) break;
            head = std::min(idx.size(), head * 4);
        }
        idx.resize(head);  // tokens past the sorted head are beyond the nucleus
    }
    // else: no rank-based cut, so skip the O(V log V) sort (129K entries per token at Flash's vocab)
    // and keep token-id order.
    if (p.top_p < 1.0f) {
        // Smallest prefix (by probability) whose renormalised mass reaches top_p; always >= 1 token.
        const double target = static_cast<double>(p.top_p) * mass;
        double cum = 0.0;
        size_t keep = 0;
        while (keep < idx.size() && cum < target) cum += probs[static_cast<size_t>(idx[keep++])];
        idx.resize(std::max<size_t>(keep, 1));
        mass = 0.0;
        for (int32_t t : idx) mass += probs[static_cast<size_t>(t)];
    }
    Candidates c;
    c.tokens = std::move(idx);
    for (int32_t t : c.tokens) c.probs.push_back(probs[static_cast<size_t>(t)] / mass);
    return c;
}

void validate_sampling_params(const SamplingParams& p, int64_t vocab_size) {
    ONECARD_CHECK(std::isfinite(p.temperature) && p.temperature >= 0.0f, "sampling: temperature must be >= 0, got {}",
                  p.temperature);
    ONECARD_CHECK(p.top_k >= 0, "sampling: top_k must be >= 0 (0 = off), got {}", p.top_k);
    ONECARD_CHECK(p.top_p > 0.0f && p.top_p <= 1.0f, "sampling: top_p must be in (0, 1], got {}", p.top_p);
    ONECARD_CHECK(p.min_p >= 0.0f && p.min_p <= 1.0f, "sampling: min_p must be in [0, 1], got {}", p.min_p);
    ONECARD_CHECK(p.repetition_penalty > 0.0f && std::isfinite(p.repetition_penalty),
                  "sampling: repetition_penalty must be > 0, got {}", p.repetition_penalty);
    ONECARD_CHECK(std::isfinite(p.presence_penalty) && std::isfinite(p.frequency_penalty),
                  "sampling: presence/frequency penalties must be finite");
    ONECARD_CHECK(p.logprobs >= -1 && p.logprobs <= 64, "sampling: logprobs must be in [-1, 64], got {}", p.logprobs);
    ONECARD_CHECK(p.max_tokens > 0, "sampling: max_tokens must be positive, got {}", p.max_tokens);
    ONECARD_CHECK(p.min_tokens >= 0 && p.min_tokens <= p.max_tokens,
                  "sampling: min_tokens must be in [0, max_tokens = {}], got {}", p.max_tokens, p.min_tokens);
    for (int32_t t : p.stop_token_ids)
        ONECARD_CHECK(t >= 0 && t < vocab_size, "sampling: stop_token_ids entry {} outside the vocabulary [0, {})", t,
                      vocab_size);
    for (const auto& s : p.stop) ONECARD_CHECK(!s.empty(), "sampling: empty stop string");
    for (const LogitBias& b : p.logit_bias) {
        ONECARD_CHECK(b.token >= 0 && b.token < vocab_size,
                      "sampling: logit_bias token {} outside the vocabulary [0, {})", b.token, vocab_size);
        ONECARD_CHECK(std::isfinite(b.bias) && b.bias >= -100.0f && b.bias <= 100.0f,
                      "sampling: logit_bias for token {} must be in [-100, 100], got {}", b.token, b.bias);
    }
}

Candidates Sampler::target_distribution(std::span<const float> logits, const SamplingParams& p,
                                        std::span<const int32_t> prompt, std::span<const int32_t> output) {
    work_.assign(logits.begin(), logits.end());
    apply_logit_bias(work_, p);
    apply_penalties(work_, p, prompt, output);
    if (work_.empty()) return {};
    if (p.temperature == 0.0f) return Candidates{{argmax(work_)}, {1.0}};
    const float mx = rank_key(work_[static_cast<size_t>(argmax(work_))]);
    // No finite maximum (all NaN / -inf, or a +inf logit): exp(x - mx) would be NaN everywhere. The
    // limit of the softmax is the argmax set; the greedy choice stands for it.
    if (!std::isfinite(mx)) return Candidates{{argmax(work_)}, {1.0}};
    probs_.resize(work_.size());
    double sum = 0.0;
    for (size_t t = 0; t < work_.size(); ++t) {
        const double q = std::exp((static_cast<double>(work_[t]) - mx) / p.temperature);
        probs_[t] = std::isnan(q) ? 0.0 : q;
        sum += probs_[t];
    }
    for (double& q : probs_) q /= sum;
    return truncate_distribution(probs_, p);
}

SampleResult Sampler::sample(std::span<const float> logits, const SamplingParams& p, std::span<const int32_t> prompt,
                             std::span<const int32_t> output, uint64_t seed) {
    ONECARD_CHECK(!logits.empty(), "sampler: empty logits row");
    const Candidates c = target_distribution(logits, p, prompt, output);
    int32_t token =
        c.tokens.back();  // never empty for a non-empty row  // fallback for u landing past the rounded total
    if (c.tokens.size() > 1) {
        const double u = sampler_uniform(seed, output.size());
        double cum = 0.0;
        for (size_t i = 0; i < c.tokens.size(); ++i) {
            cum += c.probs[i];
            if (u < cum) {
                token = c.tokens[i];
                break;
            }
        }
    } else {
        token = c.tokens.front();
    }
    SampleResult r;
    r.token = token;
    if (p.logprobs >= 0) r.logprobs = raw_logprobs(logits, token, p.logprobs);
    return r;
}

}  // namespace onecard
