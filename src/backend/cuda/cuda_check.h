// Error checks for every CUDA runtime call and kernel launch. Host-only header (no device code), so
// plain C++ translation units and tests can include it. A failed call throws onecard::Error naming
// the call, the file and line, and the CUDA error string: a GPU fault surfaces where it happened
// instead of at the next unrelated synchronisation.
#pragma once

#include "core/error.h"

#include <cuda_runtime_api.h>

namespace onecard::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* what, const char* file, int line);

}  // namespace onecard::cuda

// CUDA_CHECK(cudaMemcpy(...)): throws onecard::Error if the call does not return cudaSuccess.
#define CUDA_CHECK(call)                                                                     \
    do {                                                                                     \
        const cudaError_t onecard_cuda_err_ = (call);                                        \
        if (onecard_cuda_err_ != cudaSuccess)                                                \
            ::onecard::cuda::throw_cuda_error(onecard_cuda_err_, #call, __FILE__, __LINE__); \
    } while (0)

// After every kernel launch: catches bad launch configurations at once (cudaGetLastError) without
// synchronising; execution faults surface at the next checked synchronising call.
#define CUDA_CHECK_LAUNCH(name)                                                                          \
    do {                                                                                                 \
        const cudaError_t onecard_cuda_err_ = cudaGetLastError();                                        \
        if (onecard_cuda_err_ != cudaSuccess)                                                            \
            ::onecard::cuda::throw_cuda_error(onecard_cuda_err_, "launch of " name, __FILE__, __LINE__); \
    } while (0)
