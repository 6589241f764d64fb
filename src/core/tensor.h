// Non-owning view of a tensor's bytes as stored in a checkpoint (row-major, no strides: the
// safetensors format has none). The owner (an mmap'd file, a host buffer) outlives the view.
#pragma once

#include "core/dtype.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
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
    // The bytes as an array of a one-byte type. Wider elements go through tensor_element(): safetensors
    // does not align a tensor's data to its element size (a tensor after an odd-sized one starts at an
    // odd offset), so a typed pointer into a mapped shard would be a misaligned load.
    template <typename T>
    const T* as() const {
        static_assert(sizeof(T) == 1, "read wider elements with tensor_element<T>(view, i)");
        return reinterpret_cast<const T*>(data);
    }
};

// Element i of t read as T (memcpy: no alignment assumed). The caller checked t's dtype and that i is
// below t.numel().
template <typename T>
T tensor_element(const TensorView& t, int64_t i) {
    T v;
    std::memcpy(&v, t.data + static_cast<size_t>(i) * sizeof(T), sizeof(T));
    return v;
}

// "[1024, 4096]"-style text for messages.
std::string shape_str(const std::vector<int64_t>& shape);

}  // namespace onecard
