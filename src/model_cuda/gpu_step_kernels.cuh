// Kernels behind gpu_step.h, with a plain interface (.cu files are C++17 and cannot see the C++20
// step structures): StepAddr carries one layer's view of the step metadata and pool layout.
#pragma once

#include "core/kv_address.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace onecard {

struct StepAddr {
    int64_t n = 0;                          // tokens in the step
    const int32_t* positions = nullptr;     // [n]
    const int32_t* row_of_token = nullptr;  // [n] block-table row (the sequence's KV slot)
    const int64_t* slot_off = nullptr;      // [n] slot byte offset from the pool base
    const int32_t* block_tables = nullptr;  // [n_slots, max_blocks], a row per KV slot
    int64_t max_blocks = 0;
    int64_t step_off = 0;       // step-entries region, bytes from the pool base
    int64_t window_region = 0;  // window ring inside a slot
    int64_t window = 0;         // positions a token attends to back from itself, itself included
    int64_t window_rows = 0;    // ring rows (>= window): position p at row p % window_rows
    int64_t entry_bytes = 0;    // a KV entry (window rows and compressed entries share the format)
    int64_t ratio = 0;          // 0: SWA layer
    KvStreamGeometry entries;   // the layer's compressed-entry stream (ratio > 0)
    KvStreamGeometry keys;      // its indexer-key stream (CSA; entry_bytes 0 otherwise)
};

void launch_write_offsets(const StepAddr& a, const int32_t* seq_last, int64_t* step_dst, int64_t* ring_dst,
                          int64_t* entry_dst, int64_t* key_dst, cudaStream_t s);
void launch_attention_offsets(const StepAddr& a, const int32_t* seq_first, const int32_t* topk, int64_t k,
                              int64_t max_keys, int64_t* kv_off, cudaStream_t s);
void launch_block_attention_offsets(const StepAddr& a, const int32_t* seq_first, const int32_t* seq_last,
                                    int64_t max_keys, int64_t* kv_off, cudaStream_t s);
void launch_gather_rows(const void* src, const int32_t* rows, void* dst, int64_t n_rows, int64_t row_vecs16,
                        cudaStream_t s);

}  // namespace onecard
