// Row-dot kernels: out[r] = Σ_k W[r, k] · x[k] for a run of rows of one MXFP4 matrix (internal to the
// host experts module; tests include it to check each ISA against the scalar definition).
//
// THE SUMMATION ORDER (every variant follows it, so every variant gives the same bits):
//   16 lanes; lane l of 32-group g owns byte 16g+l of the row, i.e. elements e = 32g+2l (low nibble)
//   and o = 32g+2l+1 (high nibble). With w2 = 2·E2M1 (an integer in [-12, 12]) and
//   hs = 2^(s_g-128) (the group scale with the 1/2 folded in):
//       p       = fma(x[o], w2[o], x[e] · w2[e])      (one fma: the second product is not rounded)
//       acc[l]  = fma(p, hs, acc[l])                  (p · hs is exact unless it over/underflows)
//   then out = tree sum of acc: l + (l+8), then + (l+4), + (l+2), + (l+1).
// The bf16 variant (avx512_bf16 dot products) computes p as round(x[e]·w2[e] + x[o]·w2[o]) in one
// instruction; that equals the fma form whenever x[e]·w2[e] is exact, which holds for every x that is
// exactly representable in bf16 (the kernel converts x to bf16) — in particular every FP8-dequantised
// vector (e4m3 · 2^k), which is all the pool feeds it. Denormal x would be flushed by that
// instruction; FP8-dequantised activations are >= 2^-31 in magnitude (the 1e-4 amax floor).
//
// MULTI-VECTOR ROW-DOTS (DotRowsMultiFn): out[v][r] for up to kMaxVecs vectors in one pass over the
// rows, so pairs that share an expert read (and decode) its weights once. Each (row, vector) keeps its
// own 16 accumulators in the order above: the bits equal n_vec separate single-vector calls.
#pragma once

#include "backend/host/host_experts.h"

#include <xmmintrin.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <limits>
#include <vector>

