// Warp-level tensor-core products (mma.sync, sm_80+/sm_89+) shared by the GEMVs and the attention
// kernel, and the warp split the GEMVs use. Included by .cu files only.
//
// Fragment layout of both (lane = 4g + t): A rows g and g + 8; a0/a1 hold the first k half of
// lane t's slice for row g / g + 8, a2/a3 the second; b0/b1 the same k halves of column g; the
// result d0, d1 = (row g, columns 2t, 2t + 1), d2, d3 = (row g + 8, same columns).
#pragma once

#include <cstdint>

namespace onecard::cuda {

namespace dev {

// d[16×8] += a[16×32] · b[32×8], E4M3 in, fp32 accumulate (sm_89+). Per register 4 k values:
// a0 = (g, 4t..4t+3), a1 = (g+8, 4t..4t+3), a2 = (g, 4t+16..4t+19), a3 = (g+8, 4t+16..4t+19).
__device__ __forceinline__ void mma_m16n8k32_e4m3(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                  uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// d[16×8] += a[16×16] · b[16×8], bf16 in, fp32 accumulate. Per register 2 k values:
// a0 = (g, 2t..2t+1), a1 = (g+8, 2t..2t+1), a2 = (g, 2t+8..2t+9), a3 = (g+8, 2t+8..2t+9).
__device__ __forceinline__ void mma_m16n8k16_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                  uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

}  // namespace dev

// Warps per 16-row tile of the dense GEMVs (fp8_gemv, bf16_gemv), which split a tile's k blocks
// round-robin: enough warps in flight on small matrices (wq_a|wkv: 96 tiles) without splitting the
// big ones thin (wq_b: 2048 tiles).
inline int gemv_split_warps(int64_t tiles) {
    return tiles >= 1024 ? 4 : tiles >= 256 ? 8 : 16;
}

}  // namespace onecard::cuda
