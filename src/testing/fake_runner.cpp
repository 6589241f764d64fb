#include "testing/fake_runner.h"

#include "core/error.h"
#include "engine/token_constraint.h"

#include <thread>

namespace onecard {

namespace {
uint64_t splitmix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}
constexpr uint64_t kHashSeed = 0x1234ABCD5678EF01ULL;
}  // namespace

KvModelShape FakeRunnerConfig::tiny_fake_kv_shape() {
    KvModelShape s;
    s.head_dim = 128;
    s.rope_dim = 64;
    s.index_head_dim = 32;
    s.sliding_window = 8;
    s.n_main_layers = 3;
    s.kinds = {KvLayerKind::SWA, KvLayerKind::CSA, KvLayerKind::HCA};
    s.compress_ratios = {0, 4, 8};
    return s;
}

FakeModelRunner::FakeModelRunner(FakeRunnerConfig config) : config_(std::move(config)) {}

uint64_t FakeModelRunner::mix(uint64_t h, int64_t pos, int32_t token) {
    return splitmix(h ^ splitmix(static_cast<uint64_t>(pos) * 0x100000001B3ULL + static_cast<uint32_t>(token)));
}

void FakeModelRunner::fill_logits(uint64_t hash, float* row) const {
    for (int64_t v = 0; v < config_.vocab_size; ++v) {
        const uint64_t bits = splitmix(hash + static_cast<uint64_t>(v));
        const double u = static_cast<double>(bits >> 11) * 0x1.0p-53;  // [0, 1)
        row[v] = static_cast<float>((2.0 * u - 1.0) * config_.logit_scale);
    }
}

std::vector<float> FakeModelRunner::logits_for(const std::vector<int32_t>& history) const {
    uint64_t h = kHashSeed;
    for (size_t i = 0; i < history.size(); ++i) h = mix(h, static_cast<int64_t>(i), history[i]);
    std::vector<float> row(static_cast<size_t>(config_.vocab_size));
    fill_logits(h, row.data());
    return row;
}

RunnerOutput FakeModelRunner::execute(const SchedulerOutput& batch) {
    for (RequestId id : batch.finished_ids) states_.erase(id);
    for (RequestId id : batch.preempted_ids) states_.erase(id);
    if (config_.step_delay.count() > 0) std::this_thread::sleep_for(config_.step_delay);

    FakeStepRecord rec;
    rec.step = batch.step;
    rec.n_scheduled_tokens = batch.n_scheduled_tokens;
    RunnerOutput out;
    out.vocab_size = config_.vocab_size;
    for (const auto& e : batch.requests) {
        ONECARD_CHECK(e.n_tokens() > 0, "fake runner: request {} scheduled with no tokens", e.id);
        if (e.start_pos == 0) states_[e.id] = SeqState{0, kHashSeed, {}};
        auto it = states_.find(e.id);
        ONECARD_CHECK(it != states_.end(), "fake runner: request {} continues at {} without state", e.id, e.start_pos);
        SeqState& s = it->second;
        ONECARD_CHECK(s.next_pos == e.start_pos, "fake runner: request {} resumes at {} but computed {}", e.id,
                      e.start_pos, s.next_pos);
        const int64_t end = e.start_pos + e.n_tokens();
        // A whole table exactly when the request starts over, its new blocks otherwise.
        ONECARD_CHECK(e.new_block_table == (e.start_pos == 0 || e.restore_snapshot >= 0),
                      "fake runner: request {} at {} {} a fresh block table", e.id, e.start_pos,
                      e.new_block_table ? "gets" : "lacks");
        apply_block_ids(e, s.blocks);
        ONECARD_CHECK(static_cast<int64_t>(s.blocks.size()) * batch.kv_block_size >= end + e.n_draft_tokens,
                      "fake runner: request {} has {} KV blocks of {} for positions up to {}", e.id, s.blocks.size(),
                      batch.kv_block_size, end + e.n_draft_tokens);
        for (int64_t i = 0; i < e.n_tokens(); ++i)
            s.hash = mix(s.hash, e.start_pos + i, e.token_ids[static_cast<size_t>(i)]);
        s.next_pos = end;
        rec.scheduled.emplace_back(e.id, e.n_tokens());
        rec.sampled.push_back(e.sample);
        if (e.sample) {
            out.row_ids.push_back(e.id);
            const size_t V = static_cast<size_t>(config_.vocab_size);
            out.logits.resize(out.logits.size() + V);
            float* row = out.logits.data() + out.logits.size() - V;
            fill_logits(s.hash, row);
            if (config_.sample_rows) {
                int32_t token = -1;
                if (e.sampling) {
                    SamplingParams p;
                    p.temperature = e.sampling->temperature;
                    p.top_k = e.sampling->top_k;
                    p.top_p = e.sampling->top_p;
                    p.min_p = e.sampling->min_p;
                    if (e.sampling->fill_mask) {  // a constrained row: its mask, as a device runner applies it
                        mask_.assign(static_cast<size_t>(token_mask_words(config_.vocab_size)), 0u);
                        e.sampling->fill_mask(mask_);
                        apply_token_mask(std::span<float>(row, V), mask_);
                        ++rec.n_runner_masked;
                    }
                    // Sampler draws with counter = output size; no penalties, so only the size matters.
                    const std::vector<int32_t> output(static_cast<size_t>(e.sampling->counter), 0);
                    token = sampler_.sample(std::span<const float>(row, V), p, {}, output, e.sampling->seed).token;
                    out.logits.resize(out.logits.size() - V);  // the row goes back as its token only
                    ++rec.n_runner_sampled;
                }
                out.tokens.push_back(token);
            }
        }
    }
    log_.push_back(std::move(rec));
    return out;
}

}  // namespace onecard
