// `onecard bench --verify-k`: the draft side of speculative decoding, timed as CudaModelRunner drafts
// (engine_cuda/cuda_spec_runner.cpp). CUDA builds only.
#pragma once

#ifdef ONECARD_HAVE_CUDA

#include "model_cuda/gpu_model.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace onecard::cli {

// Wall seconds (median over `repeats` after `warmup` untimed chains) of one chain of k MTP draft steps
// for B sequences in slots 0..B-1 (block tables `tables`): each step gathers its input streams (the
// slots' pending rows, then the previous step's output), runs GpuModel::mtp_step with one token per
// sequence at positions pos - 1 + j, takes the argmax and copies the ids to the host. The model needs
// GpuModelOptions::mtp and GpuModelWeights::mtp.
double time_mtp_draft_chain(GpuModel& model, int64_t B, int64_t k, int64_t pos,
                            const std::vector<std::vector<int32_t>>& tables, int64_t vocab, int64_t warmup,
                            int64_t repeats, cudaStream_t s);

// Wall seconds (median, as above) of one DSpark draft for B sequences in slots 0..B-1: after an
// untimed one-token step per sequence at position pos (which advances by one each chain), the timed
// part is GpuModel::dspark_push of that step's rows, the block pass at pos + 1 .. pos + block_size,
// and k Markov slots, each with its argmax and confidence logits copied to the host
// (CudaModelRunner::draft_with_dspark's greedy path). The model needs GpuModelOptions::dspark and
// GpuModelWeights::dspark.
double time_dspark_draft(GpuModel& model, int64_t B, int64_t k, int64_t& pos,
                         const std::vector<std::vector<int32_t>>& tables, int64_t warmup, int64_t repeats,
                         cudaStream_t s);

}  // namespace onecard::cli

#endif
