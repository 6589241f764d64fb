// Per-step metadata of the GPU forward pass: what the scheduler decided for this step (which
// sequences, their slots, block tables and tokens), packed on the host into pinned memory and
// uploaded with one copy per array, plus the kernels that turn it into per-layer byte offsets
// (KV writes and attention key lists). Keeping all of it in device arrays of fixed capacity is
// what lets a decode step be captured once as a CUDA graph and replayed with new metadata.
// Block tables stay on the device, one row per KV slot: a step uploads only the entries of a row
// that changed since the row was last sent (a new block every block_size tokens in decode), and
// validates only those.
#pragma once

#include "model_cuda/gpu_kv_pool.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <span>

namespace onecard {

// One sequence of a step: `tokens` at positions start_pos, start_pos + 1, ...
struct GpuStepSeq {
    int32_t slot = -1;                     // its KV slot, which is also its block-table row
    std::span<const int32_t> block_table;  // covers [0, start_pos + tokens.size())
    int64_t start_pos = 0;
    std::span<const int32_t> tokens;
    bool want_logits = false;  // return the logits of its last token
    int64_t logits_rows = 1;   // with want_logits: of its last this-many tokens (a verify step's k + 1)
};

// Which logits rows a step returns: each sequence's last token where it wants logits, or every token's
// (tests compare whole prompts).
enum class LogitRows { Last, All };

class GpuStepMeta {
public:
    // Over the device arrays carve() took from the arena (GpuModel carves its whole workspace in one pass).
    // table_rows: block-table rows, one per KV slot of `pool` (throws if the pool has more slots).
    GpuStepMeta(int64_t max_num_batched_tokens, int64_t table_rows, int64_t max_blocks_per_seq, const GpuKvPool& pool,
                int32_t* d_i32, int64_t* d_i64);
    // The device arrays the constructor takes from `arena` (what GpuModel::workspace_bytes_for counts):
    // int32 [6·max_num_batched_tokens + table_rows·max_blocks_per_seq], int64 [max_num_batched_tokens],
    // in that order.
    static void carve(int64_t max_num_batched_tokens, int64_t table_rows, int64_t max_blocks_per_seq,
                      cuda::DeviceArena& arena, int32_t** d_i32, int64_t** d_i64);
    ~GpuStepMeta();
    GpuStepMeta(const GpuStepMeta&) = delete;
    GpuStepMeta& operator=(const GpuStepMeta&) = delete;

    // Packs and uploads (async on `s`; the pinned staging buffer is reused, so the previous step must
    // have finished). Throws onecard::Error on a batch over capacity, a slot twice or outside the pool,
    // a block table too short or longer than a row, or a new block id outside the pool.
    void build(std::span<const GpuStepSeq> seqs, LogitRows rows, cudaStream_t s);
    // Throws onecard::Error if the last step's counts exceed the capacity, or a row's host mirror holds
    // a block id outside the pool.
    void check_integrity() const;
    // Block-table entries uploaded since construction (what the step-to-step delta costs).
    int64_t table_entries_sent() const { return table_entries_sent_; }

    // Device arrays [n] unless noted.
    const int32_t* tokens = nullptr;
    const int32_t* positions = nullptr;
    const int32_t* row_of_token = nullptr;  // row of block_tables: the token's KV slot
    const int32_t* seq_first = nullptr;     // step index of the first token of the token's sequence
    const int32_t* seq_last = nullptr;      // ... of its last token
    const int64_t* slot_off = nullptr;      // byte offset of the sequence's slot from the pool base
    const int32_t* block_tables = nullptr;  // [table_rows, max_blocks], persistent across steps
    const int32_t* out_rows = nullptr;      // [n_out] step indices whose logits are returned
    int64_t n = 0, n_seqs = 0, max_blocks = 0, n_out = 0;
    int64_t max_pos = 0;  // largest position in the step (sizes key lists)

private:
    struct Staging;
    const GpuKvPool& pool_;
    Staging* host_ = nullptr;
    int64_t cap_tokens_, cap_rows_, cap_blocks_;
    int32_t* d_i32_ = nullptr;  // device mirror of the int32 arrays
    int64_t* d_i64_ = nullptr;
    int64_t table_entries_sent_ = 0;
};

// Byte offsets a layer writes this step (device arrays [n]; −1 = no write):
//  step_dst:  every token's KV row into the step-entries region (row i at step_entries + i·eb);
//  ring_dst:  tokens among the last `window` of their sequence, into the slot's window ring;
//  entry_dst: tokens that close a compressor window, into the entry stream (ratio > 0);
//  key_dst:   the same for the indexer-key stream (CSA; may be nullptr otherwise).
void build_write_offsets(const GpuStepMeta& m, const GpuKvPool& pool, int64_t layer, int64_t window, int64_t* step_dst,
                         int64_t* ring_dst, int64_t* entry_dst, int64_t* key_dst, cudaStream_t s);

// Attention key list per token, kv_off [n, max_keys] byte offsets (−1 = unused): the window
// positions max(0, p−W+1)..p (this step's rows from the step-entries region, older ones from the
// ring), then CSA: the indexer's picks topk [n, k]; HCA: every visible entry e < (p+1)/ratio.
// max_keys = window + (CSA: k, HCA: max visible entries of the step, SWA: 0).
void build_attention_offsets(const GpuStepMeta& m, const GpuKvPool& pool, int64_t layer, int64_t window,
                             const int32_t* topk, int64_t k, int64_t max_keys, int64_t* kv_off, cudaStream_t s);

// The DSpark block's key lists (docs/dspark.md §3), kv_off [n, max_keys]: for every token of a
// sequence whose step tokens start at position p0, the ring's positions max(0, p0−W)..p0−1 (slots
// j < window, −1 before position 0), then all of the sequence's step rows (its block), −1 after.
// The layer must be a sliding-window layer; max_keys >= window + the longest block.
void build_block_attention_offsets(const GpuStepMeta& m, const GpuKvPool& pool, int64_t layer, int64_t window,
                                   int64_t max_keys, int64_t* kv_off, cudaStream_t s);

// dst [n_rows, row_elems] fp32 = src rows rows[r] (for picking the tokens whose logits are wanted).
void gather_rows_f32(const float* src, const int32_t* rows, float* dst, int64_t n_rows, int64_t row_elems,
                     cudaStream_t s);

}  // namespace onecard
