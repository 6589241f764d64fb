// The AVX2+FMA row-dot (the summation order of mxfp4_dot.h, 16 lanes as two 8-wide halves). Compiled
// with a function target attribute, not global flags, so the binary still runs on any x86-64; only
// called after runtime detection. x is F32Split: per 32-group, x[e] for lanes 0..15 then x[o].
#include "backend/host/mxfp4_dot.h"

#include <immintrin.h>

#include <algorithm>

#define ONECARD_TARGET_AVX2 __attribute__((target("avx2,fma")))

namespace onecard::host::detail {
namespace {

ONECARD_TARGET_AVX2 inline float reduce_tree(__m256 lo, __m256 hi) {
    __m256 s8 = _mm256_add_ps(lo, hi);                                                 // l + (l+8)
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));  // + (l+4)
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));                                 // + (l+2)
    __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));                             // + (l+1)
    return _mm_cvtss_f32(s1);
}

// R rows x V vectors in one pass: a row's group is decoded once, the x loads are shared by the R rows.
// 2·R·V accumulators: (R, V) in {(4, 1), (2, 2), (1, 3), (1, 4)}, within the 16 ymm registers; more
// vectors are done 4 at a time over the same pass (its rows then come from L1).
template <int R, int V>
ONECARD_TARGET_AVX2 void rows_avx2(const uint8_t* packed, const uint8_t* scale, int64_t n_in, const float* const* x,
                                   float* const* out, int64_t r0, const uint8_t* block_end, const uint8_t* scale_end) {
    // 2·E2M1 as int8 by code; -0 becomes 0, which changes no sum (mxfp4_dot.h).
    const __m128i lut = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    const __m128i low4 = _mm_set1_epi8(0x0F);
    const int64_t row_bytes = n_in / 2, n_groups = n_in / 32;
    prefetch_next_scales(scale, R, n_groups, scale_end);
    const float* xv[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) xv[v] = x[v];
    __m256 acc_lo[R][V], acc_hi[R][V];  // lanes 0..7, 8..15
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) acc_lo[r][v] = acc_hi[r][v] = _mm256_setzero_ps();
    for (int64_t g = 0; g < n_groups; ++g) {
        if ((g & 3) == 0)
#pragma GCC unroll 4
            for (int r = 0; r < R; ++r) prefetch_row_ahead(packed, r, R, row_bytes, 16 * g, block_end);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(packed + r * row_bytes + 16 * g));
            const __m128i we = _mm_shuffle_epi8(lut, _mm_and_si128(b, low4));                     // [16] int8
            const __m128i wo = _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(b, 4), low4));  // [16] int8
            const __m256 we_lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(we));
            const __m256 we_hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(we, we)));
            const __m256 wo_lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(wo));
            const __m256 wo_hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(wo, wo)));
            const __m256 hs = _mm256_set1_ps(kHalfScale[scale[r * n_groups + g]]);
#pragma GCC unroll 4
            for (int v = 0; v < V; ++v) {
                const float* xg = xv[v] + 32 * g;
                const __m256 p_lo =
                    _mm256_fmadd_ps(_mm256_loadu_ps(xg + 16), wo_lo, _mm256_mul_ps(_mm256_loadu_ps(xg), we_lo));
                const __m256 p_hi =
                    _mm256_fmadd_ps(_mm256_loadu_ps(xg + 24), wo_hi, _mm256_mul_ps(_mm256_loadu_ps(xg + 8), we_hi));
                acc_lo[r][v] = _mm256_fmadd_ps(p_lo, hs, acc_lo[r][v]);
                acc_hi[r][v] = _mm256_fmadd_ps(p_hi, hs, acc_hi[r][v]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) out[v][r0 + r] = reduce_tree(acc_lo[r][v], acc_hi[r][v]);
}

// One pass of R rows for n_vec vectors, up to 4 at a time.
template <int R>
ONECARD_TARGET_AVX2 void pass_avx2(const uint8_t* packed, const uint8_t* scale, int64_t n_in, const float* const* x,
                                   int n_vec, float* const* out, int64_t r0, const uint8_t* block_end,
                                   const uint8_t* scale_end) {
    for (int v = 0; v < n_vec; v += 4) {
        switch (std::min(4, n_vec - v)) {
            case 1:
                rows_avx2<R, 1>(packed, scale, n_in, x + v, out + v, r0, block_end, scale_end);
                break;
            case 2:
                rows_avx2<R, 2>(packed, scale, n_in, x + v, out + v, r0, block_end, scale_end);
                break;
            case 3:
                rows_avx2<R, 3>(packed, scale, n_in, x + v, out + v, r0, block_end, scale_end);
                break;
            default:
                rows_avx2<R, 4>(packed, scale, n_in, x + v, out + v, r0, block_end, scale_end);
                break;
        }
    }
}

}  // namespace

ONECARD_TARGET_AVX2 void dot_multi_avx2(const uint8_t* packed, const uint8_t* scale, int64_t n_in, int64_t n_rows,
                                        const void* const* xv, int n_vec, float* const* out) {
    const float* const* x = reinterpret_cast<const float* const*>(xv);
    const int64_t row_bytes = n_in / 2, n_groups = n_in / 32;
    const uint8_t* block_end = packed + n_rows * row_bytes;
    const uint8_t* scale_end = scale + n_rows * n_groups;
    const int64_t R = n_vec == 1 ? 4 : n_vec == 2 ? 2 : 1;
    int64_t r = 0;
    for (; R > 1 && r + R <= n_rows; r += R) {
        if (R == 4)
            pass_avx2<4>(packed + r * row_bytes, scale + r * n_groups, n_in, x, n_vec, out, r, block_end, scale_end);
        else
            pass_avx2<2>(packed + r * row_bytes, scale + r * n_groups, n_in, x, n_vec, out, r, block_end, scale_end);
    }
    for (; r < n_rows; ++r)
        pass_avx2<1>(packed + r * row_bytes, scale + r * n_groups, n_in, x, n_vec, out, r, block_end, scale_end);
}

ONECARD_TARGET_AVX2 void dot_rows_avx2(const uint8_t* packed, const uint8_t* scale, int64_t n_in, int64_t n_rows,
                                       const void* xv, float* out) {
    dot_multi_avx2(packed, scale, n_in, n_rows, &xv, 1, &out);
}

}  // namespace onecard::host::detail
