#include "model_cuda/gpu_step.h"

#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "model_cuda/gpu_step_kernels.cuh"

#include <algorithm>
#include <cstring>
#include <vector>

namespace onecard {

// int32 arrays in one pinned block: tokens, positions, seq_of_token, seq_first, seq_last, out_rows
// ([cap_tokens] each), then block tables [cap_seqs, cap_blocks]; int64: slot_off [cap_tokens].
struct GpuStepMeta::Staging {
    int32_t* i32 = nullptr;
    int64_t* i64 = nullptr;
};

void GpuStepMeta::carve(int64_t max_num_batched_tokens, int64_t max_num_seqs, int64_t max_blocks_per_seq,
                        cuda::DeviceArena& arena, int32_t** d_i32, int64_t** d_i64) {
    *d_i32 = arena.alloc_n<int32_t>(static_cast<size_t>(6 * max_num_batched_tokens + max_num_seqs * max_blocks_per_seq),
                                    "step metadata (int32)");
    *d_i64 = arena.alloc_n<int64_t>(static_cast<size_t>(max_num_batched_tokens), "step metadata (int64)");
}

GpuStepMeta::GpuStepMeta(int64_t max_num_batched_tokens, int64_t max_num_seqs, int64_t max_blocks_per_seq,
                         int32_t* d_i32, int64_t* d_i64)
    : cap_tokens_(max_num_batched_tokens), cap_seqs_(max_num_seqs), cap_blocks_(max_blocks_per_seq) {
    const size_t n32 = static_cast<size_t>(6 * cap_tokens_ + cap_seqs_ * cap_blocks_);
    const size_t n64 = static_cast<size_t>(cap_tokens_);
    host_ = new Staging;
    CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&host_->i32), n32 * 4, cudaHostAllocDefault));
    CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&host_->i64), n64 * 8, cudaHostAllocDefault));
    d_i32_ = d_i32;
    d_i64_ = d_i64;
    tokens = d_i32_;
    positions = d_i32_ + cap_tokens_;
    seq_of_token = d_i32_ + 2 * cap_tokens_;
    seq_first = d_i32_ + 3 * cap_tokens_;
    seq_last = d_i32_ + 4 * cap_tokens_;
    out_rows = d_i32_ + 5 * cap_tokens_;
    block_tables = d_i32_ + 6 * cap_tokens_;
    slot_off = d_i64_;
}

GpuStepMeta::~GpuStepMeta() {
    if (host_) {
        cudaFreeHost(host_->i32);
        cudaFreeHost(host_->i64);
        delete host_;
    }
}

