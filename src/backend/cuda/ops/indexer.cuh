// Lightning indexer of CSA layers on the GPU (dsv4-model.md §4.6; CPU: backend/cpu/indexer.h):
// for every query token, scores all compressed entries its sequence has so far that it may see,
//   score[s] = Σ_h w[h] · ReLU(q[h] · key[s]) · softmax_scale,   s < n_visible = (pos + 1) / ratio,
// reading the keys in their 132-byte FP8 format from the paged pool, and keeps the top k.
// Parity oracle: decode_indexer_key + cpu::indexer_scores + cpu::indexer_topk (ties to the lower
// index; picks returned in ascending index order).
#pragma once

#include "backend/cuda/ops/paged_addr.cuh"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace onecard::cuda {

struct IndexerDims {
    int64_t n_heads = 64;
    int64_t head_dim = 128;  // == IndexerKeyFormat::index_head_dim; keys are head_dim + 4 bytes
    int64_t topk = 512;
    float softmax_scale = 0.0f;  // head_dim^-1/2
};

// One indexer_topk call over n query tokens.
struct IndexerTopkArgs {
    const __nv_bfloat16* q = nullptr;       // [n, n_heads, head_dim] bf16 (RoPE'd; Hadamard/FP4-simulated in REF)
    const float* w = nullptr;               // [n, n_heads] fp32 (weights_proj output already × n_heads^-1/2)
    const int32_t* positions = nullptr;     // [n]
    const int32_t* row_of_token = nullptr;  // [n] row of addr.block_tables
    const uint8_t* pool = nullptr;          // keys at paged_entry_offset(addr, row, s) from here
    PagedStreamAddr addr;                   // the layer's indexer-key stream
    int32_t* out = nullptr;  // [n, topk] int32: the picked entry indices ascending, then −1 (n_visible < topk)
    int64_t n = 0;
    int64_t max_visible = 0;  // an upper bound of n_visible over the batch (host-known from the positions)
    // Device floats for the scores: the kernel processes as many tokens at a time as fit (needs at least
    // max n_visible floats; throws onecard::Error otherwise).
    float* scratch = nullptr;
    int64_t scratch_floats = 0;
};
void indexer_topk(const IndexerTopkArgs& a, const IndexerDims& d, cudaStream_t stream);

}  // namespace onecard::cuda
