// The GPU layout of MXFP4 routed-expert matrices ("tiled"), chosen so that the tensor-core GEMV
// (mxfp4_gemv.cu) reads every operand fragment of mma.m16n8k32 with one 16-byte load per lane.
//
// Checkpoint layout of one expert matrix W [n, k] (dsv4-model.md §10.1): codes [n, k/2] (element 2j =
// low nibble of byte j), UE8M0 scales [n, k/32], one per 32-element group. Word t (t = 0..3) of group G
// of row r is checkpoint bytes [16G + 4t, 16G + 4t + 4) = elements [32G + 8t, 32G + 8t + 8).
//
// In an mma.m16n8k32 the A operand (16 rows × 32 k) sits in a warp as: lane l = 4g + t holds rows g and
// g + 8, k slice t. Taking the k slice of lane t to be word t of one scale group makes each mma one
// group, so the group's scale applies to the whole mma result. The tiled layout puts the words a lane
// needs next to each other:
//   codes:  [n/16][k/64][32 lanes][4 words of 4 bytes]; lane l = 4g + t of row tile R, group pair P
//           holds word t of rows (16R + g, 16R + g + 8) × groups (2P, 2P + 1) in the order
//           (G=2P, row g), (2P, g+8), (2P+1, g), (2P+1, g+8).
//   scales: [n/16][k/256][8 g][8 groups][2 rows]: the 16 bytes row g reads for 8 groups at once.
// Same bytes as the checkpoint, permuted; n % 16 == 0 and k % 256 == 0.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace onecard::cuda {

// Byte offset, in the tiled codes, of word t (0..3) of group G of row r.
__host__ __device__ inline int64_t mxfp4_tiled_word_offset(int64_t r, int64_t G, int64_t t, int64_t k) {
    const int64_t R = r / 16, h = (r % 16) / 8, g = r % 8, P = G / 2, q = G % 2;
    return ((R * (k / 64) + P) * 32 + 4 * g + t) * 16 + (2 * q + h) * 4;
}

// Offset, in the tiled scales, of the scale of group G of row r.
__host__ __device__ inline int64_t mxfp4_tiled_scale_offset(int64_t r, int64_t G, int64_t k) {
    const int64_t R = r / 16, h = (r % 16) / 8, g = r % 8;
    return ((R * (k / 256) + G / 8) * 8 + g) * 16 + (G % 8) * 2 + h;
}

// True when [n, k] can be tiled (n % 16 == 0, k % 256 == 0, both positive).
bool mxfp4_tileable(int64_t n, int64_t k);

// Host: checkpoint layout -> tiled layout of one matrix (codes [n*k/2], scales [n*k/32]).
void mxfp4_tile_host(const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t k, uint8_t* tiled_codes,
                     uint8_t* tiled_scales);

// Host: tiled layout -> checkpoint layout (the inverse; tests and inspection).
void mxfp4_untile_host(const uint8_t* tiled_codes, const uint8_t* tiled_scales, int64_t n, int64_t k, uint8_t* codes,
                       uint8_t* scales);

// Device: the same as mxfp4_tile_host on device buffers (the weight upload stages each checkpoint
// matrix in `codes`/`scales` and writes it tiled in place in the resident array). No overlap allowed.
void mxfp4_tile_device(const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t k, uint8_t* tiled_codes,
                       uint8_t* tiled_scales, cudaStream_t stream);

}  // namespace onecard::cuda
