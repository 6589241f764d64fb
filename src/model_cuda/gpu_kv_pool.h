// The engine's KV pool in device memory: one allocation laid out as
//   [ block arena: n_blocks × block_bytes | slot arena: n_slots × slot_bytes | step entries ]
// (kvcache/kv_spec.h; the same layout the CPU's KvHostArena uses), so that every stored vector a
// kernel reads is a byte offset from one base: attention's key lists mix window rows (slots),
// compressed entries (blocks) and this step's own rows (step entries) freely.
// The step-entries region holds the KV rows of the tokens computed in the current step in entry
// format: a chunk longer than the window would otherwise overwrite ring rows that its own earlier
// tokens still attend to; the last `sliding_window` rows of each sequence are copied into its ring
// after attention.
#pragma once

#include "backend/cuda/arena.h"
#include "backend/cuda/ops/paged_addr.cuh"
#include "kvcache/kv_layer_table.h"
#include "kvcache/kv_manager.h"
#include "kvcache/kv_spec.h"

#include <cstdint>
#include <vector>

namespace onecard {

class GpuKvPool {
public:
    // Carves the pool from `arena`. max_num_batched_tokens: the most tokens one step computes.
    GpuKvPool(const KvCacheSpec& spec, const KvPoolSize& size, int64_t max_num_batched_tokens,
              cuda::DeviceArena& arena);

    // The layer's regions inside a slot and streams inside a block (kvcache/kv_layer_table.h, the table the
    // CPU's paged view reads too).
    const KvLayerAddr& layer(int64_t il) const { return layers_.layer(il); }
    const KvLayerTable& layers() const { return layers_; }
    // A PagedStreamAddr for a layer's paged stream of this kind, over `block_tables`.
    cuda::PagedStreamAddr entry_addr(int64_t il, KvStreamKind kind, const int32_t* block_tables,
                                     int64_t max_blocks) const;

    uint8_t* base() const { return base_; }
    int64_t slot_offset(int64_t slot) const { return slots_offset_ + slot * spec().slot_bytes; }  // bytes from base
    int64_t block_offset(int64_t block) const { return block * spec().block_bytes; }              // bytes from base
    int64_t step_entries_offset() const { return step_offset_; }
    int64_t total_bytes() const { return total_bytes_; }
    const KvCacheSpec& spec() const { return layers_.spec(); }
    const KvPoolSize& size() const { return size_; }
    int64_t max_num_batched_tokens() const { return max_num_batched_tokens_; }
    // Throws onecard::Error unless the regions are ordered, 8-byte aligned and inside the allocation,
    // and every layer's addresses lie inside a slot or a block (KvLayerTable::check_integrity).
    void check_integrity() const;

private:
    KvLayerTable layers_;  // holds the spec
    KvPoolSize size_;
    int64_t max_num_batched_tokens_ = 0;
    uint8_t* base_ = nullptr;
    int64_t slots_offset_ = 0, step_offset_ = 0, total_bytes_ = 0;
};

}  // namespace onecard
