// The DSpark drafter's sequential heads (docs/dspark.md §4-5), plain fp32: the rank-r Markov head
// that adds a previous-token bias to each block slot's logits, and the confidence head that predicts
// how likely each draft is to be accepted. Pure functions of the weights: the drafter
// (engine/spec_decoder.cpp) runs them slot by slot after the block's one parallel pass.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace onecard {

// Markov step for one slot: m [r] = w1[prev] (a row of the embedding w1 [V, r]) and
// bias [V] = w2 · m (w2 [V, r], the linear r -> V). The slot's logits are base + bias.
void markov_step(std::span<const float> w1, std::span<const float> w2, int64_t rank, int32_t prev, float* m,
                 float* bias);

// c = w · [h ; m] with w [D + r], h [D] (the slot's pre-norm hidden), m [r] (its Markov embedding).
// sigmoid(c) is the predicted probability that the slot's draft is accepted given the earlier ones were.
float confidence_logit(std::span<const float> w, std::span<const float> h, std::span<const float> m);

double sigmoid(double x);

// DeepSpec's early stop: the number of leading slots whose sigmoid(c_j) >= threshold (the draft
// stops before the first slot below it); threshold <= 0 keeps every slot.
int64_t confident_prefix_length(std::span<const float> conf_logits, double threshold);

// Predicted survival of each draft prefix: out[j] = prod_{i <= j} sigmoid(c_i). The expected tokens
// of a verify step with L drafts is 1 + sum_{j < L} out[j].
std::vector<double> prefix_survival(std::span<const float> conf_logits);

}  // namespace onecard
