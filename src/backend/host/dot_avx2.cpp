// The AVX2+FMA row-dot (the summation order of mxfp4_dot.h, 16 lanes as two 8-wide halves). Compiled
// with a function target attribute, not global flags, so the binary still runs on any x86-64; only
// called after runtime detection. x is F32Split: per 32-group, x[e] for lanes 0..15 then x[o].
#include "backend/host/mxfp4_dot.h"

#include <immintrin.h>

#define ONECARD_TARGET_AVX2 __attribute__((target("avx2,fma")))

namespace onecard::host::detail {
namespace {

constexpr int64_t kPrefetchBytes = 512;  // per row stream, as dot_avx512.cpp (which says why)

ONECARD_TARGET_AVX2 inline float reduce_tree(__m256 lo, __m256 hi) {
    __m256 s8 = _mm256_add_ps(lo, hi);                                                   // l + (l+8)
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));     // + (l+4)
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));                                   // + (l+2)
    __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));                               // + (l+1)
    return _mm_cvtss_f32(s1);
}

// R rows in one pass: the x loads of a group are shared by the R rows.
template <int R>
ONECARD_TARGET_AVX2 void rows_avx2(const uint8_t* packed, const uint8_t* scale, int64_t n_in, const float* x,
                                   float* out) {
    // 2·E2M1 as int8 by code; -0 becomes 0, which changes no sum (mxfp4_dot.h).
    const __m128i lut = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    const __m128i low4 = _mm_set1_epi8(0x0F);
    const int64_t row_bytes = n_in / 2, n_groups = n_in / 32;
    __m256 acc_lo[R], acc_hi[R];  // lanes 0..7, 8..15
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc_lo[r] = acc_hi[r] = _mm256_setzero_ps();
    for (int64_t g = 0; g < n_groups; ++g) {
        const float* xg = x + 32 * g;
        const __m256 xe_lo = _mm256_loadu_ps(xg), xe_hi = _mm256_loadu_ps(xg + 8);
        const __m256 xo_lo = _mm256_loadu_ps(xg + 16), xo_hi = _mm256_loadu_ps(xg + 24);
        #pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            _mm_prefetch(reinterpret_cast<const char*>(packed + r * row_bytes + 16 * g + kPrefetchBytes), _MM_HINT_T0);
            const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(packed + r * row_bytes + 16 * g));
            const __m128i we = _mm_shuffle_epi8(lut, _mm_and_si128(b, low4));                     // [16] int8
            const __m128i wo = _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(b, 4), low4));  // [16] int8
            const __m256 we_lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(we));
            const __m256 we_hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(we, we)));
            const __m256 wo_lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(wo));
            const __m256 wo_hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(wo, wo)));
            const __m256 hs = _mm256_set1_ps(kHalfScale[scale[r * n_groups + g]]);
            const __m256 p_lo = _mm256_fmadd_ps(xo_lo, wo_lo, _mm256_mul_ps(xe_lo, we_lo));
            const __m256 p_hi = _mm256_fmadd_ps(xo_hi, wo_hi, _mm256_mul_ps(xe_hi, we_hi));
            acc_lo[r] = _mm256_fmadd_ps(p_lo, hs, acc_lo[r]);
            acc_hi[r] = _mm256_fmadd_ps(p_hi, hs, acc_hi[r]);
        }
    }
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) out[r] = reduce_tree(acc_lo[r], acc_hi[r]);
}

}  // namespace

ONECARD_TARGET_AVX2 void dot_rows_avx2(const uint8_t* packed, const uint8_t* scale, int64_t n_in, int64_t n_rows,
                                       const void* xv, float* out) {
    const float* x = static_cast<const float*>(xv);
    const int64_t row_bytes = n_in / 2, n_groups = n_in / 32;
    int64_t r = 0;
    for (; r + 4 <= n_rows; r += 4) rows_avx2<4>(packed + r * row_bytes, scale + r * n_groups, n_in, x, out + r);
    for (; r < n_rows; ++r) rows_avx2<1>(packed + r * row_bytes, scale + r * n_groups, n_in, x, out + r);
}

}  // namespace onecard::host::detail
