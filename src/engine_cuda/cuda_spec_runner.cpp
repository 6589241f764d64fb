// CudaModelRunner's speculative decoding (issue 17) with the checkpoint's mtp.0 block or the 0731
// DSpark drafter on the GPU. Greedy rows draft and verify on the device (argmax); sampled rows draw
// their drafts and are decided on the host by the CPU backend's code (q from the drafter's logits, p
// from the verify rows, engine/spec_verify.h), the same streams of randomness as the CPU, so their
// output is distributed as the target's (the chi-square tests of spec_verify_test and
// dspark_chi2_test cover that code).
//
// MTP positions (as on the CPU, engine/spec_decoder.h): the MTP block at position p reads the main
// model's pre-hc_head streams at p and the token at p + 1. A row whose next token sits at position n
// has the MTP block computed up to n - 2 (mtp_pos_ = n - 1) and the main streams of position n - 1
// pending (GpuModel::save_mtp_pending). Its draft: the MTP block at n - 1 on the pending streams and
// `next` (final: kept), then at n, n + 1, ... on its own output streams and the previous draft (dropped:
// their ring rows are overwritten later, and the ring's spare rows keep them off every row a kept
// position reads, KvModelShape::ring_spare). The step then verifies [next, drafts...] in the main
// forward; afterwards mtp_catch_up() runs the block over every position the step kept whose next
// token is known and saves the last kept position's streams as the new pending row.
//
// DSpark (docs/dspark.md) keeps no trail: every step pushes its tokens' context rows into the stage
// rings (GpuModel::dspark_push, in execute()), and a draft is one block pass at positions n..n+B-1
// plus the Markov head slot by slot, which stores nothing in the pool.
#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "engine/sampler.h"
#include "engine_cuda/cuda_model_runner.h"
#include "model/dspark_heads.h"

#include <algorithm>

