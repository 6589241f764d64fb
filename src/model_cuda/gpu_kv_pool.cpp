#include "model_cuda/gpu_kv_pool.h"

#include "core/error.h"
#include "kvcache/kv_arena.h"

namespace onecard {

GpuKvPool::GpuKvPool(const KvCacheSpec& spec, const KvPoolSize& size, int64_t max_num_batched_tokens,
                     cuda::DeviceArena& arena)
    : layers_(spec), size_(size), max_num_batched_tokens_(max_num_batched_tokens) {
    ONECARD_CHECK(size.n_slots > 0 && size.n_blocks > 0 && max_num_batched_tokens > 0,
                  "gpu kv pool: needs slots ({}), blocks ({}) and step tokens ({})", size.n_slots, size.n_blocks,
                  max_num_batched_tokens);
    // Entries are read with 8-byte loads: every region must start on an 8-byte boundary.
    ONECARD_CHECK(spec.block_bytes % 8 == 0 && spec.slot_bytes % 8 == 0 && spec.entry.entry_bytes() % 8 == 0,
                  "gpu kv pool: block {} / slot {} / entry {} bytes are not multiples of 8", spec.block_bytes,
                  spec.slot_bytes, spec.entry.entry_bytes());
    for (const auto& s : spec.streams) {
        ONECARD_CHECK(s.offset % 4 == 0, "gpu kv pool: stream of layer {} at unaligned offset {}", s.layer, s.offset);
        ONECARD_CHECK(s.kind != KvStreamKind::CompressedEntry || s.offset % 8 == 0,
                      "gpu kv pool: entry stream of layer {} at offset {} (not 8-aligned)", s.layer, s.offset);
    }
    slots_offset_ = size.n_blocks * spec.block_bytes;
    step_offset_ = slots_offset_ + size.n_slots * spec.slot_bytes;
    total_bytes_ = step_offset_ + max_num_batched_tokens * spec.entry.entry_bytes();
    base_ = static_cast<uint8_t*>(arena.alloc(static_cast<size_t>(total_bytes_), "kv pool"));
}

void GpuKvPool::check_integrity() const {
    const KvCacheSpec& sp = spec();
    ONECARD_CHECK(base_ != nullptr && slots_offset_ == size_.n_blocks * sp.block_bytes &&
                      step_offset_ == slots_offset_ + size_.n_slots * sp.slot_bytes &&
                      total_bytes_ == step_offset_ + max_num_batched_tokens_ * sp.entry.entry_bytes(),
                  "gpu kv pool: regions out of order");
    ONECARD_CHECK(slots_offset_ % 8 == 0 && step_offset_ % 8 == 0, "gpu kv pool: regions not 8-byte aligned");
    layers_.check_integrity();
}

cuda::PagedStreamAddr GpuKvPool::entry_addr(int64_t il, KvStreamKind kind, const int32_t* block_tables,
                                            int64_t max_blocks) const {
    cuda::PagedStreamAddr a;
    static_cast<KvStreamGeometry&>(a) = layers_.entry_geometry(il, kind);
    a.block_tables = block_tables;
    a.max_blocks = max_blocks;
    return a;
}

}  // namespace onecard
