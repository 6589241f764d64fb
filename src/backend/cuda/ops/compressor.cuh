// KV compressor of CSA/HCA layers on the GPU (dsv4-model.md §4.5; CPU: backend/cpu/compressor.h):
// gated per-channel softmax pooling of `ratio` consecutive tokens into one entry; ratio 4 overlaps
// windows (entry w pools the A-halves, channels [0, d), of window w−1's tokens and the B-halves,
// channels [d, 2d), of window w's tokens; window 0's previous slots are empty: weight 0).
//
// Incremental over steps. Each sequence keeps a ring of its most recent rows in its slot, fp32:
//   ring [n_ring, 2·w] with n_ring = 2·ratio (overlap) or ratio, w = c·d the projection width;
//   row of position p = p mod n_ring, holding [kv (w floats) | score (w floats, ape already added)].
// One step passes the projections of every token scheduled for the layer (sequences contiguous, in
// position order). compressor_pool() emits an entry for every token that closes a window (reading
// rows of earlier steps from the ring and rows of this step from the inputs); compressor_store()
// then writes this step's rows into the rings. Run them in that order on one stream.
// Parity oracle: cpu::CompressorState::push + RMSNorm + RoPE (model/layer_attention.cpp finish_entry).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace onecard::cuda {

struct CompressorDims {
    int64_t ratio = 4;       // 4 (overlapping) or any other ratio (plain windows, e.g. 128)
    int64_t head_dim = 512;  // d (entry width); the projections are c·d wide, c = 2 iff ratio == 4
    int64_t rope_dim = 64;   // RoPE on the trailing rope_dim dims of the entry, at position w·ratio
    float eps = 1e-6f;       // RMSNorm epsilon
    int64_t ld_in = 0;       // row stride (floats) of the kv and score inputs; 0 = c·d (dense). One
                             // GEMV over [wkv; wgate] writes rows [kv | score]: ld_in = 2·c·d.
    int64_t ring_rows = 0;   // rows of a sequence's ring, position p at row p % ring_rows; 0 = the
                             // minimum (2·ratio overlapping, else ratio); more: KvModelShape::ring_spare
};

// Per-token metadata of one step (device arrays, [n] each).
struct CompressorTokens {
    const int32_t* positions = nullptr;  // absolute position of token i
    const int32_t* seq_first = nullptr;  // batch index of the first token of i's sequence in this step
    const int64_t* ring_base = nullptr;  // byte offset of i's sequence's ring (this layer) in `state`
};

// kv, score [n, c·d] fp32 (row stride d.ld_in): this step's projections (wkv·x, wgate·x; no ape yet); ape [ratio, c·d]
// fp32; norm [d] bf16; inv_freq [rope_dim/2] fp32 (the compress θ with YaRN);
// entries [n, d] bf16: row i is written iff (positions[i] + 1) % ratio == 0 (pooled, RMSNorm'd,
// RoPE'd at the window start); other rows are left untouched. `state` is the slot pool (bytes).
void compressor_pool(const float* kv, const float* score, const float* ape, const __nv_bfloat16* norm,
                     const float* inv_freq, const uint8_t* state, const CompressorTokens& tok, __nv_bfloat16* entries,
                     int64_t n, const CompressorDims& d, cudaStream_t stream);

// Writes rows [kv | score + ape[pos % ratio]] of this step's tokens into their rings. Only the last
// n_ring tokens of each sequence matter; writing all of them in order gives the same ring.
void compressor_store(const float* kv, const float* score, const float* ape, uint8_t* state,
                      const CompressorTokens& tok, int64_t n, const CompressorDims& d, cudaStream_t stream);

// Bytes of one sequence's ring for these dims (the slot region KvFixedKind::Compressor must hold it).
inline int64_t compressor_ring_bytes(const CompressorDims& d) {
    const int64_t c = d.ratio == 4 ? 2 : 1;
    const int64_t n_ring = d.ring_rows > 0 ? d.ring_rows : d.ratio == 4 ? 2 * d.ratio : d.ratio;
    return n_ring * 2 * c * d.head_dim * 4;
}

}  // namespace onecard::cuda
