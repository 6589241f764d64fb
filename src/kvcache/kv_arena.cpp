#include "kvcache/kv_arena.h"

#include "core/error.h"

namespace onecard {

size_t kv_stream_index(const KvCacheSpec& spec, int64_t layer, KvStreamKind kind) {
    for (size_t i = 0; i < spec.streams.size(); ++i)
        if (spec.streams[i].layer == layer && spec.streams[i].kind == kind) return i;
    fail("kv arena: layer {} has no {} stream", layer,
         kind == KvStreamKind::IndexerKey ? "indexer-key" : "compressed-entry");
}

size_t kv_fixed_index(const KvCacheSpec& spec, int64_t layer, KvFixedKind kind) {
    for (size_t i = 0; i < spec.fixed.size(); ++i)
        if (spec.fixed[i].layer == layer && spec.fixed[i].kind == kind) return i;
    fail("kv arena: layer {} has no fixed region of kind {}", layer, static_cast<int>(kind));
}

KvStreamGeometry kv_stream_geometry(const KvCacheSpec& spec, size_t stream) {
    ONECARD_CHECK(stream < spec.streams.size(), "kv arena: stream {} out of range", stream);
    const KvPagedStream& s = spec.streams[stream];
    KvStreamGeometry g;
    g.block_bytes = spec.block_bytes;
    g.block_size = spec.block_size;
    g.ratio = s.ratio;
    g.stream_offset = s.offset;
    g.entry_bytes = s.entry_bytes;
    return g;
}

KvHostArena::KvHostArena(const KvCacheSpec& spec, KvPoolSize size)
    : spec_(spec), n_blocks_(size.n_blocks), n_slots_(size.n_slots) {
    ONECARD_CHECK(n_blocks_ >= 0 && n_slots_ >= 0, "kv arena: negative size ({} blocks, {} slots)", n_blocks_,
                  n_slots_);
    blocks_ = HostBytes(static_cast<size_t>(n_blocks_ * spec.block_bytes), "the KV pool's blocks");
    slots_ = HostBytes(static_cast<size_t>(n_slots_ * spec.slot_bytes), "the KV pool's sequence slots");
}

int64_t KvHostArena::paged_offset(std::span<const int32_t> block_table, size_t stream, int64_t i) const {
    const KvStreamGeometry g = kv_stream_geometry(spec_, stream);
    const int64_t b = kv_entry_block(g, i);
    ONECARD_CHECK(i >= 0 && b < static_cast<int64_t>(block_table.size()),
                  "kv arena: entry {} of layer {} needs block {} but the table has {}", i, spec_.streams[stream].layer,
                  b, block_table.size());
    const int32_t block = block_table[static_cast<size_t>(b)];
    ONECARD_CHECK(block >= 0 && block < n_blocks_, "kv arena: block id {} outside [0, {})", block, n_blocks_);
    return kv_entry_offset(g, block, i);
}

uint8_t* KvHostArena::paged_entry(std::span<const int32_t> block_table, size_t stream, int64_t i) {
    return blocks_.data() + paged_offset(block_table, stream, i);
}

const uint8_t* KvHostArena::paged_entry(std::span<const int32_t> block_table, size_t stream, int64_t i) const {
    return blocks_.data() + paged_offset(block_table, stream, i);
}

uint8_t* KvHostArena::fixed_region(int32_t slot, size_t region) {
    ONECARD_CHECK(slot >= 0 && slot < n_slots_ && region < spec_.fixed.size(),
                  "kv arena: slot {} / region {} out of range", slot, region);
    return slots_.data() + slot * spec_.slot_bytes + spec_.fixed[region].offset;
}

uint8_t* KvHostArena::window_entry(int32_t slot, size_t region, int64_t pos) {
    const KvFixedRegion& r = spec_.fixed.at(region);
    ONECARD_CHECK(r.kind == KvFixedKind::Window && pos >= 0, "kv arena: region {} of layer {} is not a window", region,
                  r.layer);
    return fixed_region(slot, region) + (pos % r.n_rows) * r.row_bytes;
}

uint8_t* KvHostArena::block(int32_t block) {
    ONECARD_CHECK(block >= 0 && block < n_blocks_, "kv arena: block {} outside [0, {})", block, n_blocks_);
    return blocks_.data() + static_cast<size_t>(block) * static_cast<size_t>(spec_.block_bytes);
}

}  // namespace onecard
