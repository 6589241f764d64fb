#include "backend/cuda/ops/fp8_gemv.cuh"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops/common.cuh"
#include "backend/cuda/ops/mma.cuh"
#include "backend/cuda/ops/pdl.cuh"

#include <algorithm>

namespace onecard::cuda {
namespace {

// grid (ceil(n/16)), S warps per block. A block owns a tile of 16 weight rows (inside one 128-row
// scale block, since 128 % 16 == 0); its warps split the 128-wide k blocks round-robin and add their
// partial sums in shared memory at the end. Per k block a lane (g = lane/4, t = lane%4) loads 16 bytes
// of rows g and g + 8 at byte offsets 16t and 64 + 16t: every load instruction of the warp reads whole
// 64-byte row segments. Those words are the A fragments of four mma.m16n8k32 as they are (within a
// 128-wide block the weight scale is one number, so any k order that A and B share is exact: lane t's
// bytes [16t, 16t + 8) are the mma's k {4t..4t+3, 4t+16..4t+19}); B is the same 16 bytes of the
// activation row of column g, read straight from the (L1-resident) quantised input. After the four
// mmas of a block, acc += D · ws[tile, kb] · xs[col, kb]. The next block's weights are in flight while
// the current one is multiplied. NT tiles of 8 activation rows (m <= 8·NT).
template <int S, int NT>
__global__ void __launch_bounds__(S * 32)
    fp8_gemv_mma_kernel(const uint8_t* __restrict__ xq, const float* __restrict__ xs, const uint8_t* __restrict__ w,
                        const float* __restrict__ ws, __nv_bfloat16* __restrict__ y, int m, int n, int k,
                        int64_t ld_y) {
    __shared__ float4 red[S][NT][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int n_kb = k / 128, ws_ld = (n_kb + 3) / 4 * 4;  // scale rows padded as fp8_gemm_weight_scale_ld
    const int r0 = static_cast<int>(blockIdx.x) * 16 + g, r1 = r0 + 8;
    // Rows past n re-read the last row (never stored), so no lane idles inside the mma.
    const uint8_t* wa = w + static_cast<int64_t>(min(r0, n - 1)) * k + 16 * t;
    const uint8_t* wb = w + static_cast<int64_t>(min(r1, n - 1)) * k + 16 * t;
    const float* wsr = ws + static_cast<int64_t>(blockIdx.x * 16 / 128) * ws_ld;

    float acc[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[nt][i] = 0.0f;

    auto load = [&](int kb, uint4(&v)[4]) {
        const int off = kb * 128;
        // Streamed once per step: keep it out of L1 (ld.global.cs).
        v[0] = __ldcs(reinterpret_cast<const uint4*>(wa + off));
        v[1] = __ldcs(reinterpret_cast<const uint4*>(wa + off + 64));
        v[2] = __ldcs(reinterpret_cast<const uint4*>(wb + off));
        v[3] = __ldcs(reinterpret_cast<const uint4*>(wb + off + 64));
    };
    auto compute = [&](int kb, const uint4(&v)[4]) {
        const float wsc = wsr[kb];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const int col = nt * 8 + g;
            uint4 x0 = make_uint4(0u, 0u, 0u, 0u), x1 = x0;
            if (col < m) {
                const uint8_t* xr = xq + static_cast<int64_t>(col) * k + kb * 128 + 16 * t;
                x0 = __ldg(reinterpret_cast<const uint4*>(xr));
                x1 = __ldg(reinterpret_cast<const uint4*>(xr + 64));
            }
            float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            dev::mma_m16n8k32_e4m3(d, v[0].x, v[2].x, v[0].y, v[2].y, x0.x, x0.y);
            dev::mma_m16n8k32_e4m3(d, v[0].z, v[2].z, v[0].w, v[2].w, x0.z, x0.w);
            dev::mma_m16n8k32_e4m3(d, v[1].x, v[3].x, v[1].y, v[3].y, x1.x, x1.y);
            dev::mma_m16n8k32_e4m3(d, v[1].z, v[3].z, v[1].w, v[3].w, x1.z, x1.w);
            const int c0 = nt * 8 + 2 * t, c1 = c0 + 1;
            const float s0 = c0 < m ? xs[static_cast<int64_t>(c0) * n_kb + kb] * wsc : 0.0f;
            const float s1 = c1 < m ? xs[static_cast<int64_t>(c1) * n_kb + kb] * wsc : 0.0f;
            acc[nt][0] = fmaf(d[0], s0, acc[nt][0]);
            acc[nt][1] = fmaf(d[1], s1, acc[nt][1]);
            acc[nt][2] = fmaf(d[2], s0, acc[nt][2]);
            acc[nt][3] = fmaf(d[3], s1, acc[nt][3]);
        }
    };
    uint4 cur[4], nxt[4];
    int kb = warp;
    // The first weights are requested before waiting for the previous kernel (pdl.cuh): nothing in a
    // step writes them, and their DRAM latency then overlaps that kernel's tail.
    if (kb < n_kb) load(kb, cur);
    dev::pdl_wait();
    dev::pdl_trigger();
    for (; kb < n_kb; kb += S) {
        const bool more = kb + S < n_kb;
        if (more) load(kb + S, nxt);
        compute(kb, cur);
        if (more) {
#pragma unroll
            for (int i = 0; i < 4; ++i) cur[i] = nxt[i];
        }
    }
    if (S > 1) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
            red[warp][nt][lane] = make_float4(acc[nt][0], acc[nt][1], acc[nt][2], acc[nt][3]);
        __syncthreads();
        if (warp != 0) return;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            for (int wi = 1; wi < S; ++wi) {  // fixed order: deterministic sums
                const float4 p = red[wi][nt][lane];
                acc[nt][0] += p.x;
                acc[nt][1] += p.y;
                acc[nt][2] += p.z;
                acc[nt][3] += p.w;
            }
        }
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const int c0 = nt * 8 + 2 * t, c1 = c0 + 1;
        if (r0 < n) {
            if (c0 < m) y[c0 * ld_y + r0] = __float2bfloat16(acc[nt][0]);
            if (c1 < m) y[c1 * ld_y + r0] = __float2bfloat16(acc[nt][1]);
        }
        if (r1 < n) {
            if (c0 < m) y[c0 * ld_y + r1] = __float2bfloat16(acc[nt][2]);
            if (c1 < m) y[c1 * ld_y + r1] = __float2bfloat16(acc[nt][3]);
        }
    }
}

template <int NT>
void launch(const uint8_t* xq, const float* xs, const uint8_t* w, const float* ws, __nv_bfloat16* y, int m, int64_t n,
            int64_t k, int64_t ld_y, cudaStream_t stream) {
    const int64_t tiles = (n + 15) / 16;
    const auto grid = static_cast<unsigned>(tiles);
    const int ni = static_cast<int>(n), ki = static_cast<int>(k);
    switch (gemv_split_warps(tiles)) {
        case 4:
            launch_pdl(fp8_gemv_mma_kernel<4, NT>, grid, 4 * 32, 0, stream, xq, xs, w, ws, y, m, ni, ki, ld_y);
            break;
        case 8:
            launch_pdl(fp8_gemv_mma_kernel<8, NT>, grid, 8 * 32, 0, stream, xq, xs, w, ws, y, m, ni, ki, ld_y);
            break;
        default:
            launch_pdl(fp8_gemv_mma_kernel<16, NT>, grid, 16 * 32, 0, stream, xq, xs, w, ws, y, m, ni, ki, ld_y);
    }
    CUDA_CHECK_LAUNCH("fp8_gemv_mma_kernel");
}

}  // namespace