namespace onecard {

bool CudaModelRunner::supports_speculation(const std::string& method) const {
    return (method == "mtp" && weights_.mtp.has_value()) || (method == "dspark" && weights_.dspark.has_value());
}

void CudaModelRunner::enable_speculation(const SpeculativeConfig& config) {
    ONECARD_CHECK(supports_speculation(config.method), "cuda runner: speculative method '{}' is not supported ({})",
                  config.method,
                  weights_.mtp      ? "the GPU drafts with the mtp.0 block: use 'mtp'"
                  : weights_.dspark ? "the GPU drafts with the 0731 DSpark drafter: use 'dspark'"
                                    : "the runner was built without a drafter (CudaRunnerOptions::mtp_drafter, "
                                      "dspark_drafter)");
    if (config.method == "dspark")
        ONECARD_CHECK(config.num_speculative_tokens <= cfg_.dspark->block_size,
                      "cuda runner: num_speculative_tokens = {} exceeds the DSpark drafter's block of {} "
                      "(dspark_block_size); use num_speculative_tokens <= {}",
                      config.num_speculative_tokens, cfg_.dspark->block_size, cfg_.dspark->block_size);
    ONECARD_CHECK(config.num_speculative_tokens >= 1 && config.num_speculative_tokens <= opt_.num_speculative_tokens,
                  "cuda runner: {} speculative tokens, the runner was sized for {}", config.num_speculative_tokens,
                  opt_.num_speculative_tokens);
    // MTP: a token reads at most window - 1 ring rows before its own, so k - 1 spare rows keep a
    // step's k rejected rows off them; a DSpark block reads window rows before its first position: k.
    const int64_t spare = config.method == "dspark" ? config.num_speculative_tokens : config.num_speculative_tokens - 1;
    ONECARD_CHECK(pool_ != nullptr && pool_->spec().shape.ring_spare >= spare,
                  "cuda runner: the KV rings have {} spare rows, {} drafts need {}",
                  pool_ ? pool_->spec().shape.ring_spare : 0, config.num_speculative_tokens, spare);
    ONECARD_CHECK(config.confidence_threshold >= 0.0 && config.confidence_threshold < 1.0,
                  "cuda runner: confidence_threshold {} is outside [0, 1)", config.confidence_threshold);
    ONECARD_CHECK(config.confidence_threshold == 0.0 || config.method == "dspark",
                  "cuda runner: confidence_threshold needs the DSpark drafter's confidence head (method 'dspark')");
    ONECARD_CHECK(mtp_pos_.empty() && tables_.empty(), "cuda runner: speculation is enabled before the first step");
    spec_k_ = config.num_speculative_tokens;
    spec_dspark_ = config.method == "dspark";
    spec_threshold_ = config.confidence_threshold;
}

std::vector<size_t> CudaModelRunner::drafting_rows(const SchedulerOutput& batch) const {
    std::vector<size_t> rows;
    for (size_t i = 0; i < batch.requests.size(); ++i) {
        const auto& r = batch.requests[i];
        if (r.n_draft_tokens <= 0 || !r.sample || !r.sampling || r.sampling->fill_mask || r.n_tokens() != 1 ||
            r.start_pos < 1)
            continue;
        if (spec_dspark_) {
            // The block's positions n .. n + B - 1 must fit the sequence length the buffers are sized for.
            if (r.start_pos + cfg_.dspark->block_size > opt_.max_model_len) continue;
        } else {
            // The MTP block's pending streams must be those of the position before next.
            const auto it = mtp_pos_.find(r.id);
            if (it == mtp_pos_.end() || it->second != r.start_pos - 1) continue;
        }
        rows.push_back(i);
    }
    return rows;
}

std::vector<CudaModelRunner::RowDraft> CudaModelRunner::draft_with_dspark(const SchedulerOutput& batch) {
    std::vector<RowDraft> drafts(batch.requests.size());
    const std::vector<size_t> rows = drafting_rows(batch);
    if (rows.empty()) return drafts;
    const int64_t V = cfg_.vocab_size, B = cfg_.dspark->block_size;
    const auto noise = static_cast<int32_t>(cfg_.dspark->noise_token_id);
    const int64_t block_tokens = pool_->spec().block_size;
    int64_t k_max = 0;
    std::vector<int32_t> tokens(rows.size() * static_cast<size_t>(B), noise);  // [rows, B]: next, noise...
    std::vector<std::vector<int32_t>> tables(rows.size());
    std::vector<GpuStepSeq> seqs;
    std::vector<int32_t> prev(rows.size());
    for (size_t at = 0; at < rows.size(); ++at) {
        const auto& r = batch.requests[rows[at]];
        k_max = std::max(k_max, std::min(r.n_draft_tokens, spec_k_));
        tokens[at * static_cast<size_t>(B)] = prev[at] = r.token_ids[0];
        // The block's positions reach n + B - 1, past the blocks the scheduler gave the row when it drafts
        // fewer than B - 1 tokens. A stage is a sliding-window layer: the block never reads or writes a
        // paged block, so the table is only padded to the length the step metadata checks.
        tables[at] = tables_[r.id];
        while (static_cast<int64_t>(tables[at].size()) * block_tokens < r.start_pos + B)
            tables[at].push_back(tables[at].back());
        GpuStepSeq q;
        q.slot = r.kv.slot;
        q.block_table = tables[at];
        q.start_pos = r.start_pos;
        q.tokens = std::span<const int32_t>(tokens).subspan(at * static_cast<size_t>(B), static_cast<size_t>(B));
        q.want_logits = true;
        q.logits_rows = B;
        seqs.push_back(q);
    }
    const float* logits = model_->dspark_block(seqs, stream_.get());
    std::vector<int32_t> ids(rows.size() * static_cast<size_t>(B));
    std::vector<float> conf(rows.size());
    std::vector<std::vector<float>> confidence(rows.size());  // per row, its slots' confidence logits
    std::vector<float> row_logits(static_cast<size_t>(V));
    Sampler sampler;
    for (int64_t j = 0; j < k_max; ++j) {
        // Slot j's logits = base + Markov bias of the token before it; its draft is the token after it.
        const GpuModel::DSparkSlot slot = model_->dspark_markov(j, prev, stream_.get());
        CUDA_CHECK(cudaMemcpyAsync(ids.data(), slot.ids, ids.size() * 4, cudaMemcpyDeviceToHost, stream_.get()));
        CUDA_CHECK(
            cudaMemcpyAsync(conf.data(), slot.confidence, conf.size() * 4, cudaMemcpyDeviceToHost, stream_.get()));
        stream_.sync();
        for (size_t at = 0; at < rows.size(); ++at) {
            const auto& r = batch.requests[rows[at]];
            if (j >= std::min(r.n_draft_tokens, spec_k_)) continue;
            RowDraft& d = drafts[rows[at]];
            const int64_t row = static_cast<int64_t>(at) * B + j;
            if (r.sampling->temperature == 0.0f) {  // greedy: the drafter's argmax
                d.tokens.push_back(ids[static_cast<size_t>(row)]);
            } else {  // sampled: drawn from q_j with the CPU drafter's stream (draft_with_dspark)
                CUDA_CHECK(
                    cudaMemcpy(row_logits.data(), logits + row * V, row_logits.size() * 4, cudaMemcpyDeviceToHost));
                const std::vector<double> q =
                    dense_distribution(sampler.target_distribution(row_logits, r.sampling->params(), {}, {}), V);
                d.tokens.push_back(draw_token(q, spec_uniform(r.sampling->seed, SpecStream::Draft,
                                                              r.sampling->counter + static_cast<uint64_t>(j))));
                d.q.insert(d.q.end(), q.begin(), q.end());
            }
            prev[at] = d.tokens.back();
            confidence[at].push_back(conf[at]);
        }
    }
    // DeepSpec's early stop, as the CPU drafter applies it (draft_with_dspark): the draft ends before the
    // first slot whose sigmoid(confidence) is below the threshold, keeping at least one token.
    if (spec_threshold_ > 0.0)
        for (size_t at = 0; at < rows.size(); ++at) {
            RowDraft& d = drafts[rows[at]];
            if (d.tokens.empty()) continue;
            const auto keep =
                static_cast<size_t>(std::max<int64_t>(1, confident_prefix_length(confidence[at], spec_threshold_)));
            if (keep >= d.tokens.size()) continue;
            d.tokens.resize(keep);
            if (!d.q.empty()) d.q.resize(keep * static_cast<size_t>(V));
        }
    return drafts;
}

std::vector<CudaModelRunner::RowDraft> CudaModelRunner::draft_with_mtp(const SchedulerOutput& batch) {
    std::vector<RowDraft> drafts(batch.requests.size());
    const std::vector<size_t> rows = drafting_rows(batch);
    if (rows.empty()) return drafts;
    const int64_t V = cfg_.vocab_size;
    int64_t k_max = 0;
    for (size_t i : rows) k_max = std::max(k_max, std::min(batch.requests[i].n_draft_tokens, spec_k_));
    std::vector<GpuStepSeq> seqs;
    std::vector<GpuModel::MtpRun> runs;
    std::vector<int32_t> tokens(rows.size()), ids(rows.size());
    std::vector<float> row_logits(static_cast<size_t>(V));
    std::vector<size_t> prev_row(batch.requests.size());  // the row's index in the previous draft step
    Sampler sampler;
    for (int64_t j = 0; j < k_max; ++j) {
        seqs.clear();
        runs.clear();
        std::vector<size_t> in_step;
        for (size_t i : rows) {
            const auto& r = batch.requests[i];
            if (j >= std::min(r.n_draft_tokens, spec_k_)) continue;
            const size_t at = in_step.size();
            tokens[at] = j == 0 ? r.token_ids[0] : drafts[i].tokens.back();
            GpuStepSeq q;
            q.slot = r.kv.slot;
            q.block_table = tables_[r.id];
            q.start_pos = r.start_pos - 1 + j;  // position n - 1 + j
            q.tokens = std::span<const int32_t>(tokens).subspan(at, 1);
            q.want_logits = true;
            seqs.push_back(q);
            runs.push_back(j == 0 ? GpuModel::MtpRun{r.kv.slot, 0, 1}
                                  : GpuModel::MtpRun{-1, static_cast<int64_t>(prev_row[i]), 1});
            prev_row[i] = at;
            in_step.push_back(i);
        }
        const float* in = model_->gather_mtp_input(runs, stream_.get());
        const float* logits = model_->mtp_step(seqs, in, LogitRows::Last, stream_.get());
        const int32_t* d_ids = model_->argmax_last(stream_.get());
        CUDA_CHECK(cudaMemcpyAsync(ids.data(), d_ids, in_step.size() * 4, cudaMemcpyDeviceToHost, stream_.get()));
        stream_.sync();  // the next draft step's tokens, and its metadata's pinned staging
        for (size_t at = 0; at < in_step.size(); ++at) {
            const auto& r = batch.requests[in_step[at]];
            RowDraft& d = drafts[in_step[at]];
            if (r.sampling->temperature == 0.0f) {  // greedy: the drafter's argmax
                d.tokens.push_back(ids[at]);
                continue;
            }
            // Sampled: q_j is the row's distribution over the drafter's logits; the draft is drawn from
            // it with the CPU drafter's stream (engine/spec_decoder.cpp draft_with_mtp).
            CUDA_CHECK(cudaMemcpy(row_logits.data(), logits + static_cast<int64_t>(at) * V, row_logits.size() * 4,
                                  cudaMemcpyDeviceToHost));
            const std::vector<double> q =
                dense_distribution(sampler.target_distribution(row_logits, r.sampling->params(), {}, {}), V);
            d.tokens.push_back(draw_token(
                q, spec_uniform(r.sampling->seed, SpecStream::Draft, r.sampling->counter + static_cast<uint64_t>(j))));
            d.q.insert(d.q.end(), q.begin(), q.end());
        }
        if (j == 0)  // the MTP row at n - 1 read the real streams and `next`: it is kept
            for (size_t i : in_step) mtp_pos_[batch.requests[i].id] = batch.requests[i].start_pos;
    }
    return drafts;
}

SpecVerdict CudaModelRunner::verify_sampled(const ScheduledRequest& r, const RowDraft& d,
                                            std::span<const float> rows) const {
    const int64_t V = cfg_.vocab_size;
    const auto k = static_cast<int64_t>(d.tokens.size());
    ONECARD_CHECK(static_cast<int64_t>(rows.size()) == (k + 1) * V && static_cast<int64_t>(d.q.size()) == k * V,
                  "cuda runner: request {} has {} drafts with {} q values and {} verify logits", r.id, k, d.q.size(),
                  rows.size());
    Sampler sampler;
    std::vector<double> p;  // [k + 1, vocab] the target's distributions
    for (int64_t i = 0; i <= k; ++i) {
        const std::vector<double> pi = dense_distribution(
            sampler.target_distribution(rows.subspan(static_cast<size_t>(i * V), static_cast<size_t>(V)),
                                        r.sampling->params(), {}, {}),
            V);
        p.insert(p.end(), pi.begin(), pi.end());
    }
    return verify_drafts(d.tokens, d.q, p, V, r.sampling->seed, r.sampling->counter);
}

void CudaModelRunner::mtp_catch_up(const SchedulerOutput& batch, const std::vector<std::vector<int32_t>>& fed,
                                   const std::vector<int64_t>& kept) {
    std::vector<GpuStepSeq> seqs;
    std::vector<GpuModel::MtpRun> runs;
    std::vector<std::pair<int32_t, int64_t>> pending;
    std::vector<std::vector<int32_t>> next(batch.requests.size());
    int64_t step_row = 0;  // the request's first row in the main step
    for (size_t i = 0; i < batch.requests.size(); ++i) {
        const auto& r = batch.requests[i];
        const int64_t s = r.start_pos, c = kept[i];
        int64_t& m = mtp_pos_[r.id];
        if (s == 0) m = 0;  // a fresh (or recomputed) sequence
        ONECARD_CHECK(m == s - 1 || m == s || s == 0, "cuda runner: request {} has the MTP block at {}, its step at {}",
                      r.id, m, s);
        // MTP positions m .. s + c - 2: position p reads streams p (the pending row for s - 1) and token p + 1.
        const int64_t last = s + c - 2;
        if (last >= m) {
            for (int64_t p = m; p <= last; ++p) next[i].push_back(fed[i][static_cast<size_t>(p + 1 - s)]);
            if (m == s - 1) runs.push_back({r.kv.slot, 0, 1});
            const int64_t from = std::max(m, s);
            if (last >= from) runs.push_back({-1, step_row + (from - s), last - from + 1});
            GpuStepSeq q;
            q.slot = r.kv.slot;
            q.block_table = tables_[r.id];
            q.start_pos = m;
            q.tokens = next[i];
            seqs.push_back(q);
            m = last + 1;
        }
        pending.emplace_back(r.kv.slot, step_row + c - 1);
        step_row += static_cast<int64_t>(fed[i].size());
    }
    // The inputs read the old pending rows and the main step's streams before either is overwritten.
    const float* in = seqs.empty() ? nullptr : model_->gather_mtp_input(runs, stream_.get());
    model_->save_mtp_pending(pending, stream_.get());
    if (!seqs.empty()) model_->mtp_step(seqs, in, LogitRows::Last, stream_.get());
    stream_.sync();  // the MTP step's metadata staging is rewritten by the next step's
}

}  // namespace onecard
