// The DSpark drafter's Markov head on the GPU (docs/dspark.md §4; the CPU oracle is
// model/dspark_heads.h markov_step): a previous-token bias added to one slot's logits per sequence.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace onecard::cuda {

// For each r < n_rows: logits[row0 + r·row_stride, v] += Σ_k w2[v, k] · w1[prev[r], k] for every v < vocab
// (fp32 sums over bf16 weights). logits [*, vocab] fp32; prev [n_rows] device token ids (each in
// [0, vocab)); w1, w2 [vocab, rank] bf16, rank a multiple of 8. Each w2 row is read once for all rows.
void markov_bias_add(float* logits, int64_t row0, int64_t row_stride, int64_t n_rows, const int32_t* prev,
                     const __nv_bfloat16* w1, const __nv_bfloat16* w2, int64_t rank, int64_t vocab,
                     cudaStream_t stream);

// The DSpark confidence head (docs/dspark.md §5; the CPU oracle is model/dspark_heads.h
// confidence_logit): for each r < n_rows, out[r] = w · [h_row ; w1[prev[r]]] with h_row = h[row0 +
// r·row_stride] (h [*, dim] bf16: a slot's pre-norm hidden), w [dim + rank] bf16, w1 [vocab, rank] bf16,
// fp32 sums. out [n_rows] fp32 on the device.
void dspark_confidence(const __nv_bfloat16* h, int64_t row0, int64_t row_stride, int64_t n_rows, const int32_t* prev,
                       const __nv_bfloat16* w, const __nv_bfloat16* w1, int64_t dim, int64_t rank, float* out,
                       cudaStream_t stream);

}  // namespace onecard::cuda
