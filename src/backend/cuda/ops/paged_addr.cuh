// Where a sequence's paged KV entries live in the engine's block pool: a stream's geometry
// (core/kv_address.h, the one offset formula the host and every kernel share) over a device block
// table with one row per sequence. Host-includable.
#pragma once

#include "core/kv_address.h"

#include <cstdint>

namespace onecard::cuda {

struct PagedStreamAddr : KvStreamGeometry {
    const int32_t* block_tables = nullptr;  // device [n_seqs, max_blocks] block ids (row per sequence)
    int64_t max_blocks = 0;                 // row stride of block_tables
};

#ifdef __CUDACC__
// Byte offset of entry i of sequence `seq` in the block pool.
__device__ __forceinline__ int64_t paged_entry_offset(const PagedStreamAddr& a, int64_t seq, int64_t i) {
    return kv_entry_offset(a, a.block_tables[seq * a.max_blocks + kv_entry_block(a, i)], i);
}
#endif

}  // namespace onecard::cuda
