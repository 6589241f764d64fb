// FP8 E4M3 dialect conversion: OCP e4m3fn (what DeepSeek ships, NVIDIA's FP8) -> e4m3fnuz (AMD
// MI300's FP8). Both have 4 exponent and 3 mantissa bits, but FNUZ's exponent bias is 8, not 7,
// so the same byte decodes to exactly half the value (the "2x trap"). Keeping the byte and
// doubling the block's power-of-two scale preserves every value bit-exactly; only the special
// codes move: OCP -0 (0x80, FNUZ's NaN) becomes +0, OCP NaN (0x7F/0xFF) becomes FNUZ NaN (0x80).
#pragma once

#include <cstdint>
#include <span>

namespace onecard {

inline constexpr uint8_t kFnuzNaN = 0x80;

// One element byte. Value-preserving only together with e8m0_scale_for_fnuz on its block scale.
uint8_t e4m3fn_byte_to_fnuz(uint8_t ocp);
// A UE8M0 block scale, doubled (exponent + 1). Throws onecard::Error for 0xFE (2^127 cannot be
// doubled in UE8M0) and 0xFF (a NaN scale is a corrupt checkpoint, not something to carry over).
uint8_t e8m0_scale_for_fnuz(uint8_t scale);

// Whole tensors. The element mapping does not depend on the block geometry (every element of
// every block keeps its byte, every scale doubles), so weights [rows, cols] and scales
// [ceil(rows/128), ceil(cols/128)] convert independently. `out` may alias `in`; sizes must match
// (throws onecard::Error otherwise). `what` names the scale tensor in error messages.
void e4m3fn_to_fnuz(std::span<const uint8_t> in, std::span<uint8_t> out);
void e8m0_scales_for_fnuz(std::span<const uint8_t> in, std::span<uint8_t> out, const char* what = "scale tensor");

}  // namespace onecard
