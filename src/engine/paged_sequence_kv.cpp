#include "engine/paged_sequence_kv.h"

#include "core/error.h"
#include "kvcache/kv_format.h"

#include <utility>

namespace onecard {

PagedSequenceKv::PagedSequenceKv(KvHostArena& arena, const KvLayerTable& layout, int32_t slot,
                                 std::span<const int32_t> block_table)
    : arena_(arena), layout_(layout), slot_(slot), block_table_(block_table) {
    ONECARD_CHECK(slot >= 0 && slot < arena.n_slots(), "paged kv: slot {} outside [0, {})", slot, arena.n_slots());
}

int64_t PagedSequenceKv::stream_of(int64_t layer, bool index_keys) const {
    const KvLayerAddr& l = layout_.layer(layer);
    const int64_t s = index_keys ? l.index_keys : l.entries;
    ONECARD_CHECK(s >= 0, "paged kv: layer {} stores no {}", layer, index_keys ? "indexer keys" : "compressed entries");
    return s;
}

void PagedSequenceKv::write_window(int64_t layer, int64_t pos, const float* row) {
    encode_kv_entry(layout_.spec().entry, row, arena_.window_entry(slot_, layout_.layer(layer).window, pos));
}

void PagedSequenceKv::read_window(int64_t layer, int64_t pos, float* row) const {
    decode_kv_entry(layout_.spec().entry, arena_.window_entry(slot_, layout_.layer(layer).window, pos), row);
}

void PagedSequenceKv::write_entry(int64_t layer, int64_t i, const float* entry) {
    const auto s = static_cast<size_t>(stream_of(layer, false));
    encode_kv_entry(layout_.spec().entry, entry, arena_.paged_entry(block_table_, s, i));
}

void PagedSequenceKv::read_entry(int64_t layer, int64_t i, float* entry) const {
    const auto s = static_cast<size_t>(stream_of(layer, false));
    decode_kv_entry(layout_.spec().entry, std::as_const(arena_).paged_entry(block_table_, s, i), entry);
}

void PagedSequenceKv::write_index_key(int64_t layer, int64_t i, const float* key) {
    const auto s = static_cast<size_t>(stream_of(layer, true));
    encode_indexer_key(layout_.spec().index_key, key, arena_.paged_entry(block_table_, s, i));
}

void PagedSequenceKv::read_index_key(int64_t layer, int64_t i, float* key) const {
    const auto s = static_cast<size_t>(stream_of(layer, true));
    decode_indexer_key(layout_.spec().index_key, std::as_const(arena_).paged_entry(block_table_, s, i), key);
}

void PagedSequenceKv::check_covers(int64_t n_tokens) const {
    const KvCacheSpec& spec = layout_.spec();
    ONECARD_CHECK(static_cast<int64_t>(block_table_.size()) >= spec.blocks_for_tokens(n_tokens),
                  "paged kv: slot {} has {} blocks, {} tokens need {}", slot_, block_table_.size(), n_tokens,
                  spec.blocks_for_tokens(n_tokens));
    for (int32_t b : block_table_)
        ONECARD_CHECK(b >= 0 && b < arena_.n_blocks(), "paged kv: slot {} holds block {} outside [0, {})", slot_, b,
                      arena_.n_blocks());
}

}  // namespace onecard
