// Shared by the prefix-cache engine tests (tests/unit/prefix_cache*_test.cpp): a synthesised tiny
// DeepSeek-V4 with the real model's 128-token sliding window (every boundary kind: window 128, CSA
// ratio 4, HCA ratio 128 = the block size), an engine harness that records every sampled logits row,
// and the bit-for-bit comparison with a cold run.
#pragma once

#include "engine/cpu_model_runner.h"
#include "engine/engine_core.h"
#include "model/deepseek_v4.h"
#include "model/synth.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace onecard::test {

// The tiny preset with a 128-token sliding window (its own is 32).
struct WindowedTinyModel {
    static constexpr uint64_t kSeed = 4242;
    TempDir dir{"onecard_prefix_cache"};
    ModelConfig cfg;
    std::unique_ptr<Checkpoint> ckpt;
    ModelWeights weights;
    std::unique_ptr<DeepSeekV4> reference;
    WindowedTinyModel() {
        SynthOptions opt;
        opt.preset = SynthPreset::Tiny;
        opt.seed = kSeed;
        opt.window = 128;
        synth_write(synth_config(opt), kSeed, dir.path(), synth_default_shard_bytes(SynthPreset::Tiny), false);
        cfg = load_config(dir / "config.json");
        ckpt = std::make_unique<Checkpoint>(Checkpoint::open(dir.path()));
        weights = bind_weights(cfg, *ckpt);
        reference = std::make_unique<DeepSeekV4>(cfg, weights, Numerics::Reference);
    }
};

// Records every sampled logits row per request and checks the runner's invariants after each step.
// inside_chunks = false makes it take snapshots only at chunk ends, as the CUDA runner does (the
// scheduler then cuts chunks at block boundaries).
class RecordingRunner : public CpuModelRunner {
public:
    RecordingRunner(const DeepSeekV4& model, int64_t max_len, bool inside_chunks = true)
        : CpuModelRunner(model, max_len), inside_chunks_(inside_chunks) {}
    bool prefix_snapshots_inside_chunks() const override { return inside_chunks_; }
    RunnerOutput execute(const SchedulerOutput& b) override {
        for (const auto& e : b.requests)
            for (const auto& save : e.save_snapshots)
                EXPECT_TRUE(inside_chunks_ || save.pos == e.start_pos + e.n_tokens())
                    << "a snapshot at " << save.pos << " inside the chunk [" << e.start_pos << ", "
                    << e.start_pos + e.n_tokens() << ")";
        n_spills += static_cast<int64_t>(b.block_spills.size());
        n_loads += static_cast<int64_t>(b.block_loads.size());
        RunnerOutput out = CpuModelRunner::execute(b);
        for (size_t i = 0; i < out.row_ids.size(); ++i)
            rows[out.row_ids[i]].emplace_back(out.row(i), out.row(i) + out.vocab_size);
        for (const auto& e : b.requests) max_chunk = std::max(max_chunk, e.n_tokens());
        check_integrity();
        return out;
    }
    std::map<RequestId, std::vector<std::vector<float>>> rows;
    int64_t max_chunk = 0;
    int64_t n_spills = 0, n_loads = 0;

private:
    bool inside_chunks_ = true;
};

inline EngineConfig prefix_engine_config(bool caching, int64_t budget = 2048, int64_t cap = 1024,
                                         int64_t max_num_seqs = 8) {
    EngineConfig c;
    c.max_num_batched_tokens = budget;
    c.long_prefill_token_threshold = cap;
    c.max_num_seqs = max_num_seqs;
    c.kv_block_size = 128;
    c.kv_cache_bytes = 64LL << 20;
    c.enable_prefix_caching = caching;
    return c;
}

struct PrefixResult {
    std::vector<int32_t> tokens;
    std::vector<std::vector<float>> rows;
    int64_t cached_tokens = -1;
    int64_t n_preemptions = 0;
};

// One engine kept across calls (its cache persists between them).
class PrefixHarness {
public:
    PrefixHarness(const DeepSeekV4& model, const EngineConfig& cfg, bool inside_chunks = true) {
        auto r = std::make_unique<RecordingRunner>(model, 4096, inside_chunks);
        rec_ = r.get();
        core_ = std::make_unique<EngineCore>(cfg, std::move(r));
    }
    // Runs these prompts together (greedy, max_tokens each) until all finish.
    std::vector<PrefixResult> run(const std::vector<std::vector<int32_t>>& prompts, int64_t max_tokens) {
        std::vector<RequestId> ids;
        for (const auto& p : prompts) {
            SamplingParams sp;
            sp.temperature = 0.0f;
            sp.max_tokens = max_tokens;
            ids.push_back(next_id_);
            core_->add_request(next_id_++, {p, sp});
        }
        std::map<RequestId, PrefixResult> by_id;
        while (core_->has_unfinished()) {
            for (auto& ev : core_->step()) {
                PrefixResult& r = by_id[ev.request_id];
                r.tokens.insert(r.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
                if (ev.stop_token) r.tokens.push_back(*ev.stop_token);
                if (ev.finished()) {
                    EXPECT_EQ(ev.finish_reason, FinishReason::Length) << ev.error;
                    r.cached_tokens = ev.usage.cached_tokens;
                    r.n_preemptions = ev.usage.n_preemptions;
                }
            }
            core_->check_integrity();
        }
        core_->step();  // lets the runner drop the finished states
        std::vector<PrefixResult> out;
        for (RequestId id : ids) {
            PrefixResult r = by_id[id];
            r.rows = std::move(rec_->rows[id]);
            out.push_back(std::move(r));
        }
        return out;
    }
    PrefixResult run_one(const std::vector<int32_t>& prompt, int64_t max_tokens) {
        return run({prompt}, max_tokens)[0];
    }
    EngineCore& core() { return *core_; }
    RecordingRunner& runner() { return *rec_; }

private:
    RecordingRunner* rec_ = nullptr;
    std::unique_ptr<EngineCore> core_;
    RequestId next_id_ = 1;
};

// A cold run: caching off, the whole prompt in one prefill.
inline PrefixResult cold_run(const DeepSeekV4& model, const std::vector<int32_t>& prompt, int64_t max_tokens) {
    PrefixHarness h(model, prefix_engine_config(false));
    EXPECT_FALSE(h.core().prefix_caching());
    return h.run_one(prompt, max_tokens);
}

inline void expect_same_rows(const PrefixResult& got, const PrefixResult& want, const std::string& what) {
    ASSERT_EQ(got.rows.size(), want.rows.size()) << what;
    for (size_t i = 0; i < got.rows.size(); ++i) {
        ASSERT_EQ(got.rows[i].size(), want.rows[i].size()) << what;
        ASSERT_EQ(0, std::memcmp(got.rows[i].data(), want.rows[i].data(), got.rows[i].size() * sizeof(float)))
            << what << ": logits row " << i << " differs from the cold run";
    }
    EXPECT_EQ(got.tokens, want.tokens) << what;
}

inline std::vector<int32_t> random_prompt(uint32_t seed, size_t n, int64_t vocab) {
    std::mt19937 rng(seed);
    std::vector<int32_t> t(n);
    for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
    return t;
}

}  // namespace onecard::test
