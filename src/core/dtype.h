// Element types that appear in DeepSeek-V4 safetensors checkpoints, with their safetensors names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace onecard {

enum class DType : uint8_t {
    F32,
    BF16,
    F16,
    F8_E4M3,  // OCP float8_e4m3fn: bias 7, max 448, no inf, NaN = S.1111.111
    F8_E5M2,
    F8_E8M0,  // UE8M0 power-of-two scale: value 2^(byte-127), 0xFF = NaN
    I8,       // also packed MXFP4 (two E2M1 codes per byte, low nibble first)
    U8,
    I32,
    I64,
};

// Bytes per element (packed MXFP4 counts as one I8 byte holding two values).
size_t dtype_size(DType t);
// Safetensors spelling ("F32", "BF16", "F8_E4M3", ...).
std::string_view dtype_name(DType t);
// Parse a safetensors dtype string; nullopt if unknown.
std::optional<DType> dtype_from_name(std::string_view s);

}  // namespace onecard
