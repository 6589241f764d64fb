#include "engine/cpu_model_runner.h"

#include "core/error.h"

#include <algorithm>

namespace onecard {

KvModelShape CpuModelRunner::kv_model_shape() const {
    const ModelConfig& cfg = model_.config();
    KvModelShape s;
    s.head_dim = cfg.head_dim;
    s.rope_dim = cfg.qk_rope_head_dim;
    s.index_head_dim = cfg.index_head_dim;
    s.sliding_window = cfg.sliding_window;
    s.n_main_layers = cfg.num_hidden_layers;
    for (size_t il = 0; il < cfg.compress_ratios.size(); ++il) {
        const int64_t r = cfg.compress_ratios[il];
        KvLayerKind kind = KvLayerKind::SWA;
        if (r != 0)
            kind = cfg.layer_kind(static_cast<int64_t>(il)) == LayerKind::CSA ? KvLayerKind::CSA : KvLayerKind::HCA;
        s.kinds.push_back(kind);
        s.compress_ratios.push_back(r);
    }
    return s;
}

CpuModelRunner::CpuModelRunner(const DeepSeekV4& model, int64_t max_model_len)
    : model_(model), max_model_len_(max_model_len > 0 ? max_model_len : model.config().max_position_embeddings) {}

RunnerOutput CpuModelRunner::execute(const SchedulerOutput& batch) {
    for (RequestId id : batch.finished_ids) states_.erase(id);
    for (RequestId id : batch.preempted_ids) states_.erase(id);
    RunnerOutput out;
    out.vocab_size = vocab_size();
    const auto V = static_cast<size_t>(out.vocab_size);
    for (const auto& e : batch.requests) {
        if (e.start_pos == 0) states_.insert_or_assign(e.id, model_.new_sequence());
        auto it = states_.find(e.id);
        ONECARD_CHECK(it != states_.end(), "cpu runner: request {} continues at position {} without state", e.id,
                      e.start_pos);
        ONECARD_CHECK(it->second.n_tokens() == e.start_pos,
                      "cpu runner: request {} scheduled at position {} but its "
                      "state holds {} tokens",
                      e.id, e.start_pos, it->second.n_tokens());
        // [n_tokens, vocab]; only the last row is needed when this chunk ends the known tokens.
        const std::vector<float> logits = model_.forward(it->second, e.token_ids);
        if (!e.sample) continue;
        out.row_ids.push_back(e.id);
        out.logits.insert(out.logits.end(), logits.end() - static_cast<long>(V), logits.end());
    }
    return out;
}

}  // namespace onecard
