// What a sequence's KV state consists of, layer by layer, and how many bytes it takes. Built from the
// model's dimensions (KvModelShape; the engine fills it from ModelConfig) so every size follows the
// config. See dsv4-model.md §8.
//
// Two kinds of storage per sequence:
//  * fixed state, one "slot" per live sequence: a sliding-window ring of `sliding_window` entries
//    for every layer (SWA, CSA, HCA and MTP), plus fp32 compressor buffers for compressed layers
//    (every ring with `ring_spare` more rows when speculative decoding is on);
//  * paged state that grows with the sequence, in blocks of `block_size` tokens: for every CSA layer
//    one compressed entry and one indexer key per `ratio` tokens, for every HCA layer one entry per
//    `ratio` tokens. One block id covers all paged streams of all layers for the same token range,
//    so a sequence needs a single block table.
//
// Arena layout (the CUDA and CPU backends address storage the same way):
//   block arena: [n_blocks][block_bytes], block = concat over streams of [entries_per_block][entry_bytes]
//   slot arena:  [n_slots][slot_bytes],   slot  = concat over fixed regions
//
// Byte budget at the Flash shape (21 CSA, 20 HCA, 2 SWA + 1 MTP layer; 584 B entries, 132 B keys):
//   per token:    21 * (584 + 132) / 4 + 20 * 584 / 128 = 3850.25 B  (~3.76 KiB; 3.9 GB per 1M tokens)
//   per sequence: 44 windows * 128 * 584 B = 3.29 MB, plus compressor state
//                 21 * (8*2048 + 8*512) * 4 B + 20 * 128*1024 * 4 B = 12.2 MB  -> ~15.5 MB fixed.
// kv_bytes_per_token() / kv_fixed_bytes_per_sequence() compute these from the config.
#pragma once

#include "kvcache/kv_format.h"

#include <cstdint>
#include <string>
#include <vector>

namespace onecard {

enum class KvLayerKind { SWA, CSA, HCA };

// The model dimensions the KV cache depends on (filled from ModelConfig by the engine, which keeps
// this module free of the model library).
struct KvModelShape {
    int64_t head_dim = 512;
    int64_t rope_dim = 64;
    int64_t index_head_dim = 128;
    int64_t sliding_window = 128;
    int64_t n_main_layers = 0;             // layers [n_main_layers, layers.size()) are MTP blocks
    std::vector<KvLayerKind> kinds;        // per layer incl. MTP
    std::vector<int64_t> compress_ratios;  // per layer incl. MTP; 0 for SWA
    // Rows added to every ring of a slot (the window ring and the compressors' rings) beyond what a
    // sequence reads: with s spare rows a step may write up to s + 1 positions it later drops
    // (speculative decoding's rejected drafts) without overwriting a row the positions it keeps still
    // need, so rolling back costs nothing (a ring of R rows holds position p at row p % R; a token
    // at p reads back at most the window's rows, which a write at p' clobbers only if p' - R lies
    // among them). 0 without speculation; the engine sets num_speculative_tokens (kv_ring_spare).
    int64_t ring_spare = 0;
};

// The Flash shape (dsv4-model.md §1.1): [SWA, SWA] + [CSA 4, HCA 128] x 20 + [CSA 4] + [MTP SWA].
KvModelShape flash_kv_model_shape();

enum class KvStreamKind { CompressedEntry, IndexerKey };
enum class KvFixedKind { Window, Compressor, IndexerCompressor };

// One paged stream: entries of one layer that grow with the sequence.
struct KvPagedStream {
    int64_t layer = 0;
    KvStreamKind kind = KvStreamKind::CompressedEntry;
    int64_t ratio = 0;              // tokens per entry
    int64_t entries_per_block = 0;  // block_size / ratio
    int64_t entry_bytes = 0;
    int64_t offset = 0;  // byte offset of this stream inside a block
};

// One fixed per-sequence region inside a slot.
struct KvFixedRegion {
    int64_t layer = 0;
    KvFixedKind kind = KvFixedKind::Window;
    int64_t n_rows = 0;     // window entries, or compressor buffer rows
    int64_t row_bytes = 0;  // entry_bytes (window) or 4 * floats per row (compressor: kv and score halves)
    int64_t offset = 0;     // byte offset inside a slot
    int64_t bytes() const { return n_rows * row_bytes; }
};

struct KvCacheSpec {
    KvModelShape shape;
    KvEntryFormat entry;
    IndexerKeyFormat index_key;
    int64_t block_size = 0;  // tokens per block
    std::vector<KvPagedStream> streams;
    std::vector<KvFixedRegion> fixed;
    int64_t block_bytes = 0;
    int64_t slot_bytes = 0;

    int64_t blocks_for_tokens(int64_t n_tokens) const { return (n_tokens + block_size - 1) / block_size; }
    // Bytes a sequence of n_tokens occupies: its slot plus its (rounded-up) blocks.
    int64_t sequence_bytes(int64_t n_tokens) const { return slot_bytes + blocks_for_tokens(n_tokens) * block_bytes; }
};

// block_size must be a positive multiple of every compress ratio (entries never straddle blocks).
KvCacheSpec make_kv_cache_spec(const KvModelShape& shape, int64_t block_size);

// Marginal paged bytes per token (block_bytes / block_size, exact as a double).
double kv_bytes_per_token(const KvCacheSpec& spec);
// Fixed bytes per live sequence (windows + compressor state) = spec.slot_bytes.
int64_t kv_fixed_bytes_per_sequence(const KvCacheSpec& spec);
// One-paragraph human summary ("3850.2 B/token, 15.5 MB/sequence, ...") for logs and `onecard` output.
std::string describe_kv_cache_spec(const KvCacheSpec& spec);

}  // namespace onecard
