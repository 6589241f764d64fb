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

    struct LayerAddr {
        int64_t window_region = -1;      // byte offset of the window ring inside a slot
        int64_t compressor_region = -1;  // ... of the compressor ring (CSA/HCA)
        int64_t index_comp_region = -1;  // ... of the indexer compressor ring (CSA)
        int64_t entry_stream = -1;       // byte offset of the compressed-entry stream inside a block
        int64_t key_stream = -1;         // ... of the indexer-key stream (CSA)
        int64_t ratio = 0;
    };
    const LayerAddr& layer(int64_t il) const { return layers_.at(static_cast<size_t>(il)); }
    // A PagedStreamAddr for a layer's entries (keys = true: its indexer keys), over `block_tables`.
    cuda::PagedStreamAddr entry_addr(int64_t il, bool keys, const int32_t* block_tables, int64_t max_blocks) const;

    uint8_t* base() const { return base_; }
    int64_t slot_offset(int64_t slot) const { return slots_offset_ + slot * spec_.slot_bytes; }  // bytes from base
    int64_t block_offset(int64_t block) const { return block * spec_.block_bytes; }              // bytes from base
    int64_t step_entries_offset() const { return step_offset_; }
    int64_t total_bytes() const { return total_bytes_; }
    const KvCacheSpec& spec() const { return spec_; }
    const KvPoolSize& size() const { return size_; }
    int64_t max_num_batched_tokens() const { return max_num_batched_tokens_; }
    // Throws onecard::Error unless the regions are ordered, 8-byte aligned and inside the allocation,
    // and every layer's addresses lie inside a slot or a block.
    void check_integrity() const;

private:
    KvCacheSpec spec_;
    KvPoolSize size_;
    int64_t max_num_batched_tokens_ = 0;
    uint8_t* base_ = nullptr;
    int64_t slots_offset_ = 0, step_offset_ = 0, total_bytes_ = 0;
    std::vector<LayerAddr> layers_;
};

}  // namespace onecard
