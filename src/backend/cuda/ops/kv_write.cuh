// Writes of the stored KV on the GPU, in kvcache's byte format (kvcache/kv_format.h), plus the
// indexer-key QAT simulation that precedes the key write in reference numerics
// (model/layer_attention.cpp: Hadamard, FP4 E2M1 blocks of 32, then the 132-byte FP8 key).
// Parity oracles: kvcache encode_kv_entry / encode_indexer_key (bit for bit on the same fp32 values),
// cpu::hadamard_transform + cpu::fp4_quant_dequant.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace onecard::cuda {

struct KvEntryDims {
    int64_t head_dim = 512;     // K = V width
    int64_t rope_dim = 64;      // trailing dims kept in bf16
    int64_t quant_block = 64;   // FP8 block along the nope dims
    int64_t entry_bytes = 584;  // KvEntryFormat::entry_bytes()
};

// rows [n, head_dim] bf16 (row stride ld_rows, 0 = head_dim) -> the entry format at byte offsets
// dst[n] (device, int64) inside `pool`; dst[i] < 0 skips row i (a token that closes no window).
// Same bytes as encode_kv_entry() of the row's fp32 values, pad bytes zeroed.
void kv_write_entries(const __nv_bfloat16* rows, int64_t ld_rows, const int64_t* dst, uint8_t* pool, int64_t n,
                      const KvEntryDims& d, cudaStream_t stream);

// keys [n, index_head_dim] bf16 -> the 132-byte style key (FP8 E4M3 + fp32 power-of-two scale) at
// byte offsets dst[n] (< 0 skips). Same bytes as encode_indexer_key().
void indexer_key_write(const __nv_bfloat16* keys, const int64_t* dst, uint8_t* pool, int64_t n, int64_t index_head_dim,
                       cudaStream_t stream);

// In place on x [n_vec, dim] bf16 (dim a power of two, <= 1024): y = Hadamard(x) (orthonormal, as
// cpu::hadamard_transform), then FP4 E2M1 quant-dequant in blocks of 32 (cpu::fp4_quant_dequant), in
// fp32; the result (exactly representable in bf16) is stored back.
void hadamard_fp4_sim(__nv_bfloat16* x, int64_t n_vec, int64_t dim, cudaStream_t stream);

// rope_bf16(x, n_tok, vec_per_token, dim, inv_freq, n_rope, positions, RopeDirection::Forward) followed by
// hadamard_fp4_sim(x, n_tok·vec_per_token, dim) in one launch, with the same bits (the indexer's
// queries: RoPE on the trailing dims, then the Hadamard + FP4 simulation).
void rope_hadamard_fp4_sim(__nv_bfloat16* x, int64_t n_tok, int64_t vec_per_token, int64_t dim, const float* inv_freq,
                           int64_t n_rope, const int32_t* positions, cudaStream_t stream);

}  // namespace onecard::cuda
