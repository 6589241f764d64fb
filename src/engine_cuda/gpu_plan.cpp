#include "engine_cuda/gpu_plan.h"

#include "backend/cuda/ops/fp8_gemm.cuh"

#include <string>

namespace onecard {

std::vector<PlannedTensor> gpu_planned_tensors(const std::vector<TensorSpec>& specs) {
    std::vector<PlannedTensor> out;
    out.reserve(specs.size());
    const TensorSpec* last_weight = nullptr;  // the weight a following .scale belongs to
    for (const TensorSpec& t : specs) {
        PlannedTensor p{t.name, t.dtype, static_cast<uint64_t>(t.nbytes())};
        switch (t.dtype) {
            case DType::F8_E4M3:
                last_weight = &t;
                break;
            case DType::I8:
            case DType::U8:
                last_weight = &t;
                break;
            case DType::F8_E8M0:
                if (last_weight != nullptr && last_weight->dtype == DType::F8_E4M3 && last_weight->shape.size() == 2) {
                    p.nbytes = static_cast<uint64_t>(
                                   cuda::fp8_gemm_weight_scale_floats(last_weight->shape[0], last_weight->shape[1])) *
                               4;
                }
                break;  // MXFP4 group scales: as stored
            case DType::I64:
                p.dtype = DType::I32;
                p.nbytes /= 2;
                break;
            default:
                break;
        }
        out.push_back(std::move(p));
    }
    return out;
}

}  // namespace onecard
