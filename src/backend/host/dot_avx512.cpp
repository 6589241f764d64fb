// The AVX-512 row-dots (the summation order of mxfp4_dot.h, one 16-lane register per row):
//  - dot_rows_avx512 (AVX-512F/BW, x F32Split): a group's 16 bytes are zero-extended to 16 dwords and
//    both nibbles looked up in a 16-entry fp32 table with vpermps (it reads only the low 4 index bits,
//    so the low nibble needs no mask);
//  - dot_rows_avx512_bf16 (+AVX512_BF16, x Bf16Natural): the same bytes become 32 bf16 weights in
//    natural element order with one vpermw, and vdpbf16ps forms each lane's two-product sum p.
// A pass holds R rows x V vectors of accumulators: a row's group is decoded once and dotted with all V
// vectors (grouped pairs of one expert). R shrinks as V grows so R·V stays <= 8 registers of chains.
// Compiled with function target attributes; only called after runtime detection.
#include "backend/host/mxfp4_dot.h"

// GCC 12 reports its own _mm512_undefined_* placeholders (self-initialised on purpose) as "may be used
// uninitialized" once AVX-512 intrinsics are inlined; the warning is about the header, not this code.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#define ONECARD_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))
#define ONECARD_TARGET_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")))

namespace onecard::host::detail {
namespace {

// The tree of mxfp4_dot.h: l + (l+8), + (l+4), + (l+2), + (l+1).
#define ONECARD_REDUCE16_BODY                                                                    \
    const __m256 s8 = _mm256_add_ps(_mm512_extractf32x8_ps(v, 0), _mm512_extractf32x8_ps(v, 1)); \
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));      \
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));                                     \
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));

ONECARD_TARGET_AVX512 inline float reduce16(__m512 v){ONECARD_REDUCE16_BODY} ONECARD_TARGET_AVX512_BF16
    inline float reduce16_bf(__m512 v) {
    ONECARD_REDUCE16_BODY
}

// Rows [0, R) of the pass at packed/scale (block_end / scale_end: where the caller's rows stop, for the
// prefetch), written to out[v][r0 + r].
template <int R, int V>
ONECARD_TARGET_AVX512 void rows_avx512(const uint8_t* packed, const uint8_t* scale, int64_t n_in, const float* const* x,
                                       float* const* out, int64_t r0, const uint8_t* block_end,
                                       const uint8_t* scale_end) {
    const __m512 lut = _mm512_loadu_ps(kE2m1Twice.data());
    const int64_t row_bytes = n_in / 2, n_groups = n_in / 32;
    prefetch_next_scales(scale, R, n_groups, scale_end);
    const float* xv[V];
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) xv[v] = x[v];
    __m512 acc[R][V];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
    for (int64_t g = 0; g < n_groups; ++g) {
        if ((g & 3) == 0)
#pragma GCC unroll 8
            for (int r = 0; r < R; ++r) prefetch_row_ahead(packed, r, R, row_bytes, 16 * g, block_end);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            const __m512i b = _mm512_cvtepu8_epi32(
                _mm_loadu_si128(reinterpret_cast<const __m128i*>(packed + r * row_bytes + 16 * g)));  // [16] bytes
            const __m512 we = _mm512_permutexvar_ps(b, lut);                                          // low nibbles
            const __m512 wo = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), lut);                    // high nibbles
            const __m512 hs = _mm512_set1_ps(kHalfScale[scale[r * n_groups + g]]);
#pragma GCC unroll 8
            for (int v = 0; v < V; ++v) {
                const __m512 xe = _mm512_loadu_ps(xv[v] + 32 * g), xo = _mm512_loadu_ps(xv[v] + 32 * g + 16);
                const __m512 p = _mm512_fmadd_ps(xo, wo, _mm512_mul_ps(xe, we));
                acc[r][v] = _mm512_fmadd_ps(p, hs, acc[r][v]);
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int v = 0; v < V; ++v) out[v][r0 + r] = reduce16(acc[r][v]);
}

