// PagedSequenceKv: the model's SequenceKv (model/sequence_kv.h) backed by the engine's KV pool, so
// that in Numerics::Reference the CPU forward pass reads and writes the same bytes the GPU will:
// window rows in the sequence's slot, compressed entries and indexer keys in its paged blocks, each
// in kvcache's byte format (kv_format.h: 584-byte entries and 132-byte indexer keys at Flash shape).
// It lives in engine/ because only the engine links both the model and kvcache.
//
// A view is cheap (a few references) and made per request per step from its slot and the block table
// the runner keeps for it (apply_block_ids); the table must cover every token the step computes.
#pragma once

#include "kvcache/kv_arena.h"
#include "kvcache/kv_layer_table.h"
#include "kvcache/kv_spec.h"
#include "model/sequence_kv.h"

#include <cstdint>
#include <span>
#include <vector>

namespace onecard {

class PagedSequenceKv final : public SequenceKv {
public:
    // `arena` and `layout` (the one layer-address table, kvcache/kv_layer_table.h) must describe the same
    // spec and outlive the view.
    PagedSequenceKv(KvHostArena& arena, const KvLayerTable& layout, int32_t slot, std::span<const int32_t> block_table);

    void write_window(int64_t layer, int64_t pos, const float* row) override;
    void read_window(int64_t layer, int64_t pos, float* row) const override;
    void write_entry(int64_t layer, int64_t i, const float* entry) override;
    void read_entry(int64_t layer, int64_t i, float* entry) const override;
    void write_index_key(int64_t layer, int64_t i, const float* key) override;
    void read_index_key(int64_t layer, int64_t i, float* key) const override;

    // Throws unless the slot is in the arena and the block table covers n_tokens tokens with block
    // ids inside the arena.
    void check_covers(int64_t n_tokens) const;

private:
    int64_t stream_of(int64_t layer, bool index_keys) const;

    KvHostArena& arena_;
    const KvLayerTable& layout_;
    int32_t slot_;
    std::span<const int32_t> block_table_;
};

}  // namespace onecard
