#include "bench_spec.h"

#ifdef ONECARD_HAVE_CUDA

#include "backend/cuda/cuda_check.h"

#include <algorithm>
#include <chrono>

namespace onecard::cli {

double time_mtp_draft_chain(GpuModel& model, int64_t B, int64_t k, int64_t pos,
                            const std::vector<std::vector<int32_t>>& tables, int64_t vocab, int64_t warmup,
                            int64_t repeats, cudaStream_t s) {
    std::vector<int32_t> tokens(static_cast<size_t>(B)), ids(static_cast<size_t>(B));
    for (int64_t q = 0; q < B; ++q) tokens[static_cast<size_t>(q)] = static_cast<int32_t>((q * 7919 + 13) % vocab);
    std::vector<GpuStepSeq> seqs(static_cast<size_t>(B));
    std::vector<GpuModel::MtpRun> runs(static_cast<size_t>(B));
    std::vector<double> times;
    for (int64_t r = 0; r < warmup + repeats; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int64_t j = 0; j < k; ++j) {
            for (int64_t q = 0; q < B; ++q) {
                GpuStepSeq& sq = seqs[static_cast<size_t>(q)];
                sq.slot = static_cast<int32_t>(q);
                sq.block_table = tables[static_cast<size_t>(q)];
                sq.start_pos = pos - 1 + j;
                sq.tokens = std::span<const int32_t>(tokens).subspan(static_cast<size_t>(q), 1);
                sq.want_logits = true;
                runs[static_cast<size_t>(q)] =
                    j == 0 ? GpuModel::MtpRun{static_cast<int32_t>(q), 0, 1} : GpuModel::MtpRun{-1, q, 1};
            }
            model.mtp_step(seqs, model.gather_mtp_input(runs, s), LogitRows::Last, s);
            const int32_t* d_ids = model.argmax_last(s);
            CUDA_CHECK(cudaMemcpyAsync(ids.data(), d_ids, ids.size() * 4, cudaMemcpyDeviceToHost, s));
            CUDA_CHECK(cudaStreamSynchronize(s));
            tokens = ids;  // the next draft step feeds this one's drafts
        }
        if (r >= warmup) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(times.begin(), times.end());
    return times.empty() ? 0.0 : times[times.size() / 2];
}

double time_dspark_draft(GpuModel& model, int64_t B, int64_t k, int64_t& pos,
                         const std::vector<std::vector<int32_t>>& tables, int64_t warmup, int64_t repeats,
                         cudaStream_t s) {
    const ModelConfig& cfg = model.config();
    const int64_t bs = cfg.dspark->block_size, vocab = cfg.vocab_size;
    const auto noise = static_cast<int32_t>(cfg.dspark->noise_token_id);
    std::vector<int32_t> fed(static_cast<size_t>(B)), block(static_cast<size_t>(B * bs), noise),
        ids(static_cast<size_t>(B * bs)), prev(static_cast<size_t>(B));
    std::vector<float> conf(static_cast<size_t>(B));
    std::vector<GpuStepSeq> seqs(static_cast<size_t>(B)), blocks(static_cast<size_t>(B));
    std::vector<double> times;
    for (int64_t r = 0; r < warmup + repeats; ++r, ++pos) {
        for (int64_t q = 0; q < B; ++q) {
            const auto i = static_cast<size_t>(q);
            fed[i] = static_cast<int32_t>((q * 7919 + r * 31 + 13) % vocab);
            block[i * static_cast<size_t>(bs)] = prev[i] = static_cast<int32_t>((q * 104729 + r * 17 + 5) % vocab);
            seqs[i] = GpuStepSeq{
                static_cast<int32_t>(q), tables[i], pos, std::span<const int32_t>(fed).subspan(i, 1), true, 1};
            blocks[i] = GpuStepSeq{
                static_cast<int32_t>(q),
                tables[i],
                pos + 1,
                std::span<const int32_t>(block).subspan(i * static_cast<size_t>(bs), static_cast<size_t>(bs)),
                true,
                bs};
        }
        model.step(seqs, LogitRows::Last, s);
        CUDA_CHECK(cudaStreamSynchronize(s));
        const auto t0 = std::chrono::steady_clock::now();
        model.dspark_push(s);
        model.dspark_block(blocks, s);
        for (int64_t j = 0; j < k; ++j) {
            const GpuModel::DSparkSlot slot = model.dspark_markov(j, prev, s);
            CUDA_CHECK(cudaMemcpyAsync(ids.data(), slot.ids, ids.size() * 4, cudaMemcpyDeviceToHost, s));
            CUDA_CHECK(cudaMemcpyAsync(conf.data(), slot.confidence, conf.size() * 4, cudaMemcpyDeviceToHost, s));
            CUDA_CHECK(cudaStreamSynchronize(s));
            for (int64_t q = 0; q < B; ++q) prev[static_cast<size_t>(q)] = ids[static_cast<size_t>(q * bs + j)];
        }
        if (r >= warmup) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(times.begin(), times.end());
    return times.empty() ? 0.0 : times[times.size() / 2];
}

}  // namespace onecard::cli

#endif
