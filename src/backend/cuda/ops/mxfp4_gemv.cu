#include "backend/cuda/ops/mxfp4_gemv.cuh"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops/common.cuh"

namespace onecard::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kUnroll = 4;  // 16-byte weight loads in flight per lane (k = 4096 has 4 passes)

// grid (ceil(n / 8), n_pairs); one warp per output row. Lane l reads weight bytes
// [it·512 + 16l, +16) = elements [it·1024 + 32l, +32): exactly one UE8M0 scale group of 32.
// The pair's activation row is dequantised once per block into shared memory (x·scale folded in),
// laid out [k/1024][4][2][32][4] so that the 8 elements of word c of lane l are the floats
// [c][0..1][l][0..3]: each LDS.128 of a warp reads 512 contiguous bytes. The E2M1 codes are decoded
// with integer ops (no conversion instructions); the first H200 run showed the per-element E4M3
// activation conversions of the register version as the limit.
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
mxfp4_expert_gemv_kernel(const uint8_t* __restrict__ xq, const float* __restrict__ xs, const uint8_t* __restrict__ w,
                         const uint8_t* __restrict__ ws, const int32_t* __restrict__ expert_ids,
                         const int32_t* __restrict__ act_rows, __nv_bfloat16* __restrict__ y, int64_t n, int64_t k) {
    extern __shared__ float xsm[];
    const int64_t pair = blockIdx.y;
    const int64_t arow = act_rows[pair];
    const int ki = static_cast<int>(k), half_k = ki / 2, n_groups = ki / 32, n_kb = ki / 128;
    const int lane = threadIdx.x & 31;
    const int64_t row = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + (threadIdx.x >> 5);
    const bool active = row < n;
    const int64_t expert = expert_ids[pair];
    const uint8_t* wr = w + (expert * n + (active ? row : 0)) * half_k;
    const uint8_t* wsr = ws + (expert * n + (active ? row : 0)) * n_groups;
    const int n_iter = half_k / 512;
    // The first weight loads go out before the activation row is staged, so the two memory
    // latencies overlap (the first H200 run showed this kernel latency-bound at ~13% of copy).
    uint4 wv[kUnroll];
    auto load = [&](int it0) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const int off = (it0 + u) * 512 + lane * 16;
            wv[u] = (active && it0 + u < n_iter) ? __ldcs(reinterpret_cast<const uint4*>(wr + off)) : make_uint4(0, 0, 0, 0);
        }
    };
    load(0);
    const uint8_t* xr = xq + arow * k;
    const float* xsr = xs + arow * n_kb;
    for (int kk = threadIdx.x; kk < ki; kk += blockDim.x) {
        const int it = kk / 1024, within = kk % 1024;
        const int l = within / 32, e8 = within % 32, c = e8 / 8, h = (e8 % 8) / 4, j = e8 % 4;
        xsm[(((it * 4 + c) * 2 + h) * 32 + l) * 4 + j] = dev::e4m3_to_f32(xr[kk]) * xsr[kk / 128];
    }
    __syncthreads();
    if (!active) return;
    float acc = 0.0f;
    for (int it0 = 0; it0 < n_iter; it0 += kUnroll) {
        if (it0 > 0) load(it0);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const int it = it0 + u;
            if (it >= n_iter) break;
            const uint32_t words[4] = {wv[u].x, wv[u].y, wv[u].z, wv[u].w};
            float d = 0.0f;
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                const float4 x0 = *reinterpret_cast<const float4*>(xsm + (((it * 4 + c) * 2 + 0) * 32 + lane) * 4);
                const float4 x1 = *reinterpret_cast<const float4*>(xsm + (((it * 4 + c) * 2 + 1) * 32 + lane) * 4);
                const uint32_t wd = words[c];
                d = fmaf(dev::e2m1_to_f32(wd & 0xFu), x0.x, d);
                d = fmaf(dev::e2m1_to_f32((wd >> 4) & 0xFu), x0.y, d);
                d = fmaf(dev::e2m1_to_f32((wd >> 8) & 0xFu), x0.z, d);
                d = fmaf(dev::e2m1_to_f32((wd >> 12) & 0xFu), x0.w, d);
                d = fmaf(dev::e2m1_to_f32((wd >> 16) & 0xFu), x1.x, d);
                d = fmaf(dev::e2m1_to_f32((wd >> 20) & 0xFu), x1.y, d);
                d = fmaf(dev::e2m1_to_f32((wd >> 24) & 0xFu), x1.z, d);
                d = fmaf(dev::e2m1_to_f32(wd >> 28), x1.w, d);
            }
            acc = fmaf(d, dev::ue8m0_to_float(wsr[it * 32 + lane]), acc);
        }
    }
    acc = dev::warp_sum(acc);
    if (lane == 0) y[pair * n + row] = __float2bfloat16(acc);
}

}  // namespace

void mxfp4_expert_gemv(const uint8_t* xq, const float* xs, const uint8_t* w, const uint8_t* ws,
                       const int32_t* expert_ids, const int32_t* act_rows, __nv_bfloat16* y, int64_t n_pairs, int64_t n,
                       int64_t k, cudaStream_t stream) {
    ONECARD_CHECK(k > 0 && k % 1024 == 0, "mxfp4_expert_gemv: k {} is not a multiple of 1024", k);
    ONECARD_CHECK(n > 0 && n_pairs >= 0 && n_pairs < 65536, "mxfp4_expert_gemv: bad shape pairs {} n {}", n_pairs, n);
    if (n_pairs == 0) return;
    const dim3 grid(static_cast<unsigned>((n + kWarpsPerBlock - 1) / kWarpsPerBlock), static_cast<unsigned>(n_pairs));
    const size_t smem = static_cast<size_t>(k) * 4;  // k <= 12288 stays under the 48 KB default
    ONECARD_CHECK(k <= 12288, "mxfp4_expert_gemv: k {} exceeds the shared-memory activation row", k);
    mxfp4_expert_gemv_kernel<<<grid, kWarpsPerBlock * 32, smem, stream>>>(xq, xs, w, ws, expert_ids, act_rows, y, n, k);
    CUDA_CHECK_LAUNCH("mxfp4_expert_gemv_kernel");
}

}  // namespace onecard::cuda
