// Sparse attention with a per-head sink (dsv4-model.md §4.7), for prefill and decode tokens alike
// (each query token has its own key list, so one kernel serves both), reading keys straight from
// the FP8 KV format of kvcache/kv_format.h (584-byte entries at the Flash shape: 448 E4M3 nope dims
// with one UE8M0 scale per 64, then 64 bf16 rope dims). Each query token attends to its own list of
// entry byte offsets into the KV pool: the model puts the window's rows (in the sequence's slot) and
// the selected (CSA) or all visible (HCA) compressed entries (in its paged blocks) in that list; −1
// marks an unused slot. Offsets, not entry indices, because slots and blocks interleave 584-byte
// entries with 132-byte indexer keys and compressor state. K = V.
//   ℓ_j = scale·(q·kv_j), p_j = exp(ℓ_j) / (exp(sink_h) + Σ exp(ℓ)), o = Σ p_j kv_j   (fp32 softmax)
// Parity oracle: kvcache decode_kv_entry + cpu::attention_with_sink.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace onecard::cuda {

struct SparseAttnDims {
    int64_t n_heads = 64;
    int64_t head_dim = 512;  // the kernel is written for 512 = 448 nope + 64 rope
    int64_t rope_dim = 64;
    int64_t quant_block = 64;
    int64_t entry_bytes = 584;  // KvEntryFormat::entry_bytes()
    float scale = 0.0f;         // softmax scale, head_dim^-1/2
};

// q [n_tok, n_heads, head_dim] bf16 (16-byte aligned), pool: KV bytes, kv_off [n_tok, max_keys] int64
// byte offsets of entries (64-bit: a pool exceeds 2 GiB; each a multiple of 8; −1 anywhere = unused
// slot), sink [n_heads] fp32, out [n_tok, n_heads, head_dim] bf16.
// Tensor-core kernel: one block serves 64 heads of one token for a share of its valid keys, decoding
// each key once into shared memory (bf16: E4M3 times a power-of-two scale is exact) and running
// q·kᵀ and p·v with bf16 mma (fp32 accumulate, p rounded to bf16 for the second product).
// scratch [scratch_floats] fp32 (optional, device): with it, few tokens split their keys over several
// blocks (flash-decoding: partial max/sum/acc per split, then a combine kernel that applies the
// sink), so batch 1 fills the GPU. Without it (nullptr) every token runs in one block: same results
// up to rounding, slower for small batches. Graph-capturable: no allocation, no host synchronisation.
void sparse_attention(const __nv_bfloat16* q, const uint8_t* pool, const int64_t* kv_off, int64_t max_keys,
                      const float* sink, __nv_bfloat16* out, int64_t n_tok, const SparseAttnDims& d,
                      cudaStream_t stream, float* scratch = nullptr, int64_t scratch_floats = 0);

// Floats of scratch that let sparse_attention split keys for any batch size (the split count
// is bounded so that n_tok x splits stays near one wave of blocks): ~17 MB at 64 heads x 512.
int64_t sparse_attention_scratch_floats(int64_t n_heads, int64_t head_dim);

// The previous CUDA-core kernel (one 128-thread block per (head, token), each key decoded per head):
// slow, kept as a second oracle for the parity test and as a drop-in fallback. Same contract.
void sparse_attention_reference(const __nv_bfloat16* q, const uint8_t* pool, const int64_t* kv_off, int64_t max_keys,
                                const float* sink, __nv_bfloat16* out, int64_t n_tok, const SparseAttnDims& d,
                                cudaStream_t stream);

}  // namespace onecard::cuda
