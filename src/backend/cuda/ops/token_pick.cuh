// Picking tokens from logits on the GPU: greedy argmax and the sampling kernel. Parity oracles:
// argmax with ties to the lower id, engine/sampler.h's distribution for the sampling kernel.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace onecard::cuda {

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

}  // namespace onecard::cuda
