// Where a sequence's paged KV entries live in the engine's block pool (kvcache/kv_spec.h): the same
// arithmetic the CPU's PagedSequenceKv uses, in a form kernels can evaluate. One block id covers
// block_size token positions of every paged stream; entry i of a stream (one per `ratio` tokens)
// lies in block block_table[i·ratio / block_size] at slot (i·ratio mod block_size) / ratio.
// Host-includable.
#pragma once

#include <cstdint>

namespace onecard::cuda {

struct PagedStreamAddr {
    const int32_t* block_tables = nullptr;  // device [n_seqs, max_blocks] block ids (row per sequence)
    int64_t max_blocks = 0;                 // row stride of block_tables
    int64_t block_bytes = 0;                // KvCacheSpec::block_bytes
    int64_t block_size = 0;                 // tokens per block
    int64_t ratio = 0;                      // tokens per entry of this stream (4 or 128)
    int64_t stream_offset = 0;              // KvPagedStream::offset: the stream's bytes inside a block
    int64_t entry_bytes = 0;                // 584-style KV entry or 132-style indexer key
};

#ifdef __CUDACC__
// Byte offset (64-bit: a pool exceeds 2 GiB) of entry i of sequence `seq` in the block pool.
__device__ __forceinline__ int64_t paged_entry_offset(const PagedStreamAddr& a, int64_t seq, int64_t i) {
    const int64_t tok = i * a.ratio;
    const int64_t block = a.block_tables[seq * a.max_blocks + tok / a.block_size];
    return block * a.block_bytes + a.stream_offset + ((tok % a.block_size) / a.ratio) * a.entry_bytes;
}
#endif

}  // namespace onecard::cuda
