// Token sampling for one logits row. Pipeline (each stage optional), in this order:
//   raw logits -> logit_bias -> repetition / frequency / presence penalties -> temperature (0 = greedy argmax)
//   -> softmax -> min-p (keep p >= min_p * p_max) -> top-k -> top-p (on the renormalised survivors)
//   -> draw from the survivors.
// Total: any row, NaN and infinities included, gives a token and never an empty candidate set (NaN
// ranks below every number; a row without a finite maximum samples greedily). Whether such a row
// should be sampled at all is the engine's call: it fails the request first (engine_core.h).
// Randomness is counter-based: the draw for output token i of a request uses only (seed, i), so a
// request that is preempted and recomputed, or batched differently, samples the same tokens.
#pragma once

#include "onecard/engine.h"

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace onecard {

struct SampleResult {
    int32_t token = 0;
    std::optional<TokenLogprobs> logprobs;  // when params.logprobs >= 0
};

// Uniform double in [0, 1) from (seed, counter): splitmix64 finalisers over the pair. Stateless.
double sampler_uniform(uint64_t seed, uint64_t counter);

// Applies the three penalties in place (vLLM semantics): repetition to tokens in prompt or output,
// frequency (per occurrence) and presence (once) to tokens in output only.
void apply_penalties(std::span<float> logits, const SamplingParams& p, std::span<const int32_t> prompt,
                     std::span<const int32_t> output);

// Adds each logit_bias entry to its token's logit, in place (tokens already validated).
void apply_logit_bias(std::span<float> logits, const SamplingParams& p);

// Whether a row with these parameters must be sampled by this sampler on the host: penalties,
// logit_bias and logprobs have no counterpart in a runner's device sampling (RowSampling).
bool needs_host_sampling(const SamplingParams& p);

// Survivors of min-p / top-k / top-p for a probability vector, with their renormalised
// probabilities. Ordered by probability descending (ties: lower token id first) when top-k or top-p
// is on; in token-id order otherwise (no rank cut, no sort). Never empty for non-empty `probs`: when
// no entry is a positive finite probability, or the filters leave nothing, the most probable token
// (lowest id first; NaN never) is the one candidate.
struct Candidates {
    std::vector<int32_t> tokens;
    std::vector<double> probs;  // sums to 1
};
Candidates truncate_distribution(std::span<const double> probs, const SamplingParams& p);

// Validates ranges; throws onecard::Error naming the field.
void validate_sampling_params(const SamplingParams& p, int64_t vocab_size);

class Sampler {
public:
    // logits: [vocab] raw row. counter: index of the output token being sampled (output.size()).
    SampleResult sample(std::span<const float> logits, const SamplingParams& p, std::span<const int32_t> prompt,
                        std::span<const int32_t> output, uint64_t seed);

    // The distribution sample() draws from for these inputs (survivors only); greedy gives one token
    // with probability 1. For tests and diagnostics.
    Candidates target_distribution(std::span<const float> logits, const SamplingParams& p,
                                   std::span<const int32_t> prompt, std::span<const int32_t> output);

private:
    std::vector<float> work_;    // [vocab] penalised logits (reused between calls)
    std::vector<double> probs_;  // [vocab]
};

}  // namespace onecard
