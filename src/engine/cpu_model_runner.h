// CpuModelRunner: executes a SchedulerOutput with the CPU DeepSeek-V4 forward pass, one
// SequenceState per request. Rows never share state, so a request's logits do not depend on which
// other requests share its batch; only where its chunk boundaries fall can move results (within the
// forward pass's chunking tolerance).
//
// [KV_SEAM] The model keeps its per-sequence KV in SequenceState (fp32 vectors), not yet in the paged
// 584/132-byte arenas the KV manager sizes; the manager's slots and blocks still bound admission and
// drive preemption, so the scheduling behaviour is the one the GPU path will have.
#pragma once

#include "engine/model_runner.h"
#include "model/config.h"
#include "model/deepseek_v4.h"

#include <unordered_map>

namespace onecard {

class CpuModelRunner : public ModelRunner {
public:
    // `model` must outlive the runner. max_model_len 0 -> the config's max_position_embeddings.
    explicit CpuModelRunner(const DeepSeekV4& model, int64_t max_model_len = 0);

    int64_t vocab_size() const override { return model_.config().vocab_size; }
    int64_t max_model_len() const override { return max_model_len_; }
    // Kinds from compress_ratios (via ModelConfig::layer_kind), MTP blocks as SWA layers.
    KvModelShape kv_model_shape() const override;
    RunnerOutput execute(const SchedulerOutput& batch) override;

    size_t n_live_states() const { return states_.size(); }

private:
    const DeepSeekV4& model_;
    int64_t max_model_len_;
    std::unordered_map<RequestId, SequenceState> states_;
};

}  // namespace onecard
