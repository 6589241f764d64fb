#include "backend/cuda/ops/moe_experts.cuh"

#include "backend/cuda/arena.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops/common.cuh"
#include "backend/cuda/ops/mxfp4_layout.cuh"
#include "backend/cuda/ops/pdl.cuh"

#include <cublas_v2.h>

#include <string>
#include <vector>

namespace onecard::cuda {
namespace {

#define CUBLAS_CHECK(call)                                                                                        \
    do {                                                                                                          \
        const cublasStatus_t st_ = (call);                                                                        \
        ONECARD_CHECK(st_ == CUBLAS_STATUS_SUCCESS, "cuBLAS error {} ({}) in {} at {}:{}", static_cast<int>(st_), \
                      cublasGetStatusString(st_), #call, __FILE__, __LINE__);                                     \
    } while (0)

constexpr size_t kAlign = 256;  // every scratch region starts at a multiple of this (DeviceArena's default)

size_t align_up(size_t b) {
    return (b + kAlign - 1) / kAlign * kAlign;
}

// The scratch regions of one run with `rows` (token, pick) pairs, in allocation order. The row buffers
// are sized for all pairs (not the busiest expert) so the requirement depends only on the shape.
struct ScratchPlan {
    size_t wdq, idx, xs, gu, h, y;
    size_t total() const {
        return align_up(wdq) + align_up(idx) + align_up(xs) + align_up(gu) + align_up(h) + align_up(y) + kAlign;
    }
};

ScratchPlan plan_for(int64_t dim, int64_t inter, int64_t rows) {
    const auto d = static_cast<size_t>(dim), f = static_cast<size_t>(inter), r = static_cast<size_t>(rows);
    ScratchPlan p{};
    p.wdq = 3 * f * d * 2;  // bf16 w1 [inter, D], w3 [inter, D], w2 [D, inter], back to back
    p.idx = 3 * r * 4;      // int32 pair_token [R], pair_slot [R], token_pairs [n, K]
    p.xs = r * d * 2;       // bf16 [R, D] gathered input rows, grouped by expert
    p.gu = r * 2 * f * 4;   // fp32 [R, 2·inter] gate | up
    p.h = r * f * 2;        // bf16 [R, inter] FP8-rounded hidden
    p.y = r * d * 4;        // fp32 [R, D] expert outputs
    return p;
}

// DeepSeek's 1×128 FP8 round trip of one block held 4 values per lane across a warp: the block
// amax (clamped at 1e-4), the UE8M0 scale, E4M3 with saturation and round-to-nearest-even, back
// times the scale. The result has a 4-bit significand, so it is exact in bf16.
__device__ __forceinline__ void fp8_round_block(float (&v)[4]) {
    float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
    amax = dev::warp_max(amax);
    const float s = dev::ue8m0_scale_for(fmaxf(amax, 1e-4f), 448.0f);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float q = fminf(fmaxf(__fdiv_rn(v[i], s), -448.0f), 448.0f);
        v[i] = __fmul_rn(dev::e4m3_to_f32(dev::f32_to_e4m3(q)), s);
    }
}

__device__ __forceinline__ void store_bf16x4(__nv_bfloat16* p, const float (&v)[4]) {
    __nv_bfloat162 a = __floats2bfloat162_rn(v[0], v[1]), b = __floats2bfloat162_rn(v[2], v[3]);
    uint2 raw;
    raw.x = *reinterpret_cast<uint32_t*>(&a);
    raw.y = *reinterpret_cast<uint32_t*>(&b);
    *reinterpret_cast<uint2*>(p) = raw;
}

// In place, one warp per 1×128 block of x [rows, k] (row stride ld).
__global__ void fp8_round_kernel(__nv_bfloat16* __restrict__ x, int64_t n_blocks, int64_t n_kb, int64_t ld) {
    dev::pdl_wait();
    dev::pdl_trigger();
    const int64_t blk = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) >> 5;
    if (blk >= n_blocks) return;  // whole warps leave together (blockDim is a multiple of 32)
    const int lane = threadIdx.x & 31;
    __nv_bfloat16* p = x + (blk / n_kb) * ld + (blk % n_kb) * 128 + lane * 4;
    const uint2 raw = *reinterpret_cast<const uint2*>(p);
    const __nv_bfloat162 p0 = *reinterpret_cast<const __nv_bfloat162*>(&raw.x);
    const __nv_bfloat162 p1 = *reinterpret_cast<const __nv_bfloat162*>(&raw.y);
    float v[4] = {__low2float(p0), __high2float(p0), __low2float(p1), __high2float(p1)};
    fp8_round_block(v);
    store_bf16x4(p, v);
}

// One thread per 32-element scale group of expert e's three matrices (tiled layout,
// mxfp4_layout.cuh): group G of row r of a [rows, cols] matrix reads its 4 code words and its scale
// byte from the tiled offsets and writes bf16 elements [32G, 32G + 32) of row r of the row-major
// matrix; w1, w3, w2 follow each other in `out`. E2M1·2^(s−127) has a 2-bit significand, so the bf16
// values are exact.
__global__ void dequant_expert_kernel(const uint8_t* __restrict__ w1, const uint8_t* __restrict__ s1,
                                      const uint8_t* __restrict__ w3, const uint8_t* __restrict__ s3,
                                      const uint8_t* __restrict__ w2, const uint8_t* __restrict__ s2, int64_t expert,
                                      int64_t dim, int64_t inter, __nv_bfloat16* __restrict__ out) {
    dev::pdl_wait();
    dev::pdl_trigger();
    const int64_t groups_per_matrix = dim * inter / 32;
    const int64_t gid = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (gid >= 3 * groups_per_matrix) return;
    const int64_t which = gid / groups_per_matrix, g = gid % groups_per_matrix;
    const uint8_t* w = which == 0 ? w1 : which == 1 ? w3 : w2;
    const uint8_t* s = which == 0 ? s1 : which == 1 ? s3 : s2;
    const int64_t cols = which == 2 ? inter : dim, row = g / (cols / 32), G = g % (cols / 32);
    w += expert * groups_per_matrix * 16;  // the expert's tiled matrix
    s += expert * groups_per_matrix;
    const float scale = dev::ue8m0_to_float(s[mxfp4_tiled_scale_offset(row, G, cols)]);
    uint4* dst = reinterpret_cast<uint4*>(out + gid * 32);
#pragma unroll
    for (int c = 0; c < 4; ++c) {
        const uint32_t word = *reinterpret_cast<const uint32_t*>(w + mxfp4_tiled_word_offset(row, G, c, cols));
        uint32_t o[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const uint32_t byte = (word >> (8 * j)) & 0xFFu;
            __nv_bfloat162 pair =
                __floats2bfloat162_rn(dev::e2m1_to_f32(byte & 0xFu) * scale, dev::e2m1_to_f32(byte >> 4) * scale);
            o[j] = *reinterpret_cast<uint32_t*>(&pair);
        }
        dst[c] = make_uint4(o[0], o[1], o[2], o[3]);
    }
}

// dequant_expert_kernel's output from an expert in the checkpoint's layout (a host expert staged in
// `staging`: w1 | s1 | w3 | s3 | w2 | s2 back to back, see stage_host_expert): group G of row r is
// 16 code bytes at r·cols/2 + 16G and one scale byte at r·cols/32 + G.
__global__ void dequant_shipped_kernel(const uint8_t* __restrict__ staging, int64_t dim, int64_t inter,
                                       __nv_bfloat16* __restrict__ out) {
    dev::pdl_wait();
    dev::pdl_trigger();
    const int64_t groups_per_matrix = dim * inter / 32;
    const int64_t gid = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (gid >= 3 * groups_per_matrix) return;
    const int64_t which = gid / groups_per_matrix, g = gid % groups_per_matrix;
    const int64_t codes = groups_per_matrix * 16, per_matrix = codes + groups_per_matrix;
    const uint8_t* w = staging + which * per_matrix;
    const uint8_t* s = w + codes;
    const float scale = dev::ue8m0_to_float(s[g]);  // row-major groups: g = row·cols/32 + G
    const uint4 raw = reinterpret_cast<const uint4*>(w)[g];
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
    uint4* dst = reinterpret_cast<uint4*>(out + gid * 32);
#pragma unroll
    for (int c = 0; c < 4; ++c) {
        uint32_t o[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const uint32_t byte = (words[c] >> (8 * j)) & 0xFFu;
            __nv_bfloat162 pair =
                __floats2bfloat162_rn(dev::e2m1_to_f32(byte & 0xFu) * scale, dev::e2m1_to_f32(byte >> 4) * scale);
            o[j] = *reinterpret_cast<uint32_t*>(&pair);
        }
        dst[c] = make_uint4(o[0], o[1], o[2], o[3]);
    }
}

// xs[p, :] = x[pair_token[p], :], 8 bf16 (16 bytes) per thread.
__global__ void gather_rows_kernel(const __nv_bfloat16* __restrict__ x, const int32_t* __restrict__ pair_token,
                                   __nv_bfloat16* __restrict__ xs, int64_t n_pairs, int64_t dim) {
    dev::pdl_wait();
    dev::pdl_trigger();
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    const int64_t per_row = dim / 8;
    if (i >= n_pairs * per_row) return;
    const int64_t p = i / per_row, c = i % per_row;
    reinterpret_cast<uint4*>(xs + p * dim)[c] = reinterpret_cast<const uint4*>(x + pair_token[p] * dim)[c];
}

// h [rows, inter] bf16 = fp8_round(swiglu_clamped(gate, up) · row weight) from gu [rows, 2·inter] fp32
// (gate | up), one warp per 1×128 block. Same fp32 operation order as cpu::swiglu_clamped followed by
// layer_moe.cpp's h *= w and cpu::fp8_quant_dequant; gate and up stay fp32 so the FP8 rounding sees the
// values the CPU sees (rounding them to bf16 first moves ~1.5% of the elements by one FP8 step).
__global__ void swiglu_fp8_kernel(const float* __restrict__ gu, const float* __restrict__ weights,
                                  const int32_t* __restrict__ pair_slot, __nv_bfloat16* __restrict__ h, int64_t rows,
                                  int64_t inter, float limit) {
    dev::pdl_wait();
    dev::pdl_trigger();
    const int64_t n_kb = inter / 128;
    const int64_t blk = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) >> 5;
    if (blk >= rows * n_kb) return;
    const int lane = threadIdx.x & 31;
    const int64_t r = blk / n_kb, c = (blk % n_kb) * 128 + lane * 4;
    const float4 g4 = *reinterpret_cast<const float4*>(gu + r * 2 * inter + c);
    const float4 u4 = *reinterpret_cast<const float4*>(gu + r * 2 * inter + inter + c);
    const float gs[4] = {g4.x, g4.y, g4.z, g4.w}, us[4] = {u4.x, u4.y, u4.z, u4.w};
    const float w = weights ? weights[pair_slot[r]] : 1.0f;
    float v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        // The decode path's rounding points: gate and up as the GEMV stores them (bf16), and the
        // (weighted) SwiGLU output in bf16 before its FP8 rounding (swiglu_clamp_quant, moe.cu).
        float g = __bfloat162float(__float2bfloat16(gs[i])), u = __bfloat162float(__float2bfloat16(us[i]));
        if (limit > 0.0f) {
            g = fminf(g, limit);
            u = fminf(fmaxf(u, -limit), limit);
        }
        v[i] = __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
        if (weights) v[i] = __fmul_rn(v[i], w);
        v[i] = __bfloat162float(__float2bfloat16(v[i]));
    }
    fp8_round_block(v);
    store_bf16x4(h + r * inter + c, v);
}

