#include "model_cuda/gpu_step.h"

#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "model_cuda/gpu_step_kernels.cuh"

#include <algorithm>
#include <cstring>
#include <vector>

namespace onecard {

// int32 arrays in one pinned block: tokens, positions, row_of_token, seq_first, seq_last, out_rows
// ([cap_tokens] each), then the block tables' host mirror [cap_rows, cap_blocks] (equal to the device
// rows at all times: an entry is written here and uploaded together); int64: slot_off [cap_tokens].
struct GpuStepMeta::Staging {
    int32_t* i32 = nullptr;
    int64_t* i64 = nullptr;
};

void GpuStepMeta::carve(int64_t max_num_batched_tokens, int64_t table_rows, int64_t max_blocks_per_seq,
                        cuda::DeviceArena& arena, int32_t** d_i32, int64_t** d_i64) {
    *d_i32 = arena.alloc_n<int32_t>(static_cast<size_t>(6 * max_num_batched_tokens + table_rows * max_blocks_per_seq),
                                    "step metadata (int32)");
    *d_i64 = arena.alloc_n<int64_t>(static_cast<size_t>(max_num_batched_tokens), "step metadata (int64)");
}

GpuStepMeta::GpuStepMeta(int64_t max_num_batched_tokens, int64_t table_rows, int64_t max_blocks_per_seq,
                         const GpuKvPool& pool, int32_t* d_i32, int64_t* d_i64)
    : pool_(pool), cap_tokens_(max_num_batched_tokens), cap_rows_(table_rows), cap_blocks_(max_blocks_per_seq) {
    ONECARD_CHECK(pool.size().n_slots <= cap_rows_,
                  "gpu step: the KV pool has {} slots but the block tables have {} rows (one per slot; raise "
                  "max_num_seqs)",
                  pool.size().n_slots, cap_rows_);
    const size_t n32 = static_cast<size_t>(6 * cap_tokens_ + cap_rows_ * cap_blocks_);
    const size_t n64 = static_cast<size_t>(cap_tokens_);
    host_ = new Staging;
    CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&host_->i32), n32 * 4, cudaHostAllocDefault));
    CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&host_->i64), n64 * 8, cudaHostAllocDefault));
    d_i32_ = d_i32;
    d_i64_ = d_i64;
    tokens = d_i32_;
    positions = d_i32_ + cap_tokens_;
    row_of_token = d_i32_ + 2 * cap_tokens_;
    seq_first = d_i32_ + 3 * cap_tokens_;
    seq_last = d_i32_ + 4 * cap_tokens_;
    out_rows = d_i32_ + 5 * cap_tokens_;
    block_tables = d_i32_ + 6 * cap_tokens_;
    slot_off = d_i64_;
    // The table stride is the capacity, not a step's longest table: kernels captured in a CUDA graph keep
    // the stride they were captured with.
    max_blocks = cap_blocks_;
    // Rows start as block 0 on both sides, so the mirror equals the device from the start.
    std::memset(host_->i32 + 6 * cap_tokens_, 0, static_cast<size_t>(cap_rows_ * cap_blocks_) * 4);
    CUDA_CHECK(cudaMemset(const_cast<int32_t*>(block_tables), 0, static_cast<size_t>(cap_rows_ * cap_blocks_) * 4));
    CUDA_CHECK(cudaDeviceSynchronize());  // before any stream reads a row
}

GpuStepMeta::~GpuStepMeta() {
    if (host_) {
        cudaFreeHost(host_->i32);
        cudaFreeHost(host_->i64);
        delete host_;
    }
}

