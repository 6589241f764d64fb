#include "engine/spec_decoder.h"

#include "core/error.h"
#include "model/dspark_heads.h"
#include "model/spec_step.h"

#include <algorithm>

namespace onecard {
namespace {

std::vector<double> target(Sampler& sampler, std::span<const float> row, const SamplingParams& params, int64_t vocab) {
    return dense_distribution(sampler.target_distribution(row, params, {}, {}), vocab);
}

// Appends what the drafter reads of the positions the main model just kept: their streams for the
// MTP block (read at the next draft), or, DSpark, their taps pushed into the drafter's rings now.
void keep_for_drafter(const DeepSeekV4& model, SequenceState& state, SpecTrail& trail, const ForwardOutput& out,
                      int64_t n_kept) {
    const ModelConfig& cfg = model.config();
    if (model.has_dspark()) {
        const int64_t per = static_cast<int64_t>(cfg.dspark->target_layer_ids.size()) * cfg.hidden_size;
        model.dspark_push_context(state, std::span(out.taps.data(), static_cast<size_t>(n_kept * per)));
        return;
    }
    const int64_t per = cfg.hc_mult * cfg.hidden_size;
    trail.pending.insert(trail.pending.end(), out.streams.begin(), out.streams.begin() + n_kept * per);
}

}  // namespace

void SpecTrail::check_integrity(const SequenceState& state, const ModelConfig& cfg) const {
    const int64_t per = cfg.hc_mult * cfg.hidden_size;
    ONECARD_CHECK(static_cast<int64_t>(fed.size()) == state.n_tokens() &&
                      static_cast<int64_t>(pending.size()) == (state.n_tokens() - state.n_mtp_tokens()) * per,
                  "spec trail: {} tokens fed and {} pending stream floats for a state at {} tokens, MTP at {}",
                  fed.size(), pending.size(), state.n_tokens(), state.n_mtp_tokens());
}

std::vector<float> forward_tracked(const DeepSeekV4& model, SequenceState& state, SequenceKv& kv, SpecTrail& trail,
                                   std::span<const int32_t> tokens) {
    ForwardOutput out = model.forward_with_streams(state, kv, tokens);
    trail.fed.insert(trail.fed.end(), tokens.begin(), tokens.end());
    keep_for_drafter(model, state, trail, out, static_cast<int64_t>(tokens.size()));
    return std::move(out.logits);
}

Draft draft_with_mtp(const DeepSeekV4& model, SequenceState& state, SequenceKv& kv, SpecTrail& trail, int32_t next,
                     const SamplingParams& params, uint64_t seed, uint64_t counter, int64_t k) {
    const ModelConfig& cfg = model.config();
    ONECARD_CHECK(k >= 1, "spec: {} drafts", k);
    const auto V = static_cast<size_t>(cfg.vocab_size);
    const int64_t per = cfg.hc_mult * cfg.hidden_size, n = state.n_tokens(), nm = state.n_mtp_tokens();
    // Catch-up: positions nm..n-1 with the main model's streams and the tokens at nm+1..n (the last
    // is `next`). These MTP rows are final; the last one predicts the token after `next`.
    std::vector<int32_t> next_tokens(trail.fed.begin() + nm + 1, trail.fed.end());
    next_tokens.push_back(next);
    ForwardOutput out = model.forward_mtp_with_streams(state, kv, trail.pending, next_tokens);
    trail.pending.clear();

    Draft d;
    Sampler sampler;
    std::vector<float> streams(out.streams.end() - per, out.streams.end());  // [1, hc, D]
    std::vector<float> logits(out.logits.end() - static_cast<long>(V), out.logits.end());
    // The further positions run on the block's own streams: rolled back once drafted.
    SpeculativeStep step(state, kv, cfg);
    for (int64_t j = 0; j < k; ++j) {
        if (j > 0) {
            out = model.forward_mtp_with_streams(state, step.kv(), streams, std::span(&d.tokens.back(), 1));
            streams = std::move(out.streams);
            logits = std::move(out.logits);
        }
        const std::vector<double> q = target(sampler, logits, params, cfg.vocab_size);
        d.tokens.push_back(draw_token(q, spec_uniform(seed, SpecStream::Draft, counter + static_cast<uint64_t>(j))));
        d.q.insert(d.q.end(), q.begin(), q.end());
        d.mtp_logits.insert(d.mtp_logits.end(), logits.begin(), logits.end());
    }
    step.finish(state.n_tokens(), n);
    return d;
}

Draft draft_with_dspark(const DeepSeekV4& model, const SequenceState& state, int32_t next, const SamplingParams& params,
                        uint64_t seed, uint64_t counter, int64_t k, double confidence_threshold) {
    const ModelConfig& cfg = model.config();
    ONECARD_CHECK(cfg.dspark.has_value() && model.has_dspark(), "spec: DSpark drafts need a 0731 checkpoint");
    const int64_t B = cfg.dspark->block_size, D = cfg.hidden_size;
    ONECARD_CHECK(k >= 1 && k <= B, "spec: {} DSpark drafts, the drafter's block holds {} (dspark_block_size)", k, B);
    const auto V = static_cast<size_t>(cfg.vocab_size);
    const DenseDSpark& w = model.dspark_weights();
    const DSparkBlockOutput blk = model.dspark_block(state, next);  // [B, vocab], [B, D]

    Draft d;
    Sampler sampler;
    std::vector<float> m(static_cast<size_t>(w.rank)), logits(V);
    int32_t prev = next;
    for (int64_t j = 0; j < k; ++j) {
        // logits_j = base_j + markov_w2 · markov_w1[prev_j]; c_j = w_conf · [h_j ; m_j]
        markov_step(w.markov_w1, w.markov_w2, w.rank, prev, m.data(), logits.data());
        for (size_t v = 0; v < V; ++v) logits[v] += blk.base_logits[static_cast<size_t>(j) * V + v];
        d.confidence.push_back(confidence_logit(w.confidence, std::span(blk.hidden.data() + j * D, D), m));
        const std::vector<double> q = target(sampler, logits, params, cfg.vocab_size);
        prev = draw_token(q, spec_uniform(seed, SpecStream::Draft, counter + static_cast<uint64_t>(j)));
        d.tokens.push_back(prev);
        d.q.insert(d.q.end(), q.begin(), q.end());
        d.mtp_logits.insert(d.mtp_logits.end(), logits.begin(), logits.end());
    }
    const int64_t keep = std::max<int64_t>(1, confident_prefix_length(d.confidence, confidence_threshold));
    d.tokens.resize(static_cast<size_t>(keep));
    d.confidence.resize(static_cast<size_t>(keep));
    d.q.resize(static_cast<size_t>(keep) * V);
    d.mtp_logits.resize(static_cast<size_t>(keep) * V);
    return d;
}

SpecVerdict verify_draft(const DeepSeekV4& model, SequenceState& state, SequenceKv& kv, SpecTrail& trail, int32_t next,
                         const Draft& draft, const SamplingParams& params, uint64_t seed, uint64_t counter,
                         int64_t* step_bytes) {
    const ModelConfig& cfg = model.config();
    const auto V = static_cast<size_t>(cfg.vocab_size);
    const auto k = static_cast<int64_t>(draft.tokens.size());
    ONECARD_CHECK(k >= 1 && draft.q.size() == static_cast<size_t>(k) * V, "spec: a draft of {} tokens with {} q values",
                  k, draft.q.size());
    const int64_t n = state.n_tokens();
    std::vector<int32_t> tokens{next};
    tokens.insert(tokens.end(), draft.tokens.begin(), draft.tokens.end());

    SpeculativeStep step(state, kv, cfg);
    const ForwardOutput out = model.forward_with_streams(state, step.kv(), tokens);  // [k + 1, vocab]
    Sampler sampler;
    std::vector<double> p;  // [k + 1, vocab]
    for (int64_t i = 0; i <= k; ++i) {
        const std::vector<double> pi = target(sampler, std::span(out.logits.data() + i * V, V), params, cfg.vocab_size);
        p.insert(p.end(), pi.begin(), pi.end());
    }
    const SpecVerdict v = verify_drafts(draft.tokens, draft.q, p, cfg.vocab_size, seed, counter);
    if (step_bytes != nullptr) *step_bytes = step.bytes();
    step.finish(n + 1 + v.n_accepted, state.n_mtp_tokens());
    trail.fed.insert(trail.fed.end(), tokens.begin(), tokens.begin() + 1 + v.n_accepted);
    keep_for_drafter(model, state, trail, out, 1 + v.n_accepted);
    return v;
}

SpecDecoder::SpecDecoder(const DeepSeekV4& model, SamplingParams params, uint64_t seed)
    : model_(model), params_(std::move(params)), seed_(seed), state_(model.new_sequence()) {
    ONECARD_CHECK(!needs_host_sampling(params_), "spec decoder: penalties, logit_bias and logprobs are not speculated");
}

int32_t SpecDecoder::start(std::span<const int32_t> prompt) {
    ONECARD_CHECK(state_.n_tokens() == 0 && !prompt.empty(), "spec decoder: start() once, with a prompt");
    prompt_.assign(prompt.begin(), prompt.end());
    const std::vector<float> logits = forward_tracked(model_, state_, state_.own_kv(), trail_, prompt);
    const auto V = static_cast<size_t>(model_.config().vocab_size);
    const std::span<const float> last(logits.data() + logits.size() - V, V);
    output_.push_back(sampler_.sample(last, params_, prompt_, output_, seed_).token);
    return output_.back();
}

Draft SpecDecoder::dspark_draft(int64_t k, double confidence_threshold) {
    ONECARD_CHECK(!output_.empty(), "spec decoder: start() first");
    return draft_with_dspark(model_, state_, output_.back(), params_, seed_, output_.size(), k, confidence_threshold);
}

Draft SpecDecoder::mtp_draft(int64_t k) {
    ONECARD_CHECK(!output_.empty(), "spec decoder: start() first");
    return draft_with_mtp(model_, state_, state_.own_kv(), trail_, output_.back(), params_, seed_, output_.size(), k);
}

SpecStepResult SpecDecoder::verify(const Draft& draft) {
    const SpecVerdict v = verify_draft(model_, state_, state_.own_kv(), trail_, output_.back(), draft, params_, seed_,
                                       output_.size(), &last_step_bytes_);
    SpecStepResult r;
    r.tokens.assign(draft.tokens.begin(), draft.tokens.begin() + v.n_accepted);
    r.tokens.push_back(v.token);
    r.n_drafts = static_cast<int64_t>(draft.tokens.size());
    r.n_accepted = v.n_accepted;
    output_.insert(output_.end(), r.tokens.begin(), r.tokens.end());
    return r;
}

int32_t SpecDecoder::plain_step() {
    const int32_t next = output_.back();
    const std::vector<float> logits = forward_tracked(model_, state_, state_.own_kv(), trail_, std::span(&next, 1));
    output_.push_back(sampler_.sample(logits, params_, prompt_, output_, seed_).token);
    return output_.back();
}

void SpecDecoder::check_integrity() const {
    state_.check_integrity();
    trail_.check_integrity(state_, model_.config());
    ONECARD_CHECK(state_.n_tokens() == static_cast<int64_t>(prompt_.size() + output_.size()) - 1,
                  "spec decoder: {} tokens fed for a prompt of {} and {} output tokens", state_.n_tokens(),
                  prompt_.size(), output_.size());
}

}  // namespace onecard
