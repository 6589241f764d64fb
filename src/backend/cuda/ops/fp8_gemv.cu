#include "backend/cuda/ops/fp8_gemv.cuh"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops/common.cuh"

#include <cuda_fp16.h>

#include <algorithm>

namespace onecard::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kUnroll = 4;  // 16-byte loads in flight per lane before the first FMA

// Dot of 16 E4M3 weights (one uint4) with 16 E4M3 activations, in fp32.
__device__ __forceinline__ float dot16_e4m3(const uint4& w, const uint4& x) {
    const uint32_t wv[4] = {w.x, w.y, w.z, w.w};
    const uint32_t xv[4] = {x.x, x.y, x.z, x.w};
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int b = 0; b < 4; ++b) {
            acc = fmaf(dev::e4m3_to_f32(static_cast<uint8_t>(wv[i] >> (8 * b))),
                       dev::e4m3_to_f32(static_cast<uint8_t>(xv[i] >> (8 * b))), acc);
        }
    }
    return acc;
}

// One warp per output row n; lane l covers bytes [it·512 + 16l, +16) of the row, which lie inside
// one 128-wide scale block (8 lanes share a block).
template <int M>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
fp8_gemv_kernel(const uint8_t* __restrict__ xq, const float* __restrict__ xs, const uint8_t* __restrict__ w,
                const float* __restrict__ ws, __nv_bfloat16* __restrict__ y, int m_valid, int64_t n, int64_t k,
                int64_t ld_y) {
    const int lane = threadIdx.x & 31;
    const int64_t row = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + (threadIdx.x >> 5);
    if (row >= n) return;
    const int64_t n_kb = k / 128;
    const uint8_t* wr = w + row * k;
    const float* wsr = ws + (row / 128) * ((n_kb + 3) / 4 * 4);  // rows padded as fp8_gemm_weight_scale_ld
    float acc[M];
#pragma unroll
    for (int mi = 0; mi < M; ++mi) acc[mi] = 0.0f;
    const int64_t n_iter = k / 512;
    for (int64_t it0 = 0; it0 < n_iter; it0 += kUnroll) {
        uint4 wv[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const int64_t off = (it0 + u) * 512 + lane * 16;
            // Streamed once per step: keep it out of L1 (ld.global.nc.L1::no_allocate).
            wv[u] = (it0 + u < n_iter) ? __ldcs(reinterpret_cast<const uint4*>(wr + off)) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            if (it0 + u >= n_iter) break;
            const int64_t off = (it0 + u) * 512 + lane * 16;
            const int64_t kb = off / 128;
            const float wscale = wsr[kb];
#pragma unroll
            for (int mi = 0; mi < M; ++mi) {
                const int mr = mi < m_valid ? mi : 0;  // padded rows recompute row 0; never stored
                const uint4 xv = *reinterpret_cast<const uint4*>(xq + mr * k + off);
                acc[mi] = fmaf(dot16_e4m3(wv[u], xv), wscale * xs[mr * n_kb + kb], acc[mi]);
            }
        }
    }
#pragma unroll
    for (int mi = 0; mi < M; ++mi) {
        const float v = dev::warp_sum(acc[mi]);
        if (lane == 0 && mi < m_valid) y[mi * ld_y + row] = __float2bfloat16(v);
    }
}

// Batch-1 path (and small m·k): the activations are dequantised ONCE per block into shared memory as
// fp32 (x·scale folded in), so the inner loop converts only weights (two per cvt instruction).
// The first H200 run showed the register path limited by E4M3 conversions (two per weight byte at
// quarter rate), not by bandwidth. Shared layout [M][k/512][4][32][4]: word c of lane l's 16-byte
// weight load meets floats [c][l][0..3], so every LDS.128 of a warp is 512 contiguous bytes.
// Each warp takes two rows (more loads in flight, half the staging cost per row).
constexpr int kSmemRowsPerWarp = 2;
constexpr int64_t kSmemMaxBytes = 48 * 1024;

