// The DSpark drafter's sequential heads (docs/dspark.md §4-5) against hand-computed small cases:
// the Markov head's embedding row and low-rank bias, the confidence head's dot product over
// [hidden ; markov embedding], DeepSpec's early-stop length and the predicted prefix survival.
#include "model/dspark_heads.h"
#include "core/error.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace onecard {
namespace {

// V = 4, r = 2.
const std::vector<float> kW1 = {1, 2, /**/ 0, 1, /**/ 3, -1, /**/ 0.5f, 0.5f};  // [V, r] embedding
const std::vector<float> kW2 = {1, 0, /**/ 0, 1, /**/ 1, 1, /**/ 2, -1};        // [V, r] r -> V

TEST(DSparkHeads, MarkovStepIsTheEmbeddingRowAndItsProjection) {
    std::vector<float> m(2), bias(4);
    markov_step(kW1, kW2, 2, 2, m.data(), bias.data());
    EXPECT_EQ(m, (std::vector<float>{3, -1}));  // w1[2]
    // bias[v] = w2[v] · m: (1·3 + 0·-1, 0·3 + 1·-1, 3 - 1, 2·3 - 1·-1)
    EXPECT_EQ(bias, (std::vector<float>{3, -1, 2, 7}));
    markov_step(kW1, kW2, 2, 3, m.data(), bias.data());
    EXPECT_EQ(m, (std::vector<float>{0.5f, 0.5f}));
    EXPECT_EQ(bias, (std::vector<float>{0.5f, 0.5f, 1.0f, 0.5f}));
}

TEST(DSparkHeads, MarkovStepRefusesTokensOutsideTheVocabulary) {
    std::vector<float> m(2), bias(4);
    EXPECT_THROW(markov_step(kW1, kW2, 2, 4, m.data(), bias.data()), Error);
    EXPECT_THROW(markov_step(kW1, kW2, 2, -1, m.data(), bias.data()), Error);
    EXPECT_THROW(markov_step(kW1, std::vector<float>(6), 2, 0, m.data(), bias.data()), Error);
}

TEST(DSparkHeads, ConfidenceIsTheProjectionOfHiddenThenMarkov) {
    const std::vector<float> w = {0.5f, -1, 2, /* markov */ 0.25f, 1};  // [D + r], D = 3, r = 2
    const std::vector<float> h = {2, 1, 0.5f};
    // 0.5·2 - 1·1 + 2·0.5 = 1 from the hidden; 0.25·4 + 1·m1 from the embedding
    EXPECT_EQ(confidence_logit(w, h, std::vector<float>{4, -2}), 0.0f);
    EXPECT_EQ(confidence_logit(w, h, std::vector<float>{4, 2}), 4.0f);
    // The order matters: the hidden comes first.
    EXPECT_EQ(confidence_logit(w, std::vector<float>{4, -2, 2}, std::vector<float>{1, 0.5f}),
              2.0f + 2.0f + 4.0f + 0.25f + 0.5f);
    EXPECT_THROW(confidence_logit(w, h, std::vector<float>{1}), Error);
}

TEST(DSparkHeads, EarlyStopKeepsTheSlotsAboveTheThreshold) {
    // sigmoid: 0.881, 0.731, 0.378, 0.953
    const std::vector<float> c = {2.0f, 1.0f, -0.5f, 3.0f};
    EXPECT_EQ(confident_prefix_length(c, 0.0), 4);  // off
    EXPECT_EQ(confident_prefix_length(c, 0.5), 2);  // stops before the first slot below, even if later ones are above
    EXPECT_EQ(confident_prefix_length(c, 0.75), 1);
    EXPECT_EQ(confident_prefix_length(c, 0.9), 0);
    EXPECT_EQ(confident_prefix_length(c, 0.3), 4);
    EXPECT_EQ(confident_prefix_length(std::vector<float>{}, 0.5), 0);
}

TEST(DSparkHeads, PrefixSurvivalIsTheRunningProductOfSigmoids) {
    const float ln3 = std::log(3.0f);  // sigmoid(ln 3) = 3/4
    const std::vector<double> s = prefix_survival(std::vector<float>{0.0f, ln3, ln3});
    ASSERT_EQ(s.size(), 3u);
    EXPECT_DOUBLE_EQ(s[0], 0.5);
    EXPECT_NEAR(s[1], 0.375, 1e-7);
    EXPECT_NEAR(s[2], 0.28125, 1e-7);
    EXPECT_DOUBLE_EQ(sigmoid(0.0), 0.5);
}

}  // namespace
}  // namespace onecard