// out[t, d] = bf16(shared + Σ_k bf16(y[token_pairs[t, k], d]) · (weights ? w : 1)): moe_combine's
// (decode) arithmetic: each expert row as the GEMV stores it (bf16), summed in pick order in fp32
// without contraction, the shared expert added last, one rounding.
__global__ void combine_pairs_kernel(const float* __restrict__ y, const int32_t* __restrict__ token_pairs,
                                     const int32_t* __restrict__ pair_slot, const float* __restrict__ weights,
                                     const __nv_bfloat16* __restrict__ shared, __nv_bfloat16* __restrict__ out,
                                     int64_t n, int64_t top_k, int64_t dim) {
    dev::pdl_wait();
    dev::pdl_trigger();
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= n * dim) return;
    const int64_t t = i / dim, d = i % dim;
    float acc = 0.0f;
    for (int64_t j = 0; j < top_k; ++j) {
        const int64_t p = token_pairs[t * top_k + j];
        const float v = __bfloat162float(__float2bfloat16(y[p * dim + d]));
        acc = __fadd_rn(acc, weights ? __fmul_rn(v, weights[pair_slot[p]]) : v);
    }
    out[i] = __float2bfloat16(__fadd_rn(shared ? __bfloat162float(shared[i]) : 0.0f, acc));
}