__device__ __forceinline__ float2 e4m3x2_to_float2(uint32_t two) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two & 0xFFFFu), __NV_E4M3);
    return __half22float2(__half2(h));
}

template <int M>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
fp8_gemv_smem_kernel(const uint8_t* __restrict__ xq, const float* __restrict__ xs, const uint8_t* __restrict__ w,
                     const float* __restrict__ ws, __nv_bfloat16* __restrict__ y, int m_valid, int64_t n, int64_t k,
                     int64_t ld_y) {
    extern __shared__ float xsm[];
    const int lane = threadIdx.x & 31;
    const int ki = static_cast<int>(k), n_kb = ki / 128, n_iter = ki / 512;
    const int ws_ld = (n_kb + 3) / 4 * 4;  // rows padded as fp8_gemm_weight_scale_ld
    const int64_t row0 = (blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + (threadIdx.x >> 5)) * kSmemRowsPerWarp;
    const int n_rows = row0 >= n ? 0 : (n - row0 < kSmemRowsPerWarp ? static_cast<int>(n - row0) : kSmemRowsPerWarp);
    // Software pipeline: the weight loads of the next two passes are in flight while the current two are
    // multiplied; the first ones are issued before the activations are staged, so the two memory
    // latencies overlap instead of adding up.
    uint4 nxt[2][kSmemRowsPerWarp];
    auto load = [&](int it0) {
#pragma unroll
        for (int u = 0; u < 2; ++u)
#pragma unroll
            for (int r = 0; r < kSmemRowsPerWarp; ++r)
                nxt[u][r] = (it0 + u < n_iter && r < n_rows)
                                ? __ldcs(reinterpret_cast<const uint4*>(w + (row0 + r) * k + (it0 + u) * 512 + lane * 16))
                                : make_uint4(0, 0, 0, 0);
    };
    load(0);
    for (int mi = 0; mi < M; ++mi) {
        for (int kk = threadIdx.x; kk < ki; kk += blockDim.x) {
            const float v = mi < m_valid ? dev::e4m3_to_f32(xq[mi * k + kk]) * xs[mi * n_kb + kk / 128] : 0.0f;
            const int it = kk / 512, within = kk % 512;
            xsm[((mi * n_iter + it) * 4 + (within % 16) / 4) * 128 + (within / 16) * 4 + within % 4] = v;
        }
    }
    __syncthreads();
    if (n_rows == 0) return;
    float acc[kSmemRowsPerWarp][M];
#pragma unroll
    for (int r = 0; r < kSmemRowsPerWarp; ++r)
#pragma unroll
        for (int mi = 0; mi < M; ++mi) acc[r][mi] = 0.0f;
    for (int it0 = 0; it0 < n_iter; it0 += 2) {
        uint4 wv[2][kSmemRowsPerWarp];
#pragma unroll
        for (int u = 0; u < 2; ++u)
#pragma unroll
            for (int r = 0; r < kSmemRowsPerWarp; ++r) wv[u][r] = nxt[u][r];
        if (it0 + 2 < n_iter) load(it0 + 2);
#pragma unroll
        for (int u = 0; u < 2; ++u) {
            const int it = it0 + u;
            if (it >= n_iter) break;
            const int kb = (it * 512 + lane * 16) / 128;
#pragma unroll
            for (int r = 0; r < kSmemRowsPerWarp; ++r) {
                const uint32_t words[4] = {wv[u][r].x, wv[u][r].y, wv[u][r].z, wv[u][r].w};
                float d[M];
#pragma unroll
                for (int mi = 0; mi < M; ++mi) d[mi] = 0.0f;
#pragma unroll
                for (int c = 0; c < 4; ++c) {
                    const float2 a01 = e4m3x2_to_float2(words[c]);
                    const float2 a23 = e4m3x2_to_float2(words[c] >> 16);
#pragma unroll
                    for (int mi = 0; mi < M; ++mi) {
                        const float4 xv = *reinterpret_cast<const float4*>(xsm + ((mi * n_iter + it) * 4 + c) * 128 + lane * 4);
                        d[mi] = fmaf(a01.x, xv.x, fmaf(a01.y, xv.y, fmaf(a23.x, xv.z, fmaf(a23.y, xv.w, d[mi]))));
                    }
                }
                const float wscale = r < n_rows ? ws[((row0 + r) / 128) * ws_ld + kb] : 0.0f;
#pragma unroll
                for (int mi = 0; mi < M; ++mi) acc[r][mi] = fmaf(d[mi], wscale, acc[r][mi]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < kSmemRowsPerWarp; ++r) {
#pragma unroll
        for (int mi = 0; mi < M; ++mi) {
            const float v = dev::warp_sum(acc[r][mi]);
            if (lane == 0 && r < n_rows && mi < m_valid) y[mi * ld_y + row0 + r] = __float2bfloat16(v);
        }
    }
}

template <int M>
void launch(const uint8_t* xq, const float* xs, const uint8_t* w, const float* ws, __nv_bfloat16* y, int m_valid,
            int64_t n, int64_t k, int64_t ld_y, cudaStream_t stream) {
    const int64_t smem = static_cast<int64_t>(M) * k * 4;
    if (smem <= kSmemMaxBytes) {
        const int64_t rows_per_block = kWarpsPerBlock * kSmemRowsPerWarp;
        const int64_t blocks = (n + rows_per_block - 1) / rows_per_block;
        fp8_gemv_smem_kernel<M><<<static_cast<unsigned>(blocks), kWarpsPerBlock * 32, static_cast<size_t>(smem), stream>>>(
            xq, xs, w, ws, y, m_valid, n, k, ld_y);
        CUDA_CHECK_LAUNCH("fp8_gemv_smem_kernel");
        return;
    }
    const int64_t blocks = (n + kWarpsPerBlock - 1) / kWarpsPerBlock;
    fp8_gemv_kernel<M><<<static_cast<unsigned>(blocks), kWarpsPerBlock * 32, 0, stream>>>(xq, xs, w, ws, y, m_valid, n,
                                                                                        k, ld_y);
    CUDA_CHECK_LAUNCH("fp8_gemv_kernel");
}

}  // namespace

void fp8_gemv(const uint8_t* xq, const float* xs, const uint8_t* w, const float* ws, __nv_bfloat16* y, int64_t m,
              int64_t n, int64_t k, cudaStream_t stream, int64_t ld_y) {
    ONECARD_CHECK(k > 0 && k % 512 == 0, "fp8_gemv: k {} is not a multiple of 512", k);
    ONECARD_CHECK(n > 0 && m >= 0, "fp8_gemv: bad shape m {} n {}", m, n);
    if (ld_y == 0) ld_y = n;
    const int64_t n_kb = k / 128;
    for (int64_t m0 = 0; m0 < m; m0 += kFp8GemvMaxM) {
        const int mm = static_cast<int>(std::min(kFp8GemvMaxM, m - m0));
        const uint8_t* xq0 = xq + m0 * k;
        const float* xs0 = xs + m0 * n_kb;
        __nv_bfloat16* y0 = y + m0 * ld_y;
        if (mm == 1) launch<1>(xq0, xs0, w, ws, y0, mm, n, k, ld_y, stream);
        else if (mm == 2) launch<2>(xq0, xs0, w, ws, y0, mm, n, k, ld_y, stream);
        else if (mm <= 4) launch<4>(xq0, xs0, w, ws, y0, mm, n, k, ld_y, stream);
        else launch<8>(xq0, xs0, w, ws, y0, mm, n, k, ld_y, stream);
    }
}

}  // namespace onecard::cuda
