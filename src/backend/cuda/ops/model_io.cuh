// The ends of the forward pass on the GPU: token embedding into the hyper-connection streams, the
// HC head that collapses them, and picking tokens from logits. Plus the small element-wise ops the
// model glue needs. Parity oracles: the CPU forward's embedding copy, cpu::hc_head, argmax with
// ties to the lower id, engine/sampler.h's distribution for the sampling kernel.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace onecard::cuda {

// X [n, hc, D] bf16: every stream of token i is embed[tokens[i]] (embed [vocab, D] bf16).
void embed_streams(const int32_t* tokens, const __nv_bfloat16* embed, __nv_bfloat16* X, int64_t n, int64_t dim,
                   int64_t hc, cudaStream_t stream);

// y [n, D] bf16 = Σ_j pre_j · X_j with pre = sigmoid(mixes·scale[0] + base) + eps and
// mixes = rsqrt(mean(v²) + norm_eps) · (fn · v), v = flatten(X_i) (cpu::hc_head). X [n, 4, D] bf16,
// fn [4, 4·D] fp32, base [4], scale [1].
void hc_head_bf16(const __nv_bfloat16* X, const float* fn, const float* base, const float* scale, __nv_bfloat16* y,
                  int64_t n, int64_t dim, float hc_eps, float norm_eps, cudaStream_t stream);

// ids [n] = argmax of each row of logits [n, vocab] fp32 (ties to the lower id; NaN never wins).
void argmax_rows(const float* logits, int32_t* ids, int64_t n, int64_t vocab, cudaStream_t stream);

// Per-row sampling parameters (device array [n]); penalties are applied to the logits beforehand.
struct SampleParams {
    float temperature = 1.0f;  // <= 0: greedy (argmax)
    float min_p = 0.0f;        // <= 0: off
    int32_t top_k = 0;         // <= 0: off
    float top_p = 1.0f;        // >= 1: off
    uint64_t seed = 0;         // the row's draw is sampler_uniform(seed, counter) (engine/sampler.h),
    uint64_t counter = 0;      // computed the same way on the device, so GPU and CPU pick alike
    uint32_t masked = 0;       // 1: the row's allowed-token mask (sample_rows' masks) applies
};
// ids [n]: what engine/sampler.h's Sampler::sample picks for the row without penalties: softmax of
// logits / T, then min-p, top-k, top-p (ties by lower id), one draw. masks: null, or device
// [n, ceil(vocab / 32)] uint32 bitmasks (bit t set = token t allowed) read for the rows with
// params.masked; a masked-out token counts as a -inf logit, exactly as the host sampler sees a row
// after engine/token_constraint.h's apply_token_mask, so it is never picked while any token is
// allowed (a mask allowing nothing gives an arbitrary id: the engine refuses such rows). scratch:
// device memory, at least sample_rows_scratch_bytes(n, vocab).
void sample_rows(const float* logits, const SampleParams* params, const uint32_t* masks, int32_t* ids, int64_t n,
                 int64_t vocab, void* scratch, cudaStream_t stream);
size_t sample_rows_scratch_bytes(int64_t n, int64_t vocab);

// y = a + b, bf16 [n] (fp32 add).
void add_bf16(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* y, int64_t n, cudaStream_t stream);
// y [n] = f32(x) / bf16(x) conversions.
void bf16_to_f32(const __nv_bfloat16* x, float* y, int64_t n, cudaStream_t stream);
void f32_to_bf16(const float* x, __nv_bfloat16* y, int64_t n, cudaStream_t stream);
// y [n, k] *= s (fp32 scalar), fp32.
void scale_f32(float* y, float s, int64_t n, cudaStream_t stream);

}  // namespace onecard::cuda
