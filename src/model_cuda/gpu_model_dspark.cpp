// GpuModel's 0731 DSpark drafter (docs/dspark.md; the CPU oracle is model/dspark.cpp and
// model/dspark_heads.h): the taps a step keeps, the context rows pushed into each stage's window
// ring, the block's one parallel pass through the S stages, and the Markov head slot by slot.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops/elementwise.cuh"
#include "backend/cuda/ops/embed_head.cuh"
#include "backend/cuda/ops/kv_write.cuh"
#include "backend/cuda/ops/markov.cuh"
#include "backend/cuda/ops/rmsnorm.cuh"
#include "backend/cuda/ops/rope.cuh"
#include "core/error.h"
#include "model_cuda/gpu_model.h"
#include "model_cuda/gpu_model_buffers.h"

namespace onecard {

void GpuModel::keep_taps(int64_t layer, cudaStream_t s) {
    Buffers& b = *buf_;
    const std::vector<int64_t>& ids = cfg_.dspark->target_layer_ids;
    const auto S = static_cast<int64_t>(ids.size());
    const int64_t D = cfg_.hidden_size;
    // taps [n, S, D]: target t's column block is the mean of the streams layer ids[t] outputs.
    for (int64_t t = 0; t < S; ++t)
        if (ids[static_cast<size_t>(t)] == layer) cuda::mean_streams(b.X, b.taps + t * D, meta_->n, 4, D, S * D, s);
}

void GpuModel::dspark_push(cudaStream_t s) {
    Buffers& b = *buf_;
    ONECARD_CHECK(b.taps != nullptr && w_.dspark.has_value(),
                  "gpu model: the DSpark drafter is off (GpuModelOptions::dspark, GpuModelWeights::dspark)");
    ONECARD_CHECK(last_run_ == LastRun::Step,
                  "gpu model: dspark_push needs a main step's taps (the last run was not "
                  "step())");
    const GpuDSpark& d = *w_.dspark;
    const ModelConfig& c = cfg_;
    const int64_t n = meta_->n, D = c.hidden_size, hd = c.head_dim, W = c.sliding_window;
    const float eps = static_cast<float>(c.rms_norm_eps);
    // main_x = main_norm(main_proj · taps)   [n, D] (b.x is free between steps)
    lin_->fp8(d.main_proj, b.taps, n, b.x, s);
    cuda::rmsnorm_bf16(b.x, d.main_norm, b.x, n, D, eps, s);
    const KvCacheSpec& spec = pool_.spec();
    cuda::KvEntryDims ed;
    ed.head_dim = hd;
    ed.rope_dim = c.qk_rope_head_dim;
    ed.quant_block = spec.entry.quant_block;
    ed.entry_bytes = spec.entry.entry_bytes();
    for (const GpuBlock& st : d.stages) {
        // ctx_s = RoPE(kv_norm_s(wkv_s · main_x)) at the token's position, into the stage's ring
        // (stages are sliding-window layers: the main rope frequencies).
        lin_->fp8(st.attn.wkv, b.x, n, b.kv, s);
        cuda::rmsnorm_bf16(b.kv, st.attn.kv_norm, b.kv, n, hd, eps, s);
        cuda::rope_bf16(b.kv, n, 1, hd,
                        {b.rope_main, c.qk_rope_head_dim, meta_->positions, cuda::RopeDirection::Forward}, s);
        build_write_offsets(*meta_, pool_, st.layer_id, W, b.step_dst, b.ring_dst, b.entry_dst, b.key_dst, s);
        cuda::kv_write_entries(b.kv, 0, b.ring_dst, pool_.base(), n, ed, s);
    }
}

const float* GpuModel::dspark_block(std::span<const GpuStepSeq> seqs, cudaStream_t s) {
    Buffers& b = *buf_;
    ONECARD_CHECK(b.taps != nullptr && w_.dspark.has_value(),
                  "gpu model: the DSpark drafter is off (GpuModelOptions::dspark, GpuModelWeights::dspark)");
    const GpuDSpark& d = *w_.dspark;
    const ModelConfig& c = cfg_;
    const int64_t B = c.dspark->block_size, D = c.hidden_size;
    ONECARD_CHECK(pool_.layers().n_layers() >= c.num_hidden_layers + static_cast<int64_t>(d.stages.size()),
                  "gpu model: the KV pool has no rings for the {} DSpark stages ({} layers)", d.stages.size(),
                  pool_.layers().n_layers());
    for (const GpuStepSeq& q : seqs)
        ONECARD_CHECK(static_cast<int64_t>(q.tokens.size()) == B && q.want_logits && q.logits_rows == B,
                      "gpu model: a DSpark block of slot {} has {} tokens and {} logits rows (the block is {} wide)",
                      q.slot, q.tokens.size(), q.logits_rows, B);
    build_meta(seqs, LogitRows::Last, s);
    last_run_ = LastRun::DSparkBlock;
    StepPlan plan = plan_step(meta_->n, meta_->max_pos);
    plan.stream_experts = false;  // the stages' experts are all on the GPU
    plan.dspark_block = true;
    profiling_ = profile_;
    profile_ = false;
    tick("start", s);
    // X = embed(ids) in every stream   [n, 4, D]
    cuda::embed_streams(meta_->tokens, w_.embed, b.X, meta_->n, D, 4, s);
    for (const GpuBlock& st : d.stages) run_block(plan, st, s);
    head(d.hc_head, d.norm, s, b.dspark_h);  // keeps the pre-norm hidden for the confidence head
    profiling_ = false;
    return b.logits;
}

GpuModel::DSparkSlot GpuModel::dspark_markov(int64_t j, std::span<const int32_t> prev, cudaStream_t s) {
    Buffers& b = *buf_;
    ONECARD_CHECK(last_run_ == LastRun::DSparkBlock, "gpu model: dspark_markov without a DSpark block pass before it");
    const GpuDSpark& d = *w_.dspark;
    const int64_t B = cfg_.dspark->block_size, V = cfg_.vocab_size;
    const int64_t n_seqs = meta_->n_out / B;
    ONECARD_CHECK(j >= 0 && j < B && static_cast<int64_t>(prev.size()) == n_seqs,
                  "gpu model: Markov slot {} of a block of {} with {} previous tokens for {} sequences", j, B,
                  prev.size(), n_seqs);
    for (int32_t t : prev) ONECARD_CHECK(t >= 0 && t < V, "gpu model: Markov previous token {} outside [0, {})", t, V);
    // prev goes through pageable memory: the call returns once the values are staged.
    CUDA_CHECK(cudaMemcpyAsync(b.dspark_prev, prev.data(), prev.size() * sizeof(int32_t), cudaMemcpyHostToDevice, s));
    cuda::markov_bias_add(b.logits, j, B, n_seqs, b.dspark_prev, d.markov_w1, d.markov_w2, d.rank, V, s);
    cuda::dspark_confidence(b.dspark_h, j, B, n_seqs, b.dspark_prev, d.confidence, d.markov_w1, cfg_.hidden_size,
                            d.rank, b.dspark_conf, s);
    return {argmax_last(s), b.dspark_conf};
}

}  // namespace onecard
