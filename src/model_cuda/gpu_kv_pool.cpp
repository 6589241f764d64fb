#include "model_cuda/gpu_kv_pool.h"

#include "core/error.h"
#include "kvcache/kv_arena.h"

namespace onecard {

GpuKvPool::GpuKvPool(const KvCacheSpec& spec, const KvPoolSize& size, int64_t max_num_batched_tokens,
                     cuda::DeviceArena& arena)
    : spec_(spec), size_(size), max_num_batched_tokens_(max_num_batched_tokens) {
    ONECARD_CHECK(size.n_slots > 0 && size.n_blocks > 0 && max_num_batched_tokens > 0,
                  "gpu kv pool: needs slots ({}), blocks ({}) and step tokens ({})", size.n_slots, size.n_blocks,
                  max_num_batched_tokens);
    // Entries are read with 8-byte loads: every region must start on an 8-byte boundary.
    ONECARD_CHECK(spec.block_bytes % 8 == 0 && spec.slot_bytes % 8 == 0 && spec.entry.entry_bytes() % 8 == 0,
                  "gpu kv pool: block {} / slot {} / entry {} bytes are not multiples of 8", spec.block_bytes,
                  spec.slot_bytes, spec.entry.entry_bytes());
    slots_offset_ = size.n_blocks * spec.block_bytes;
    step_offset_ = slots_offset_ + size.n_slots * spec.slot_bytes;
    total_bytes_ = step_offset_ + max_num_batched_tokens * spec.entry.entry_bytes();
    base_ = static_cast<uint8_t*>(arena.alloc(static_cast<size_t>(total_bytes_), "kv pool"));
    layers_.resize(spec.shape.kinds.size());
    for (size_t il = 0; il < layers_.size(); ++il) layers_[il].ratio = spec.shape.compress_ratios[il];
    for (const auto& f : spec.fixed) {
        LayerAddr& l = layers_.at(static_cast<size_t>(f.layer));
        if (f.kind == KvFixedKind::Window) l.window_region = f.offset;
        if (f.kind == KvFixedKind::Compressor) l.compressor_region = f.offset;
        if (f.kind == KvFixedKind::IndexerCompressor) l.index_comp_region = f.offset;
    }
    for (const auto& s : spec.streams) {
        LayerAddr& l = layers_.at(static_cast<size_t>(s.layer));
        ONECARD_CHECK(s.offset % 4 == 0, "gpu kv pool: stream of layer {} at unaligned offset {}", s.layer, s.offset);
        if (s.kind == KvStreamKind::CompressedEntry) {
            ONECARD_CHECK(s.offset % 8 == 0, "gpu kv pool: entry stream of layer {} at offset {} (not 8-aligned)",
                          s.layer, s.offset);
            l.entry_stream = s.offset;
        } else {
            l.key_stream = s.offset;
        }
    }
}

void GpuKvPool::check_integrity() const {
    ONECARD_CHECK(base_ != nullptr && slots_offset_ == size_.n_blocks * spec_.block_bytes &&
                      step_offset_ == slots_offset_ + size_.n_slots * spec_.slot_bytes &&
                      total_bytes_ == step_offset_ + max_num_batched_tokens_ * spec_.entry.entry_bytes(),
                  "gpu kv pool: regions out of order");
    ONECARD_CHECK(slots_offset_ % 8 == 0 && step_offset_ % 8 == 0, "gpu kv pool: regions not 8-byte aligned");
    for (size_t il = 0; il < layers_.size(); ++il) {
        const LayerAddr& l = layers_[il];
        ONECARD_CHECK(l.window_region >= 0 &&
                          l.window_region + spec_.shape.sliding_window * spec_.entry.entry_bytes() <= spec_.slot_bytes,
                      "gpu kv pool: layer {}'s window ring lies outside its slot", il);
        ONECARD_CHECK((l.ratio == 0) == (l.entry_stream < 0) && l.entry_stream < spec_.block_bytes &&
                          l.key_stream < spec_.block_bytes,
                      "gpu kv pool: layer {}'s paged streams disagree with its ratio {}", il, l.ratio);
    }
}

cuda::PagedStreamAddr GpuKvPool::entry_addr(int64_t il, bool keys, const int32_t* block_tables,
                                            int64_t max_blocks) const {
    const LayerAddr& l = layer(il);
    ONECARD_CHECK(l.ratio > 0 && (keys ? l.key_stream : l.entry_stream) >= 0, "gpu kv pool: layer {} has no {} stream",
                  il, keys ? "indexer-key" : "compressed-entry");
    cuda::PagedStreamAddr a;
    static_cast<KvStreamGeometry&>(a) = kv_stream_geometry(
        spec_, kv_stream_index(spec_, il, keys ? KvStreamKind::IndexerKey : KvStreamKind::CompressedEntry));
    a.block_tables = block_tables;
    a.max_blocks = max_blocks;
    return a;
}

}  // namespace onecard
