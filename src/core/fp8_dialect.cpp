#include "core/fp8_dialect.h"

#include "core/error.h"

namespace onecard {

uint8_t e4m3fn_byte_to_fnuz(uint8_t ocp) {
    if ((ocp & 0x7F) == 0x7F) return kFnuzNaN;  // OCP NaN, either sign
    if (ocp == 0x80) return 0x00;               // OCP -0: FNUZ has no -0 (0x80 is its NaN)
    return ocp;
}

uint8_t e8m0_scale_for_fnuz(uint8_t scale) {
    ONECARD_CHECK(scale != 0xFF, "UE8M0 scale 0xFF is NaN: cannot convert it to the FNUZ dialect");
    ONECARD_CHECK(scale != 0xFE, "UE8M0 scale 0xFE (2^127) cannot be doubled for the FNUZ dialect");
    return static_cast<uint8_t>(scale + 1);
}

void e4m3fn_to_fnuz(std::span<const uint8_t> in, std::span<uint8_t> out) {
    ONECARD_CHECK(in.size() == out.size(), "e4m3fn_to_fnuz: {} input bytes but {} output bytes", in.size(), out.size());
    for (size_t i = 0; i < in.size(); ++i) out[i] = e4m3fn_byte_to_fnuz(in[i]);
}

void e8m0_scales_for_fnuz(std::span<const uint8_t> in, std::span<uint8_t> out, const char* what) {
    ONECARD_CHECK(in.size() == out.size(), "{}: {} input scales but {} output scales", what, in.size(), out.size());
    for (size_t i = 0; i < in.size(); ++i) {
        ONECARD_CHECK(in[i] < 0xFE, "{}: scale {} is 0x{:02X}, which cannot be doubled for the FNUZ dialect", what, i,
                      in[i]);
        out[i] = static_cast<uint8_t>(in[i] + 1);
    }
}

}  // namespace onecard
