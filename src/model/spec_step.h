// SpeculativeStep: the rollback point of one sequence around a speculative step (a multi-token
// verify over [accepted..., rejected...] tokens, or the drafter's steps): the compressors journal
// what they overwrite (SequenceState::begin_journal) and the stored KV writes are staged
// (StagedSequenceKv). finish(n, n_mtp) keeps the first n main tokens and n_mtp MTP positions: the
// state is rolled back and only the kept positions' vectors reach the store, so the sequence is
// bit for bit what feeding only the kept tokens would have made, and nothing kept is recomputed.
//
// Cost, per sequence and step of m tokens: the journal (per compressor and token one row of kv and
// score, 2·row_width floats, plus 2·ratio·row_width floats per overlapping window closed) and the
// staged vectors (per layer m window rows [head_dim], plus the entries and keys of closed windows),
// all fp32; bytes() reports the sum. At V4-Flash shape (20 CSA + 20 HCA layers, head_dim 512) and
// m = 8: 2.2 MiB of journaled rows, up to 1.6 MiB of overlap shifts (two windows of 4 close), 0.7 MiB
// staged; a plain copy of the compressor buffers would be 11.6 MiB (the HCA windows of 128 rows),
// and replaying the kept tokens would cost a forward pass. The GPU can keep the journal far smaller
// (it already stages the step's rows); this is the reference.
#pragma once

#include "model/config.h"
#include "model/sequence_kv.h"
#include "model/sequence_state.h"
#include "model/staged_kv.h"

#include <cstdint>

namespace onecard {

class SpeculativeStep {
public:
    // Starts journaling `state`, whose stored KV is `store` (its own store, or the external one it
    // always uses). Both must outlive the step.
    SpeculativeStep(SequenceState& state, SequenceKv& store, const ModelConfig& cfg);
    // A step never finished is rolled back to where it started.
    ~SpeculativeStep();
    SpeculativeStep(const SpeculativeStep&) = delete;
    SpeculativeStep& operator=(const SpeculativeStep&) = delete;

    // The store to pass to every forward call of the step.
    SequenceKv& kv() { return staged_; }
    int64_t start_tokens() const { return start_tokens_; }
    int64_t start_mtp_tokens() const { return start_mtp_tokens_; }

    // Keeps the first n_tokens main tokens and n_mtp_tokens MTP positions (each between its count at
    // the start and now), publishes their stored vectors and ends the journal. Call once.
    void finish(int64_t n_tokens, int64_t n_mtp_tokens);
    bool finished() const { return finished_; }
    int64_t bytes() const { return state_.journal_bytes() + staged_.staged_bytes(); }

    void check_integrity() const;

private:
    SequenceState& state_;
    StagedSequenceKv staged_;
    int64_t start_tokens_ = 0, start_mtp_tokens_ = 0;
    bool finished_ = false;
};

}  // namespace onecard
