// MXFP4 routed-expert GEMV for decode (Hopper has no FP4 tensor cores, so the E2M1 codes are
// dequantised in the kernel): for each (token, expert) pair p,
//   y[p, r] = Σ_k (xq[act_row[p], k]·xs[act_row[p], k/128]) · e2m1(W_e[r, k])·2^(ws_e[r, k/32]−127),
// e = expert_ids[p]; fp32 accumulation, bf16 out. The activations are the FP8 1×128 quantised input
// REF feeds its fp4_gemm (dsv4-model.md §7.4, §10.1).
// Parity oracle: cpu::matmul_nt over cpu::dequant_mxfp4(W_e) and cpu::fp8_quant_dequant(x).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace onecard::cuda {

// xq [n_act_rows, k] E4M3, xs [n_act_rows, k/128] fp32 (ActScaleLayout::RowMajor);
// w [n_experts, n, k/2] packed E2M1 (element 2j = low nibble), ws [n_experts, n, k/32] raw UE8M0
// bytes as stored in the checkpoint; expert_ids, act_rows [n_pairs] on the device; y [n_pairs, n].
// Offsets are 64-bit (all 256 experts of a layer span ~3.4 GB). k must be a multiple of 1024.
void mxfp4_expert_gemv(const uint8_t* xq, const float* xs, const uint8_t* w, const uint8_t* ws,
                       const int32_t* expert_ids, const int32_t* act_rows, __nv_bfloat16* y, int64_t n_pairs, int64_t n,
                       int64_t k, cudaStream_t stream);

}  // namespace onecard::cuda
