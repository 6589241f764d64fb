#include "backend/cuda/ops/bf16_gemv.cuh"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops/common.cuh"
#include "backend/cuda/ops/fp8_gemm.cuh"
#include "backend/cuda/ops/mma.cuh"
#include "backend/cuda/ops/pdl.cuh"

#include <algorithm>

namespace onecard::cuda {
namespace {

// Four E4M3 bytes (element i in byte i) -> bf16x2 words lo = (e0, e1), hi = (e2, e3) holding
// value · 2^-120: the E4M3 exponent field becomes the low 4 bits of the bf16 one and the mantissa its
// top 3 bits, so E4M3 subnormals land on bf16 subnormals of the same scaled value (integer ops only:
// no conversion unit in the weight stream).
__device__ __forceinline__ void e4m3x4_to_bf16x2_shifted(uint32_t u, uint32_t& lo, uint32_t& hi) {
    const uint32_t a = __byte_perm(u, 0u, 0x1404), b = __byte_perm(u, 0u, 0x3424);  // bytes to bits 15..8 of each half
    lo = (a & 0x80008000u) | ((a >> 4) & 0x07F007F0u);
    hi = (b & 0x80008000u) | ((b >> 4) & 0x07F007F0u);
}

__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, __nv_bfloat162 b) {
    __nv_bfloat162 v = __hmul2(*reinterpret_cast<__nv_bfloat162*>(&a), b);
    return *reinterpret_cast<uint32_t*>(&v);
}

// grid (ceil(n/16)), S warps per block splitting the k blocks round-robin (partial sums added in
// shared memory). bf16 weights (FP8W false), k blocks of 64: a lane (g = lane/4, t = lane%4) loads
// 16 bytes (8 elements) of rows g and g + 8 at element offsets 8t and 32 + 8t, i.e. whole 64-byte row
// segments per warp load. Those words are the A fragments of four mma.m16n8k16 as stored (no scale,
// so any k order shared by A and B is exact: lane t's elements [8t, 8t + 4) are the mma's k {2t, 2t+1,
// 2t+8, 2t+9}); B is the same 16 bytes of the activation row of column g.
// FP8 weights (FP8W true, wo_a), k blocks of 128 = one weight scale: the lane loads 16 bytes (16
// elements) of rows g and g + 8 at offsets 16t and 64 + 16t and turns them into the bf16 values REF's
// dequantisation gives (E4M3 · 2^-120 by bit moves, then · 2^120 and · scale: power-of-two products,
// exact), eight mmas per block; B is the 32 activation elements at the same offsets.
// The next block's weights are in flight while the current one is multiplied; the first are requested
// before the programmatic-launch wait.
template <int S, int NT, bool F32, bool FP8W>
__global__ void __launch_bounds__(S * 32)
    bf16_gemv_kernel(const __nv_bfloat16* __restrict__ x, int64_t ld_x, const void* __restrict__ wv,
                     const float* __restrict__ ws, int64_t ld_ws, void* __restrict__ yv, int64_t ld_y, int m, int n,
                     int k, int rows_per_group, float alpha) {
    __shared__ float4 red[S][NT][32];
    constexpr int kKb = FP8W ? 128 : 64;   // elements per k block
    constexpr int kEsz = FP8W ? 1 : 2;     // weight bytes per element
    constexpr int kLaneElems = 16 / kEsz;  // elements per 16-byte load
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int n_kb = k / kKb;
    const int r0 = static_cast<int>(blockIdx.x) * 16 + g, r1 = r0 + 8;
    const auto* w = static_cast<const uint8_t*>(wv);
    const uint8_t* wa = w + (static_cast<int64_t>(min(r0, n - 1)) * k + kLaneElems * t) * kEsz;
    const uint8_t* wb = w + (static_cast<int64_t>(min(r1, n - 1)) * k + kLaneElems * t) * kEsz;
    // The tile's 16 rows lie in one group (rows_per_group % 16 == 0) and one 128-row scale block.
    const int64_t x_off = static_cast<int64_t>(blockIdx.x * 16 / rows_per_group) * k + kLaneElems * t;
    const float* ws_tile = FP8W ? ws + static_cast<int64_t>(blockIdx.x * 16 / 128) * ld_ws : nullptr;

    float acc[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[nt][i] = 0.0f;

    auto load = [&](int kb, uint4(&v)[4], float& sc) {
        const int64_t off = static_cast<int64_t>(kb) * kKb * kEsz;  // bytes
        v[0] = __ldcs(reinterpret_cast<const uint4*>(wa + off));
        v[1] = __ldcs(reinterpret_cast<const uint4*>(wa + off + kKb / 2 * kEsz));
        v[2] = __ldcs(reinterpret_cast<const uint4*>(wb + off));
        v[3] = __ldcs(reinterpret_cast<const uint4*>(wb + off + kKb / 2 * kEsz));
        if (FP8W) sc = __ldg(ws_tile + kb);
    };
    auto compute = [&](int kb, const uint4(&v)[4], float sc) {
        if constexpr (!FP8W) {
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
        } else {
            const __nv_bfloat162 up = __float2bfloat162_rn(0x1p120f), s2 = __float2bfloat162_rn(sc);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                // Rows g (a) and g + 8 (b): 16 elements each as 8 bf16x2 words, word i = elements 2i, 2i + 1.
                uint32_t a[8], b[8];
                const uint32_t wa4[4] = {v[h].x, v[h].y, v[h].z, v[h].w};
                const uint32_t wb4[4] = {v[2 + h].x, v[2 + h].y, v[2 + h].z, v[2 + h].w};
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    e4m3x4_to_bf16x2_shifted(wa4[i], a[2 * i], a[2 * i + 1]);
                    e4m3x4_to_bf16x2_shifted(wb4[i], b[2 * i], b[2 * i + 1]);
                }
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    a[i] = bf16x2_mul(bf16x2_mul(a[i], up), s2);
                    b[i] = bf16x2_mul(bf16x2_mul(b[i], up), s2);
                }
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    const int col = nt * 8 + g;
                    uint4 x0 = make_uint4(0u, 0u, 0u, 0u), x1 = x0;
                    if (col < m) {
                        const __nv_bfloat16* xr = x + static_cast<int64_t>(col) * ld_x + x_off + kb * 128 + h * 64;
                        x0 = __ldg(reinterpret_cast<const uint4*>(xr));
                        x1 = __ldg(reinterpret_cast<const uint4*>(xr + 8));
                    }
                    dev::mma_m16n8k16_bf16(acc[nt], a[0], b[0], a[1], b[1], x0.x, x0.y);
                    dev::mma_m16n8k16_bf16(acc[nt], a[2], b[2], a[3], b[3], x0.z, x0.w);
                    dev::mma_m16n8k16_bf16(acc[nt], a[4], b[4], a[5], b[5], x1.x, x1.y);
                    dev::mma_m16n8k16_bf16(acc[nt], a[6], b[6], a[7], b[7], x1.z, x1.w);
                }
            }
        }
    };
    uint4 cur[4], nxt[4];
    float sc_cur = 0.0f, sc_nxt = 0.0f;
    int kb = warp;
    if (kb < n_kb) load(kb, cur, sc_cur);
    dev::pdl_wait();
    dev::pdl_trigger();
    for (; kb < n_kb; kb += S) {
        const bool more = kb + S < n_kb;
        if (more) load(kb + S, nxt, sc_nxt);
        compute(kb, cur, sc_cur);
        if (more) {
#pragma unroll
            for (int i = 0; i < 4; ++i) cur[i] = nxt[i];
            sc_cur = sc_nxt;
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

template <int NT, bool F32, bool FP8W>
void launch(const __nv_bfloat16* x, int64_t ld_x, const void* w, const float* ws, int64_t ld_ws, void* y, int64_t ld_y,
            int m, int64_t n, int64_t k, int rows_per_group, float alpha, cudaStream_t stream) {
    const int64_t tiles = (n + 15) / 16;
    const auto grid = static_cast<unsigned>(tiles);
    const int ni = static_cast<int>(n), ki = static_cast<int>(k);
    // Eight column tiles keep at most 8 warps (the partial-sum buffer stays within 48 KiB).
    const int warps = NT == 8 ? std::min(8, gemv_split_warps(tiles)) : gemv_split_warps(tiles);
    if (warps == 4) {
        launch_pdl(bf16_gemv_kernel<4, NT, F32, FP8W>, grid, 4 * 32, 0, stream, x, ld_x, w, ws, ld_ws, y, ld_y, m, ni,
                   ki, rows_per_group, alpha);
    } else if (warps == 8) {
        launch_pdl(bf16_gemv_kernel<8, NT, F32, FP8W>, grid, 8 * 32, 0, stream, x, ld_x, w, ws, ld_ws, y, ld_y, m, ni,
                   ki, rows_per_group, alpha);
    } else if constexpr (NT < 8) {
        launch_pdl(bf16_gemv_kernel<16, NT, F32, FP8W>, grid, 16 * 32, 0, stream, x, ld_x, w, ws, ld_ws, y, ld_y, m, ni,
                   ki, rows_per_group, alpha);
    }
    CUDA_CHECK_LAUNCH("bf16_gemv_kernel");
}

template <bool F32, bool FP8W>
void dispatch(const __nv_bfloat16* x, int64_t ld_x, const void* w, const float* ws, int64_t ld_ws, void* y,
              int64_t ld_y, int mm, int64_t n, int64_t k, int rows_per_group, float alpha, cudaStream_t stream) {
    if (mm <= 8)
        launch<1, F32, FP8W>(x, ld_x, w, ws, ld_ws, y, ld_y, mm, n, k, rows_per_group, alpha, stream);
    else if (mm <= 16)
        launch<2, F32, FP8W>(x, ld_x, w, ws, ld_ws, y, ld_y, mm, n, k, rows_per_group, alpha, stream);
    else if (!FP8W || mm <= 32)
        launch<4, F32, FP8W>(x, ld_x, w, ws, ld_ws, y, ld_y, mm, n, k, rows_per_group, alpha, stream);
    else if constexpr (FP8W)
        launch<8, F32, FP8W>(x, ld_x, w, ws, ld_ws, y, ld_y, mm, n, k, rows_per_group, alpha, stream);
}

// Both weight kinds: checks, then passes of up to 32 activation rows.
template <bool FP8W>
void gemv_passes(const __nv_bfloat16* x, int64_t ld_x, const void* w, const float* ws, void* y, GemmOut out,
                 int64_t ld_y, int64_t m, int64_t n, int64_t k, cudaStream_t stream, int64_t rows_per_group,
                 float alpha) {
    const int64_t groups = rows_per_group > 0 ? n / rows_per_group : 1;
    if (ld_x == 0) ld_x = k * groups;
    if (ld_y == 0) ld_y = n;
    const int64_t kb = FP8W ? 128 : 64;
    ONECARD_CHECK(n > 0 && n < (int64_t{1} << 30) && m >= 0 && k < (int64_t{1} << 30),
                  "bf16_gemv: bad shape m {} n {} k {}", m, n, k);
    ONECARD_CHECK(k > 0 && k % kb == 0 && ld_x % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(w) % 16 == 0 && ld_x >= k * groups,
                  "bf16_gemv: k {} (a multiple of {}), ld_x {} (a multiple of 8, >= {}), 16-byte aligned x and W", k,
                  kb, ld_x, k * groups);
    ONECARD_CHECK(rows_per_group == 0 || (rows_per_group % 16 == 0 && n % rows_per_group == 0),
                  "bf16_gemv: {} rows per group (a multiple of 16 dividing n = {})", rows_per_group, n);
    const int rpg = static_cast<int>(rows_per_group > 0 ? rows_per_group : ((n + 15) / 16) * 16);
    const int64_t ld_ws = FP8W ? fp8_gemm_weight_scale_ld(k) : 0;
    const size_t esz = out == GemmOut::F32 ? 4 : 2;
    const int64_t pass = FP8W ? kBf16GemvFp8wMaxM : kBf16GemvMaxM;
    for (int64_t m0 = 0; m0 < m; m0 += pass) {
        const int mm = static_cast<int>(std::min(pass, m - m0));
        const __nv_bfloat16* x0 = x + m0 * ld_x;
        void* y0 = static_cast<char*>(y) + static_cast<size_t>(m0 * ld_y) * esz;
        if (out == GemmOut::F32)
            dispatch<true, FP8W>(x0, ld_x, w, ws, ld_ws, y0, ld_y, mm, n, k, rpg, alpha, stream);
        else
            dispatch<false, FP8W>(x0, ld_x, w, ws, ld_ws, y0, ld_y, mm, n, k, rpg, alpha, stream);
    }
}

// out [n, k] bf16 = E4M3 w · its 128×128 block scale (fp8_gemm_weight_scale_ld layout): exact.
__global__ void fp8_weight_to_bf16_kernel(const uint8_t* __restrict__ w, const float* __restrict__ ws, int64_t ld_ws,
                                          __nv_bfloat16* __restrict__ out, int64_t n, int64_t k) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;  // 4-element chunk
    if (i * 4 >= n * k) return;
    const int64_t r = i * 4 / k, c = i * 4 % k;
    const uint32_t u = reinterpret_cast<const uint32_t*>(w)[i];
    const float sc = ws[(r / 128) * ld_ws + c / 128];
    __nv_bfloat16* o = out + i * 4;
#pragma unroll
    for (int j = 0; j < 4; ++j) o[j] = __float2bfloat16(dev::e4m3_to_f32(static_cast<uint8_t>(u >> (8 * j))) * sc);
}

}  // namespace

