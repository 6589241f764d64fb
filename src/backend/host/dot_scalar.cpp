// The scalar row-dot: the readable statement of the summation order in mxfp4_dot.h, and the kernel of
// the Scalar ISA path. x is natural fp32.
#include "backend/host/mxfp4_dot.h"

#include <cmath>

namespace onecard::host::detail {

void dot_rows_scalar(const uint8_t* packed, const uint8_t* scale, int64_t n_in, int64_t n_rows, const void* xv,
                     float* out) {
    const float* x = static_cast<const float*>(xv);  // [n_in]
    const int64_t row_bytes = n_in / 2, n_groups = n_in / 32;
    for (int64_t r = 0; r < n_rows; ++r) {
        const uint8_t* prow = packed + r * row_bytes;  // [n_in/2]
        const uint8_t* srow = scale + r * n_groups;    // [n_in/32]
        float acc[16] = {};
        for (int64_t g = 0; g < n_groups; ++g) {
            const float hs = kHalfScale[srow[g]];
            const float* xg = x + 32 * g;
            for (int l = 0; l < 16; ++l) {
                const uint8_t byte = prow[16 * g + l];
                // std::fmaf, not a*b+c: the SIMD kernels fuse this product, and glibc's fmaf is exact
                // (the FMA instruction where the CPU has one, a correct emulation where not).
                const float p = std::fmaf(xg[2 * l + 1], kE2m1Twice[byte >> 4], xg[2 * l] * kE2m1Twice[byte & 0xF]);
                acc[l] = std::fmaf(p, hs, acc[l]);
            }
        }
        for (int width = 8; width >= 1; width /= 2)
            for (int l = 0; l < width; ++l) acc[l] = acc[l] + acc[l + width];
        out[r] = acc[0];
    }
}

// Each 32-group's weights are decoded once per row and dotted with every vector, in the order above.
void dot_multi_scalar(const uint8_t* packed, const uint8_t* scale, int64_t n_in, int64_t n_rows, const void* const* xv,
                      int n_vec, float* const* out) {
    const int64_t row_bytes = n_in / 2, n_groups = n_in / 32;
    for (int64_t r = 0; r < n_rows; ++r) {
        const uint8_t* prow = packed + r * row_bytes;
        const uint8_t* srow = scale + r * n_groups;
        float acc[kMaxVecs][16] = {};
        for (int64_t g = 0; g < n_groups; ++g) {
            const float hs = kHalfScale[srow[g]];
            float we[16], wo[16];
            for (int l = 0; l < 16; ++l) {
                we[l] = kE2m1Twice[prow[16 * g + l] & 0xF];
                wo[l] = kE2m1Twice[prow[16 * g + l] >> 4];
            }
            for (int v = 0; v < n_vec; ++v) {
                const float* xg = static_cast<const float*>(xv[v]) + 32 * g;
                for (int l = 0; l < 16; ++l)
                    acc[v][l] = std::fmaf(std::fmaf(xg[2 * l + 1], wo[l], xg[2 * l] * we[l]), hs, acc[v][l]);
            }
        }
        for (int v = 0; v < n_vec; ++v) {
            for (int width = 8; width >= 1; width /= 2)
                for (int l = 0; l < width; ++l) acc[v][l] = acc[v][l] + acc[v][l + width];
            out[v][r] = acc[v][0];
        }
    }
}

}  // namespace onecard::host::detail
