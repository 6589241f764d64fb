#include "kvcache/kv_spec.h"

#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>

namespace onecard {

KvModelShape flash_kv_model_shape() {
    KvModelShape s;
    s.n_main_layers = 43;
    auto add = [&](KvLayerKind k, int64_t r) {
        s.kinds.push_back(k);
        s.compress_ratios.push_back(r);
    };
    add(KvLayerKind::SWA, 0);
    add(KvLayerKind::SWA, 0);
    for (int i = 0; i < 20; ++i) {
        add(KvLayerKind::CSA, 4);
        add(KvLayerKind::HCA, 128);
    }
    add(KvLayerKind::CSA, 4);
    add(KvLayerKind::SWA, 0);  // MTP block
    return s;
}

KvCacheSpec make_kv_cache_spec(const KvModelShape& shape, int64_t block_size) {
    ONECARD_CHECK(shape.kinds.size() == shape.compress_ratios.size() && !shape.kinds.empty(),
                  "kv cache spec: {} layer kinds but {} compress_ratios", shape.kinds.size(),
                  shape.compress_ratios.size());
    ONECARD_CHECK(shape.sliding_window > 0, "kv cache spec: sliding_window must be positive, got {}",
                  shape.sliding_window);
    ONECARD_CHECK(block_size > 0, "kv cache spec: block_size must be positive, got {}", block_size);
    ONECARD_CHECK(shape.ring_spare >= 0 && shape.ring_spare <= 64, "kv cache spec: ring_spare {} outside [0, 64]",
                  shape.ring_spare);
    KvCacheSpec spec;
    spec.shape = shape;
    spec.entry = make_kv_entry_format(shape.head_dim, shape.rope_dim);
    // Only CSA layers store indexer keys; a model without them may leave index_head_dim unset.
    const bool has_csa = std::find(shape.kinds.begin(), shape.kinds.end(), KvLayerKind::CSA) != shape.kinds.end();
    spec.index_key = has_csa ? make_indexer_key_format(shape.index_head_dim) : IndexerKeyFormat{shape.index_head_dim};
    spec.block_size = block_size;

    for (size_t il = 0; il < shape.kinds.size(); ++il) {
        const KvLayerKind kind = shape.kinds[il];
        const int64_t m = shape.compress_ratios[il];
        const auto layer = static_cast<int64_t>(il);
        // Every layer keeps the last sliding_window kv entries (window incl. the current token), plus
        // the spare rows that make a dropped position's write harmless (KvModelShape::ring_spare).
        const int64_t spare = shape.ring_spare;
        spec.fixed.push_back({layer, KvFixedKind::Window, shape.sliding_window + spare, spec.entry.entry_bytes(), 0});
        if (kind == KvLayerKind::SWA) {
            ONECARD_CHECK(m == 0, "kv cache spec: layer {} is SWA but compress_ratios[{}] = {}", il, il, m);
            continue;
        }
        ONECARD_CHECK(m > 0 && block_size % m == 0,
                      "kv cache spec: block_size {} is not a multiple of compress_ratios[{}] = {}", block_size, il, m);
        spec.streams.push_back({layer, KvStreamKind::CompressedEntry, m, block_size / m, spec.entry.entry_bytes(), 0});
        const int64_t d = shape.head_dim;
        if (kind == KvLayerKind::CSA) {
            spec.streams.push_back(
                {layer, KvStreamKind::IndexerKey, m, block_size / m, spec.index_key.entry_bytes(), 0});
            // Overlapping compressor: 2m rows (previous window + open window), each row holds the
            // 2d-wide kv projection and the 2d-wide gate scores in fp32 (dsv4-model.md §4.5, §8.1).
            spec.fixed.push_back({layer, KvFixedKind::Compressor, 2 * m + spare, 4 * (2 * d + 2 * d), 0});
            const int64_t di = shape.index_head_dim;
            spec.fixed.push_back({layer, KvFixedKind::IndexerCompressor, 2 * m + spare, 4 * (2 * di + 2 * di), 0});
        } else {
            // Non-overlapping compressor: the open window's m rows of (kv d, score d) fp32.
            spec.fixed.push_back({layer, KvFixedKind::Compressor, m + spare, 4 * (d + d), 0});
        }
    }
    for (auto& s : spec.streams) {
        s.offset = spec.block_bytes;
        spec.block_bytes += s.entries_per_block * s.entry_bytes;
    }
    for (auto& f : spec.fixed) {
        f.offset = spec.slot_bytes;
        spec.slot_bytes += f.bytes();
    }
    // A model without compressed layers has no paged state; keep an 8-byte block so pool arithmetic
    // stays well-defined (a sequence still "owns" its token range) and the GPU pool's regions keep their
    // 8-byte alignment (a 1-byte block refused `bench --layers 1` there).
    if (spec.block_bytes == 0) spec.block_bytes = 8;
    return spec;
}

double kv_bytes_per_token(const KvCacheSpec& spec) {
    return static_cast<double>(spec.block_bytes) / static_cast<double>(spec.block_size);
}

int64_t kv_fixed_bytes_per_sequence(const KvCacheSpec& spec) {
    return spec.slot_bytes;
}

std::string describe_kv_cache_spec(const KvCacheSpec& spec) {
    int64_t n_swa = 0, n_csa = 0, n_hca = 0;
    for (auto k : spec.shape.kinds) {
        n_swa += k == KvLayerKind::SWA;
        n_csa += k == KvLayerKind::CSA;
        n_hca += k == KvLayerKind::HCA;
    }
    return fmt::format(
        "kv cache: {} SWA + {} CSA + {} HCA layers; entry {} B, indexer key {} B; {:.2f} B/token paged "
        "(block {} tokens = {} B); {:.2f} MB fixed per sequence",
        n_swa, n_csa, n_hca, spec.entry.entry_bytes(), spec.index_key.entry_bytes(), kv_bytes_per_token(spec),
        spec.block_size, spec.block_bytes, static_cast<double>(spec.slot_bytes) / 1e6);
}

}  // namespace onecard
