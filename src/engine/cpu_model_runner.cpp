#include "engine/cpu_model_runner.h"

#include "core/error.h"
#include "engine/memory_plan.h"

#include <algorithm>
#include <unordered_set>

namespace onecard {

// The same per-layer cache shape the memory planner sizes the pool with.
KvModelShape CpuModelRunner::kv_model_shape() const { return kv_model_shape_from_config(model_.config()); }

CpuModelRunner::CpuModelRunner(const DeepSeekV4& model, int64_t max_model_len)
    : model_(model), max_model_len_(max_model_len > 0 ? max_model_len : model.config().max_position_embeddings) {}

void CpuModelRunner::bind_kv_pool(const KvCacheSpec& spec, const KvPoolSize& size) {
    // Exact numerics must stay what transformers computes: fp32 KV, never the FP8 byte format.
    if (model_.numerics() != Numerics::Reference) return;
    ONECARD_CHECK(arena_ == nullptr, "cpu runner: the KV pool is already bound");
    const KvModelShape want = kv_model_shape();
    ONECARD_CHECK(spec.shape.kinds == want.kinds && spec.shape.head_dim == want.head_dim &&
                      spec.shape.rope_dim == want.rope_dim && spec.shape.sliding_window == want.sliding_window,
                  "cpu runner: the KV pool's spec does not describe this model's layers");
    spec_ = std::make_unique<KvCacheSpec>(spec);
    layout_ = std::make_unique<PagedKvLayout>(*spec_);
    arena_ = std::make_unique<KvHostArena>(*spec_, size);
}

RunnerOutput CpuModelRunner::execute(const SchedulerOutput& batch) {
    for (RequestId id : batch.finished_ids) states_.erase(id);
    for (RequestId id : batch.preempted_ids) states_.erase(id);
    ONECARD_CHECK(paged_kv() || model_.numerics() != Numerics::Reference,
                  "cpu runner: reference numerics keep KV in the engine's pool, but bind_kv_pool() was not called");
    RunnerOutput out;
    out.vocab_size = vocab_size();
    const auto V = static_cast<size_t>(out.vocab_size);
    for (const auto& e : batch.requests) {
        if (e.start_pos == 0)
            states_.insert_or_assign(
                e.id, Live{paged_kv() ? model_.new_sequence_external_kv() : model_.new_sequence(), e.kv.slot, {}});
        auto it = states_.find(e.id);
        ONECARD_CHECK(it != states_.end(), "cpu runner: request {} continues at position {} without state", e.id,
                      e.start_pos);
        Live& live = it->second;
        ONECARD_CHECK(live.state.n_tokens() == e.start_pos,
                      "cpu runner: request {} scheduled at position {} but its "
                      "state holds {} tokens",
                      e.id, e.start_pos, live.state.n_tokens());
        // [n_tokens, vocab]; only the last row is needed when this chunk ends the known tokens.
        std::vector<float> logits;
        if (paged_kv()) {
            ONECARD_CHECK(e.kv.slot == live.slot, "cpu runner: request {} moved from KV slot {} to {} while live", e.id,
                          live.slot, e.kv.slot);
            live.block_table = e.block_table;
            PagedSequenceKv kv(*arena_, *layout_, live.slot, live.block_table);
            kv.check_covers(e.start_pos + e.n_tokens());
            logits = model_.forward(live.state, kv, e.token_ids);
        } else {
            logits = model_.forward(live.state, e.token_ids);
        }
        if (!e.sample) continue;
        out.row_ids.push_back(e.id);
        out.logits.insert(out.logits.end(), logits.end() - static_cast<long>(V), logits.end());
    }
    return out;
}

void CpuModelRunner::check_integrity() const {
    std::unordered_set<int32_t> slots, blocks;
    for (const auto& [id, live] : states_) {
        live.state.check_integrity();
        if (!paged_kv()) continue;
        ONECARD_CHECK(slots.insert(live.slot).second, "cpu runner: KV slot {} is used by two live requests", live.slot);
        // Entries are written through the table, so it must cover every token computed so far.
        PagedSequenceKv(*arena_, *layout_, live.slot, live.block_table).check_covers(live.state.n_tokens());
        for (int32_t b : live.block_table)
            ONECARD_CHECK(blocks.insert(b).second, "cpu runner: KV block {} is in two live block tables (request {})",
                          b, id);
    }
}

}  // namespace onecard
