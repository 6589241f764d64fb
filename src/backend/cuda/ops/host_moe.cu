#include "backend/cuda/ops/host_moe.cuh"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops/mxfp4_layout.cuh"
#include "backend/cuda/ops/pdl.cuh"

#include <algorithm>

namespace onecard::cuda {
namespace {

__device__ __forceinline__ uint32_t load_acquire_sys(const volatile uint32_t* p) {
    uint32_t v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void store_release_sys(volatile uint32_t* p, uint32_t v) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint64_t global_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
    return t;
}

// Grid-strided 16-byte copies of xq and xs, 4-byte copies of the picks; the last block to finish
// publishes. Every block fences its writes at system scope before it counts itself done, so when
// the last block sees the full count, every byte of the request is visible to the host.
__global__ void publish_kernel(const uint8_t* __restrict__ xq, const float* __restrict__ xs,
                               const int32_t* __restrict__ experts, const float* __restrict__ weights,
                               const int32_t* __restrict__ slot_of, const int32_t* __restrict__ stream_slot_of,
                               int32_t* __restrict__ local_ids, int32_t* __restrict__ stream_ids, int64_t n,
                               int64_t top_k, int64_t dim, int32_t layer, HostMoeDeviceView box) {
    dev::pdl_wait();
    dev::pdl_trigger();
    const int64_t tid = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    const int64_t xq_vec = n * dim / 16, xs_vec = n * dim / 128 / 4, P = n * top_k;
    for (int64_t i = tid; i < xq_vec; i += stride)
        reinterpret_cast<uint4*>(box.xq)[i] = reinterpret_cast<const uint4*>(xq)[i];
    for (int64_t i = tid; i < xs_vec; i += stride)
        reinterpret_cast<float4*>(box.xs)[i] = reinterpret_cast<const float4*>(xs)[i];
    for (int64_t i = xs_vec * 4 + tid; i < n * dim / 128; i += stride) box.xs[i] = xs[i];  // tail (dim/128 % 4)
    for (int64_t p = tid; p < P; p += stride) {
        const int32_t e = experts[p];
        const int32_t slot = slot_of[e];
        const int32_t staged = slot < 0 && stream_slot_of ? stream_slot_of[e] : -1;
        const int32_t local = slot >= 0 ? slot : staged >= 0 ? kStreamedPair : kHostPair;
        box.experts[p] = local == kHostPair ? e : -1;
        box.weights[p] = weights[p];
        local_ids[p] = local;
        if (stream_ids) stream_ids[p] = staged;
    }
    __threadfence_system();
    __syncthreads();
    if (threadIdx.x != 0) return;
    const uint32_t done = atomicAdd(box.arrive, 1u) + 1u;
    if (done != gridDim.x) return;
    *box.arrive = 0;  // ready for the next publish (the next one starts after this grid completes)
    const uint32_t seq = *box.seq + 1u;
    *box.seq = seq;
    box.ctl->layer = static_cast<uint32_t>(layer);
    box.ctl->n_tokens = static_cast<uint32_t>(n);
    __threadfence_system();
    store_release_sys(&box.ctl->request_seq, seq);
}

// One block per pair; blocks of GPU pairs leave at once. Thread 0 waits for the host's answer.
__global__ void wait_gather_kernel(const int32_t* __restrict__ local_ids, int64_t dim, HostMoeDeviceView box,
                                   __nv_bfloat16* __restrict__ y2, uint64_t timeout_ns) {
    dev::pdl_wait();
    dev::pdl_trigger();
    const int64_t p = blockIdx.x;
    if (local_ids[p] != kHostPair) return;
    __shared__ int ok;
    if (threadIdx.x == 0) {
        const uint32_t want = *box.seq;
        const uint64_t t0 = global_ns();
        int good = 0;
        for (;;) {
            if (load_acquire_sys(&box.ctl->done_seq) == want) {
                good = load_acquire_sys(&box.ctl->host_status) == 0u;
                break;
            }
            if (global_ns() - t0 > timeout_ns) break;
            __nanosleep(200);
        }
        // A plain store: atomics on host memory are not available over PCIe, and any value but 0 reads as failed.
        if (!good) box.ctl->gpu_error = 1u;
        ok = good;
    }
    __syncthreads();
    if (!ok) return;  // the step is failed on the host side (HostMoeBridge::check_step reads gpu_error)
    const uint4* src = reinterpret_cast<const uint4*>(box.y + p * dim);
    uint4* dst = reinterpret_cast<uint4*>(y2 + p * dim);
    for (int64_t i = threadIdx.x; i < dim / 8; i += blockDim.x) {
        // A plain (coherent) load: the acquire above orders it after the host's writes.
        dst[i] = src[i];
    }
}

// grid (row-group items, 3 · records): one thread per (row, 32-element group) of one matrix of one
// record, as mxfp4_tile_device's kernel. The three matrices have the same item count (I·D/32).
__global__ void tile_records_kernel(const uint8_t* __restrict__ records, uint64_t stride, MxExpertRecordLayout L,
                                    MxExpertWeights dst) {
    const int64_t rec = blockIdx.y / 3, m = blockIdx.y % 3;
    const int64_t n = m == 2 ? dst.dim : dst.inter, k = m == 2 ? dst.inter : dst.dim, groups = k / 32;
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= n * groups) return;
    const uint8_t* codes = records + rec * stride + L.off[2 * m];
    const uint8_t* scales = records + rec * stride + L.off[2 * m + 1];
    uint8_t* tcodes = const_cast<uint8_t*>(m == 0 ? dst.w1 : m == 1 ? dst.w3 : dst.w2) + rec * (n * k / 2);
    uint8_t* tscales = const_cast<uint8_t*>(m == 0 ? dst.s1 : m == 1 ? dst.s3 : dst.s2) + rec * (n * k / 32);
    const int64_t r = i / groups, G = i % groups;
    const uint4 v = *reinterpret_cast<const uint4*>(codes + i * 16);  // bytes [16G, 16G + 16) of row r
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int t = 0; t < 4; ++t) *reinterpret_cast<uint32_t*>(tcodes + mxfp4_tiled_word_offset(r, G, t, k)) = words[t];
    tscales[mxfp4_tiled_scale_offset(r, G, k)] = scales[i];
}