void GpuStepMeta::build(std::span<const GpuStepSeq> seqs, LogitRows rows, cudaStream_t s) {
    const GpuKvPool& pool = pool_;
    int64_t total = 0;
    for (const auto& q : seqs) total += static_cast<int64_t>(q.tokens.size());
    ONECARD_CHECK(total >= 1 && total <= cap_tokens_, "gpu step: {} tokens (capacity {})", total, cap_tokens_);
    ONECARD_CHECK(static_cast<int64_t>(seqs.size()) <= cap_rows_, "gpu step: {} sequences (capacity {})", seqs.size(),
                  cap_rows_);
    n = total;
    n_seqs = static_cast<int64_t>(seqs.size());
    max_pos = 0;
    int32_t* h = host_->i32;
    int32_t *h_tok = h, *h_pos = h + cap_tokens_, *h_row = h + 2 * cap_tokens_, *h_first = h + 3 * cap_tokens_,
            *h_last = h + 4 * cap_tokens_, *h_out = h + 5 * cap_tokens_, *h_bt = h + 6 * cap_tokens_;
    int64_t i = 0, n_o = 0;
    const KvCacheSpec& spec = pool.spec();
    std::vector<int32_t> slots_seen;
    slots_seen.reserve(seqs.size());
    for (int64_t si = 0; si < n_seqs; ++si) {
        const GpuStepSeq& q = seqs[static_cast<size_t>(si)];
        const auto len = static_cast<int64_t>(q.tokens.size());
        const auto n_table = static_cast<int64_t>(q.block_table.size());
        ONECARD_CHECK(len >= 1, "gpu step: sequence {} has no tokens", si);
        ONECARD_CHECK(q.slot >= 0 && q.slot < pool.size().n_slots, "gpu step: slot {} outside the pool ({} slots)",
                      q.slot, pool.size().n_slots);
        ONECARD_CHECK(std::find(slots_seen.begin(), slots_seen.end(), q.slot) == slots_seen.end(),
                      "gpu step: slot {} holds two sequences of one step", q.slot);
        slots_seen.push_back(q.slot);
        ONECARD_CHECK(n_table >= spec.blocks_for_tokens(q.start_pos + len),
                      "gpu step: sequence {} has {} blocks for {} tokens", si, n_table, q.start_pos + len);
        ONECARD_CHECK(n_table <= cap_blocks_, "gpu step: a block table of {} blocks (capacity {})", n_table,
                      cap_blocks_);
        // Send the row's changed entries [lo, hi) only; a table shorter than the row leaves the rest
        // (earlier ids of this slot, all inside the pool) unread.
        int32_t* mirror = h_bt + static_cast<int64_t>(q.slot) * cap_blocks_;
        int64_t lo = 0, hi = n_table;
        while (lo < n_table && mirror[lo] == q.block_table[static_cast<size_t>(lo)]) ++lo;
        while (hi > lo && mirror[hi - 1] == q.block_table[static_cast<size_t>(hi - 1)]) --hi;
        for (int64_t b = lo; b < hi; ++b) {
            const int32_t id = q.block_table[static_cast<size_t>(b)];
            ONECARD_CHECK(id >= 0 && id < pool.size().n_blocks, "gpu step: block id {} outside the pool ({} blocks)",
                          id, pool.size().n_blocks);
            mirror[b] = id;
        }
        if (hi > lo) {
            CUDA_CHECK(cudaMemcpyAsync(const_cast<int32_t*>(block_tables) + q.slot * cap_blocks_ + lo, mirror + lo,
                                       static_cast<size_t>(hi - lo) * 4, cudaMemcpyHostToDevice, s));
            table_entries_sent_ += hi - lo;
        }
        ONECARD_CHECK(q.logits_rows >= 1 && q.logits_rows <= len, "gpu step: {} logits rows of a {}-token sequence",
                      q.logits_rows, len);
        const int64_t first = i;
        for (int64_t t = 0; t < len; ++t, ++i) {
            h_tok[i] = q.tokens[static_cast<size_t>(t)];
            h_pos[i] = static_cast<int32_t>(q.start_pos + t);
            h_row[i] = q.slot;
            h_first[i] = static_cast<int32_t>(first);
            h_last[i] = static_cast<int32_t>(first + len - 1);
            host_->i64[i] = pool.slot_offset(q.slot);
            if (rows == LogitRows::All || (q.want_logits && t >= len - q.logits_rows))
                h_out[n_o++] = static_cast<int32_t>(i);
        }
        max_pos = std::max(max_pos, q.start_pos + len - 1);
    }
    n_out = n_o;
    auto up = [&](const int32_t* src, const int32_t* dst, int64_t count) {
        if (count > 0)
            CUDA_CHECK(cudaMemcpyAsync(const_cast<int32_t*>(dst), src, static_cast<size_t>(count) * 4,
                                       cudaMemcpyHostToDevice, s));
    };
    up(h_tok, tokens, n);
    up(h_pos, positions, n);
    up(h_row, row_of_token, n);
    up(h_first, seq_first, n);
    up(h_last, seq_last, n);
    up(h_out, out_rows, n_out);
    CUDA_CHECK(cudaMemcpyAsync(d_i64_, host_->i64, static_cast<size_t>(n) * 8, cudaMemcpyHostToDevice, s));
}

