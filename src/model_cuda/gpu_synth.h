// Synthetic DeepSeek-V4 weights made directly in device memory, in GpuModelWeights' layouts, for
// benchmarks and smoke runs of the full Flash shape (~150 GB: nothing passes through host memory).
// Every value comes from a counter-based hash of (seed, tensor tag, element index), so the bytes
// depend only on (config, seed) and a tensor's values do not depend on which other tensors exist.
// The distributions follow model/synth.cpp's on-disk synthetic checkpoint, so activations keep a
// sensible scale through all layers:
//  * FP8 linears: E4M3 codes of N(0,1)·σ/2^e with power-of-two (UE8M0-representable) block scales
//    2^e, e ∈ {e0, e0+1} per 128×128 block (e0 puts the code std in (56, 112], well inside ±448),
//    so the effective weight is N(0, σ²) with σ = 1/√fan_in; padded scale entries are 0;
//  * bf16 linears N(0, 1/fan_in); embedding N(0, 1); every RMSNorm gain exactly 1;
//  * MXFP4 experts: codes uniform over the 16 E2M1 values (E[v²] = 8.5625), per-32 block exponents
//    mixed between two neighbours so that E[w²] = 1/fan_in exactly;
//  * HC fn N(0, (0.2/√(hc·D))²), base and scale as synth.cpp (pre-mix logits averaging the streams,
//    near-identity comb), ape 0.1·N(0,1), attention sinks N(0,1), router bias 0.05·N(0,1);
//  * tid2eid: K distinct experts per vocabulary row, uniform over [0, E).
// Values are NOT those of a checkpoint written by `onecard synth` with the same seed (different
// generator); only the distributions match.
#pragma once

#include "backend/cuda/arena.h"
#include "model/config.h"
#include "model/expert_placement.h"
#include "model_cuda/gpu_weights.h"

#include <cuda_runtime_api.h>

#include <cstdint>

namespace onecard {

// Bytes synth_weights_on_device (and alloc_synth_weights) take from an arena whose used() is a
// multiple of 256 (a fresh one): every tensor plus the 256-byte alignment padding between them.
// The synthetic MXFP4 experts' block scales for a matrix of input width fan_in: the UE8M0 byte is
// base_byte, or base_byte + 1 with probability p_high, so that E[w²] = 1/fan_in for uniform E2M1
// codes. One rule for the device fill and the host experts (HostExpertStore::fill_synthetic).
void synth_mx_scale_rule(int64_t fan_in, int& base_byte, double& p_high);

// With a placement, only its GPU-resident routed experts (the rest: HostExpertStore::fill_synthetic);
// embed_on_host: without the embedding table (HostEmbedding holds it).
int64_t synth_weights_device_bytes(const ModelConfig& cfg, const ExpertPlacement* placement = nullptr,
                                   bool embed_on_host = false);

// Carves every tensor of `cfg`'s main model out of `arena` (tags name the tensor, as in the
// checkpoint: "layers.3.attn.wq_b.weight", "layers.3.attn.wq_b.scale", "layers.3.ffn.experts.w1.weight"
// for all experts' w1, ...) without writing them. Never touches the memory, so a borrowed host
// arena works (tests check the bookkeeping that way). Throws onecard::Error naming the tensor on a
// shape the layouts cannot take (FP8 input width not a multiple of 128, MXFP4 width not a multiple
// of 32, top-k above 32 or above the expert count on hash layers).
// host_embed (HostEmbedding::device()): the embedding table lives there, not in the arena.
GpuModelWeights alloc_synth_weights(const ModelConfig& cfg, cuda::DeviceArena& arena,
                                    const ExpertPlacement* placement = nullptr, __nv_bfloat16* host_embed = nullptr);

// alloc_synth_weights + the fill kernels, queued on `stream` (the weights are ready when the stream
// reaches this point; nothing here synchronises).
GpuModelWeights synth_weights_on_device(const ModelConfig& cfg, cuda::DeviceArena& arena, uint64_t seed,
                                        cudaStream_t stream, const ExpertPlacement* placement = nullptr,
                                        __nv_bfloat16* host_embed = nullptr);

// The MTP block mtp.0 of `cfg` (every routed expert on the GPU), synthesised like the main layers
// (tags "mtp.0.*"), for GpuModelWeights::mtp.
GpuMtp synth_mtp_on_device(const ModelConfig& cfg, cuda::DeviceArena& arena, uint64_t seed, cudaStream_t stream);
// The 0731 DSpark drafter of `cfg` (cfg.dspark; every routed expert on the GPU), likewise, for
// GpuModelWeights::dspark.
// Device bytes synth_mtp_on_device / synth_dspark_on_device take (the bench's budget for the drafter).
int64_t synth_mtp_device_bytes(const ModelConfig& cfg);
int64_t synth_dspark_device_bytes(const ModelConfig& cfg);
GpuDSpark synth_dspark_on_device(const ModelConfig& cfg, cuda::DeviceArena& arena, uint64_t seed, cudaStream_t stream);

}  // namespace onecard
