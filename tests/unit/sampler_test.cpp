// Sampler: empirical frequencies match the target distribution (chi-square), min-p / top-k / top-p
// truncate exactly, seeds reproduce, penalties move logits by hand-computed amounts, logit_bias applies
// before them.
#include "engine/sampler.h"
#include "core/error.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace onecard {
namespace {

std::vector<double> softmax(const std::vector<float>& logits, double temperature) {
    double mx = -1e300;
    for (float x : logits) mx = std::max(mx, static_cast<double>(x));
    std::vector<double> p;
    double sum = 0;
    for (float x : logits) {
        p.push_back(std::exp((x - mx) / temperature));
        sum += p.back();
    }
    for (double& q : p) q /= sum;
    return p;
}

double chi_square(const std::vector<int64_t>& counts, const std::vector<double>& expected_p, int64_t n) {
    double chi = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
        const double e = expected_p[i] * static_cast<double>(n);
        if (e == 0) {
            EXPECT_EQ(counts[i], 0) << "token " << i << " has zero probability but was drawn";
            continue;
        }
        chi += (counts[i] - e) * (counts[i] - e) / e;
    }
    return chi;
}

const std::vector<float> kLogits = {2.0f, 1.0f, 0.5f, 0.0f, -0.5f, -1.0f, 1.5f, 0.2f};

TEST(Sampler, FrequenciesMatchSoftmaxChiSquare) {
    SamplingParams p;
    p.temperature = 0.7f;
    Sampler s;
    const int64_t n = 100000;
    std::vector<int64_t> counts(kLogits.size(), 0);
    for (int64_t i = 0; i < n; ++i) ++counts[static_cast<size_t>(s.sample(kLogits, p, {}, {}, 1000 + i).token)];
    // 7 degrees of freedom: P(chi2 > 24.32) = 0.001.
    EXPECT_LT(chi_square(counts, softmax(kLogits, 0.7), n), 24.32);
}

TEST(Sampler, FrequenciesOverOutputPositionsWithOneSeed) {
    // One request, one seed: draws at successive output positions must also follow the distribution.
    SamplingParams p;
    p.temperature = 1.3f;
    Sampler s;
    const int64_t n = 60000;
    std::vector<int64_t> counts(kLogits.size(), 0);
    std::vector<int32_t> output;
    output.reserve(n);
    for (int64_t i = 0; i < n; ++i) {
        const int32_t t = s.sample(kLogits, p, {}, output, 77).token;
        ++counts[static_cast<size_t>(t)];
        output.push_back(t);  // no penalties: content does not matter, only the position counter
    }
    EXPECT_LT(chi_square(counts, softmax(kLogits, 1.3), n), 24.32);
}

TEST(Sampler, TopKFrequenciesAreRenormalised) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.top_k = 3;
    Sampler s;
    auto probs = softmax(kLogits, 1.0);
    // Top 3 logits: tokens 0 (2.0), 6 (1.5), 1 (1.0).
    std::vector<double> want(kLogits.size(), 0.0);
    const double mass = probs[0] + probs[6] + probs[1];
    for (int t : {0, 6, 1}) want[static_cast<size_t>(t)] = probs[static_cast<size_t>(t)] / mass;
    const int64_t n = 50000;
    std::vector<int64_t> counts(kLogits.size(), 0);
    for (int64_t i = 0; i < n; ++i) ++counts[static_cast<size_t>(s.sample(kLogits, p, {}, {}, 5 * i + 1).token)];
    EXPECT_LT(chi_square(counts, want, n), 13.82);  // 2 dof, p = 0.001
}

TEST(Sampler, UniformIsUniform) {
    std::vector<int64_t> buckets(20, 0);
    const int64_t n = 200000;
    for (int64_t i = 0; i < n; ++i) {
        const double u = sampler_uniform(42, static_cast<uint64_t>(i));
        ASSERT_GE(u, 0.0);
        ASSERT_LT(u, 1.0);
        ++buckets[static_cast<size_t>(u * 20)];
    }
    EXPECT_LT(chi_square(buckets, std::vector<double>(20, 0.05), n), 43.82);  // 19 dof, p = 0.001
}

