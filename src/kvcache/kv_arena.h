// Host storage laid out exactly as KvCacheSpec describes: a block arena [n_blocks][block_bytes] for
// the paged streams and a slot arena [n_slots][slot_bytes] for the fixed per-sequence regions. The
// CPU backend reads and writes encoded entries (kv_format.h) through it; the CUDA backend allocates
// the same two arenas in device memory and addresses them with the same arithmetic.
//
// Addressing: entry i of paged stream s at core/kv_address.h's kv_entry_offset (the formula the
// kernels evaluate too) of its stream's geometry, kv_stream_geometry(spec, s); the window row for
// token position p of a layer lives at row p % n_rows of its Window region (sliding_window, plus the
// shape's ring_spare rows).
#pragma once

#include "core/kv_address.h"
#include "kvcache/host_bytes.h"
#include "kvcache/kv_manager.h"
#include "kvcache/kv_spec.h"

#include <cstdint>
#include <span>

namespace onecard {

// Index of the paged stream / fixed region of `layer` with this kind; throws if the layer has none.
size_t kv_stream_index(const KvCacheSpec& spec, int64_t layer, KvStreamKind kind);
size_t kv_fixed_index(const KvCacheSpec& spec, int64_t layer, KvFixedKind kind);
// Paged stream `stream`'s geometry inside the spec's blocks (what kv_entry_offset reads).
KvStreamGeometry kv_stream_geometry(const KvCacheSpec& spec, size_t stream);

class KvHostArena {
public:
    KvHostArena(const KvCacheSpec& spec, KvPoolSize size);

    // [entry_bytes] of entry i of stream s for the sequence owning block_table. Throws if i is past
    // what the table covers.
    uint8_t* paged_entry(std::span<const int32_t> block_table, size_t stream, int64_t i);
    const uint8_t* paged_entry(std::span<const int32_t> block_table, size_t stream, int64_t i) const;
    // [n_rows, row_bytes] of fixed region r in a slot.
    uint8_t* fixed_region(int32_t slot, size_t region);
    // [block_bytes] of paged block `block` (the host tier copies whole blocks).
    uint8_t* block(int32_t block);
    // [entry_bytes] window row for token position pos (ring of the region's n_rows rows).
    uint8_t* window_entry(int32_t slot, size_t region, int64_t pos);

    int64_t n_blocks() const { return n_blocks_; }
    int64_t n_slots() const { return n_slots_; }
    int64_t bytes() const { return static_cast<int64_t>(blocks_.size() + slots_.size()); }

private:
    int64_t paged_offset(std::span<const int32_t> block_table, size_t stream, int64_t i) const;

    const KvCacheSpec& spec_;
    int64_t n_blocks_ = 0, n_slots_ = 0;
    // Lazily backed (host_bytes.h): a 1 GiB pool costs nothing until a sequence writes into it (a
    // std::vector wrote every byte up front, ~3 s of a 2-core machine for each `onecard generate`).
    HostBytes blocks_;  // [n_blocks, block_bytes]
    HostBytes slots_;   // [n_slots, slot_bytes]
};

}  // namespace onecard