void GpuStepMeta::check_integrity() const {
    ONECARD_CHECK(n <= cap_tokens_ && n_seqs <= cap_rows_ && n_out <= n && max_blocks == cap_blocks_,
                  "gpu step: the last step's metadata ({} tokens, {} sequences, {} rows) exceeds the capacity", n,
                  n_seqs, n_out);
    const int32_t* bt = host_->i32 + 6 * cap_tokens_;
    const int64_t n_blocks = pool_.size().n_blocks;
    for (int64_t j = 0; j < cap_rows_ * cap_blocks_; ++j)
        ONECARD_CHECK(bt[j] >= 0 && bt[j] < n_blocks, "gpu step: block-table row {} holds block id {} outside [0, {})",
                      j / cap_blocks_, bt[j], n_blocks);
}

namespace {

StepAddr step_addr(const GpuStepMeta& m, const GpuKvPool& pool, int64_t layer, int64_t window) {
    const KvLayerAddr& l = pool.layer(layer);
    const KvCacheSpec& spec = pool.spec();
    StepAddr a;
    a.n = m.n;
    a.positions = m.positions;
    a.row_of_token = m.row_of_token;
    a.slot_off = m.slot_off;
    a.block_tables = m.block_tables;
    a.max_blocks = m.max_blocks;
    a.step_off = pool.step_entries_offset();
    a.window_region = l.window_offset;
    a.window = window;
    a.window_rows = l.window_rows;
    a.entry_bytes = spec.entry.entry_bytes();
    a.ratio = l.ratio;
    if (l.entries >= 0) a.entries = pool.layers().entry_geometry(layer, KvStreamKind::CompressedEntry);
    if (l.index_keys >= 0) a.keys = pool.layers().entry_geometry(layer, KvStreamKind::IndexerKey);
    return a;
}

}  // namespace

void build_write_offsets(const GpuStepMeta& m, const GpuKvPool& pool, int64_t layer, int64_t window, int64_t* step_dst,
                         int64_t* ring_dst, int64_t* entry_dst, int64_t* key_dst, cudaStream_t s) {
    const KvLayerAddr& l = pool.layer(layer);
    launch_write_offsets(step_addr(m, pool, layer, window), m.seq_last, step_dst, ring_dst,
                         l.entries >= 0 ? entry_dst : nullptr, l.index_keys >= 0 ? key_dst : nullptr, s);
}

void build_attention_offsets(const GpuStepMeta& m, const GpuKvPool& pool, int64_t layer, int64_t window,
                             const int32_t* topk, int64_t k, int64_t max_keys, int64_t* kv_off, cudaStream_t s) {
    ONECARD_CHECK(max_keys >= window, "attention offsets: {} keys cannot hold the window of {}", max_keys, window);
    ONECARD_CHECK(pool.layer(layer).window_rows >= window, "attention offsets: layer {}'s ring of {} rows < window {}",
                  layer, pool.layer(layer).window_rows, window);
    launch_attention_offsets(step_addr(m, pool, layer, window), m.seq_first, topk, k, max_keys, kv_off, s);
}

void build_block_attention_offsets(const GpuStepMeta& m, const GpuKvPool& pool, int64_t layer, int64_t window,
                                   int64_t max_keys, int64_t* kv_off, cudaStream_t s) {
    const KvLayerAddr& l = pool.layer(layer);
    ONECARD_CHECK(l.ratio == 0, "block attention offsets: layer {} is compressed (ratio {})", layer, l.ratio);
    ONECARD_CHECK(l.window_rows >= window, "block attention offsets: layer {}'s ring of {} rows < window {}", layer,
                  l.window_rows, window);
    launch_block_attention_offsets(step_addr(m, pool, layer, window), m.seq_first, m.seq_last, max_keys, kv_off, s);
}

void gather_rows_f32(const float* src, const int32_t* rows, float* dst, int64_t n_rows, int64_t row_elems,
                     cudaStream_t s) {
    ONECARD_CHECK(row_elems % 4 == 0, "gather_rows_f32: {} elements per row is not a multiple of 4", row_elems);
    launch_gather_rows(src, rows, dst, n_rows, row_elems / 4, s);
}

}  // namespace onecard
