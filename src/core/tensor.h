// Non-owning view of a tensor's bytes as stored in a checkpoint (row-major, no strides: the
// safetensors format has none). The owner (an mmap'd file, a host buffer) outlives the view.
#pragma once

#include "core/dtype.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace onecard {

struct TensorView {
    std::string name;  // checkpoint name, e.g. "layers.3.attn.wq_a.weight"
    DType dtype = DType::F32;
    std::vector<int64_t> shape;  // row-major, outermost first
    const std::byte* data = nullptr;
    size_t nbytes = 0;

    int64_t numel() const {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        return n;
    }
    template <typename T>
    const T* as() const {
        return reinterpret_cast<const T*>(data);
    }
};

// "[1024, 4096]"-style text for messages.
std::string shape_str(const std::vector<int64_t>& shape);

}  // namespace onecard