bool bf16_gemv_ok(const __nv_bfloat16* x, int64_t ld_x, const __nv_bfloat16* w, int64_t k) {
    return k > 0 && k % 64 == 0 && ld_x % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
           reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

void bf16_gemv(const __nv_bfloat16* x, const __nv_bfloat16* w, void* y, GemmOut out, const Bf16GemvShape& sh,
               cudaStream_t stream, float alpha) {
    gemv_passes<false>(x, sh.ld_x, w, nullptr, y, out, sh.ld_y, sh.m, sh.n, sh.k, stream, sh.rows_per_group, alpha);
}

void bf16_gemv_fp8w(const __nv_bfloat16* x, const uint8_t* w, const float* ws, void* y, GemmOut out,
                    const Bf16GemvShape& sh, cudaStream_t stream) {
    ONECARD_CHECK(ws != nullptr, "bf16_gemv_fp8w: no weight scales");
    gemv_passes<true>(x, sh.ld_x, w, ws, y, out, sh.ld_y, sh.m, sh.n, sh.k, stream, sh.rows_per_group, 1.0f);
}

void fp8_weight_to_bf16(const uint8_t* w, const float* ws, __nv_bfloat16* out, int64_t n, int64_t k,
                        cudaStream_t stream) {
    ONECARD_CHECK(n > 0 && k > 0 && k % 128 == 0, "fp8_weight_to_bf16: k {} is not a multiple of 128", k);
    const int64_t chunks = n * k / 4;
    const auto grid = static_cast<unsigned>((chunks + 255) / 256);
    fp8_weight_to_bf16_kernel<<<grid, 256, 0, stream>>>(w, ws, fp8_gemm_weight_scale_ld(k), out, n, k);
    CUDA_CHECK_LAUNCH("fp8_weight_to_bf16_kernel");
}

}  // namespace onecard::cuda