TEST(Truncation, TopKExact) {
    const std::vector<double> probs = {0.05, 0.4, 0.1, 0.25, 0.2};
    SamplingParams p;
    p.top_k = 2;
    const auto c = truncate_distribution(probs, p);
    EXPECT_EQ(c.tokens, (std::vector<int32_t>{1, 3}));
    EXPECT_NEAR(c.probs[0], 0.4 / 0.65, 1e-15);
    EXPECT_NEAR(c.probs[1], 0.25 / 0.65, 1e-15);
}

TEST(Truncation, TopKTiesGoToLowerIds) {
    const std::vector<double> probs = {0.25, 0.25, 0.25, 0.25};
    SamplingParams p;
    p.top_k = 2;
    EXPECT_EQ(truncate_distribution(probs, p).tokens, (std::vector<int32_t>{0, 1}));
}

TEST(Truncation, TopPExact) {
    const std::vector<double> probs = {0.05, 0.4, 0.1, 0.25, 0.2};
    SamplingParams p;
    p.top_p = 0.3f;  // 0.4 alone reaches it
    EXPECT_EQ(truncate_distribution(probs, p).tokens, (std::vector<int32_t>{1}));
    p.top_p = 0.5f;  // 0.4 + 0.25
    EXPECT_EQ(truncate_distribution(probs, p).tokens, (std::vector<int32_t>{1, 3}));
    p.top_p = 0.7f;  // 0.65 < 0.7: add 0.2
    const auto c = truncate_distribution(probs, p);
    EXPECT_EQ(c.tokens, (std::vector<int32_t>{1, 3, 4}));
    EXPECT_NEAR(c.probs[2], 0.2 / 0.85, 1e-15);
    p.top_p = 0.94f;  // 0.85 < 0.94 <= 0.95: everything but the 0.05 token
    EXPECT_EQ(truncate_distribution(probs, p).tokens, (std::vector<int32_t>{1, 3, 4, 2}));
}

// Large vocabulary, flat enough that the nucleus spans thousands of tokens: the partial ordering
// used for top-p must keep exactly the tokens a full sort keeps.
TEST(Truncation, TopPOnLargeVocabularyMatchesFullSort) {
    std::mt19937 rng(12);
    std::uniform_real_distribution<double> ud(0.0, 1.0);
    for (int trial = 0; trial < 6; ++trial) {
        std::vector<double> probs(20000);
        double sum = 0;
        for (auto& q : probs) sum += q = std::pow(ud(rng), 1 + trial);  // flatter for small trial
        for (auto& q : probs) q /= sum;
        std::vector<int32_t> order(probs.size());
        for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
        std::sort(order.begin(), order.end(),
                  [&](int32_t a, int32_t b) { return probs[a] > probs[b] || (probs[a] == probs[b] && a < b); });
        for (float top_p : {0.05f, 0.5f, 0.9f, 0.999f}) {
            SamplingParams p;
            p.top_p = top_p;
            double cum = 0;
            size_t keep = 0;
            while (keep < order.size() && cum < static_cast<double>(top_p)) cum += probs[order[keep++]];
            const std::vector<int32_t> want(order.begin(), order.begin() + static_cast<long>(keep));
            const auto got = truncate_distribution(probs, p).tokens;
            ASSERT_EQ(got.size(), want.size()) << "trial " << trial << " top_p " << top_p;
            EXPECT_EQ(got, want) << "trial " << trial << " top_p " << top_p;
        }
    }
}

TEST(Truncation, MinPExact) {
    const std::vector<double> probs = {0.05, 0.4, 0.1, 0.25, 0.2};
    SamplingParams p;
    p.min_p = 0.55f;  // keep p >= 0.22
    EXPECT_EQ(truncate_distribution(probs, p).tokens, (std::vector<int32_t>{1, 3}));
    p.min_p = 0.45f;  // keep p >= 0.18
    EXPECT_EQ(truncate_distribution(probs, p).tokens, (std::vector<int32_t>{1, 3, 4}));
    p.min_p = 1.0f;  // only the maximum
    EXPECT_EQ(truncate_distribution(probs, p).tokens, (std::vector<int32_t>{1}));
}

