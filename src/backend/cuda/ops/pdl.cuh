// Programmatic dependent launch (Hopper, CUDA graphs included): a kernel launched with launch_pdl
// may start while the kernel before it in the stream is still finishing, so the launch latency and
// whatever the kernel does before pdl_wait() (index math, prefetching weights that no kernel writes)
// overlap the previous kernel's tail. At batch 1 a decode step is ~2,000 small dependent kernels, so
// those gaps are a large share of the step (docs/results.md).
//
// Contract for every kernel launched with launch_pdl: call pdl_wait() before its first access to
// memory that an earlier kernel of the step writes or reads (it returns once the previous grid has
// completed and its writes are visible; transitively, every earlier one), and pdl_trigger() after it
// (lets the next kernel be scheduled). Both are no-ops for a plain launch, so the kernels can be
// launched either way. Included by .cu files only (C++17 and C++20 alike).
#pragma once

#include "backend/cuda/cuda_check.h"

#include <cuda_runtime.h>

#include <utility>

namespace onecard::cuda {

namespace dev {
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
}  // namespace dev

// kernel<<<grid, block, smem, stream>>>(args...) with the programmatic-serialisation attribute.
template <typename... KArgs, typename... Args>
void launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

}  // namespace onecard::cuda
