// Minimal NumPy .npy (format v1.0) reader/writer for little-endian float32 and int32 arrays,
// C order. Enough for logits dumps and golden files; anything else is refused with an Error.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

namespace onecard {

template <typename T>
struct NpyArray {
    std::vector<int64_t> shape;  // outermost first
    std::vector<T> data;         // row-major, numel(shape) elements
};

// Writes `data` (numel(shape) elements) as '<f4' / '<i4'. Throws onecard::Error naming the path.
void npy_write_f32(const std::filesystem::path& path, std::span<const float> data, const std::vector<int64_t>& shape);
void npy_write_i32(const std::filesystem::path& path, std::span<const int32_t> data, const std::vector<int64_t>& shape);

// Reads a v1/v2 .npy file whose dtype is '<f4' / '<i4' and fortran_order is False.
NpyArray<float> npy_read_f32(const std::filesystem::path& path);
NpyArray<int32_t> npy_read_i32(const std::filesystem::path& path);

}  // namespace onecard
