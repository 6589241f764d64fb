#include "backend/cuda/ops/bf16_gemv.cuh"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops/mma.cuh"
#include "backend/cuda/ops/pdl.cuh"

#include <algorithm>

namespace onecard::cuda {
namespace {

// grid (ceil(n/16)), S warps per block splitting the 64-element k blocks round-robin (partial sums
// added in shared memory). Per k block a lane (g = lane/4, t = lane%4) loads 16 bytes (8 elements) of
// rows g and g + 8 at element offsets 8t and 32 + 8t, i.e. whole 64-byte row segments per warp load.
// Those words are the A fragments of four mma.m16n8k16 as stored (no scale, so any k order shared by
// A and B is exact: lane t's elements [8t, 8t + 4) are the mma's k {2t, 2t+1, 2t+8, 2t+9}); B is the
// same 16 bytes of the activation row of column g. The next block's weights are in flight while the
// current one is multiplied; the first are requested before the programmatic-launch wait.
template <int S, int NT, bool F32>
__global__ void __launch_bounds__(S * 32)
    bf16_gemv_kernel(const __nv_bfloat16* __restrict__ x, int64_t ld_x, const __nv_bfloat16* __restrict__ w,
                     void* __restrict__ yv, int64_t ld_y, int m, int n, int k, int rows_per_group, float alpha) {
    __shared__ float4 red[S][NT][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int n_kb = k / 64;
    const int r0 = static_cast<int>(blockIdx.x) * 16 + g, r1 = r0 + 8;
    const __nv_bfloat16* wa = w + static_cast<int64_t>(min(r0, n - 1)) * k + 8 * t;
    const __nv_bfloat16* wb = w + static_cast<int64_t>(min(r1, n - 1)) * k + 8 * t;
    // The tile's 16 rows lie in one group (rows_per_group % 16 == 0).
    const int64_t x_off = static_cast<int64_t>(blockIdx.x * 16 / rows_per_group) * k + 8 * t;

    float acc[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[nt][i] = 0.0f;

    auto load = [&](int kb, uint4 (&v)[4]) {
        const int off = kb * 64;
        v[0] = __ldcs(reinterpret_cast<const uint4*>(wa + off));
        v[1] = __ldcs(reinterpret_cast<const uint4*>(wa + off + 32));
        v[2] = __ldcs(reinterpret_cast<const uint4*>(wb + off));
        v[3] = __ldcs(reinterpret_cast<const uint4*>(wb + off + 32));
    };
    auto compute = [&](int kb, const uint4 (&v)[4]) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const int col = nt * 8 + g;
            uint4 x0 = make_uint4(0u, 0u, 0u, 0u), x1 = x0;
            if (col < m) {
                const __nv_bfloat16* xr = x + static_cast<int64_t>(col) * ld_x + x_off + kb * 64;
                x0 = __ldg(reinterpret_cast<const uint4*>(xr));
                x1 = __ldg(reinterpret_cast<const uint4*>(xr + 32));
            }
            dev::mma_m16n8k16_bf16(acc[nt], v[0].x, v[2].x, v[0].y, v[2].y, x0.x, x0.y);
            dev::mma_m16n8k16_bf16(acc[nt], v[0].z, v[2].z, v[0].w, v[2].w, x0.z, x0.w);
            dev::mma_m16n8k16_bf16(acc[nt], v[1].x, v[3].x, v[1].y, v[3].y, x1.x, x1.y);
            dev::mma_m16n8k16_bf16(acc[nt], v[1].z, v[3].z, v[1].w, v[3].w, x1.z, x1.w);
        }
    };
    uint4 cur[4], nxt[4];
    int kb = warp;
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
        for (int nt = 0; nt < NT; ++nt) red[warp][nt][lane] = make_float4(acc[nt][0], acc[nt][1], acc[nt][2], acc[nt][3]);
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
    auto store = [&](int col, int row, float v) {
        v *= alpha;  // exact when alpha == 1
        if (F32)
            static_cast<float*>(yv)[col * ld_y + row] = v;
        else
            static_cast<__nv_bfloat16*>(yv)[col * ld_y + row] = __float2bfloat16(v);
    };
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const int c0 = nt * 8 + 2 * t, c1 = c0 + 1;
        if (r0 < n) {
            if (c0 < m) store(c0, r0, acc[nt][0]);
            if (c1 < m) store(c1, r0, acc[nt][1]);
        }
        if (r1 < n) {
            if (c0 < m) store(c0, r1, acc[nt][2]);
            if (c1 < m) store(c1, r1, acc[nt][3]);
        }
    }
}

template <int NT, bool F32>
void launch(const __nv_bfloat16* x, int64_t ld_x, const __nv_bfloat16* w, void* y, int64_t ld_y, int m, int64_t n,
            int64_t k, int rows_per_group, float alpha, cudaStream_t stream) {
    const int64_t tiles = (n + 15) / 16;
    const auto grid = static_cast<unsigned>(tiles);
    const int ni = static_cast<int>(n), ki = static_cast<int>(k);
    switch (gemv_split_warps(tiles)) {
        case 4:
            launch_pdl(bf16_gemv_kernel<4, NT, F32>, grid, 4 * 32, 0, stream, x, ld_x, w, y, ld_y, m, ni, ki,
                       rows_per_group, alpha);
            break;
        case 8:
            launch_pdl(bf16_gemv_kernel<8, NT, F32>, grid, 8 * 32, 0, stream, x, ld_x, w, y, ld_y, m, ni, ki,
                       rows_per_group, alpha);
            break;
        default:
            launch_pdl(bf16_gemv_kernel<16, NT, F32>, grid, 16 * 32, 0, stream, x, ld_x, w, y, ld_y, m, ni, ki,
                       rows_per_group, alpha);
    }
    CUDA_CHECK_LAUNCH("bf16_gemv_kernel");
}

template <bool F32>
void dispatch(const __nv_bfloat16* x, int64_t ld_x, const __nv_bfloat16* w, void* y, int64_t ld_y, int mm, int64_t n,
              int64_t k, int rows_per_group, float alpha, cudaStream_t stream) {
    if (mm <= 8)
        launch<1, F32>(x, ld_x, w, y, ld_y, mm, n, k, rows_per_group, alpha, stream);
    else if (mm <= 16)
        launch<2, F32>(x, ld_x, w, y, ld_y, mm, n, k, rows_per_group, alpha, stream);
    else
        launch<4, F32>(x, ld_x, w, y, ld_y, mm, n, k, rows_per_group, alpha, stream);
}

}  // namespace

