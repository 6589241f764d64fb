#include "engine/cpu_model_runner.h"

#include "core/error.h"
#include "engine/memory_plan.h"

#include <algorithm>
#include <cstring>
#include <unordered_set>

namespace onecard {

// The same per-layer cache shape the memory planner sizes the pool with.
KvModelShape CpuModelRunner::kv_model_shape() const {
    return kv_model_shape_from_config(model_.config());
}

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
    layout_ = std::make_unique<KvLayerTable>(*spec_);
    arena_ = std::make_unique<KvHostArena>(*spec_, size);
    for (size_t r = 0; r < spec_->fixed.size(); ++r)
        if (spec_->fixed[r].kind == KvFixedKind::Window) window_regions_.push_back(r);
}

int64_t CpuModelRunner::prefix_snapshot_bytes(const KvCacheSpec& spec) const {
    int64_t bytes = 8 + 4 * model_.new_sequence_external_kv().boundary_carry_floats();
    for (const KvFixedRegion& f : spec.fixed)
        if (f.kind == KvFixedKind::Window) bytes += f.bytes();
    return bytes;
}

void CpuModelRunner::save_snapshot(const Live& live, int64_t id) {
    ONECARD_CHECK(id >= 0 && id < host_.n_snapshots, "cpu runner: snapshot entry {} outside the bound host memory", id);
    uint8_t* p = host_.snapshot(id);
    const int64_t n = live.state.n_tokens();
    std::memcpy(p, &n, 8);
    p += 8;
    const std::vector<float> carry = live.state.boundary_carry();
    std::memcpy(p, carry.data(), carry.size() * 4);
    p += carry.size() * 4;
    for (size_t r : window_regions_) {
        const auto bytes = static_cast<size_t>(spec_->fixed[r].bytes());
        std::memcpy(p, arena_->fixed_region(live.slot, r), bytes);
        p += bytes;
    }
}

CpuModelRunner::Live CpuModelRunner::restore_snapshot(int64_t id, int32_t slot, int64_t start_pos) {
    ONECARD_CHECK(id >= 0 && id < host_.n_snapshots, "cpu runner: prefix-cache snapshot {} is not stored", id);
    const uint8_t* p = host_.snapshot(id);
    int64_t n = 0;
    std::memcpy(&n, p, 8);
    p += 8;
    ONECARD_CHECK(n == start_pos, "cpu runner: snapshot {} was taken at {} tokens, not {}", id, n, start_pos);
    Live live{model_.new_sequence_external_kv(), slot, {}, {}};
    std::vector<float> carry(static_cast<size_t>(live.state.boundary_carry_floats()));
    std::memcpy(carry.data(), p, carry.size() * 4);
    p += carry.size() * 4;
    live.state.restore_boundary(n, carry);
    for (size_t r : window_regions_) {
        const auto bytes = static_cast<size_t>(spec_->fixed[r].bytes());
        std::memcpy(arena_->fixed_region(slot, r), p, bytes);
        p += bytes;
    }
    return live;
}

void CpuModelRunner::bind_host_tier(const KvHostMemory& mem) {
    ONECARD_CHECK(paged_kv() && (mem.n_snapshots == 0 || mem.snapshot_bytes == prefix_snapshot_bytes(*spec_)) &&
                      (mem.n_blocks == 0 || mem.block_bytes == spec_->block_bytes),
                  "cpu runner: host tier entries of {} / {} bytes do not match this model's snapshots and blocks",
                  mem.snapshot_bytes, mem.block_bytes);
    host_ = mem;
}

void CpuModelRunner::copy_blocks(const SchedulerOutput& batch) {
    const auto bytes = static_cast<size_t>(host_.block_bytes);
    for (const KvBlockCopy& c : batch.block_spills) {
        ONECARD_CHECK(c.host_entry >= 0 && c.host_entry < host_.n_blocks, "cpu runner: host entry {} out of range",
                      c.host_entry);
        std::memcpy(host_.block(c.host_entry), arena_->block(c.block), bytes);
    }
    for (const KvBlockCopy& c : batch.block_loads) {
        ONECARD_CHECK(c.host_entry >= 0 && c.host_entry < host_.n_blocks, "cpu runner: host entry {} out of range",
                      c.host_entry);
        std::memcpy(arena_->block(c.block), host_.block(c.host_entry), bytes);
    }
}