void fp8_gemv(const uint8_t* xq, const float* xs, const uint8_t* w, const float* ws, __nv_bfloat16* y, int64_t m,
              int64_t n, int64_t k, cudaStream_t stream, int64_t ld_y) {
    ONECARD_CHECK(k > 0 && k % 128 == 0 && k < (int64_t{1} << 30), "fp8_gemv: k {} is not a multiple of 128", k);
    ONECARD_CHECK(n > 0 && n < (int64_t{1} << 30) && m >= 0, "fp8_gemv: bad shape m {} n {}", m, n);
    if (ld_y == 0) ld_y = n;
    const int64_t n_kb = k / 128;
    for (int64_t m0 = 0; m0 < m; m0 += kFp8GemvMaxM) {
        const int mm = static_cast<int>(std::min(kFp8GemvMaxM, m - m0));
        const uint8_t* xq0 = xq + m0 * k;
        const float* xs0 = xs + m0 * n_kb;
        __nv_bfloat16* y0 = y + m0 * ld_y;
        if (mm <= 8)
            launch<1>(xq0, xs0, w, ws, y0, mm, n, k, ld_y, stream);
        else if (mm <= 16)
            launch<2>(xq0, xs0, w, ws, y0, mm, n, k, ld_y, stream);
        else
            launch<4>(xq0, xs0, w, ws, y0, mm, n, k, ld_y, stream);
    }
}

}  // namespace onecard::cuda
