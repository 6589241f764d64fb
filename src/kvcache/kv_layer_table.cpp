#include "kvcache/kv_layer_table.h"

#include "core/error.h"
#include "kvcache/kv_arena.h"

namespace onecard {

KvLayerTable::KvLayerTable(const KvCacheSpec& spec) : spec_(spec) {
    const auto n_layers = static_cast<int64_t>(spec.shape.kinds.size());
    for (int64_t il = 0; il < n_layers; ++il) {
        KvLayerAddr l;
        l.ratio = spec.shape.compress_ratios[static_cast<size_t>(il)];
        l.window = kv_fixed_index(spec, il, KvFixedKind::Window);
        l.window_offset = spec.fixed[l.window].offset;
        l.window_rows = spec.fixed[l.window].n_rows;
        const KvLayerKind kind = spec.shape.kinds[static_cast<size_t>(il)];
        if (kind != KvLayerKind::SWA) {
            const KvFixedRegion& c = spec.fixed[kv_fixed_index(spec, il, KvFixedKind::Compressor)];
            l.compressor_offset = c.offset;
            l.compressor_rows = c.n_rows;
            l.entries = static_cast<int64_t>(kv_stream_index(spec, il, KvStreamKind::CompressedEntry));
        }
        if (kind == KvLayerKind::CSA) {
            const KvFixedRegion& c = spec.fixed[kv_fixed_index(spec, il, KvFixedKind::IndexerCompressor)];
            l.index_compressor_offset = c.offset;
            l.index_compressor_rows = c.n_rows;
            l.index_keys = static_cast<int64_t>(kv_stream_index(spec, il, KvStreamKind::IndexerKey));
        }
        layers_.push_back(l);
    }
    check_integrity();
}

const KvLayerAddr& KvLayerTable::layer(int64_t il) const {
    ONECARD_CHECK(il >= 0 && il < n_layers(), "kv layer table: layer {} outside [0, {})", il, n_layers());
    return layers_[static_cast<size_t>(il)];
}

KvStreamGeometry KvLayerTable::entry_geometry(int64_t il, KvStreamKind kind) const {
    const KvLayerAddr& l = layer(il);
    const bool index_keys = kind == KvStreamKind::IndexerKey;
    const int64_t s = index_keys ? l.index_keys : l.entries;
    ONECARD_CHECK(s >= 0, "kv layer table: layer {} stores no {}", il,
                  index_keys ? "indexer keys" : "compressed entries");
    return kv_stream_geometry(spec_, static_cast<size_t>(s));
}

void KvLayerTable::check_integrity() const {
    ONECARD_CHECK(static_cast<int64_t>(spec_.shape.kinds.size()) == n_layers(),
                  "kv layer table: {} layers for a shape of {}", n_layers(), spec_.shape.kinds.size());
    auto region_fits = [&](int64_t offset, int64_t bytes) { return offset >= 0 && offset + bytes <= spec_.slot_bytes; };
    auto stream_fits = [&](int64_t s, KvStreamKind kind, int64_t il) {
        if (s < 0 || s >= static_cast<int64_t>(spec_.streams.size())) return false;
        const KvPagedStream& p = spec_.streams[static_cast<size_t>(s)];
        return p.layer == il && p.kind == kind && p.offset + p.entries_per_block * p.entry_bytes <= spec_.block_bytes;
    };
    for (int64_t il = 0; il < n_layers(); ++il) {
        const KvLayerAddr& l = layers_[static_cast<size_t>(il)];
        const KvLayerKind kind = spec_.shape.kinds[static_cast<size_t>(il)];
        ONECARD_CHECK(l.window < spec_.fixed.size() && spec_.fixed[l.window].offset == l.window_offset &&
                          region_fits(l.window_offset, spec_.fixed[l.window].bytes()),
                      "kv layer table: layer {}'s window ring lies outside its slot", il);
        ONECARD_CHECK((kind == KvLayerKind::SWA) == (l.ratio == 0) &&
                          (kind == KvLayerKind::SWA ? l.entries < 0 && l.compressor_offset < 0
                                                    : stream_fits(l.entries, KvStreamKind::CompressedEntry, il) &&
                                                          region_fits(l.compressor_offset, 0)),
                      "kv layer table: layer {}'s entry stream and compressor disagree with its ratio {}", il, l.ratio);
        ONECARD_CHECK(kind == KvLayerKind::CSA ? stream_fits(l.index_keys, KvStreamKind::IndexerKey, il) &&
                                                     region_fits(l.index_compressor_offset, 0)
                                               : l.index_keys < 0 && l.index_compressor_offset < 0,
                      "kv layer table: layer {}'s indexer key stream disagrees with its kind", il);
    }
}

}  // namespace onecard
