// Reading single elements of a checkpoint tensor whose bytes may be misaligned. Safetensors does not
// align a tensor's data to its element size (a tensor after an odd-sized one starts at an odd offset),
// so a typed pointer into a mapped shard is undefined behaviour for any element wider than a byte.
#pragma once

#include "core/tensor.h"

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace onecard {

// Element i of t read as T (memcpy: no alignment assumed). The caller checked t's dtype and that i is
// below t.numel().
template <typename T>
T tensor_element(const TensorView& t, int64_t i) {
    static_assert(std::is_trivially_copyable_v<T>);
    T v;
    std::memcpy(&v, t.data + static_cast<size_t>(i) * sizeof(T), sizeof(T));
    return v;
}

}  // namespace onecard
