// Byte format of one stored KV entry and one indexer key: the format the CUDA kernels and the CPU
// backend both read. Mirrors vLLM's `fp8_ds_mla` for DeepSeek-V4 (dsv4-model.md §8.1), generalised to
// the config's head_dim / qk_rope_head_dim / index_head_dim so tiny synthetic models use it too.
//
// KV entry (window tokens and compressed entries alike), array-of-structs per entry:
//
//   | nope: n_nope x FP8 E4M3 | rope: n_rope x BF16 | scales: n_blocks x UE8M0 | pad to 8 B |
//   Flash shape:   448 B            128 B                 7 B                       1 B  = 584 B
//
// The nope dims are quantised in blocks of `quant_block` (64) with one power-of-two scale each;
// the rope dims stay bf16 because RoPE'd dims are never FP8-quantised by the model (§10.2).
// NOTE: vLLM's kernels group 64 entries per block with the scale bytes after the token data; we keep
// scales next to their entry because no kernel we run needs FlashMLA's layout, and an entry that is
// self-contained can be copied, decoded and checked on its own.
//
// Indexer key (CSA layers): | n_index x FP8 E4M3 | fp32 scale (a power of two) |  = 132 B at Flash.
#pragma once

#include <cstdint>

namespace onecard {

struct KvEntryFormat {
    int64_t head_dim = 512;    // stored vector width (K = V)
    int64_t rope_dim = 64;     // trailing dims kept in bf16
    int64_t quant_block = 64;  // FP8 block size along the nope dims

    int64_t nope_dim() const { return head_dim - rope_dim; }
    int64_t n_scale_blocks() const { return nope_dim() / quant_block; }
    int64_t rope_offset() const { return nope_dim(); }                  // bytes
    int64_t scale_offset() const { return nope_dim() + 2 * rope_dim; }  // bytes
    // Padded to 8 bytes so consecutive entries keep 8-byte alignment (584 at Flash shape).
    int64_t entry_bytes() const { return (scale_offset() + n_scale_blocks() + 7) / 8 * 8; }
};

struct IndexerKeyFormat {
    int64_t index_head_dim = 128;  // one block: a single scale for the whole key
    int64_t scale_offset() const { return index_head_dim; }
    int64_t entry_bytes() const { return index_head_dim + 4; }  // 132 at Flash shape
};

// Validating constructors: throw onecard::Error naming the offending dimension.
KvEntryFormat make_kv_entry_format(int64_t head_dim, int64_t rope_dim, int64_t quant_block = 64);
IndexerKeyFormat make_indexer_key_format(int64_t index_head_dim);

// Exponent k of the UE8M0 block scale 2^k used by every FP8 quantisation in DeepSeek-V4:
// k = ceil(log2(max(amax, 1e-4) * (1 / fmt_max))), the product rounded to fp32 as the reference
// does and the ceil(log2) evaluated exactly (no libm rounding near powers of two). Same scales as
// cpu::ue8m0_block_scale, which the model's QAT simulation uses.
int ue8m0_exponent_for_amax(float amax, float fmt_max);

// x: [head_dim] fp32 (normally already bf16-valued) -> out: [entry_bytes]. Pad bytes are zeroed.
void encode_kv_entry(const KvEntryFormat& fmt, const float* x, uint8_t* out);
// in: [entry_bytes] -> x: [head_dim] fp32 (the dequantised values the attention kernels use).
void decode_kv_entry(const KvEntryFormat& fmt, const uint8_t* in, float* x);

// x: [index_head_dim] fp32 -> out: [index_head_dim + 4].
void encode_indexer_key(const IndexerKeyFormat& fmt, const float* x, uint8_t* out);
void decode_indexer_key(const IndexerKeyFormat& fmt, const uint8_t* in, float* x);

}  // namespace onecard
