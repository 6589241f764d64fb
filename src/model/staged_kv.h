// StagedSequenceKv: a SequenceKv view that keeps every write of a speculative step (the verify step
// over [accepted..., rejected...] tokens, or the drafter's steps) to itself and passes reads of
// anything it does not hold to the store behind it. publish() then writes to that store only the
// vectors of positions the sequence kept (after SequenceState::rollback) and forgets the rest, so a
// rejected position's window row, compressed entry or indexer key never reaches the store: nothing
// to undo there, and the window ring rows the rejected positions would have overwritten (positions
// p - sliding_window, still attended by the kept ones) are never lost.
//
// Why staging rather than an undo log on the store: the store's ring rows are overwritten in place,
// so an undo log would have to read and keep rows in the store's own format (the paged store's
// bytes); staging keeps fp32 rows the model already rounded to what every store holds (see
// model/sequence_kv.h), and it is the GPU's layout too (the step's rows go to a step-entries region
// and are copied into the rings after attention, docs/ARCHITECTURE.md).
// Cost: the step's own writes in fp32, per layer (k + 1) window rows [head_dim] plus the entries
// and keys windows closed during the step; staged_bytes() says how many bytes exactly.
#pragma once

#include "model/sequence_kv.h"
#include "model/sequence_state.h"

#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

namespace onecard {

class StagedSequenceKv final : public SequenceKv {
public:
    // `store` must outlive the view; nothing is written to it before publish(). Row widths are the
    // config's head_dim (window rows, entries) and index_head_dim (indexer keys).
    StagedSequenceKv(SequenceKv& store, const ModelConfig& cfg)
        : store_(store), head_dim_(cfg.head_dim), index_head_dim_(cfg.index_head_dim) {}

    void write_window(int64_t layer, int64_t pos, const float* row) override;
    void read_window(int64_t layer, int64_t pos, float* row) const override;
    void write_entry(int64_t layer, int64_t i, const float* entry) override;
    void read_entry(int64_t layer, int64_t i, float* entry) const override;
    void write_index_key(int64_t layer, int64_t i, const float* key) override;
    void read_index_key(int64_t layer, int64_t i, float* key) const override;
    const SequenceKv& backing() const override { return store_.backing(); }

    // Writes to the store, in position order, the staged vectors `state` (already rolled back to
    // what it keeps) still covers: window rows of positions < the layer's n_tokens, entries and
    // indexer keys < its n_compressed(); drops every staged vector. Layers are matched by layer_id
    // (main layers and MTP blocks alike).
    void publish(const SequenceState& state);
    // Drops every staged vector without writing any.
    void discard() { staged_.clear(); }

    int64_t staged_bytes() const;
    // Throws unless every staged vector has its kind's width.
    void check_integrity() const;

private:
    enum class Kind { Window, Entry, IndexKey };
    using Key = std::tuple<int64_t, Kind, int64_t>;  // (layer, kind, position or index)

    int64_t width(Kind kind) const { return kind == Kind::IndexKey ? index_head_dim_ : head_dim_; }
    void put(Kind kind, int64_t layer, int64_t i, const float* v);
    bool get(Kind kind, int64_t layer, int64_t i, float* v) const;

    SequenceKv& store_;
    int64_t head_dim_ = 0, index_head_dim_ = 0;
    std::map<Key, std::vector<float>> staged_;  // ordered: publish() writes in position order
};

}  // namespace onecard