namespace onecard::host::detail {

// How a kernel wants its input vector laid out (phase A and phase C write this layout directly).
enum class VecLayout {
    F32Natural,   // fp32 [n]
    F32Split,     // fp32 [n]: per 32-group, the 16 even elements then the 16 odd ones
    Bf16Natural,  // bf16 [n] (uint16 bits)
};
size_t layout_bytes(VecLayout layout, int64_t n);
// Writes natural fp32 x[n] (n a multiple of 32) in `layout` at dst (bf16: round to nearest even).
void to_layout(VecLayout layout, const float* x, int64_t n, void* dst);

// out[r] for r in [0, n_rows): rows start at packed/scale (row strides n_in/2 and n_in/32 bytes);
// n_in a multiple of 32; x in the kernel's layout.
using DotRowsFn = void (*)(const uint8_t* packed, const uint8_t* scale, int64_t n_in, int64_t n_rows, const void* x,
                           float* out);

// out[v][r] = Σ_k W[r, k] · x[v][k] for v in [0, n_vec), 1 <= n_vec <= kMaxVecs, r in [0, n_rows).
inline constexpr int kMaxVecs = 8;
using DotRowsMultiFn = void (*)(const uint8_t* packed, const uint8_t* scale, int64_t n_in, int64_t n_rows,
                                const void* const* x, int n_vec, float* const* out);

struct DotKernel {
    const char* name;
    Isa isa;          // the ISA level it needs
    bool needs_bf16;  // also needs avx512_bf16
    VecLayout layout;
    DotRowsFn fn;
    DotRowsMultiFn multi;
};

// Every kernel built into this binary, scalar first (those the CPU cannot run included).
const std::vector<DotKernel>& dot_kernels();
bool kernel_supported(const DotKernel& k);
// The index (into dot_kernels()) of the kernel a pool on `isa` uses: on Avx512 the bf16 one only where
// the CPU has avx512_bf16 and allow_bf16 is set (throws onecard::Error if the CPU lacks `isa`).
int kernel_index_for(Isa isa, bool allow_bf16 = false);
bool cpu_has_avx512_bf16();

// The per-ISA kernels (one translation unit each, compiled with function target attributes).
void dot_rows_scalar(const uint8_t* packed, const uint8_t* scale, int64_t n_in, int64_t n_rows, const void* x,
                     float* out);
void dot_rows_avx2(const uint8_t* packed, const uint8_t* scale, int64_t n_in, int64_t n_rows, const void* x,
                   float* out);
void dot_rows_avx512(const uint8_t* packed, const uint8_t* scale, int64_t n_in, int64_t n_rows, const void* x,
                     float* out);
void dot_rows_avx512_bf16(const uint8_t* packed, const uint8_t* scale, int64_t n_in, int64_t n_rows, const void* x,
                          float* out);
void dot_multi_scalar(const uint8_t* packed, const uint8_t* scale, int64_t n_in, int64_t n_rows, const void* const* x,
                      int n_vec, float* const* out);
void dot_multi_avx2(const uint8_t* packed, const uint8_t* scale, int64_t n_in, int64_t n_rows, const void* const* x,
                    int n_vec, float* const* out);
void dot_multi_avx512(const uint8_t* packed, const uint8_t* scale, int64_t n_in, int64_t n_rows, const void* const* x,
                      int n_vec, float* const* out);
void dot_multi_avx512_bf16(const uint8_t* packed, const uint8_t* scale, int64_t n_in, int64_t n_rows,
                           const void* const* x, int n_vec, float* const* out);

// Software prefetch of the SIMD kernels. A pass streams R rows in parallel (R short streams, 1-2 KB
// each, that the hardware prefetchers pick up late and drop at every 4 KB page). Every 64 bytes of a
// row, the kernel prefetches kPrefetchAhead bytes further along the same row; once that runs past the
// row's end it continues into the same row of the NEXT pass, so the stream never restarts cold at a
// pass boundary. Addresses past the block (n_rows rows) are not prefetched: the next block usually
// belongs to another thread, and fetching it here would cost bandwidth twice. Measured (2-core
// Sapphire Rapids-class VM, bench/host_experts_bench): one thread streams 8.0 GB/s from DRAM (read
// bandwidth 9.6; the per-row 512 B prefetch that restarted at every pass gave 6.6) and 12 GB/s from
// cache, where the loop is the limit (7 vector ops per row and 32-group, 3 of them on port 5);
// 512 and 2048 bytes ahead measured within noise of 1024.
inline constexpr int64_t kPrefetchAhead = 1024;
// Row r of the pass starting at `pass`, `off` bytes in (off a multiple of 64).
inline void prefetch_row_ahead(const uint8_t* pass, int64_t r, int64_t rows_in_pass, int64_t row_bytes, int64_t off,
                               const uint8_t* block_end) {
    int64_t o = off + kPrefetchAhead;
    if (o >= row_bytes) o += (rows_in_pass - 1) * row_bytes;  // the same row of the next pass
    const uint8_t* a = pass + r * row_bytes + o;
    if (a < block_end) _mm_prefetch(reinterpret_cast<const char*>(a), _MM_HINT_T0);
}
// The next pass's scale bytes (rows_in_pass rows of n_groups bytes, contiguous), once per pass.
inline void prefetch_next_scales(const uint8_t* pass_scale, int64_t rows_in_pass, int64_t n_groups,
                                 const uint8_t* scale_end) {
    const uint8_t* b = pass_scale + rows_in_pass * n_groups;
    const uint8_t* e = std::min(b + rows_in_pass * n_groups, scale_end);
    for (const uint8_t* a = b; a < e; a += 64) _mm_prefetch(reinterpret_cast<const char*>(a), _MM_HINT_T0);
}

// 2·E2M1 by code (bit 3 = sign; the doubled values are integers, so exact in int8, fp32 and bf16).
inline constexpr std::array<float, 16> kE2m1Twice = {0.0f,  1.0f,  2.0f,  3.0f,  4.0f,  6.0f,  8.0f,  12.0f,
                                                     -0.0f, -1.0f, -2.0f, -3.0f, -4.0f, -6.0f, -8.0f, -12.0f};

// UE8M0 code s -> 2^(s-128) (the group scale halved, compensating kE2m1Twice); exact down to s = 0
// (2^-128 is an fp32 subnormal); s = 255 is NaN, as ue8m0_to_f32.
inline constexpr std::array<float, 256> make_half_scale_table() {
    std::array<float, 256> t{};
    for (int s = 0; s < 256; ++s) {
        uint32_t bits = 0;
        if (s == 255)
            bits = 0x7FC00000u;
        else if (s >= 2)
            bits = static_cast<uint32_t>(s - 1) << 23;  // biased exponent s-1 = 2^(s-128)
        else
            bits = s == 1 ? 0x00400000u : 0x00200000u;  // 2^-127, 2^-128: subnormal
        t[s] = std::bit_cast<float>(bits);
    }
    return t;
}
inline constexpr std::array<float, 256> kHalfScale = make_half_scale_table();

}  // namespace onecard::host::detail