template <int R, int V>
ONECARD_TARGET_AVX512_BF16 void rows_avx512_bf16(const uint8_t* packed, const uint8_t* scale, int64_t n_in,
                                                 const uint16_t* const* x, float* const* out, int64_t r0,
                                                 const uint8_t* block_end, const uint8_t* scale_end) {
    // bf16 bits of 2·E2M1 by code in words 0..15 (vpermw reads 5 index bits; codes are 0..15).
    alignas(64) static constexpr uint16_t kLut[32] = {0x0000, 0x3F80, 0x4000, 0x4040, 0x4080, 0x40C0, 0x4100, 0x4140,
                                                      0x8000, 0xBF80, 0xC000, 0xC040, 0xC080, 0xC0C0, 0xC100, 0xC140};
    const __m512i lut = _mm512_load_si512(kLut);
    const __m512i low4 = _mm512_set1_epi32(0x0F);
    const int64_t row_bytes = n_in / 2, n_groups = n_in / 32;
    prefetch_next_scales(scale, R, n_groups, scale_end);
    const uint16_t* xv[V];
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) xv[v] = x[v];
    __m512 acc[R][V];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
    for (int64_t g = 0; g < n_groups; ++g) {
        if ((g & 3) == 0)
#pragma GCC unroll 8
            for (int r = 0; r < R; ++r) prefetch_row_ahead(packed, r, R, row_bytes, 16 * g, block_end);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            const __m512i b = _mm512_cvtepu8_epi32(
                _mm_loadu_si128(reinterpret_cast<const __m128i*>(packed + r * row_bytes + 16 * g)));
            // dword l = byte l: word 2l <- low nibble (element 2l), word 2l+1 <- high nibble (2l+1).
            const __m512i idx = _mm512_ternarylogic_epi32(b, _mm512_slli_epi32(b, 12), low4, 0xEC);  // (A&C)|B
            const __m512bh w = (__m512bh)_mm512_permutexvar_epi16(idx, lut);
            const __m512 hs = _mm512_set1_ps(kHalfScale[scale[r * n_groups + g]]);
#pragma GCC unroll 8
            for (int v = 0; v < V; ++v) {
                const __m512bh xg = (__m512bh)_mm512_loadu_si512(xv[v] + 32 * g);  // [32] bf16, natural order
                const __m512 p = _mm512_dpbf16_ps(_mm512_setzero_ps(), xg, w);
                acc[r][v] = _mm512_fmadd_ps(p, hs, acc[r][v]);
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int v = 0; v < V; ++v) out[v][r0 + r] = reduce16_bf(acc[r][v]);
}

// Rows per pass for V vectors: 4 rows for one or two vectors (the x loads shared by 4 rows), fewer as
// V grows so that R·V accumulators plus the decoded weights stay within the 32 registers.
template <int V>
constexpr int rows_per_pass() {
    return V <= 2 ? 4 : V <= 4 ? 2 : 1;
}

template <int V>
ONECARD_TARGET_AVX512 void multi_avx512(const uint8_t* packed, const uint8_t* scale, int64_t n_in, int64_t n_rows,
                                        const float* const* x, float* const* out) {
    constexpr int R = rows_per_pass<V>();
    const int64_t row_bytes = n_in / 2, n_groups = n_in / 32;
    const uint8_t* block_end = packed + n_rows * row_bytes;
    const uint8_t* scale_end = scale + n_rows * n_groups;
    int64_t r = 0;
    for (; r + R <= n_rows; r += R)
        rows_avx512<R, V>(packed + r * row_bytes, scale + r * n_groups, n_in, x, out, r, block_end, scale_end);
    for (; r < n_rows; ++r)
        rows_avx512<1, V>(packed + r * row_bytes, scale + r * n_groups, n_in, x, out, r, block_end, scale_end);
}

