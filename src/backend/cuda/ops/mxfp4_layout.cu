#include "backend/cuda/ops/mxfp4_layout.cuh"

#include "backend/cuda/cuda_check.h"

#include <cstring>

namespace onecard::cuda {
namespace {

void check_shape(int64_t n, int64_t k, const char* who) {
    ONECARD_CHECK(mxfp4_tileable(n, k), "{}: MXFP4 matrix [{}, {}] cannot be tiled (rows % 16, columns % 256)", who, n,
                  k);
}

// One thread per (row, group): 4 code words and one scale byte.
__global__ void tile_kernel(const uint8_t* __restrict__ codes, const uint8_t* __restrict__ scales, int64_t n, int64_t k,
                            uint8_t* __restrict__ tcodes, uint8_t* __restrict__ tscales) {
    const int64_t groups = k / 32;
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= n * groups) return;
    const int64_t r = i / groups, G = i % groups;
    const uint4 v = *reinterpret_cast<const uint4*>(codes + i * 16);  // bytes [16G, 16G + 16) of row r
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int t = 0; t < 4; ++t) *reinterpret_cast<uint32_t*>(tcodes + mxfp4_tiled_word_offset(r, G, t, k)) = words[t];
    tscales[mxfp4_tiled_scale_offset(r, G, k)] = scales[i];
}

}  // namespace

bool mxfp4_tileable(int64_t n, int64_t k) {
    return n > 0 && k > 0 && n % 16 == 0 && k % 256 == 0;
}

void mxfp4_tile_host(const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t k, uint8_t* tiled_codes,
                     uint8_t* tiled_scales) {
    check_shape(n, k, "mxfp4_tile_host");
    for (int64_t r = 0; r < n; ++r) {
        for (int64_t G = 0; G < k / 32; ++G) {
            for (int64_t t = 0; t < 4; ++t)
                std::memcpy(tiled_codes + mxfp4_tiled_word_offset(r, G, t, k), codes + r * (k / 2) + 16 * G + 4 * t, 4);
            tiled_scales[mxfp4_tiled_scale_offset(r, G, k)] = scales[r * (k / 32) + G];
        }
    }
}

void mxfp4_untile_host(const uint8_t* tiled_codes, const uint8_t* tiled_scales, int64_t n, int64_t k, uint8_t* codes,
                       uint8_t* scales) {
    check_shape(n, k, "mxfp4_untile_host");
    for (int64_t r = 0; r < n; ++r) {
        for (int64_t G = 0; G < k / 32; ++G) {
            for (int64_t t = 0; t < 4; ++t)
                std::memcpy(codes + r * (k / 2) + 16 * G + 4 * t, tiled_codes + mxfp4_tiled_word_offset(r, G, t, k), 4);
            scales[r * (k / 32) + G] = tiled_scales[mxfp4_tiled_scale_offset(r, G, k)];
        }
    }
}

void mxfp4_tile_device(const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t k, uint8_t* tiled_codes,
                       uint8_t* tiled_scales, cudaStream_t stream) {
    check_shape(n, k, "mxfp4_tile_device");
    ONECARD_CHECK(reinterpret_cast<uintptr_t>(codes) % 16 == 0 && reinterpret_cast<uintptr_t>(tiled_codes) % 16 == 0,
                  "mxfp4_tile_device: code buffers must be 16-byte aligned");
    const int64_t items = n * (k / 32);
    const int threads = 256;
    tile_kernel<<<static_cast<unsigned>((items + threads - 1) / threads), threads, 0, stream>>>(
        codes, scales, n, k, tiled_codes, tiled_scales);
    CUDA_CHECK_LAUNCH("mxfp4 tile_kernel");
}

}  // namespace onecard::cuda
