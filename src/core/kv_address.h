// Where a paged KV entry lives in the engine's block pool: the one formula that the host
// (kvcache/kv_arena.cpp), the step kernels (model_cuda/gpu_step.cu) and the indexer
// (backend/cuda/ops/indexer.cu) evaluate. One block id covers block_size token positions of every
// paged stream; entry i of a stream (one per `ratio` tokens) lies in the block at table index
// i·ratio / block_size, at slot (i·ratio mod block_size) / ratio of that stream.
// C++17 and host/device, because nvcc compiles it into kernels.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define ONECARD_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define ONECARD_HOST_DEVICE inline
#endif

namespace onecard {

// One paged stream of one layer (kvcache/kv_spec.h: KvPagedStream inside a KvCacheSpec block).
struct KvStreamGeometry {
    int64_t block_bytes = 0;    // KvCacheSpec::block_bytes
    int64_t block_size = 0;     // tokens per block (a multiple of ratio)
    int64_t ratio = 0;          // tokens per entry of this stream
    int64_t stream_offset = 0;  // KvPagedStream::offset: the stream's bytes inside a block
    int64_t entry_bytes = 0;    // 584-byte KV entry or 132-byte indexer key
};

// Index, in a sequence's block table, of the block holding entry i.
ONECARD_HOST_DEVICE int64_t kv_entry_block(const KvStreamGeometry& g, int64_t i) {
    return i * g.ratio / g.block_size;
}

// Byte offset from the pool base (64-bit: a pool exceeds 2 GiB) of entry i, which lies in block
// `block_id` (the table's id at kv_entry_block(g, i)).
ONECARD_HOST_DEVICE int64_t kv_entry_offset(const KvStreamGeometry& g, int64_t block_id, int64_t i) {
    return block_id * g.block_bytes + g.stream_offset + ((i * g.ratio) % g.block_size) / g.ratio * g.entry_bytes;
}

}  // namespace onecard