std::vector<float> CpuModelRunner::forward_saving(Live& live, const ScheduledRequest& e) {
    PagedSequenceKv kv(*arena_, *layout_, live.slot, live.block_table);
    std::vector<float> logits;
    int64_t done = 0;                     // tokens of e computed so far
    auto advance_to = [&](int64_t end) {  // end: tokens of e computed afterwards
        if (end <= done) return;
        logits = model_.forward(live.state, kv,
                                std::span<const int32_t>(e.token_ids.data() + done, static_cast<size_t>(end - done)));
        done = end;
    };
    for (const auto& save : e.save_snapshots) {
        ONECARD_CHECK(save.pos > e.start_pos + done && save.pos <= e.start_pos + e.n_tokens(),
                      "cpu runner: request {} snapshot at {} outside its chunk ({}, {}]", e.id, save.pos,
                      e.start_pos + done, e.start_pos + e.n_tokens());
        advance_to(save.pos - e.start_pos);
        save_snapshot(live, save.id);
    }
    advance_to(e.n_tokens());
    return logits;
}

RunnerOutput CpuModelRunner::execute(const SchedulerOutput& batch) {
    for (RequestId id : batch.finished_ids) states_.erase(id);
    for (RequestId id : batch.preempted_ids) states_.erase(id);
    if (!batch.block_spills.empty() || !batch.block_loads.empty()) copy_blocks(batch);
    ONECARD_CHECK(paged_kv() || model_.numerics() != Numerics::Reference,
                  "cpu runner: reference numerics keep KV in the engine's pool, but bind_kv_pool() was not called");
    RunnerOutput out;
    out.vocab_size = vocab_size();
    const auto V = static_cast<size_t>(out.vocab_size);
    for (const auto& e : batch.requests) {
        ONECARD_CHECK((e.restore_snapshot < 0 && e.save_snapshots.empty()) || paged_kv(),
                      "cpu runner: prefix-cache snapshots need reference numerics (KV in the engine's pool)");
        if (e.restore_snapshot >= 0)
            states_.insert_or_assign(e.id, restore_snapshot(e.restore_snapshot, e.kv.slot, e.start_pos));
        else if (e.start_pos == 0)
            states_.insert_or_assign(
                e.id, Live{paged_kv() ? model_.new_sequence_external_kv() : model_.new_sequence(), e.kv.slot, {}, {}});
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
            apply_block_ids(e, live.block_table);
            PagedSequenceKv(*arena_, *layout_, live.slot, live.block_table)
                .check_covers(e.start_pos + e.n_tokens() + e.n_draft_tokens);
            if (spec_k_ > 0) {
                execute_spec_row(live, e, out);
                continue;
            }
            logits = forward_saving(live, e);
        } else if (spec_k_ > 0) {
            execute_spec_row(live, e, out);
            continue;
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
    std::unordered_set<int32_t> slots;
    // Prefix caching shares full blocks (read only); a block still being written has one owner.
    std::unordered_map<int32_t, int> holders, writers;
    for (const auto& [id, live] : states_) {
        live.state.check_integrity();
        if (!paged_kv()) continue;
        ONECARD_CHECK(slots.insert(live.slot).second, "cpu runner: KV slot {} is used by two live requests", live.slot);
        // Entries are written through the table, so it must cover every token computed so far.
        PagedSequenceKv(*arena_, *layout_, live.slot, live.block_table).check_covers(live.state.n_tokens());
        const int64_t n_full = live.state.n_tokens() / spec_->block_size;
        for (size_t i = 0; i < live.block_table.size(); ++i) {
            const int32_t b = live.block_table[i];
            ++holders[b];
            if (static_cast<int64_t>(i) >= n_full) ++writers[b];
        }
    }
    for (const auto& [b, n] : writers)
        ONECARD_CHECK(n == 1 && holders[b] == 1,
                      "cpu runner: KV block {} is still written by a request but in {} live block tables", b,
                      holders[b]);
}

}  // namespace onecard
