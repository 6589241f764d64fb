// The GPU half of hybrid experts: at an MoE layer whose cold experts live in host RAM, the GPU
// hands the host the layer's routed rows through mapped pinned memory and later takes back the
// host experts' output rows, without any host-side stream synchronisation, so the exchange works
// inside a captured decode graph:
//
//   host_moe_publish     copies xq/xs (the FP8 1x128 input), the picks and their weights into the
//                        mailbox's buffers, writes the GPU-local expert slot of every pair (-1 for a
//                        host expert) for the GPU's own grouped GEMV, and, once every block's writes
//                        are visible system-wide, bumps the request sequence number;
//   (GPU experts and the shared expert run meanwhile; a host thread sees the new sequence number,
//    computes the host pairs and writes their bf16 rows and the done sequence number)
//   host_moe_wait_gather spins on the done sequence number (acquire, system scope) with a timeout and
//                        copies the host pairs' rows into the step's expert-output buffer, where
//                        moe_combine sums every pair in pick order as before.
//
// The sequence number lives in device memory and is bumped by the GPU itself, so a replayed graph
// produces a fresh number each time. Host side: model_cuda/host_moe_bridge.h.
#pragma once

#include "backend/cuda/ops/moe_experts.cuh"

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace onecard::cuda {

// The mailbox's control words, in mapped pinned memory. Each side writes its own cache line only.
struct alignas(128) HostMoeControl {
    // Written by the GPU (host_moe_publish's last block), read by the host.
    volatile uint32_t request_seq;
    volatile uint32_t layer;
    volatile uint32_t n_tokens;
    volatile uint32_t gpu_error;  // set (never cleared by the GPU) when a wait timed out or the host reported a failure
    uint32_t pad0[28];
    // Written by the host, read by the GPU (host_moe_wait_gather).
    volatile uint32_t done_seq;
    volatile uint32_t host_status;  // 0 = ok; anything else: the host could not compute the request
    uint32_t pad1[30];
};

// Device-visible pointers into the mailbox (mapped pinned memory) plus the device-side counters.
struct HostMoeDeviceView {
    HostMoeControl* ctl = nullptr;
    uint8_t* xq = nullptr;             // [max_tokens, D] E4M3
    float* xs = nullptr;               // [max_tokens, D/128]
    int32_t* experts = nullptr;        // [max_tokens·K] global expert ids
    float* weights = nullptr;          // [max_tokens·K]
    const __nv_bfloat16* y = nullptr;  // [max_tokens·K, D]: host pairs' rows, written by the host
    uint32_t* seq = nullptr;           // device memory: the last request number issued
    uint32_t* arrive = nullptr;        // device memory: blocks of the current publish that are done (reset by the last)
};

// One layer's publish: n tokens, K picks each, hidden D (% 128 == 0). local_ids receives
// slot_of[experts[p]] for a GPU expert, kStreamedPair for a host expert staged into HBM this step
// (stream_slot_of[e] >= 0) and kHostPair for one the host computes; stream_ids receives the staged
// expert's slot (else -1). The mailbox's ids hold the global id of the host's pairs only (-1
// elsewhere): the host computes exactly those.
constexpr int32_t kHostPair = -1;
constexpr int32_t kStreamedPair = -2;
struct HostMoePublishArgs {
    const uint8_t* xq = nullptr;              // [n, D] E4M3: the tokens' FP8 rows
    const float* xs = nullptr;                // [n, D/128] their scales
    const int32_t* experts = nullptr;         // [n, K] global expert ids (moe_route)
    const float* weights = nullptr;           // [n, K] routing weights
    const int32_t* slot_of = nullptr;         // [E] GPU-local slot of a global id, or -1
    const int32_t* stream_slot_of = nullptr;  // [E] staged slot, or -1; nullptr: nothing is staged
    int32_t* local_ids = nullptr;             // out [n·K]
    int32_t* stream_ids = nullptr;            // out [n·K]; may be nullptr when nothing is staged
    int64_t n = 0, top_k = 0, dim = 0;
    int32_t layer = 0;
};
void host_moe_publish(const HostMoePublishArgs& a, const HostMoeDeviceView& box, cudaStream_t stream);

// For every pair p with local_ids[p] == kHostPair: waits (once per block) for the host's answer to
// the last published request, at most timeout_ns, then y2[p, :] = box.y[p, :]. y2 [n·K, D] bf16.
void host_moe_wait_gather(const int32_t* local_ids, int64_t n_pairs, int64_t dim, const HostMoeDeviceView& box,
                          __nv_bfloat16* y2, uint64_t timeout_ns, cudaStream_t stream);

// One host expert in pinned host RAM (HostExpertStore's record): the checkpoint's parts back to back,
// w1 codes [I, D/2] | w1 scales [I, D/32] | w3 codes | w3 scales | w2 codes [D, I/2] | w2 scales
// [D, I/32], each record padded to 64 bytes (cache lines for the host kernels).
struct MxExpertRecordLayout {
    uint64_t off[6] = {}, len[6] = {};
    uint64_t total = 0;  // the record stride
};
MxExpertRecordLayout mx_expert_record_layout(int64_t dim, int64_t inter);

// Device: n_records host expert records, copied as they are into `records` (device, stride
// mx_expert_record_layout(dst.dim, dst.inter).total), into dst's tiled arrays (experts 0..n_records-1,
// mxfp4_layout.cuh), where the decode GEMV reads them. One launch for all records and matrices.
void tile_expert_records(const uint8_t* records, int64_t n_records, const MxExpertWeights& dst, cudaStream_t stream);

// counts[experts[p]] += 1 for p < n_pairs (uint32, device): the engine's expert-use profile.
void count_expert_picks(const int32_t* experts, int64_t n_pairs, uint32_t* counts, cudaStream_t stream);

}  // namespace onecard::cuda
