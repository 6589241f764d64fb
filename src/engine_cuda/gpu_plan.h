// The memory planner's view of a checkpoint on the CUDA backend: the planner (engine/memory_plan.h)
// sizes weights from a tensor list, and the GPU does not keep every tensor as stored
// (model_cuda/gpu_weights.cpp): FP8 block scales become the GEMM's padded fp32 matrix, tid2eid becomes
// int32; the rest keeps its bytes (the MXFP4 experts are permuted, not resized). Planning with the
// stored sizes would understate the GPU's need and pass plans the runner then refuses.
#pragma once

#include "engine/memory_plan.h"
#include "loader/safetensors_writer.h"

#include <vector>

namespace onecard {

// `specs` in checkpoint order (each .scale right after its .weight, as checkpoint_layout gives them).
std::vector<PlannedTensor> gpu_planned_tensors(const std::vector<TensorSpec>& specs);

}  // namespace onecard
