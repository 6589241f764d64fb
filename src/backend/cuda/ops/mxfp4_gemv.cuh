// MXFP4 routed-expert GEMV for decode on tensor cores (Hopper has no FP4 MMA, so the E2M1 codes are
// turned into E4M3 in registers, exactly, and multiplied with the E4M3 activations by
// mma.m16n8k32): for each (token, expert) pair p,
//   y[p, r] = Σ_k (xq[act_row[p], k]·xs[act_row[p], k/128]) · e2m1(W_e[r, k])·2^(ws_e[r, k/32]−127),
// e = expert_ids[p]; fp32 accumulation per 32-element group, bf16 out. The activations are the FP8
// 1×128 quantised input REF feeds its fp4_gemm (dsv4-model.md §7.4, §10.1). The weights are in the
// tiled layout of mxfp4_layout.cuh (the checkpoint's bytes, permuted at upload).
// Parity oracle: cpu::matmul_nt over cpu::dequant_mxfp4(W_e) and cpu::fp8_quant_dequant(x).
//
// The pairs are grouped by expert on the device (mxfp4_group_pairs, once per MoE layer); then every
// expert with pairs is streamed ONCE per matrix for up to 8 of its pairs (decode batch 64: ~384 pairs
// over ~180 experts).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace onecard::cuda {

// The pairs of one step grouped by expert, as the device holds them in `scratch`, plus the host-side
// bounds that size the GEMV grid (no host synchronisation: the item count itself stays on the device).
// Layout of scratch (int32): [0] n_items, [4, 4 + 4·max_items) items as {expert, first slot in
// sorted, n pairs, 0}, then sorted [n_pairs]: pair ids ordered by expert, ascending pair id within
// an expert (stable counting sort). An item is at most max_item_pairs (<= 8) pairs of one expert; an expert
// with more pairs gets several consecutive items.
struct MoePairGroups {
    const int32_t* scratch = nullptr;
    int64_t n_pairs = 0;
    int64_t max_items = 0;       // upper bound on the device-side item count
    int64_t max_item_pairs = 0;  // pairs per item, at most
};

// The most pairs one mxfp4_group_pairs call groups (its ids are staged in shared memory).
inline constexpr int kMxfp4MaxGroupPairs = 4096;

// int32 elements of scratch that mxfp4_group_pairs needs for up to n_pairs pairs.
int64_t mxfp4_group_scratch_ints(int64_t n_pairs);

// Groups expert_ids [n_pairs] (device) by expert: one block, a counting sort (no host sync, graph
// capturable). n_experts <= 1024, n_pairs <= 4096. max_pairs_per_expert is the caller's bound on how
// many pairs one expert can get (the token count for top-k routing, whose picks per token are
// distinct; n_pairs if unknown): it only sizes items and the GEMV's per-block group (a wrong bound
// costs speed, never correctness: items are split at the bound). Pairs whose id is outside
// [0, n_experts) are left out (their y rows are not written).
MoePairGroups mxfp4_group_pairs(const int32_t* expert_ids, int64_t n_pairs, int64_t n_experts,
                                int64_t max_pairs_per_expert, int32_t* scratch, int64_t scratch_ints,
                                cudaStream_t stream);

// One MXFP4 matrix of mxfp4_grouped_gemv: w [n_experts] tiled codes of [n, k], ws the tiled UE8M0
// scales (mxfp4_layout.cuh), y [n_pairs, n] bf16 out.
struct Mxfp4Matrix {
    const uint8_t* w = nullptr;
    const uint8_t* ws = nullptr;
    __nv_bfloat16* y = nullptr;
};

// One grouped GEMV: FP8 activations, up to two matrices of one shape, the pairs' activation rows.
struct Mxfp4GroupedGemvArgs {
    const uint8_t* xq = nullptr;        // [n_act_rows, k] E4M3
    const float* xs = nullptr;          // [n_act_rows, k/128] fp32 (ActScaleLayout::RowMajor)
    const int32_t* act_rows = nullptr;  // [n_pairs] a pair's activation row (nullptr: row = pair id)
    Mxfp4Matrix a;                      // the matrix
    Mxfp4Matrix b;                      // optional second one (b.w == nullptr: none), e.g. w3 next to w1
    int64_t n = 0, k = 0;               // rows and columns of each matrix
};

// y[p, r] for every pair of `groups` and each matrix: y = W[expert of p] · x[act row of p]. The second
// matrix, when given, is computed in the same launch over the same staged activations. One warp
// streams 16 rows of one expert once for all the pairs of an item (<= 8). n % 16 == 0, k % 256 == 0,
// k <= 8192; offsets are 64-bit (all 256 experts of a layer span ~3.4 GB). Graph capturable (grid
// from the host-side bounds of `groups`).
void mxfp4_grouped_gemv(const Mxfp4GroupedGemvArgs& args, const MoePairGroups& groups, cudaStream_t stream);

}  // namespace onecard::cuda
