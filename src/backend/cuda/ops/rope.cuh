// Rotary embedding on the GPU (dsv4-model.md §4.4): interleaved pairs on the TRAILING n_rope dims of
// each vector, angle pos·inv_freq[i] formed in fp32, rotation in fp32, bf16 in place. The inverse
// (conjugate) rotation de-rotates the attention output. YaRN lives entirely in inv_freq, which the
// caller precomputes on the host (cpu::rope_inv_freqs) and uploads once per layer kind.
// Parity oracle: cpu::apply_rope_rows (backend/cpu/rope.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace onecard::cuda {

// Forward rotates by +θ·position (queries and keys); Inverse by −θ·position (the attention output's
// de-rotation, dsv4-model.md §4).
enum class RopeDirection { Forward, Inverse };

// A step's rotation: token t turns the trailing n_rope dims of each vector by positions[t]·inv_freq.
struct RopeRotation {
    const float* inv_freq = nullptr;     // [n_rope/2] fp32 on the device
    int64_t n_rope = 0;                  // even, <= the vector's dim
    const int32_t* positions = nullptr;  // [n_tok] on the device
    RopeDirection direction = RopeDirection::Forward;
};

// x [n_tok, n_vec, dim] bf16, rotated in place.
void rope_bf16(__nv_bfloat16* x, int64_t n_tok, int64_t n_vec, int64_t dim, const RopeRotation& r, cudaStream_t stream);

// rope_bf16 on two tensors of the same head size, positions and frequencies in one launch (the
// attention's q [n_tok, n_vec_a, dim] and its shared KV head [n_tok, n_vec_b, dim]); same results.
void rope_bf16_pair(__nv_bfloat16* x_a, int64_t n_vec_a, __nv_bfloat16* x_b, int64_t n_vec_b, int64_t n_tok,
                    int64_t dim, const RopeRotation& r, cudaStream_t stream);

}  // namespace onecard::cuda
