#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops/pdl.cuh"
#include "core/kv_address.h"
#include "model_cuda/gpu_step_kernels.cuh"

namespace onecard {
namespace {

// Entry e of stream g of the sequence in block-table row `row`: core/kv_address.h.
__device__ __forceinline__ int64_t paged_offset(const StepAddr& a, const KvStreamGeometry& g, int64_t row, int64_t e) {
    return kv_entry_offset(g, a.block_tables[row * a.max_blocks + kv_entry_block(g, e)], e);
}

__global__ void write_offsets_kernel(StepAddr a, const int32_t* __restrict__ last, int64_t* step_dst, int64_t* ring_dst,
                                     int64_t* entry_dst, int64_t* key_dst) {
    cuda::dev::pdl_wait();
    cuda::dev::pdl_trigger();
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= a.n) return;
    const int64_t p = a.positions[i];
    const int64_t eb = a.entry_bytes;
    step_dst[i] = a.step_off + i * eb;
    // Only a sequence's last `window` tokens of the step survive in its ring.
    ring_dst[i] = last[i] - i < a.window ? a.slot_off[i] + a.window_region + (p % a.window_rows) * eb : -1;
    if (a.ratio > 0) {
        const bool closes = (p + 1) % a.ratio == 0;
        const int64_t e = (p + 1) / a.ratio - 1;
        const int64_t row = a.row_of_token[i];
        if (entry_dst) entry_dst[i] = closes ? paged_offset(a, a.entries, row, e) : -1;
        if (key_dst) key_dst[i] = closes ? paged_offset(a, a.keys, row, e) : -1;
    }
}

// One block per token; threads over the key slots. Slot j < window holds position p − window + 1 + j.
__global__ void attention_offsets_kernel(StepAddr a, const int32_t* __restrict__ first,
                                         const int32_t* __restrict__ topk, int64_t k, int64_t max_keys,
                                         int64_t* __restrict__ kv_off) {
    cuda::dev::pdl_wait();
    cuda::dev::pdl_trigger();
    const int64_t i = blockIdx.x;
    const int64_t p = a.positions[i];
    const int64_t f = first[i];
    const int64_t p0 = a.positions[f];  // position of the sequence's first token in this step
    const int64_t eb = a.entry_bytes;
    int64_t* out = kv_off + i * max_keys;
    for (int64_t j = threadIdx.x; j < max_keys; j += blockDim.x) {
        int64_t o = -1;
        if (j < a.window) {
            const int64_t q = p - a.window + 1 + j;
            // This step's rows are read from the step region (the ring still holds older positions).
            if (q >= 0)
                o = q >= p0 ? a.step_off + (f + (q - p0)) * eb
                            : a.slot_off[i] + a.window_region + (q % a.window_rows) * eb;
        } else if (a.ratio > 0) {
            const int64_t jj = j - a.window;
            int64_t e = -1;
            if (topk) {
                if (jj < k) e = topk[i * k + jj];
            } else if (jj < (p + 1) / a.ratio) {
                e = jj;
            }
            if (e >= 0) o = paged_offset(a, a.entries, a.row_of_token[i], e);
        }
        out[j] = o;
    }
}

// DSpark block rows (docs/dspark.md §3): every token of a sequence's block sees the same keys, the
// ring's positions p0 − window .. p0 − 1 (p0: the block's first position) then the block's own rows
// from the step region, whatever its own position (bidirectional inside the block).
__global__ void block_attention_offsets_kernel(StepAddr a, const int32_t* __restrict__ first,
                                               const int32_t* __restrict__ last, int64_t max_keys,
                                               int64_t* __restrict__ kv_off) {
    cuda::dev::pdl_wait();
    cuda::dev::pdl_trigger();
    const int64_t i = blockIdx.x;
    const int64_t f = first[i], nb = int64_t(last[i]) - f + 1;
    const int64_t p0 = a.positions[f];
    const int64_t eb = a.entry_bytes;
    int64_t* out = kv_off + i * max_keys;
    for (int64_t j = threadIdx.x; j < max_keys; j += blockDim.x) {
        int64_t o = -1;
        if (j < a.window) {
            const int64_t q = p0 - a.window + j;
            if (q >= 0) o = a.slot_off[i] + a.window_region + (q % a.window_rows) * eb;
        } else if (j - a.window < nb) {
            o = a.step_off + (f + j - a.window) * eb;
        }
        out[j] = o;
    }
}

__global__ void gather_rows_kernel(const uint4* __restrict__ src, const int32_t* __restrict__ rows,
                                   uint4* __restrict__ dst, int64_t row_vecs) {
    cuda::dev::pdl_wait();
    cuda::dev::pdl_trigger();
    const int64_t r = blockIdx.x;
    const uint4* s = src + int64_t(rows[r]) * row_vecs;
    for (int64_t j = threadIdx.x; j < row_vecs; j += blockDim.x) dst[r * row_vecs + j] = s[j];
}

}  // namespace

void launch_write_offsets(const StepAddr& a, const int32_t* seq_last, int64_t* step_dst, int64_t* ring_dst,
                          int64_t* entry_dst, int64_t* key_dst, cudaStream_t s) {
    if (a.n == 0) return;
    const int threads = 128;
    cuda::launch_pdl(write_offsets_kernel, static_cast<unsigned>((a.n + threads - 1) / threads), threads, 0, s, a,
                     seq_last, step_dst, ring_dst, entry_dst, key_dst);
    CUDA_CHECK_LAUNCH("write_offsets_kernel");
}

void launch_attention_offsets(const StepAddr& a, const int32_t* seq_first, const int32_t* topk, int64_t k,
                              int64_t max_keys, int64_t* kv_off, cudaStream_t s) {
    if (a.n == 0) return;
    cuda::launch_pdl(attention_offsets_kernel, static_cast<unsigned>(a.n), 128, 0, s, a, seq_first, topk, k, max_keys,
                     kv_off);
    CUDA_CHECK_LAUNCH("attention_offsets_kernel");
}

void launch_block_attention_offsets(const StepAddr& a, const int32_t* seq_first, const int32_t* seq_last,
                                    int64_t max_keys, int64_t* kv_off, cudaStream_t s) {
    if (a.n == 0) return;
    cuda::launch_pdl(block_attention_offsets_kernel, static_cast<unsigned>(a.n), 128, 0, s, a, seq_first, seq_last,
                     max_keys, kv_off);
    CUDA_CHECK_LAUNCH("block_attention_offsets_kernel");
}

void launch_gather_rows(const void* src, const int32_t* rows, void* dst, int64_t n_rows, int64_t row_vecs16,
                        cudaStream_t s) {
    if (n_rows == 0) return;
    cuda::launch_pdl(gather_rows_kernel, static_cast<unsigned>(n_rows), 256, 0, s, static_cast<const uint4*>(src), rows,
                     static_cast<uint4*>(dst), row_vecs16);
    CUDA_CHECK_LAUNCH("gather_rows_kernel");
}

}  // namespace onecard
