// Lossless verification of drafted tokens (issue 17): standard speculative sampling (Leviathan et
// al. 2023, Chen et al. 2023). With drafts d_1..d_k drawn from q_1..q_k and the target's
// distributions p_0..p_k at the verify step's k + 1 rows (p_i is the target after the context and
// d_1..d_i): d_{i+1} is accepted with probability min(1, p_i(d) / q_{i+1}(d)); the first rejection
// emits a draw from the residual max(0, p_i - q_{i+1}) normalised and ends the step; when all k are
// accepted a bonus token is drawn from p_k. Every emitted token is then distributed exactly as
// p_i (proven statistically in tests/unit/spec_verify_test.cpp).
//
// Greedy rows are the same rule on one-hot distributions (Sampler::target_distribution gives
// temperature 0 as one token with probability 1, and a greedy drafter's q is one-hot): a draft is
// accepted exactly when it is the target's argmax, and a rejection emits that argmax, so greedy
// output is the non-speculative output token for token.
//
// Randomness is counter-based like the sampler's (sampler_uniform): the draws for output token
// `counter` come from (seed, counter) on three streams salted apart (drafting, acceptance,
// resampling), so the drafter's noise is independent of the verifier's.
#pragma once

#include "engine/sampler.h"

#include <cstdint>
#include <span>
#include <vector>

namespace onecard {

enum class SpecStream : uint64_t { Draft = 1, Accept = 2, Resample = 3 };

// Uniform in [0, 1) for output token `counter` of a request with `seed`, on `stream`.
double spec_uniform(uint64_t seed, SpecStream stream, uint64_t counter);

// Dense [vocab] probabilities of a sampler's candidate set (zero off the candidates).
std::vector<double> dense_distribution(const Candidates& c, int64_t vocab);

// Inverse-CDF draw from probs [vocab] (need not be normalised; the total must be positive): the
// smallest token whose cumulative mass exceeds u * total. Zero-probability tokens are never drawn.
int32_t draw_token(std::span<const double> probs, double u);

struct SpecVerdict {
    int64_t n_accepted = 0;  // drafts kept, 0..k
    int32_t token = 0;       // the correction (first rejection) or the bonus (all accepted)
};

// drafts [k]; q [k, vocab] the distributions the drafts were drawn from; p [k + 1, vocab] the
// target's. counter: output index of the token d_1 would be (the step emits n_accepted + 1 tokens,
// at counters counter .. counter + n_accepted). Throws if a draft has q = 0 (it cannot have been
// drawn from q).
SpecVerdict verify_drafts(std::span<const int32_t> drafts, std::span<const double> q, std::span<const double> p,
                          int64_t vocab, uint64_t seed, uint64_t counter);

}  // namespace onecard