__global__ void count_picks_kernel(const int32_t* __restrict__ experts, int64_t n_pairs,
                                   uint32_t* __restrict__ counts) {
    dev::pdl_wait();
    dev::pdl_trigger();
    const int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (p < n_pairs) atomicAdd(counts + experts[p], 1u);
}

}  // namespace

void host_moe_publish(const HostMoePublishArgs& a, const HostMoeDeviceView& box, cudaStream_t stream) {
    const uint8_t* xq = a.xq;
    const float* xs = a.xs;
    const int32_t *experts = a.experts, *slot_of = a.slot_of, *stream_slot_of = a.stream_slot_of;
    const float* weights = a.weights;
    int32_t *local_ids = a.local_ids, *stream_ids = a.stream_ids;
    const int64_t n = a.n, top_k = a.top_k, dim = a.dim;
    const int32_t layer = a.layer;
    ONECARD_CHECK(!stream_slot_of || stream_ids, "host_moe_publish: staged experts need the stream_ids output");
    ONECARD_CHECK(n > 0 && top_k > 0 && dim % 128 == 0, "host_moe_publish: n {} top_k {} dim {} (dim % 128 == 0)", n,
                  top_k, dim);
    ONECARD_CHECK(box.ctl && box.xq && box.xs && box.experts && box.weights && box.seq && box.arrive,
                  "host_moe_publish: mailbox not set up");
    const int threads = 256;
    const int64_t work = std::max<int64_t>(n * dim / 16, n * top_k);
    const unsigned blocks = static_cast<unsigned>(std::clamp<int64_t>((work + threads - 1) / threads, 1, 64));
    launch_pdl(publish_kernel, blocks, threads, 0, stream, xq, xs, experts, weights, slot_of, stream_slot_of, local_ids,
               stream_ids, n, top_k, dim, layer, box);
    CUDA_CHECK_LAUNCH("host_moe_publish");
}

void host_moe_wait_gather(const int32_t* local_ids, int64_t n_pairs, int64_t dim, const HostMoeDeviceView& box,
                          __nv_bfloat16* y2, uint64_t timeout_ns, cudaStream_t stream) {
    ONECARD_CHECK(n_pairs > 0 && dim % 8 == 0 && box.ctl && box.y && box.seq,
                  "host_moe_wait_gather: {} pairs, dim {}, mailbox {}", n_pairs, dim, box.ctl ? "set" : "missing");
    launch_pdl(wait_gather_kernel, static_cast<unsigned>(n_pairs), 128, 0, stream, local_ids, dim, box, y2, timeout_ns);
    CUDA_CHECK_LAUNCH("host_moe_wait_gather");
}

MxExpertRecordLayout mx_expert_record_layout(int64_t dim, int64_t inter) {
    MxExpertRecordLayout r;
    const uint64_t codes = static_cast<uint64_t>(dim * inter / 2), scales = static_cast<uint64_t>(dim * inter / 32);
    for (int i = 0; i < 6; ++i) {
        r.off[i] = r.total;
        r.len[i] = i % 2 == 0 ? codes : scales;
        r.total += r.len[i];
    }
    r.total = (r.total + 63) / 64 * 64;
    return r;
}

void tile_expert_records(const uint8_t* records, int64_t n_records, const MxExpertWeights& dst, cudaStream_t stream) {
    if (n_records <= 0) return;
    ONECARD_CHECK(
        n_records <= dst.n_experts && mxfp4_tileable(dst.inter, dst.dim) && mxfp4_tileable(dst.dim, dst.inter),
        "tile_expert_records: {} records into {} slots of [{}, {}]", n_records, dst.n_experts, dst.inter, dst.dim);
    ONECARD_CHECK(reinterpret_cast<uintptr_t>(records) % 16 == 0,
                  "tile_expert_records: records must be 16-byte aligned");
    const MxExpertRecordLayout L = mx_expert_record_layout(dst.dim, dst.inter);
    const int64_t items = dst.inter * (dst.dim / 32);  // = dim · (inter / 32): w1, w3 and w2 alike
    const int threads = 256;
    const dim3 grid(static_cast<unsigned>((items + threads - 1) / threads), static_cast<unsigned>(3 * n_records));
    tile_records_kernel<<<grid, threads, 0, stream>>>(records, L.total, L, dst);
    CUDA_CHECK_LAUNCH("tile_expert_records");
}

void count_expert_picks(const int32_t* experts, int64_t n_pairs, uint32_t* counts, cudaStream_t stream) {
    if (n_pairs <= 0) return;
    const int threads = 256;
    launch_pdl(count_picks_kernel, static_cast<unsigned>((n_pairs + threads - 1) / threads), threads, 0, stream,
               experts, n_pairs, counts);
    CUDA_CHECK_LAUNCH("count_expert_picks");
}

}  // namespace onecard::cuda
