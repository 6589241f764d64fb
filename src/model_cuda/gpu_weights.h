// DeepSeek-V4 weights in device memory, in the layouts the CUDA ops read (all carved from one
// DeviceArena; the structs hold non-owning device pointers):
//  * FP8 linears (wq_a, wq_b, wkv, wo_a, wo_b, indexer wq_b, shared expert): E4M3 bytes [n_out, n_in]
//    + fp32 block scales in fp8_gemm_prepare_weight_scales' layout (one tensor serves the cuBLASLt GEMM
//    and the decode GEMV). wo_a, which REF runs dequantised in bf16, stays FP8 too: its GEMV forms the
//    bf16 values in registers and its GEMM path dequantises one group at a time (gpu_linear.h);
//  * linears REF keeps in bf16 (compressor wkv/wgate, weights_proj, router gate, head): bf16 [n_out, n_in];
//  * routed experts: MXFP4 as in the checkpoint, one array per matrix over all experts of a layer;
//  * norms bf16, HC parameters, ape, sinks and router bias fp32, tid2eid int32.
#pragma once

#include "backend/cuda/arena.h"
#include "backend/cuda/ops/moe_experts.cuh"
#include "model/config.h"
#include "model/expert_placement.h"
#include "model/weights.h"

#include <cuda_bf16.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace onecard {

struct GpuFp8Linear {
    const uint8_t* w = nullptr;  // [n_out, n_in] E4M3
    const float* ws = nullptr;   // fp8_gemm_weight_scale_floats(n_out, n_in) fp32
    int64_t n_out = 0, n_in = 0;
};

struct GpuBf16Linear {
    const __nv_bfloat16* w = nullptr;  // [n_out, n_in]
    int64_t n_out = 0, n_in = 0;
};

struct GpuHC {
    const float* fn = nullptr;     // [n_mix, hc·D]
    const float* base = nullptr;   // [n_mix]
    const float* scale = nullptr;  // [3] (head: [1])
};

struct GpuCompressor {
    int64_t ratio = 0, head_dim = 0;      // d
    GpuBf16Linear wkv, wgate;             // [c·d, D]
    GpuBf16Linear wkv_wgate;              // [2·c·d, D]: both as one linear when stored back to back (w null if not)
    const float* ape = nullptr;           // [ratio, c·d]
    const __nv_bfloat16* norm = nullptr;  // [d]
};

// wkv and wgate as one [2·c·d, D] linear if the arena placed them back to back, else a null view.
GpuBf16Linear fuse_compressor_rows(const GpuBf16Linear& wkv, const GpuBf16Linear& wgate);

struct GpuIndexer {
    GpuFp8Linear wq_b;           // [nI·dI, q_lora_rank]
    GpuBf16Linear weights_proj;  // [nI, D]
    GpuCompressor compressor;    // d = index_head_dim
};

struct GpuAttention {
    GpuFp8Linear wq_a;                      // [q_lora_rank, D]
    const __nv_bfloat16* q_norm = nullptr;  // [q_lora_rank]
    GpuFp8Linear wq_b;                      // [H·hd, q_lora_rank]
    GpuFp8Linear wkv;                       // [hd, D]
    // wq_a and wkv as one [q_lora_rank + hd, D] linear when they lie back to back in memory (both read
    // xn: one quantisation, one launch); w == nullptr otherwise (fuse_rows).
    GpuFp8Linear wq_a_wkv;
    const __nv_bfloat16* kv_norm = nullptr;  // [hd]
    GpuFp8Linear wo_a;                       // [G·r, H·hd/G]: group g's [r, H·hd/G] block at rows g·r
    GpuFp8Linear wo_b;                       // [D, G·r]
    const float* sink = nullptr;             // [H]
    std::optional<GpuCompressor> compressor;
    std::optional<GpuIndexer> indexer;
};

struct GpuMoE {
    GpuBf16Linear gate;                // [E, D]
    const float* bias = nullptr;       // [E]; nullptr on hash layers
    const int32_t* tid2eid = nullptr;  // [vocab, K]; nullptr on learned-routing layers
    cuda::MxExpertWeights experts;     // MXFP4 [E_gpu, ...]: all E experts, or the GPU-resident ones in slot order
    // Hybrid layers (an ExpertPlacement keeps some experts in host RAM; attach_host_experts): the slot
    // of each global expert id in `experts`, or -1, on the device and the host, and each host
    // expert's pinned weights. expert_slot == nullptr: every expert on the GPU, slot = id.
    const int32_t* expert_slot = nullptr;          // device [E]
    std::vector<int32_t> expert_slot_host;         // [E]
    std::vector<cuda::MxHostExpert> host_experts;  // [E], set where expert_slot_host < 0
    // Host experts staged into HBM on large decode steps (HostExpertStreamer): the layer's first
    // n_stream host records (pinned, contiguous, HostExpertStore::bytes_per_expert() apart) and the
    // stream slot of each global expert id held in one of them, or -1, on the device and the host.
    int64_t n_stream = 0;
    const uint8_t* stream_records = nullptr;
    const int32_t* expert_stream_slot = nullptr;   // device [E]
    std::vector<int32_t> expert_stream_slot_host;  // [E]
    bool hybrid() const { return expert_slot != nullptr; }
    GpuFp8Linear shared_w1, shared_w3;  // [inter, D]
    GpuFp8Linear shared_w13;            // w1 and w3 as one [2·inter, D] linear (fuse_rows), or w == nullptr
    GpuFp8Linear shared_w2;             // [D, inter]
};

