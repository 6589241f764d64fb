// GpuModel's step buffers (private to model_cuda: gpu_model.cpp carves them, gpu_model_mtp.cpp runs
// the MTP block over them too).
#pragma once

#include "backend/cuda/ops/token_pick.cuh"
#include "model_cuda/gpu_model.h"

#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

namespace onecard {

using bf16 = __nv_bfloat16;

// Device buffers of one step at full capacity (T = max_num_batched_tokens rows), taken once. Every
// bf16 write into them (and every bf16 rounding inside a fused kernel) is a point of
// model/storage_points.h, where the CPU oracle rounds too: a change of what is stored in bf16 here
// goes there as well, or the GPU parity tests measure the difference as error.
struct GpuModel::Buffers {
    int64_t T = 0, logits_rows = 0, max_keys = 0, gemv_rows = 0, index_scratch_floats = 0;
    float* X = nullptr;                                      // [T, 4, D] the residual streams, fp32
    bf16 *x = nullptr, *a = nullptr;                         // [T, D] sub-block input and output
    float *pre = nullptr, *post = nullptr, *comb = nullptr;  // [T, 4], [T, 4], [T, 16]
    float* hc_scratch = nullptr;                             // hc_pre partial mixes
    size_t hc_scratch_floats = 0;
    bf16 *qr = nullptr, *q = nullptr, *o = nullptr, *kv = nullptr, *z = nullptr;
    bf16* qkv = nullptr;     // [T, q_lora_rank + hd]: the fused wq_a|wkv output
    uint8_t* qrq = nullptr;  // [gemv rows, q_lora_rank] qr quantised once (wq_b, indexer wq_b)
    float* qrs = nullptr;
    bf16* s13 = nullptr;                  // [T, 2·inter]: the fused shared w1|w3 output
    float* ckv = nullptr;                 // [T, 4·hd]: the compressor's kv and score projections
    bf16* centries = nullptr;             // [T, hd]
    bf16* iq = nullptr;                   // [T, nI·dI]
    float *iw = nullptr, *ikv = nullptr;  // ikv [T, 4·dI]: the indexer compressor's kv and score
    bf16* ientries = nullptr;             // [T, dI]
    int32_t* topk = nullptr;              // [T, index_topk]
    float* index_scratch = nullptr;
    int64_t *step_dst = nullptr, *ring_dst = nullptr, *entry_dst = nullptr, *key_dst = nullptr;  // [T]
    int64_t* kv_off = nullptr;                                                                   // [T, max_keys]
    float* attn_scratch = nullptr;  // sparse attention split partials
    // MoE
    float* router = nullptr;  // [T, E]
    int32_t* experts = nullptr;
    float* weights = nullptr;                          // [T, K]
    bf16 *sg = nullptr, *su = nullptr, *sh = nullptr;  // shared expert [T, inter]
    bf16 *shared = nullptr, *xr = nullptr;             // [T, D]
    bf16 *y1 = nullptr, *y3 = nullptr, *y2 = nullptr;  // decode pairs
    uint8_t *xq = nullptr, *hq = nullptr;
    float *xs = nullptr, *hs = nullptr;
    int32_t* pair_token = nullptr;     // [gemv_rows·K]: pair i belongs to token i / K
    int32_t* pair_groups = nullptr;    // the decode pairs grouped by expert (mxfp4_group_pairs)
    int32_t* local_ids = nullptr;      // [gemv_rows·K]: hybrid layers' GPU slot per pair (kHostPair, kStreamedPair)
    int32_t* stream_ids = nullptr;     // [gemv_rows·K]: the staged expert's slot per pair, or -1 (HostExpertStreamer)
    int32_t* stream_groups = nullptr;  // the staged experts' pairs grouped by slot
    uint32_t* pick_counts = nullptr;   // [layers, E] (count_expert_picks)
    // head
    float *head_rows = nullptr, *head_y = nullptr;  // [logits_rows, 4, D], [logits_rows, D]
    float* logits = nullptr;                        // [logits_rows, vocab]
    int32_t* ids = nullptr;                         // [logits_rows]
    cuda::SampleParams* sample_params = nullptr;    // [logits_rows]
    uint32_t* sample_masks = nullptr;               // [logits_rows, ceil(vocab / 32)] allowed-token bitmasks
    void* sample_scratch = nullptr;                 // sample_rows_scratch_bytes(logits_rows, vocab)
    float *rope_main = nullptr, *rope_compress = nullptr;
    // The MTP drafter (GpuModelOptions::mtp): its input streams [T, 4, D] gathered for an mtp_step, and
    // per KV slot the main model's streams of the sequence's last kept position [max_num_seqs, 4, D].
    float *mtp_in = nullptr, *mtp_pending = nullptr;
    // The DSpark drafter (GpuModelOptions::dspark): the last step's taps [T, S, D] (target layer s's
    // output streams averaged), the previous token of each block's Markov slot [logits_rows], the
    // block rows' pre-norm hidden [logits_rows, D] and a slot's confidence logits [logits_rows].
    bf16* taps = nullptr;
    int32_t* dspark_prev = nullptr;
    bf16* dspark_h = nullptr;
    float* dspark_conf = nullptr;
};

}  // namespace onecard