template <int V>
ONECARD_TARGET_AVX512_BF16 void multi_avx512_bf16(const uint8_t* packed, const uint8_t* scale, int64_t n_in,
                                                  int64_t n_rows, const uint16_t* const* x, float* const* out) {
    constexpr int R = rows_per_pass<V>();
    const int64_t row_bytes = n_in / 2, n_groups = n_in / 32;
    const uint8_t* block_end = packed + n_rows * row_bytes;
    const uint8_t* scale_end = scale + n_rows * n_groups;
    int64_t r = 0;
    for (; r + R <= n_rows; r += R)
        rows_avx512_bf16<R, V>(packed + r * row_bytes, scale + r * n_groups, n_in, x, out, r, block_end, scale_end);
    for (; r < n_rows; ++r)
        rows_avx512_bf16<1, V>(packed + r * row_bytes, scale + r * n_groups, n_in, x, out, r, block_end, scale_end);
}

}  // namespace

ONECARD_TARGET_AVX512 void dot_multi_avx512(const uint8_t* packed, const uint8_t* scale, int64_t n_in, int64_t n_rows,
                                            const void* const* xv, int n_vec, float* const* out) {
    const float* const* x = reinterpret_cast<const float* const*>(xv);
    switch (n_vec) {
        case 1:
            return multi_avx512<1>(packed, scale, n_in, n_rows, x, out);
        case 2:
            return multi_avx512<2>(packed, scale, n_in, n_rows, x, out);
        case 3:
            return multi_avx512<3>(packed, scale, n_in, n_rows, x, out);
        case 4:
            return multi_avx512<4>(packed, scale, n_in, n_rows, x, out);
        case 5:
            return multi_avx512<5>(packed, scale, n_in, n_rows, x, out);
        case 6:
            return multi_avx512<6>(packed, scale, n_in, n_rows, x, out);
        case 7:
            return multi_avx512<7>(packed, scale, n_in, n_rows, x, out);
        case 8:
            return multi_avx512<8>(packed, scale, n_in, n_rows, x, out);
        default:
            return;
    }
}

ONECARD_TARGET_AVX512_BF16 void dot_multi_avx512_bf16(const uint8_t* packed, const uint8_t* scale, int64_t n_in,
                                                      int64_t n_rows, const void* const* xv, int n_vec,
                                                      float* const* out) {
    const uint16_t* const* x = reinterpret_cast<const uint16_t* const*>(xv);
    switch (n_vec) {
        case 1:
            return multi_avx512_bf16<1>(packed, scale, n_in, n_rows, x, out);
        case 2:
            return multi_avx512_bf16<2>(packed, scale, n_in, n_rows, x, out);
        case 3:
            return multi_avx512_bf16<3>(packed, scale, n_in, n_rows, x, out);
        case 4:
            return multi_avx512_bf16<4>(packed, scale, n_in, n_rows, x, out);
        case 5:
            return multi_avx512_bf16<5>(packed, scale, n_in, n_rows, x, out);
        case 6:
            return multi_avx512_bf16<6>(packed, scale, n_in, n_rows, x, out);
        case 7:
            return multi_avx512_bf16<7>(packed, scale, n_in, n_rows, x, out);
        case 8:
            return multi_avx512_bf16<8>(packed, scale, n_in, n_rows, x, out);
        default:
            return;
    }
}

ONECARD_TARGET_AVX512 void dot_rows_avx512(const uint8_t* packed, const uint8_t* scale, int64_t n_in, int64_t n_rows,
                                           const void* xv, float* out) {
    dot_multi_avx512(packed, scale, n_in, n_rows, &xv, 1, &out);
}

ONECARD_TARGET_AVX512_BF16 void dot_rows_avx512_bf16(const uint8_t* packed, const uint8_t* scale, int64_t n_in,
                                                     int64_t n_rows, const void* xv, float* out) {
    dot_multi_avx512_bf16(packed, scale, n_in, n_rows, &xv, 1, &out);
}

}  // namespace onecard::host::detail
