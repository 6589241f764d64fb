// Where each layer's KV lives inside a KvCacheSpec, looked up once: the fixed regions of a slot (window
// ring, compressor rings) and the paged streams of a block (compressed entries, indexer keys). It is
// the one layer-address table: the CPU's PagedSequenceKv reads it by region and stream index, the GPU's
// pool and step kernels by byte offset and stream geometry (core/kv_address.h).
#pragma once

#include "core/kv_address.h"
#include "kvcache/kv_spec.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace onecard {

struct KvLayerAddr {
    int64_t ratio = 0;                     // compress ratio (0: SWA layer)
    size_t window = 0;                     // the Window region (index into spec.fixed)
    int64_t window_offset = 0;             // ... its byte offset inside a slot
    int64_t window_rows = 0;               // ... its rows: position p at row p % window_rows
    int64_t compressor_offset = -1;        // the Compressor region's byte offset inside a slot (CSA/HCA)
    int64_t index_compressor_offset = -1;  // the IndexerCompressor region's (CSA)
    int64_t compressor_rows = 0;           // rows of the Compressor ring (position p at row p % rows)
    int64_t index_compressor_rows = 0;     // ... of the IndexerCompressor ring
    int64_t entries = -1;                  // the CompressedEntry stream (index into spec.streams; -1: SWA)
    int64_t index_keys = -1;               // the IndexerKey stream (-1: not CSA)
};

class KvLayerTable {
public:
    explicit KvLayerTable(const KvCacheSpec& spec);

    const KvCacheSpec& spec() const { return spec_; }
    int64_t n_layers() const { return static_cast<int64_t>(layers_.size()); }
    // Throws onecard::Error outside [0, n_layers()).
    const KvLayerAddr& layer(int64_t il) const;
    // The geometry of layer il's paged stream of this kind; throws if the layer has none.
    KvStreamGeometry entry_geometry(int64_t il, KvStreamKind kind) const;
    // Throws onecard::Error unless every layer's regions lie inside a slot, its streams inside a block,
    // and which of them exist agrees with its kind.
    void check_integrity() const;

private:
    KvCacheSpec spec_;                 // a copy: the table outlives whoever built the spec
    std::vector<KvLayerAddr> layers_;  // [n layers incl. MTP]
};

}  // namespace onecard