unsigned grid_for(int64_t threads_total, int threads) {
    return static_cast<unsigned>((threads_total + threads - 1) / threads);
}

}  // namespace

void fp8_round_1x128(__nv_bfloat16* x, int64_t rows, int64_t k, cudaStream_t stream, int64_t ld) {
    if (ld == 0) ld = k;
    ONECARD_CHECK(k > 0 && k % 128 == 0 && ld >= k && ld % 4 == 0 && rows >= 0,
                  "fp8_round_1x128: rows {} k {} ld {} (k % 128 == 0, ld >= k, ld % 4 == 0)", rows, k, ld);
    ONECARD_CHECK(reinterpret_cast<uintptr_t>(x) % 8 == 0, "fp8_round_1x128: x is not 8-byte aligned");
    const int64_t n_kb = k / 128, n_blocks = rows * n_kb;
    if (n_blocks == 0) return;
    const int threads = 256;
    launch_pdl(fp8_round_kernel, grid_for(n_blocks * 32, threads), threads, 0, stream, x, n_blocks, n_kb, ld);
    CUDA_CHECK_LAUNCH("fp8_round_kernel");
}

struct MoeExperts::Impl {
    void* scratch = nullptr;
    size_t scratch_bytes = 0;
    int64_t max_rows = 0;
    cublasHandle_t handle = nullptr;
    int32_t* host_experts = nullptr;       // pinned [max_rows]: the routing, read back once per run
    int32_t* host_index = nullptr;         // pinned [3·max_rows]: pair_token, pair_slot, token_pairs
    cudaEvent_t index_uploaded = nullptr;  // host_index may be rewritten once this has completed
    // Host experts (hybrid): copies into the staging buffers run on their own stream; copied[b]
    // orders a buffer's dequantisation after its copy, consumed[b] the next copy after it.
    cudaStream_t copy_stream = nullptr;
    cudaEvent_t copied[MxHybridExperts::kStagingBuffers] = {}, consumed[MxHybridExperts::kStagingBuffers] = {};
};

