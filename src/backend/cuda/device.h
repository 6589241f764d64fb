// CUDA device discovery. Host-only header: no CUDA types leak to callers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace onecard::cuda {

struct DeviceInfo {
    int index = 0;
    std::string name;
    int cc_major = 0;
    int cc_minor = 0;
    int n_sm = 0;
    uint64_t total_bytes = 0;
    uint64_t free_bytes = 0;
};

// Every visible device; empty (never throws) when there is no driver or no GPU.
std::vector<DeviceInfo> list_devices();
// Why list_devices() is empty, for skip messages ("no CUDA driver", "no device", ...).
std::string no_device_reason();

}  // namespace onecard::cuda
