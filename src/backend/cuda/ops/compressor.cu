#include "backend/cuda/ops/compressor.cuh"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops/common.cuh"
#include "backend/cuda/ops/pdl.cuh"

namespace onecard::cuda {
namespace {

// Shapes shared by both kernels, derived once on the host.
struct RingGeom {
    int ratio;
    int d;       // entry width
    int w;       // projection width c·d
    int n_ring;  // ring rows: at least 2·ratio (overlap) or ratio
    bool overlap;
    int64_t ld;  // row stride of the kv / score inputs (>= w)
};

RingGeom ring_geom(const CompressorDims& d) {
    RingGeom g{};
    g.ratio = static_cast<int>(d.ratio);
    g.d = static_cast<int>(d.head_dim);
    g.overlap = d.ratio == 4;
    g.w = g.overlap ? 2 * g.d : g.d;
    g.n_ring = static_cast<int>(d.ring_rows > 0 ? d.ring_rows : g.overlap ? 2 * g.ratio : g.ratio);
    g.ld = d.ld_in > 0 ? d.ld_in : g.w;
    return g;
}

// One block per token; tokens that close no window leave at once (the whole block together). Each
// thread owns channels c, c+blockDim, ... and runs an online softmax over the window's slots; the
// pooled row then goes through RMSNorm and RoPE in shared memory.
__global__ void compressor_pool_kernel(const float* __restrict__ kv, const float* __restrict__ score,
                                       const float* __restrict__ ape, const __nv_bfloat16* __restrict__ norm,
                                       const float* __restrict__ inv_freq, const uint8_t* __restrict__ state,
                                       const int32_t* __restrict__ positions, const int32_t* __restrict__ seq_first,
                                       const int64_t* __restrict__ ring_base, __nv_bfloat16* __restrict__ entries,
                                       RingGeom g, int rope_dim, float eps) {
    dev::pdl_wait();
    dev::pdl_trigger();
    extern __shared__ float row[];  // [d]
    __shared__ float scratch[32];
    const int64_t i = blockIdx.x;
    const int64_t pos = positions[i];
    if ((pos + 1) % g.ratio != 0) return;
    const int64_t window = pos / g.ratio;
    const int64_t first_idx = seq_first[i];
    const int64_t first_pos = positions[first_idx];  // rows at positions >= first_pos come from this step
    const float* ring = reinterpret_cast<const float*>(state + ring_base[i]);
    const int64_t w = g.w;

    // Overlap: slots [0, ratio) = window−1's tokens (A half, channels [0, d)), [ratio, 2·ratio) =
    // window's tokens (B half, channels [d, 2d)). Plain: the window's ratio tokens, all channels.
    const int n_slots = g.overlap ? 2 * g.ratio : g.ratio;
    const int64_t p0 = g.overlap ? (window - 1) * g.ratio : window * g.ratio;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < g.d; c += blockDim.x) {
        float m = -INFINITY, l = 0.0f, acc = 0.0f;
        for (int s = 0; s < n_slots; ++s) {
            const int64_t p = p0 + s;
            if (p < 0) continue;  // window 0's previous window is empty (weight 0)
            const int64_t ch = (g.overlap && s >= g.ratio ? g.d : 0) + c;
            float v, sc;
            if (p >= first_pos) {
                const int64_t t = first_idx + (p - first_pos);
                v = kv[t * g.ld + ch];
                sc = score[t * g.ld + ch] + ape[(p % g.ratio) * w + ch];
            } else {
                const float* r = ring + (p % g.n_ring) * 2 * w;
                v = r[ch];
                sc = r[w + ch];
            }
            if (sc > m) {
                const float corr = expf(m - sc);  // 0 on the first slot (m = −∞)
                l = l * corr + 1.0f;
                acc = acc * corr + v;
                m = sc;
            } else {
                const float e = expf(sc - m);
                l += e;
                acc += e * v;
            }
        }
        const float pooled = acc / l;
        row[c] = pooled;
        ss += pooled * pooled;
    }
    ss = dev::block_sum(ss, scratch);  // its barriers also publish row[]
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(g.d) + eps);
    for (int c = threadIdx.x; c < g.d; c += blockDim.x) row[c] = __bfloat162float(norm[c]) * (row[c] * inv);
    __syncthreads();
    // RoPE (interleaved pairs on the trailing rope_dim dims) at the window's first position, the
    // angle formed in fp32 like cpu::apply_rope; accurate sincosf (angles reach ~1e6 rad).
    const float fpos = static_cast<float>(window * g.ratio);
    float* rp = row + (g.d - rope_dim);
    for (int k = threadIdx.x; k < rope_dim / 2; k += blockDim.x) {
        float sn, cs;
        sincosf(inv_freq[k] * fpos, &sn, &cs);
        const float a = rp[2 * k], b = rp[2 * k + 1];
        rp[2 * k] = a * cs - b * sn;
        rp[2 * k + 1] = b * cs + a * sn;
    }
    __syncthreads();
    __nv_bfloat16* out = entries + i * g.d;
    for (int c = threadIdx.x; c < g.d; c += blockDim.x) out[c] = __float2bfloat16(row[c]);
}

