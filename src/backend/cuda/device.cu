#include "backend/cuda/device.h"

#include <cuda_runtime.h>

namespace onecard::cuda {

std::vector<DeviceInfo> list_devices() {
    std::vector<DeviceInfo> out;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();  // clear the sticky "no driver" error
        return out;
    }
    for (int i = 0; i < n; ++i) {
        cudaDeviceProp p{};
        if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
        DeviceInfo d;
        d.index = i;
        d.name = p.name;
        d.cc_major = p.major;
        d.cc_minor = p.minor;
        d.n_sm = p.multiProcessorCount;
        d.total_bytes = p.totalGlobalMem;
        size_t free_b = 0, total_b = 0;
        if (cudaSetDevice(i) == cudaSuccess && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) d.free_bytes = free_b;
        out.push_back(d);
    }
    return out;
}

std::string no_device_reason() {
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        cudaGetLastError();
        return std::string("CUDA runtime reports: ") + cudaGetErrorString(err);
    }
    return n == 0 ? "no CUDA device visible" : "";
}

}  // namespace onecard::cuda
