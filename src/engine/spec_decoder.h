// Speculative decoding of one sequence on the CPU model (issue 17; the reference for the GPU): a
// draft of k tokens (from the mtp.0 block, draft_with_mtp(); from the 0731 DSpark drafter,
// draft_with_dspark(); or from any other source) is verified
// in ONE multi-token forward of the main model (verify_draft()), decided by the lossless rule of
// engine/spec_verify.h, and everything the rejected positions wrote is rolled back without
// replaying the kept ones (model/spec_step.h). Greedy output is the non-speculative output token
// for token; sampled output is distributed as the target's.
//
// Positions: the main model has consumed n tokens and `next` (the last sampled token) is known but
// not fed. A verify step feeds [next, d_1..d_k] at positions n..n+k, keeps n + 1 + a of them, and
// the verdict's token becomes the new `next`. The MTP block at position p reads the main model's
// pre-hc_head streams at p and the token at p + 1, so it trails the main model: the streams of
// kept positions wait in SpecTrail::pending until the next draft, whose first MTP call consumes
// them (those MTP rows are kept: they used the real streams); the further k - 1 draft positions
// feed the block its own output streams, and those rows are rolled back.
//
// DSpark (docs/dspark.md) needs no trail: every forward here pushes the taps of the positions the
// main model keeps into the drafter's window rings at once (DeepSeekV4::dspark_push_context), and a
// draft is one pass of the block plus the Markov head, which stores nothing.
//
// Distributions: p and q are the sampler's target distribution under the row's temperature /
// top-k / top-p / min-p (RowSampling's pipeline). Rows that need penalties, logit_bias, logprobs or
// a grammar are not speculated (the engine gives them no drafts).
#pragma once

#include "engine/sampler.h"
#include "engine/spec_verify.h"
#include "model/deepseek_v4.h"
#include "onecard/engine.h"

#include <cstdint>
#include <span>
#include <vector>

namespace onecard {

struct Draft {
    std::vector<int32_t> tokens;    // [k]
    std::vector<double> q;          // [k, vocab] the distribution each draft was drawn from
    std::vector<float> mtp_logits;  // [k, vocab] the drafter's raw logits (MTP block; DSpark: base + Markov bias)
    std::vector<float> confidence;  // [k] DSpark's confidence logits (draft_with_dspark only)
};

// What a speculating sequence carries besides its SequenceState.
struct SpecTrail {
    std::vector<int32_t> fed;  // [n_tokens] every token fed to the main model
    // [n_tokens - n_mtp_tokens, hc, D] main streams the MTP block has not read (always empty for
    // DSpark, whose drafter reads every kept position at once)
    std::vector<float> pending;
    // Throws unless the trail matches the state's token counts.
    void check_integrity(const SequenceState& state, const ModelConfig& cfg) const;
};

// A plain forward (prefill chunk or one-token decode) that keeps the trail up to date; returns the
// logits [n, vocab].
std::vector<float> forward_tracked(const DeepSeekV4& model, SequenceState& state, SequenceKv& kv, SpecTrail& trail,
                                   std::span<const int32_t> tokens);

// k >= 1 drafts from the mtp.0 block after `next`, drawn from its distributions under `params`
// (greedy: its argmax) with spec_uniform(seed, Draft, counter + j). Leaves the MTP block at n
// positions (the main model's count).
Draft draft_with_mtp(const DeepSeekV4& model, SequenceState& state, SequenceKv& kv, SpecTrail& trail, int32_t next,
                     const SamplingParams& params, uint64_t seed, uint64_t counter, int64_t k);

// k drafts (1 <= k <= dspark_block_size) from the 0731 DSpark drafter after `next`: one pass of the
// block, then slot by slot the Markov bias of the previous token and a draw from the row's
// distribution under `params` (greedy: argmax) with spec_uniform(seed, Draft, counter + j).
// confidence_threshold > 0 stops the draft before the first slot whose sigmoid(confidence) is below
// it (keeping at least one draft); 0 keeps k. Changes nothing in the state.
Draft draft_with_dspark(const DeepSeekV4& model, const SequenceState& state, int32_t next, const SamplingParams& params,
                        uint64_t seed, uint64_t counter, int64_t k, double confidence_threshold = 0.0);

// One verify step over [next, draft...]; keeps next and the accepted drafts (state, KV, trail).
// counter: output index of the token d_1 would be. *step_bytes (optional): the rollback's cost.
SpecVerdict verify_draft(const DeepSeekV4& model, SequenceState& state, SequenceKv& kv, SpecTrail& trail, int32_t next,
                         const Draft& draft, const SamplingParams& params, uint64_t seed, uint64_t counter,
                         int64_t* step_bytes = nullptr);

struct SpecStepResult {
    std::vector<int32_t> tokens;  // emitted: the accepted drafts, then the correction or bonus token
    int64_t n_drafts = 0;
    int64_t n_accepted = 0;
};

// One sequence with its own KV store, driven step by step (tests and tools).
class SpecDecoder {
public:
    // `model` must outlive the decoder; params must not need host sampling (needs_host_sampling).
    SpecDecoder(const DeepSeekV4& model, SamplingParams params, uint64_t seed);

    // Feeds the prompt and samples the first output token as the non-speculative path does
    // (Sampler::sample with (seed, 0)); returns it.
    int32_t start(std::span<const int32_t> prompt);
    Draft mtp_draft(int64_t k);
    Draft dspark_draft(int64_t k, double confidence_threshold = 0.0);
    SpecStepResult verify(const Draft& draft);
    // A plain decode step: feeds next and samples as the non-speculative path does.
    int32_t plain_step();

    const std::vector<int32_t>& output() const { return output_; }
    const SequenceState& state() const { return state_; }
    int64_t last_step_bytes() const { return last_step_bytes_; }
    void check_integrity() const;

private:
    const DeepSeekV4& model_;
    SamplingParams params_;
    uint64_t seed_ = 0;
    Sampler sampler_;
    SequenceState state_;
    SpecTrail trail_;
    std::vector<int32_t> prompt_, output_;  // output_.back() is `next`, not yet fed
    int64_t last_step_bytes_ = 0;
};

}  // namespace onecard