// One block per token. Two tokens of one sequence n_ring apart map to the same ring row; only the
// later one writes (token i + n_ring belongs to the same sequence iff it has the same seq_first,
// since a sequence's tokens are contiguous), so no two blocks write one row.
__global__ void compressor_store_kernel(const float* __restrict__ kv, const float* __restrict__ score,
                                        const float* __restrict__ ape, uint8_t* __restrict__ state,
                                        const int32_t* __restrict__ positions, const int32_t* __restrict__ seq_first,
                                        const int64_t* __restrict__ ring_base, int64_t n, RingGeom g) {
    dev::pdl_wait();
    dev::pdl_trigger();
    const int64_t i = blockIdx.x;
    const int64_t later = i + g.n_ring;
    if (later < n && seq_first[later] == seq_first[i]) return;
    const int64_t pos = positions[i];
    const int64_t w = g.w;
    float* r = reinterpret_cast<float*>(state + ring_base[i]) + (pos % g.n_ring) * 2 * w;
    const float* kv_i = kv + i * g.ld;
    const float* sc_i = score + i * g.ld;
    const float* ape_p = ape + (pos % g.ratio) * w;
    for (int64_t c = threadIdx.x; c < w; c += blockDim.x) {
        r[c] = kv_i[c];
        r[w + c] = sc_i[c] + ape_p[c];  // the same fp32 add as the pool kernel's in-step rows
    }
}

void check_dims(const CompressorDims& d, int64_t n, const char* what) {
    ONECARD_CHECK(d.ratio > 0 && d.ratio <= 4096, "{}: ratio {} out of range", what, d.ratio);
    ONECARD_CHECK(d.head_dim > 0 && d.head_dim <= 8192, "{}: head_dim {} out of range", what, d.head_dim);
    ONECARD_CHECK(d.rope_dim >= 0 && d.rope_dim % 2 == 0 && d.rope_dim <= d.head_dim,
                  "{}: rope_dim {} must be even and <= head_dim {}", what, d.rope_dim, d.head_dim);
    ONECARD_CHECK(n >= 0 && n < (int64_t{1} << 31), "{}: {} tokens exceed the grid", what, n);
    const int64_t w = (d.ratio == 4 ? 2 : 1) * d.head_dim;
    ONECARD_CHECK(d.ld_in == 0 || d.ld_in >= w, "{}: input row stride {} < projection width {}", what, d.ld_in, w);
    const int64_t min_rows = d.ratio == 4 ? 2 * d.ratio : d.ratio;
    ONECARD_CHECK(d.ring_rows == 0 || (d.ring_rows >= min_rows && d.ring_rows <= min_rows + 64),
                  "{}: a ring of {} rows for ratio {} (at least {})", what, d.ring_rows, d.ratio, min_rows);
}

}  // namespace

void compressor_pool(const float* kv, const float* score, const float* ape, const __nv_bfloat16* norm,
                     const float* inv_freq, const uint8_t* state, const CompressorTokens& tok, __nv_bfloat16* entries,
                     int64_t n, const CompressorDims& d, cudaStream_t stream) {
    check_dims(d, n, "compressor_pool");
    if (n == 0) return;
    const RingGeom g = ring_geom(d);
    const int threads = d.head_dim >= 256 ? 256 : 128;
    const size_t smem = static_cast<size_t>(d.head_dim) * sizeof(float);
    launch_pdl(compressor_pool_kernel, static_cast<unsigned>(n), threads, smem, stream, kv, score, ape, norm, inv_freq,
               state, tok.positions, tok.seq_first, tok.ring_base, entries, g, static_cast<int>(d.rope_dim), d.eps);
    CUDA_CHECK_LAUNCH("compressor_pool_kernel");
}

void compressor_store(const float* kv, const float* score, const float* ape, uint8_t* state,
                      const CompressorTokens& tok, int64_t n, const CompressorDims& d, cudaStream_t stream) {
    check_dims(d, n, "compressor_store");
    if (n == 0) return;
    const RingGeom g = ring_geom(d);
    launch_pdl(compressor_store_kernel, static_cast<unsigned>(n), 256, 0, stream, kv, score, ape, state, tok.positions,
               tok.seq_first, tok.ring_base, n, g);
    CUDA_CHECK_LAUNCH("compressor_store_kernel");
}

}  // namespace onecard::cuda