void GpuStepMeta::build(std::span<const GpuStepSeq> seqs, const GpuKvPool& pool, bool all_rows, cudaStream_t s) {
    int64_t total = 0, mb = 1;
    for (const auto& q : seqs) {
        total += static_cast<int64_t>(q.tokens.size());
        mb = std::max<int64_t>(mb, static_cast<int64_t>(q.block_table.size()));
    }
    ONECARD_CHECK(total >= 1 && total <= cap_tokens_, "gpu step: {} tokens (capacity {})", total, cap_tokens_);
    ONECARD_CHECK(static_cast<int64_t>(seqs.size()) <= cap_seqs_, "gpu step: {} sequences (capacity {})", seqs.size(),
                  cap_seqs_);
    ONECARD_CHECK(mb <= cap_blocks_, "gpu step: a block table of {} blocks (capacity {})", mb, cap_blocks_);
    n = total;
    n_seqs = static_cast<int64_t>(seqs.size());
    // The table stride is the capacity, not this step's longest table: kernels captured in a CUDA
    // graph keep the stride they were captured with.
    mb = cap_blocks_;
    max_blocks = mb;
    max_pos = 0;
    int32_t* h = host_->i32;
    int32_t *h_tok = h, *h_pos = h + cap_tokens_, *h_seq = h + 2 * cap_tokens_, *h_first = h + 3 * cap_tokens_,
            *h_last = h + 4 * cap_tokens_, *h_out = h + 5 * cap_tokens_, *h_bt = h + 6 * cap_tokens_;
    int64_t i = 0, n_o = 0;
    const KvCacheSpec& spec = pool.spec();
    for (int64_t si = 0; si < n_seqs; ++si) {
        const GpuStepSeq& q = seqs[static_cast<size_t>(si)];
        const auto len = static_cast<int64_t>(q.tokens.size());
        ONECARD_CHECK(len >= 1, "gpu step: sequence {} has no tokens", si);
        ONECARD_CHECK(q.slot >= 0 && q.slot < pool.size().n_slots, "gpu step: slot {} outside the pool ({} slots)",
                      q.slot, pool.size().n_slots);
        ONECARD_CHECK(static_cast<int64_t>(q.block_table.size()) >= spec.blocks_for_tokens(q.start_pos + len),
                      "gpu step: sequence {} has {} blocks for {} tokens", si, q.block_table.size(), q.start_pos + len);
        for (size_t b = 0; b < q.block_table.size(); ++b) {
            ONECARD_CHECK(q.block_table[b] >= 0 && q.block_table[b] < pool.size().n_blocks,
                          "gpu step: block id {} outside the pool ({} blocks)", q.block_table[b], pool.size().n_blocks);
            h_bt[si * mb + static_cast<int64_t>(b)] = q.block_table[b];
        }
        for (int64_t b = static_cast<int64_t>(q.block_table.size()); b < mb; ++b) h_bt[si * mb + b] = 0;
        const int64_t first = i;
        for (int64_t t = 0; t < len; ++t, ++i) {
            h_tok[i] = q.tokens[static_cast<size_t>(t)];
            h_pos[i] = static_cast<int32_t>(q.start_pos + t);
            h_seq[i] = static_cast<int32_t>(si);
            h_first[i] = static_cast<int32_t>(first);
            h_last[i] = static_cast<int32_t>(first + len - 1);
            host_->i64[i] = pool.slot_offset(q.slot);
            if (all_rows || (q.want_logits && t == len - 1)) h_out[n_o++] = static_cast<int32_t>(i);
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
    up(h_seq, seq_of_token, n);
    up(h_first, seq_first, n);
    up(h_last, seq_last, n);
    up(h_out, out_rows, n_out);
    up(h_bt, block_tables, n_seqs * mb);
    CUDA_CHECK(cudaMemcpyAsync(d_i64_, host_->i64, static_cast<size_t>(n) * 8, cudaMemcpyHostToDevice, s));
}

namespace {

StepAddr step_addr(const GpuStepMeta& m, const GpuKvPool& pool, int64_t layer, int64_t window) {
    const auto& l = pool.layer(layer);
    const KvCacheSpec& spec = pool.spec();
    StepAddr a;
    a.n = m.n;
    a.positions = m.positions;
    a.seq_of_token = m.seq_of_token;
    a.slot_off = m.slot_off;
    a.block_tables = m.block_tables;
    a.max_blocks = m.max_blocks;
    a.step_off = pool.step_entries_offset();
    a.window_region = l.window_region;
    a.window = window;
    a.entry_bytes = spec.entry.entry_bytes();
    a.ratio = l.ratio;
    a.block_size = spec.block_size;
    a.block_bytes = spec.block_bytes;
    a.entry_stream = l.entry_stream;
    return a;
}

}  // namespace

void build_write_offsets(const GpuStepMeta& m, const GpuKvPool& pool, int64_t layer, int64_t window, int64_t* step_dst,
                         int64_t* ring_dst, int64_t* entry_dst, int64_t* key_dst, cudaStream_t s) {
    const auto& l = pool.layer(layer);
    const KvCacheSpec& spec = pool.spec();
    const StepAddr a = step_addr(m, pool, layer, window);
    launch_write_offsets(a, m.seq_last, spec.index_key.entry_bytes(), l.key_stream, step_dst, ring_dst,
                         l.ratio > 0 ? entry_dst : nullptr, l.key_stream >= 0 ? key_dst : nullptr, s);
}

void build_attention_offsets(const GpuStepMeta& m, const GpuKvPool& pool, int64_t layer, int64_t window,
                             const int32_t* topk, int64_t k, int64_t max_keys, int64_t* kv_off, cudaStream_t s) {
    ONECARD_CHECK(max_keys >= window, "attention offsets: {} keys cannot hold the window of {}", max_keys, window);
    launch_attention_offsets(step_addr(m, pool, layer, window), m.seq_first, topk, k, max_keys, kv_off, s);
}

void gather_rows_bf16(const void* src, const int32_t* rows, void* dst, int64_t n_rows, int64_t row_elems,
                      cudaStream_t s) {
    ONECARD_CHECK(row_elems % 8 == 0, "gather_rows_bf16: {} elements per row is not a multiple of 8", row_elems);
    launch_gather_rows(src, rows, dst, n_rows, row_elems / 8, s);
}

}  // namespace onecard
