// The AVX-512 row-dots (the summation order of mxfp4_dot.h, one 16-lane register per row):
//  - dot_rows_avx512 (AVX-512F/BW, x F32Split): a group's 16 bytes are zero-extended to 16 dwords and
//    both nibbles looked up in a 16-entry fp32 table with vpermps (it reads only the low 4 index bits,
//    so the low nibble needs no mask);
//  - dot_rows_avx512_bf16 (+AVX512_BF16, x Bf16Natural): the same bytes become 32 bf16 weights in
//    natural element order with one vpermw, and vdpbf16ps forms each lane's two-product sum p.
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

// Software prefetch distance along each row (bytes). The R rows of a pass are R interleaved streams
// 2 KB apart, which the hardware prefetchers follow late; prefetching 512 B ahead in every stream took
// a DRAM-bound single thread from ~5.5 to ~7.2 GB/s on Sapphire Rapids (256: same, 2048: worse).
constexpr int64_t kPrefetchBytes = 512;

// The tree of mxfp4_dot.h: l + (l+8), + (l+4), + (l+2), + (l+1).
#define ONECARD_REDUCE16_BODY                                                                         \
    const __m256 s8 = _mm256_add_ps(_mm512_extractf32x8_ps(v, 0), _mm512_extractf32x8_ps(v, 1));      \
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));            \
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));                                          \
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));

ONECARD_TARGET_AVX512 inline float reduce16(__m512 v) { ONECARD_REDUCE16_BODY }
ONECARD_TARGET_AVX512_BF16 inline float reduce16_bf(__m512 v) { ONECARD_REDUCE16_BODY }

template <int R>
ONECARD_TARGET_AVX512 void rows_avx512(const uint8_t* packed, const uint8_t* scale, int64_t n_in, const float* x,
                                       float* out) {
    const __m512 lut = _mm512_loadu_ps(kE2m1Twice.data());
    const int64_t row_bytes = n_in / 2, n_groups = n_in / 32;
    __m512 acc[R];
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t g = 0; g < n_groups; ++g) {
        const __m512 xe = _mm512_loadu_ps(x + 32 * g), xo = _mm512_loadu_ps(x + 32 * g + 16);
        #pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            _mm_prefetch(reinterpret_cast<const char*>(packed + r * row_bytes + 16 * g + kPrefetchBytes), _MM_HINT_T0);
            const __m512i v = _mm512_cvtepu8_epi32(
                _mm_loadu_si128(reinterpret_cast<const __m128i*>(packed + r * row_bytes + 16 * g)));  // [16] bytes
            const __m512 we = _mm512_permutexvar_ps(v, lut);                         // low nibbles
            const __m512 wo = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), lut);  // high nibbles
            const __m512 p = _mm512_fmadd_ps(xo, wo, _mm512_mul_ps(xe, we));
            acc[r] = _mm512_fmadd_ps(p, _mm512_set1_ps(kHalfScale[scale[r * n_groups + g]]), acc[r]);
        }
    }
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) out[r] = reduce16(acc[r]);
}

template <int R>
ONECARD_TARGET_AVX512_BF16 void rows_avx512_bf16(const uint8_t* packed, const uint8_t* scale, int64_t n_in,
                                                 const uint16_t* x, float* out) {
    // bf16 bits of 2·E2M1 by code in words 0..15 (vpermw reads 5 index bits; codes are 0..15).
    alignas(64) static constexpr uint16_t kLut[32] = {0x0000, 0x3F80, 0x4000, 0x4040, 0x4080, 0x40C0, 0x4100, 0x4140,
                                                      0x8000, 0xBF80, 0xC000, 0xC040, 0xC080, 0xC0C0, 0xC100, 0xC140};
    const __m512i lut = _mm512_load_si512(kLut);
    const __m512i low4 = _mm512_set1_epi32(0x0F);
    const int64_t row_bytes = n_in / 2, n_groups = n_in / 32;
    __m512 acc[R];
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t g = 0; g < n_groups; ++g) {
        const __m512bh xg = (__m512bh)_mm512_loadu_si512(x + 32 * g);  // [32] bf16, natural order
        #pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            _mm_prefetch(reinterpret_cast<const char*>(packed + r * row_bytes + 16 * g + kPrefetchBytes), _MM_HINT_T0);
            const __m512i v = _mm512_cvtepu8_epi32(
                _mm_loadu_si128(reinterpret_cast<const __m128i*>(packed + r * row_bytes + 16 * g)));
            // dword l = byte l: word 2l <- low nibble (element 2l), word 2l+1 <- high nibble (2l+1).
            const __m512i idx = _mm512_ternarylogic_epi32(v, _mm512_slli_epi32(v, 12), low4, 0xEC);  // (A&C)|B
            const __m512bh w = (__m512bh)_mm512_permutexvar_epi16(idx, lut);
            const __m512 p = _mm512_dpbf16_ps(_mm512_setzero_ps(), xg, w);
            acc[r] = _mm512_fmadd_ps(p, _mm512_set1_ps(kHalfScale[scale[r * n_groups + g]]), acc[r]);
        }
    }
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) out[r] = reduce16_bf(acc[r]);
}

}  // namespace

ONECARD_TARGET_AVX512 void dot_rows_avx512(const uint8_t* packed, const uint8_t* scale, int64_t n_in,
                                           int64_t n_rows, const void* xv, float* out) {
    const float* x = static_cast<const float*>(xv);
    const int64_t row_bytes = n_in / 2, n_groups = n_in / 32;
    int64_t r = 0;
    for (; r + 4 <= n_rows; r += 4) rows_avx512<4>(packed + r * row_bytes, scale + r * n_groups, n_in, x, out + r);
    for (; r < n_rows; ++r) rows_avx512<1>(packed + r * row_bytes, scale + r * n_groups, n_in, x, out + r);
}

ONECARD_TARGET_AVX512_BF16 void dot_rows_avx512_bf16(const uint8_t* packed, const uint8_t* scale, int64_t n_in,
                                                     int64_t n_rows, const void* xv, float* out) {
    const uint16_t* x = static_cast<const uint16_t*>(xv);
    const int64_t row_bytes = n_in / 2, n_groups = n_in / 32;
    int64_t r = 0;
    for (; r + 4 <= n_rows; r += 4)
        rows_avx512_bf16<4>(packed + r * row_bytes, scale + r * n_groups, n_in, x, out + r);
    for (; r < n_rows; ++r) rows_avx512_bf16<1>(packed + r * row_bytes, scale + r * n_groups, n_in, x, out + r);
}

}  // namespace onecard::host::detail