TEST(Truncation, StagesComposeInOrder) {
    const std::vector<double> probs = {0.05, 0.4, 0.1, 0.25, 0.2};
    SamplingParams p;
    p.min_p = 0.2f;  // drops 0.05 (< 0.08)
    p.top_k = 3;     // 0.4, 0.25, 0.2
    p.top_p = 0.7f;  // renormalised 0.47, 0.29 (cum 0.76 >= 0.7)
    const auto c = truncate_distribution(probs, p);
    EXPECT_EQ(c.tokens, (std::vector<int32_t>{1, 3}));
    EXPECT_NEAR(c.probs[0] + c.probs[1], 1.0, 1e-15);
}

TEST(Sampler, TruncatedTokensAreNeverDrawn) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.top_p = 0.5f;
    Sampler s;
    const auto target = s.target_distribution(kLogits, p, {}, {});
    std::vector<bool> allowed(kLogits.size(), false);
    for (int32_t t : target.tokens) allowed[static_cast<size_t>(t)] = true;
    EXPECT_LT(target.tokens.size(), kLogits.size());
    for (int64_t i = 0; i < 5000; ++i) ASSERT_TRUE(allowed[static_cast<size_t>(s.sample(kLogits, p, {}, {}, i).token)]);
}

TEST(Sampler, SameSeedSameTokens) {
    SamplingParams p;
    p.temperature = 1.0f;
    Sampler a, b;
    std::vector<int32_t> out_a, out_b, out_c;
    for (int i = 0; i < 200; ++i) {
        out_a.push_back(a.sample(kLogits, p, {}, out_a, 123).token);
        out_b.push_back(b.sample(kLogits, p, {}, out_b, 123).token);
        out_c.push_back(b.sample(kLogits, p, {}, out_c, 124).token);
    }
    EXPECT_EQ(out_a, out_b);
    EXPECT_NE(out_a, out_c);
}

TEST(Penalties, HandComputed) {
    std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f};
    SamplingParams p;
    p.repetition_penalty = 2.0f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    const std::vector<int32_t> prompt = {0};
    const std::vector<int32_t> output = {1, 3, 3};
    apply_penalties(logits, p, prompt, output);
    EXPECT_FLOAT_EQ(logits[0], 1.0f);                  // prompt only: 2 / 2
    EXPECT_FLOAT_EQ(logits[1], -2.0f - 0.5f - 0.25f);  // -1 * 2, one occurrence
    EXPECT_FLOAT_EQ(logits[2], 0.5f);                  // unseen
    EXPECT_FLOAT_EQ(logits[3], 1.5f - 1.0f - 0.25f);   // 3 / 2, two occurrences
    EXPECT_FLOAT_EQ(logits[4], -2.0f);                 // unseen
}

TEST(Penalties, ChangeTheGreedyChoice) {
    const std::vector<float> logits = {1.0f, 0.9f, 0.1f};
    SamplingParams p;
    p.temperature = 0.0f;
    Sampler s;
    EXPECT_EQ(s.sample(logits, p, {}, {}, 0).token, 0);
    p.presence_penalty = 0.2f;
    const std::vector<int32_t> output = {0};
    EXPECT_EQ(s.sample(logits, p, {}, output, 0).token, 1);
}