struct GpuBlock {
    int64_t layer_id = 0;
    const __nv_bfloat16* attn_norm = nullptr;  // [D]
    const __nv_bfloat16* ffn_norm = nullptr;   // [D]
    GpuHC hc_attn, hc_ffn;
    GpuAttention attn;
    GpuMoE ffn;
};

// The V4-Flash MTP block mtp.0 (model/weights.h MTPWeights): a decoder block (layer_id =
// num_hidden_layers, its KV the pool's layer of that index) plus its input glue and own head norms;
// the embedding and the output head are the main model's.
struct GpuMtp {
    GpuBlock block;
    const __nv_bfloat16* enorm = nullptr;  // [D]
    const __nv_bfloat16* hnorm = nullptr;  // [D]
    const __nv_bfloat16* norm = nullptr;   // [D]
    GpuFp8Linear e_proj, h_proj;           // [D, D]
    GpuHC hc_head;                         // fn [hc, hc·D], base [hc], scale [1]
};

// The DeepSeek-V4-Flash-0731 DSpark drafter (model/weights.h DSparkWeights; docs/dspark.md): S stages,
// sliding-window decoder blocks at layer ids num_hidden_layers + s (their context KV in the pool's
// window rings of those layers), every routed expert on the GPU; the embedding and the output head
// are the main model's.
struct GpuDSpark {
    std::vector<GpuBlock> stages;
    GpuFp8Linear main_proj;                     // [D, S·D]: the concatenated taps to the context input
    const __nv_bfloat16* main_norm = nullptr;   // [D]
    const __nv_bfloat16* norm = nullptr;        // [D] the last stage's final norm
    GpuHC hc_head;                              // the last stage's: fn [hc, hc·D], base [hc], scale [1]
    const __nv_bfloat16* markov_w1 = nullptr;   // [vocab, rank] embedding of the previous token
    const __nv_bfloat16* markov_w2 = nullptr;   // [vocab, rank] projection rank -> vocab
    const __nv_bfloat16* confidence = nullptr;  // [D + rank] the confidence head's one output row
    int64_t rank = 0;
};

struct GpuModelWeights {
    const __nv_bfloat16* embed = nullptr;  // [vocab, D], in HBM or device-mapped host RAM (HostEmbedding)
    GpuBf16Linear head;                    // [vocab, D]
    const __nv_bfloat16* norm = nullptr;   // [D]
    GpuHC hc_head;                         // fn [hc, hc·D], base [hc], scale [1]
    std::vector<GpuBlock> layers;          // main layers only
    std::optional<GpuMtp> mtp;             // the MTP drafter, when uploaded (upload_mtp_weights)
    std::optional<GpuDSpark> dspark;       // the 0731 DSpark drafter, when uploaded (upload_dspark_weights)
};

// a and b as one linear [a.n_out + b.n_out, n_in] when b's weight rows and block scales follow a's
// directly in memory (allocate a.w, b.w, a.ws, b.ws in that order with 256-byte-multiple sizes);
// otherwise an empty linear (w == nullptr), and callers use the two separately.
GpuFp8Linear fuse_rows(const GpuFp8Linear& a, const GpuFp8Linear& b);

// Bytes the device copy of `cfg`'s main-model weights takes in these layouts (what the memory plan
// and the benchmark report), with an entry per component for the startup report.
struct GpuWeightBytes {
    int64_t total = 0;
    int64_t embed_head = 0, attention = 0, routed_experts = 0, shared_experts = 0, other = 0;
};
GpuWeightBytes gpu_weight_bytes(const ModelConfig& cfg);

// Checks that the CUDA kernels can run this config (head_dim 512 with 64 rope dims, hc 4, D and the
// linears' widths multiples of 512, ...); throws onecard::Error naming every unsupported dimension.
void check_gpu_model_shape(const ModelConfig& cfg);

// Copies (and converts) a checkpoint's main-model weights into `arena`. Throws onecard::Error naming
// the tensor on a dtype or shape the GPU layouts do not take. With a placement, only its
// GPU-resident routed experts are uploaded (in ascending id = slot order); the others stay for a
// HostExpertStore (model_cuda/host_expert_store.h), joined with attach_host_experts. host_embed: the
// embedding table's device address in host RAM (HostEmbedding, already filled), not uploaded.
GpuModelWeights upload_weights(const ModelConfig& cfg, const ModelWeights& w, cuda::DeviceArena& arena,
                               const ExpertPlacement* placement = nullptr, const __nv_bfloat16* host_embed = nullptr);
// The checkpoint's MTP block mtp.0 into `arena` (every routed expert on the GPU). Throws when the
// checkpoint has none. Its bytes are not in gpu_weight_bytes(), which counts the main model.
GpuMtp upload_mtp_weights(const ModelConfig& cfg, const ModelWeights& w, cuda::DeviceArena& arena);
// The checkpoint's DSpark drafter (0731) into `arena`. Throws when the checkpoint has none, or its
// Markov rank is not a multiple of 8 (the Markov kernel's vector loads).
GpuDSpark upload_dspark_weights(const ModelConfig& cfg, const ModelWeights& w, cuda::DeviceArena& arena);

}  // namespace onecard
