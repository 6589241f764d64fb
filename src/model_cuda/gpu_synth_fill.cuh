// Fill kernels behind gpu_synth.h (implemented in gpu_synth.cu). Host-includable, C++17, and free of
// model headers: the .cu files of this folder compile as C++17, while gpu_weights.h pulls in C++20
// headers, so the tensor walk lives in gpu_synth.cpp and only these launchers are CUDA.
// Every value is a function of (key, element index) only: key = hash(seed, tensor tag).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace onecard::cuda {

inline constexpr int kSynthMaxTopK = 32;  // tid2eid rows are built in a per-thread array of this size

// w [n_out, n_in] E4M3 (n_in % 128 == 0): e4m3(z · sigma / 2^(e0 + bump(block))), z ~ N(0, 1), with
// bump ∈ {0, 1} drawn per 128×128 block from block_key.
void synth_fill_fp8_codes(uint8_t* w, int64_t n_out, int64_t n_in, uint64_t key, uint64_t block_key, float sigma,
                          int e0, cudaStream_t stream);
// ws [n_rb, ld] fp32: 2^(e0 + bump(rb·n_cb + cb)) for cb < n_cb (the same bumps as the codes), 0 in
// the padding columns cb ≥ n_cb.
void synth_fill_fp8_scales(float* ws, int64_t n_rb, int64_t n_cb, int64_t ld, uint64_t block_key, int e0,
                           cudaStream_t stream);
// n_bytes uniformly random bytes (two uniform E2M1 codes each). n_bytes % 16 == 0.
void synth_fill_random_bytes(uint8_t* out, int64_t n_bytes, uint64_t key, cudaStream_t stream);
// n UE8M0 bytes: base_byte, or base_byte + 1 with probability p_high.
void synth_fill_mx_scales(uint8_t* out, int64_t n, uint64_t key, int base_byte, float p_high, cudaStream_t stream);
// out [n] bf16 (passed as raw 16-bit storage) = bf16(mean + std·z); std == 0 gives exactly bf16(mean).
void synth_fill_bf16_normal(void* out, int64_t n, uint64_t key, float mean, float std, cudaStream_t stream);
// out [n] fp32 = mean + std·z.
void synth_fill_f32_normal(float* out, int64_t n, uint64_t key, float mean, float std, cudaStream_t stream);
// HC base [n] = model/synth.cpp's pattern + 0.02·z: `pre` for j < hc (every j for the head), 0 for
// hc ≤ j < 2hc, then the hc×hc comb logits 3 on the diagonal and 0 elsewhere.
void synth_fill_hc_base(float* out, int64_t n, int64_t hc, bool head, float pre, uint64_t key, cudaStream_t stream);
// tid2eid [vocab, k] int32: k distinct experts of [0, n_experts) per row, uniformly. k ≤ kSynthMaxTopK.
void synth_fill_tid2eid(int32_t* out, int64_t vocab, int k, int n_experts, uint64_t key, cudaStream_t stream);

}  // namespace onecard::cuda