MoeExperts::MoeExperts(void* scratch, size_t scratch_bytes, int64_t max_rows) : impl_(std::make_unique<Impl>()) {
    // Pair indices are int32 on the device.
    ONECARD_CHECK(max_rows > 0 && max_rows < (int64_t{1} << 31), "MoeExperts: max_rows {} out of range", max_rows);
    impl_->scratch = scratch;
    impl_->scratch_bytes = scratch_bytes;
    impl_->max_rows = max_rows;
    CUBLAS_CHECK(cublasCreate(&impl_->handle));
    // fp32 accumulation everywhere (no reduced-precision split-K reductions).
    CUBLAS_CHECK(cublasSetMathMode(
        impl_->handle,
        static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    CUDA_CHECK(cudaMallocHost(&impl_->host_experts, static_cast<size_t>(max_rows) * sizeof(int32_t)));
    CUDA_CHECK(cudaMallocHost(&impl_->host_index, static_cast<size_t>(3 * max_rows) * sizeof(int32_t)));
    CUDA_CHECK(cudaEventCreateWithFlags(&impl_->index_uploaded, cudaEventDisableTiming));
    CUDA_CHECK(cudaStreamCreateWithFlags(&impl_->copy_stream, cudaStreamNonBlocking));
    for (int b = 0; b < MxHybridExperts::kStagingBuffers; ++b) {
        CUDA_CHECK(cudaEventCreateWithFlags(&impl_->copied[b], cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&impl_->consumed[b], cudaEventDisableTiming));
    }
}

MoeExperts::~MoeExperts() {
    if (!impl_) return;
    // Destructors do not throw: release what was acquired and ignore late errors.
    if (impl_->index_uploaded) {
        cudaEventSynchronize(impl_->index_uploaded);
        cudaEventDestroy(impl_->index_uploaded);
    }
    if (impl_->copy_stream) {
        cudaStreamSynchronize(impl_->copy_stream);
        cudaStreamDestroy(impl_->copy_stream);
    }
    for (int b = 0; b < MxHybridExperts::kStagingBuffers; ++b) {
        if (impl_->copied[b]) cudaEventDestroy(impl_->copied[b]);
        if (impl_->consumed[b]) cudaEventDestroy(impl_->consumed[b]);
    }
    if (impl_->host_index) cudaFreeHost(impl_->host_index);
    if (impl_->host_experts) cudaFreeHost(impl_->host_experts);
    if (impl_->handle) cublasDestroy(impl_->handle);
}

size_t MxHybridExperts::staging_bytes_for(int64_t dim, int64_t inter) {
    return static_cast<size_t>(3 * (dim * inter / 2 + dim * inter / 32));
}

namespace {

// Queues the copy of host expert `h` (pinned) into `staging` in dequant_shipped_kernel's order.
void stage_host_expert(const MxHostExpert& h, int64_t dim, int64_t inter, uint8_t* staging, cudaStream_t stream) {
    const size_t codes = static_cast<size_t>(dim * inter / 2), scales = static_cast<size_t>(dim * inter / 32);
    const uint8_t* parts[6] = {h.w1, h.s1, h.w3, h.s3, h.w2, h.s2};
    size_t off = 0;
    for (int i = 0; i < 6; ++i) {
        ONECARD_CHECK(parts[i] != nullptr, "MoeExperts: a host expert has no weights (part {})", i);
        const size_t b = i % 2 == 0 ? codes : scales;
        CUDA_CHECK(cudaMemcpyAsync(staging + off, parts[i], b, cudaMemcpyHostToDevice, stream));
        off += b;
    }
}

}  // namespace

size_t MoeExperts::scratch_bytes_for(int64_t dim, int64_t inter, int64_t max_rows) {
    return plan_for(dim, inter, max_rows).total();
}

void MoeExperts::run(const __nv_bfloat16* x, const int32_t* experts, const float* weights, int64_t n, int64_t top_k,
                     const MxExpertWeights& w, ExpertWeighting weighting, float swiglu_limit,
                     const __nv_bfloat16* shared, __nv_bfloat16* out, cudaStream_t stream,
                     const MxHybridExperts* hybrid) {
    Impl& im = *impl_;
    const int64_t D = w.dim, F = w.inter, R = n * top_k;
    const int64_t E = hybrid ? hybrid->n_global : w.n_experts;  // the id space of `experts`
    ONECARD_CHECK(!hybrid || (hybrid->slot_of && hybrid->host && hybrid->staging),
                  "MoeExperts: hybrid experts without slot map, host views or staging buffer");
    ONECARD_CHECK(E > 0 && mxfp4_tileable(F, D) && mxfp4_tileable(D, F),
                  "MoeExperts: experts {} dim {} inter {} (dim and inter must be multiples of 256)", E, D, F);
    ONECARD_CHECK(n >= 0 && top_k > 0 && R <= im.max_rows, "MoeExperts: {} tokens × top_k {} exceed max_rows {}", n,
                  top_k, im.max_rows);
    for (const uint8_t* p : {w.w1, w.w3, w.w2})
        ONECARD_CHECK(p && reinterpret_cast<uintptr_t>(p) % 16 == 0,
                      "MoeExperts: expert weights must be 16-byte aligned");
    ONECARD_CHECK(w.s1 && w.s3 && w.s2, "MoeExperts: missing expert scales");
    ONECARD_CHECK(reinterpret_cast<uintptr_t>(x) % 16 == 0, "MoeExperts: x must be 16-byte aligned (row gather)");
    if (n == 0) return;
    const ScratchPlan plan = plan_for(D, F, R);
    ONECARD_CHECK(plan.total() <= im.scratch_bytes,
                  "MoeExperts: scratch of {} bytes is {} bytes short for dim {} inter {} and {} rows", im.scratch_bytes,
                  plan.total() - im.scratch_bytes, D, F, R);

    // The one synchronisation: the routing decides how many rows each expert's GEMMs get.
    CUDA_CHECK(cudaMemcpyAsync(im.host_experts, experts, static_cast<size_t>(R) * sizeof(int32_t),
                               cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    // A previous run may have queued its index upload on another stream; wait before rewriting it.
    CUDA_CHECK(cudaEventSynchronize(im.index_uploaded));

    // Pairs (token t, pick k) grouped by expert ascending, tokens ascending inside a group: the row
    // order of layer_moe.cpp's expert loop.
    std::vector<int64_t> count(static_cast<size_t>(E) + 1, 0);
    for (int64_t i = 0; i < R; ++i) {
        const int32_t e = im.host_experts[i];
        ONECARD_CHECK(e >= 0 && e < E, "MoeExperts: expert id {} at pair {} out of range [0, {})", e, i, E);
        ++count[static_cast<size_t>(e) + 1];
    }
    std::vector<int64_t> start(count.size(), 0);  // start[e]: first pair of expert e
    for (int64_t e = 0; e < E; ++e) start[e + 1] = start[e] + count[e + 1];
    int32_t* pair_token = im.host_index;
    int32_t* pair_slot = im.host_index + R;
    int32_t* token_pairs = im.host_index + 2 * R;
    {
        std::vector<int64_t> fill(start.begin(), start.end() - 1);
        for (int64_t t = 0; t < n; ++t)
            for (int64_t k = 0; k < top_k; ++k) {
                const int64_t p = fill[im.host_experts[t * top_k + k]]++;
                pair_token[p] = static_cast<int32_t>(t);
                pair_slot[p] = static_cast<int32_t>(t * top_k + k);
                token_pairs[t * top_k + k] = static_cast<int32_t>(p);  // each token's pairs in pick order
            }
    }

    DeviceArena arena(im.scratch, im.scratch_bytes, "MoeExperts scratch");
    auto* wdq = arena.alloc_n<__nv_bfloat16>(plan.wdq / 2, "dequantised expert");  // w1 | w3 | w2
    auto* d_index = arena.alloc_n<int32_t>(plan.idx / 4, "pair index");
    auto* xs = arena.alloc_n<__nv_bfloat16>(plan.xs / 2, "gathered rows");  // [R, D]
    auto* gu = arena.alloc_n<float>(plan.gu / 4, "gate|up");                // [R, 2F]
    auto* h = arena.alloc_n<__nv_bfloat16>(plan.h / 2, "hidden");           // [R, F]
    auto* y = arena.alloc_n<float>(plan.y / 4, "expert outputs");           // [R, D]
    const int32_t* d_pair_token = d_index;
    const int32_t* d_pair_slot = d_index + R;
    const int32_t* d_token_pairs = d_index + 2 * R;
    CUDA_CHECK(cudaMemcpyAsync(d_index, im.host_index, static_cast<size_t>(3 * R) * sizeof(int32_t),
                               cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaEventRecord(im.index_uploaded, stream));

    const int threads = 256;
    launch_pdl(gather_rows_kernel, grid_for(R * (D / 8), threads), threads, 0, stream, x, d_pair_token, xs, R, D);
    CUDA_CHECK_LAUNCH("gather_rows_kernel");

    CUBLAS_CHECK(cublasSetStream(im.handle, stream));
    const float one = 1.0f, zero = 0.0f;
    const int64_t groups = F * D / 32;           // scale groups per matrix
    const __nv_bfloat16* w13 = wdq;              // [2F, D]: w1 rows then w3 rows, so one GEMM gives gate | up
    const __nv_bfloat16* w2b = wdq + 2 * F * D;  // [D, F]
    // Host experts this run uses, in loop order; the first kStagingBuffers copies start now.
    std::vector<int64_t> host_order;
    if (hybrid)
        for (int64_t e = 0; e < E; ++e)
            if (count[e + 1] > 0 && hybrid->slot_of[e] < 0) host_order.push_back(e);
    const size_t stage_bytes = MxHybridExperts::staging_bytes_for(D, F);
    auto issue_copy = [&](size_t j) {
        const int b = static_cast<int>(j % MxHybridExperts::kStagingBuffers);
        CUDA_CHECK(cudaStreamWaitEvent(im.copy_stream, im.consumed[b], 0));  // its last reader is done
        stage_host_expert(hybrid->host[host_order[j]], D, F, hybrid->staging + b * stage_bytes, im.copy_stream);
        CUDA_CHECK(cudaEventRecord(im.copied[b], im.copy_stream));
    };
    for (size_t j = 0; j < host_order.size() && j < MxHybridExperts::kStagingBuffers; ++j) issue_copy(j);
    size_t host_j = 0;
    for (int64_t e = 0; e < E; ++e) {
        const int64_t m = count[e + 1], off = start[e];
        if (m == 0) continue;
        const int64_t slot = hybrid ? hybrid->slot_of[e] : e;
        if (slot >= 0) {
            ONECARD_CHECK(slot < w.n_experts, "MoeExperts: expert {} maps to slot {} of {}", e, slot, w.n_experts);
            launch_pdl(dequant_expert_kernel, grid_for(3 * groups, threads), threads, 0, stream, w.w1, w.s1, w.w3, w.s3,
                       w.w2, w.s2, slot, D, F, wdq);
            CUDA_CHECK_LAUNCH("dequant_expert_kernel");
        } else {
            const int b = static_cast<int>(host_j % MxHybridExperts::kStagingBuffers);
            CUDA_CHECK(cudaStreamWaitEvent(stream, im.copied[b], 0));
            launch_pdl(dequant_shipped_kernel, grid_for(3 * groups, threads), threads, 0, stream,
                       hybrid->staging + b * stage_bytes, D, F, wdq);
            CUDA_CHECK_LAUNCH("dequant_shipped_kernel");
            CUDA_CHECK(cudaEventRecord(im.consumed[b], stream));
            if (host_j + MxHybridExperts::kStagingBuffers < host_order.size())
                issue_copy(host_j + MxHybridExperts::kStagingBuffers);
            ++host_j;
        }
        // Row-major y[m, N] = x[m, K]·W[N, K]ᵀ is column-major yᵀ = Wᵀ·xᵀ with W read as [K, N] (op T).
        // gu[off.., 2F] = xs[off.., D] · w13ᵀ
        CUBLAS_CHECK(cublasGemmEx(im.handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(2 * F), static_cast<int>(m),
                                  static_cast<int>(D), &one, w13, CUDA_R_16BF, static_cast<int>(D), xs + off * D,
                                  CUDA_R_16BF, static_cast<int>(D), &zero, gu + off * 2 * F, CUDA_R_32F,
                                  static_cast<int>(2 * F), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        launch_pdl(swiglu_fp8_kernel, grid_for(m * (F / 128) * 32, threads), threads, 0, stream, gu + off * 2 * F,
                   weighting == ExpertWeighting::BeforeW2 ? weights : nullptr, d_pair_slot + off, h + off * F, m, F,
                   swiglu_limit);
        CUDA_CHECK_LAUNCH("swiglu_fp8_kernel");
        // y[off.., D] = h[off.., F] · w2ᵀ
        CUBLAS_CHECK(cublasGemmEx(im.handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(D), static_cast<int>(m),
                                  static_cast<int>(F), &one, w2b, CUDA_R_16BF, static_cast<int>(F), h + off * F,
                                  CUDA_R_16BF, static_cast<int>(F), &zero, y + off * D, CUDA_R_32F, static_cast<int>(D),
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
    launch_pdl(combine_pairs_kernel, grid_for(n * D, threads), threads, 0, stream, y, d_token_pairs, d_pair_slot,
               weighting == ExpertWeighting::BeforeW2 ? nullptr : weights, shared, out, n, top_k, D);
    CUDA_CHECK_LAUNCH("combine_pairs_kernel");
}

}  // namespace onecard::cuda
