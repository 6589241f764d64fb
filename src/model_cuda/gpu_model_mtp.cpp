// GpuModel's MTP block (dsv4-model.md §6.2; the CPU oracle is DeepSeekV4::forward_mtp): the next
// token's embedding and the main model's streams go through their norms and projections, their sum
// through one decoder block at layer index num_hidden_layers (its KV a window ring of the pool), and
// the block's own hc_head and norm into the shared output head.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops/elementwise.cuh"
#include "backend/cuda/ops/embed_head.cuh"
#include "backend/cuda/ops/rmsnorm.cuh"
#include "core/error.h"
#include "model_cuda/gpu_model.h"
#include "model_cuda/gpu_model_buffers.h"

namespace onecard {

const float* GpuModel::last_streams() const {
    return buf_->X;
}

const float* GpuModel::mtp_step(std::span<const GpuStepSeq> seqs, const float* streams, LogitRows rows,
                                cudaStream_t s) {
    Buffers& b = *buf_;
    ONECARD_CHECK(w_.mtp.has_value(), "gpu model: the weights carry no MTP block (upload_mtp_weights)");
    ONECARD_CHECK(pool_.layers().n_layers() > cfg_.num_hidden_layers,
                  "gpu model: the KV pool has no layer for the MTP block ({} layers)", pool_.layers().n_layers());
    ONECARD_CHECK(streams != nullptr, "gpu model: an MTP step without input streams");
    build_meta(seqs, rows, s);
    last_run_ = LastRun::Mtp;
    StepPlan plan = plan_step(meta_->n, meta_->max_pos);
    plan.stream_experts = false;  // the MTP block's experts are all on the GPU
    profiling_ = profile_;
    profile_ = false;
    mtp_forward(plan, streams, s);
    profiling_ = false;
    return b.logits;
}

const float* GpuModel::gather_mtp_input(std::span<const MtpRun> runs, cudaStream_t s) {
    Buffers& b = *buf_;
    ONECARD_CHECK(b.mtp_in != nullptr, "gpu model: MTP buffers are off (GpuModelOptions::mtp)");
    const int64_t row_elems = 4 * cfg_.hidden_size;
    const auto row_bytes = static_cast<size_t>(row_elems) * sizeof(float);
    int64_t at = 0;
    for (const MtpRun& r : runs) {
        ONECARD_CHECK(r.n >= 1 && at + r.n <= b.T, "gpu model: MTP input of {} rows past {}", at + r.n, b.T);
        const float* src = nullptr;
        if (r.slot >= 0) {
            ONECARD_CHECK(r.slot < opt_.max_num_seqs && r.n == 1, "gpu model: pending MTP row of slot {} (x{})", r.slot,
                          r.n);
            src = b.mtp_pending + r.slot * row_elems;
        } else {
            ONECARD_CHECK(r.row >= 0 && r.row + r.n <= meta_->n, "gpu model: MTP rows [{}, {}) outside the last step",
                          r.row, r.row + r.n);
            src = b.X + r.row * row_elems;
        }
        CUDA_CHECK(cudaMemcpyAsync(b.mtp_in + at * row_elems, src, row_bytes * static_cast<size_t>(r.n),
                                   cudaMemcpyDeviceToDevice, s));
        at += r.n;
    }
    return b.mtp_in;
}

void GpuModel::save_mtp_pending(std::span<const std::pair<int32_t, int64_t>> slot_rows, cudaStream_t s) {
    Buffers& b = *buf_;
    ONECARD_CHECK(b.mtp_pending != nullptr, "gpu model: MTP buffers are off (GpuModelOptions::mtp)");
    const int64_t row_elems = 4 * cfg_.hidden_size;
    for (const auto& [slot, row] : slot_rows) {
        ONECARD_CHECK(slot >= 0 && slot < opt_.max_num_seqs && row >= 0 && row < meta_->n,
                      "gpu model: pending MTP row {} of slot {} outside the last step", row, slot);
        CUDA_CHECK(cudaMemcpyAsync(b.mtp_pending + slot * row_elems, b.X + row * row_elems,
                                   static_cast<size_t>(row_elems) * sizeof(float), cudaMemcpyDeviceToDevice, s));
    }
}

void GpuModel::mtp_forward(const StepPlan& p, const float* streams, cudaStream_t s) {
    Buffers& b = *buf_;
    const ModelConfig& c = cfg_;
    const GpuMtp& m = *w_.mtp;
    const int64_t n = meta_->n, D = c.hidden_size;
    const float eps = static_cast<float>(c.rms_norm_eps);
    // hnorm's output [n·4, D] goes to the q buffer and h_proj's to the o buffer, both free until the
    // block's attention.
    ONECARD_CHECK(c.num_attention_heads * c.head_dim >= 4 * D, "gpu model: the q buffer cannot hold the MTP streams");
    tick("start", s);
    if (streams != b.X)
        CUDA_CHECK(
            cudaMemcpyAsync(b.X, streams, static_cast<size_t>(n * 4 * D) * sizeof(float), cudaMemcpyDeviceToDevice, s));
    // X = h_proj · hnorm(H) per stream   [n, 4, D] (the linear writes bf16, widened into the fp32 streams)
    cuda::rmsnorm_f32_to_bf16(b.X, m.hnorm, b.q, n * 4, D, eps, s);
    lin_->fp8(m.h_proj, b.q, n * 4, b.o, s);
    cuda::bf16_to_f32(b.o, b.X, n * 4 * D, s);
    // pe = e_proj · enorm(embed[next])   [n, D]; X += pe in every stream
    cuda::embed_streams(meta_->tokens, w_.embed, b.x, n, D, 1, s);
    cuda::rmsnorm_bf16(b.x, m.enorm, b.x, n, D, eps, s);
    lin_->fp8(m.e_proj, b.x, n, b.a, s);
    cuda::add_to_streams(b.a, b.X, n, 4, D, s);
    tick("mtp: input projections", s);
    run_block(p, m.block, s);
    head(m.hc_head, m.norm, s);
}

}  // namespace onecard
