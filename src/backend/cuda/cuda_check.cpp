#include "backend/cuda/cuda_check.h"

namespace onecard::cuda {

void throw_cuda_error(cudaError_t err, const char* what, const char* file, int line) {
    // Clear the error unless it is sticky (a fault leaves the context unusable either way).
    cudaGetLastError();
    fail("CUDA error {} ({}) in {} at {}:{}", static_cast<int>(err), cudaGetErrorString(err), what, file, line);
}

}  // namespace onecard::cuda