bool bf16_gemv_ok(const __nv_bfloat16* x, int64_t ld_x, const __nv_bfloat16* w, int64_t k) {
    return k > 0 && k % 64 == 0 && ld_x % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
           reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

void bf16_gemv(const __nv_bfloat16* x, int64_t ld_x, const __nv_bfloat16* w, void* y, GemmOut out, int64_t ld_y,
               int64_t m, int64_t n, int64_t k, cudaStream_t stream, int64_t rows_per_group, float alpha) {
    const int64_t groups = rows_per_group > 0 ? n / rows_per_group : 1;
    if (ld_x == 0) ld_x = k * groups;
    if (ld_y == 0) ld_y = n;
    ONECARD_CHECK(n > 0 && n < (int64_t{1} << 30) && m >= 0 && k < (int64_t{1} << 30), "bf16_gemv: bad shape m {} n {} k {}",
                  m, n, k);
    ONECARD_CHECK(bf16_gemv_ok(x, ld_x, w, k) && ld_x >= k * groups,
                  "bf16_gemv: k {} (a multiple of 64), ld_x {} (a multiple of 8, >= {}), 16-byte aligned x and W", k,
                  ld_x, k * groups);
    ONECARD_CHECK(rows_per_group == 0 || (rows_per_group % 16 == 0 && n % rows_per_group == 0),
                  "bf16_gemv: {} rows per group (a multiple of 16 dividing n = {})", rows_per_group, n);
    const int rpg = static_cast<int>(rows_per_group > 0 ? rows_per_group : ((n + 15) / 16) * 16);
    const size_t esz = out == GemmOut::F32 ? 4 : 2;
    for (int64_t m0 = 0; m0 < m; m0 += kBf16GemvMaxM) {
        const int mm = static_cast<int>(std::min(kBf16GemvMaxM, m - m0));
        const __nv_bfloat16* x0 = x + m0 * ld_x;
        void* y0 = static_cast<char*>(y) + static_cast<size_t>(m0 * ld_y) * esz;
        if (out == GemmOut::F32)
            dispatch<true>(x0, ld_x, w, y0, ld_y, mm, n, k, rpg, alpha, stream);
        else
            dispatch<false>(x0, ld_x, w, y0, ld_y, mm, n, k, rpg, alpha, stream);
    }
}

}  // namespace onecard::cuda
