#include "model/spec_step.h"

#include "core/error.h"

namespace onecard {

SpeculativeStep::SpeculativeStep(SequenceState& state, SequenceKv& store, const ModelConfig& cfg)
    : state_(state), staged_(store, cfg), start_tokens_(state.n_tokens()), start_mtp_tokens_(state.n_mtp_tokens()) {
    ONECARD_CHECK(!state.owns_kv() || &store.backing() == &state.own_kv(),
                  "speculative step: this sequence keeps its KV in its own store; pass that store");
    state_.begin_journal();
}

SpeculativeStep::~SpeculativeStep() {
    if (finished_) return;
    // Nothing staged reaches the store; the compressors return to the start.
    staged_.discard();
    state_.rollback(start_tokens_, start_mtp_tokens_);
    state_.end_journal();
}

void SpeculativeStep::finish(int64_t n_tokens, int64_t n_mtp_tokens) {
    ONECARD_CHECK(!finished_, "speculative step: finished twice");
    state_.rollback(n_tokens, n_mtp_tokens);  // checks both counts against the journal
    staged_.publish(state_);
    state_.end_journal();
    finished_ = true;
}

void SpeculativeStep::check_integrity() const {
    staged_.check_integrity();
    // Mid-step an owned store lags the state by the staged positions, which the state's own check
    // would reject; after finish() the two agree again.
    if (finished_) state_.check_integrity();
    ONECARD_CHECK(state_.n_tokens() >= start_tokens_ && state_.n_mtp_tokens() >= start_mtp_tokens_,
                  "speculative step: sequence at ({}, mtp {}) before its start ({}, mtp {})", state_.n_tokens(),
                  state_.n_mtp_tokens(), start_tokens_, start_mtp_tokens_);
}

}  // namespace onecard