TEST(LogitBias, ShiftsTheDistributionBeforePenaltiesAndTemperature) {
    const std::vector<float> logits = {1.0f, 0.0f, 2.0f, -1.0f};
    SamplingParams p;
    p.temperature = 0.0f;
    Sampler s;
    EXPECT_EQ(s.sample(logits, p, {}, {}, 0).token, 2);
    p.logit_bias = {{2, -100.0f}};  // banned in practice
    EXPECT_EQ(s.sample(logits, p, {}, {}, 0).token, 0);
    p.logit_bias = {{3, 3.5f}};  // -1 + 3.5 = 2.5 beats 2
    EXPECT_EQ(s.sample(logits, p, {}, {}, 0).token, 3);
    // Sampled distribution: softmax((logits + bias) / T), exactly.
    p.temperature = 0.5f;
    p.logit_bias = {{0, 1.0f}, {1, -0.5f}};
    const Candidates c = s.target_distribution(logits, p, {}, {});
    const std::vector<double> want = softmax({2.0f, -0.5f, 2.0f, -1.0f}, 0.5);
    ASSERT_EQ(c.tokens.size(), want.size());
    for (size_t i = 0; i < c.tokens.size(); ++i)
        EXPECT_NEAR(c.probs[i], want[static_cast<size_t>(c.tokens[i])], 1e-12) << i;
    // Bias first, then the repetition penalty (vLLM's order): (1 + 1) / 2 = 1 for a seen token 0.
    // The other order would give 1 / 2 + 1 = 1.5, a tie that token 0 wins.
    const std::vector<float> row = {1.0f, 1.5f};
    SamplingParams q;
    q.temperature = 0.0f;
    q.logit_bias = {{0, 1.0f}};
    q.repetition_penalty = 2.0f;
    const std::vector<int32_t> prompt = {0};
    EXPECT_EQ(s.sample(row, q, prompt, {}, 0).token, 1);
    // Logprobs stay those of the raw distribution.
    p.temperature = 0.0f;
    p.logprobs = 1;
    p.logit_bias = {{3, 50.0f}};
    const auto r = s.sample(logits, p, {}, {}, 0);
    EXPECT_EQ(r.token, 3);
    const double lse = std::log(std::exp(1.0) + std::exp(0.0) + std::exp(2.0) + std::exp(-1.0));
    EXPECT_NEAR(r.logprobs->sampled.logprob, -1.0 - lse, 1e-6);
    EXPECT_EQ(r.logprobs->top[0].token, 2);
}

TEST(LogitBias, ValidatedAndRoutedToTheHost) {
    SamplingParams p;
    EXPECT_FALSE(needs_host_sampling(p));
    p.logit_bias = {{9, 100.0f}};
    EXPECT_NO_THROW(validate_sampling_params(p, 10));
    EXPECT_TRUE(needs_host_sampling(p));  // the GPU sampler takes no bias: such rows come back as logits
    p.logit_bias = {{10, 1.0f}};
    EXPECT_THROW(validate_sampling_params(p, 10), Error);
    p.logit_bias = {{1, 100.5f}};
    EXPECT_THROW(validate_sampling_params(p, 10), Error);
    p.logit_bias = {{1, NAN}};
    EXPECT_THROW(validate_sampling_params(p, 10), Error);
}

TEST(Sampler, GreedyTiesAndLogprobs) {
    const std::vector<float> logits = {0.5f, 3.0f, 3.0f, -1.0f};
    SamplingParams p;
    p.temperature = 0.0f;
    p.logprobs = 2;
    Sampler s;
    const auto r = s.sample(logits, p, {}, {}, 9);
    EXPECT_EQ(r.token, 1);
    ASSERT_TRUE(r.logprobs.has_value());
    const double lse = std::log(std::exp(0.5) + 2 * std::exp(3.0) + std::exp(-1.0));
    EXPECT_NEAR(r.logprobs->sampled.logprob, 3.0 - lse, 1e-6);
    ASSERT_EQ(r.logprobs->top.size(), 2u);
    EXPECT_EQ(r.logprobs->top[0].token, 1);
    EXPECT_EQ(r.logprobs->top[1].token, 2);
    EXPECT_NEAR(r.logprobs->top[1].logprob, 3.0 - lse, 1e-6);
    p.logprobs = -1;
    EXPECT_FALSE(s.sample(logits, p, {}, {}, 9).logprobs.has_value());
}

TEST(Sampler, ValidationNamesTheField) {
    SamplingParams p;
    p.top_p = 0.0f;
    try {
        validate_sampling_params(p, 10);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("top_p"), std::string::npos);
    }
    p = {};
    p.stop_token_ids = {10};
    EXPECT_THROW(validate_sampling_params(p, 10), Error);
    p = {};
    p.temperature = -1.0f;
    EXPECT_THROW(validate_sampling_params(p, 10), Error);
}

}  // namespace
}  // namespace onecard
