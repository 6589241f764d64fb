// End to end through the engine on a synthesised tiny DeepSeek-V4 checkpoint (CPU forward pass):
// 16 concurrent requests of different lengths give exactly the greedy tokens each gives alone,
// under several token budgets / long-prefill caps and under KV pressure (preemption). And a row's
// logits do not depend on its batch: replaying a request alone with the chunk boundaries the engine
// chose reproduces every sampled row bit for bit, in both numerics modes.
#include "engine/cpu_model_runner.h"
#include "engine/engine_core.h"
#include "loader/checkpoint.h"
#include "model/deepseek_v4.h"
#include "model/synth.h"
#include "model/weights.h"
#include "onecard/engine.h"

#include "support/test_support.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>

namespace onecard {
namespace {

constexpr uint64_t kSeed = 777;

test::TinyModel* g_tiny = nullptr;  // synthesised once per test binary

class TinyEnv : public ::testing::Environment {
public:
    void SetUp() override { g_tiny = new test::TinyModel(kSeed, "onecard_engine_e2e"); }
    void TearDown() override {
        delete g_tiny;
        g_tiny = nullptr;
    }
};
const auto* const g_env = ::testing::AddGlobalTestEnvironment(new TinyEnv);

// Records every logits row the model produced for a sampled chunk, and every chunk boundary.
class RecordingRunner : public CpuModelRunner {
public:
    using CpuModelRunner::CpuModelRunner;
    RunnerOutput execute(const SchedulerOutput& b) override {
        for (RequestId id : b.preempted_ids) chunks[id].clear();
        RunnerOutput out = CpuModelRunner::execute(b);
        for (const auto& e : b.requests) chunks[e.id].emplace_back(e.start_pos, e.n_tokens());
        for (size_t i = 0; i < out.row_ids.size(); ++i)
            rows[out.row_ids[i]].emplace_back(out.row(i), out.row(i) + out.vocab_size);
        return out;
    }
    std::map<RequestId, std::vector<std::pair<int64_t, int64_t>>> chunks;  // since the last preemption
    std::map<RequestId, std::vector<std::vector<float>>> rows;             // every sampled row, in order
};

struct Workload {
    std::vector<std::vector<int32_t>> prompts;
    std::vector<int64_t> max_tokens;
};

Workload make_workload(int n, uint32_t seed) {
    std::mt19937 rng(seed);
    Workload w;
    for (int i = 0; i < n; ++i) {
        std::vector<int32_t> p(1 + rng() % 150);
        for (auto& t : p) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(g_tiny->cfg.vocab_size));
        w.prompts.push_back(std::move(p));
        w.max_tokens.push_back(3 + static_cast<int64_t>(rng() % 8));
    }
    return w;
}

int32_t argmax(const float* row, int64_t n) {
    return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

// Alone: the whole prompt in one forward call, then one token at a time.
std::vector<int32_t> greedy_alone(const DeepSeekV4& m, const std::vector<int32_t>& prompt, int64_t n) {
    SequenceState st = m.new_sequence();
    const int64_t V = m.config().vocab_size;
    std::vector<float> logits = m.forward(st, prompt);
    std::vector<int32_t> out;
    for (int64_t i = 0; i < n; ++i) {
        out.push_back(argmax(logits.data() + logits.size() - V, V));
        if (i + 1 < n) logits = m.forward(st, std::span<const int32_t>(&out.back(), 1));
    }
    return out;
}

struct RunResult {
    std::map<RequestId, std::vector<int32_t>> tokens;
    int64_t n_preemptions = 0;
    int64_t largest_step_tokens = 0;  // observed: the most tokens one step scheduled
};

RunResult run_engine(const DeepSeekV4& m, const Workload& w, EngineConfig cfg, RecordingRunner** rec_out = nullptr) {
    auto runner = std::make_unique<RecordingRunner>(m, 4096);
    RecordingRunner* rec = runner.get();
    EngineCore core(cfg, std::move(runner));
    for (size_t i = 0; i < w.prompts.size(); ++i) {
        SamplingParams sp;
        sp.temperature = 0.0f;
        sp.max_tokens = w.max_tokens[i];
        core.add_request(i + 1, {w.prompts[i], sp});
    }
    RunResult r;
    while (core.has_unfinished()) {
        for (auto& ev : core.step()) {
            auto& t = r.tokens[ev.request_id];
            t.insert(t.end(), ev.token_ids.begin(), ev.token_ids.end());
        }
        core.check_integrity();
        const auto& out = core.last_output();
        EXPECT_LE(out.n_scheduled_tokens, cfg.max_num_batched_tokens);
        for (const auto& e : out.requests) EXPECT_LE(e.n_tokens(), cfg.long_prefill_token_threshold);
        r.largest_step_tokens = std::max(r.largest_step_tokens, out.n_scheduled_tokens);
    }
    core.step();
    EXPECT_EQ(rec->n_live_states(), 0u);
    EXPECT_EQ(core.kv().n_free_blocks(), core.kv().n_total_blocks());
    r.n_preemptions = core.scheduler().n_preemptions();
    if (rec_out) *rec_out = nullptr;  // the runner dies with the core
    return r;
}

EngineConfig config(int64_t budget, int64_t cap, int64_t max_num_seqs) {
    EngineConfig c;
    c.max_num_batched_tokens = budget;
    c.long_prefill_token_threshold = cap;
    c.max_num_seqs = max_num_seqs;
    c.kv_block_size = 128;
    c.kv_cache_bytes = 256LL << 20;
    return c;
}

TEST(EngineCpuModel, ConcurrentRequestsMatchAloneUnderAnyBudget) {
    const DeepSeekV4& m = *g_tiny->exact;
    const Workload w = make_workload(16, 1);
    std::map<RequestId, std::vector<int32_t>> alone;
    for (size_t i = 0; i < w.prompts.size(); ++i) alone[i + 1] = greedy_alone(m, w.prompts[i], w.max_tokens[i]);

    const auto spec = make_kv_cache_spec(CpuModelRunner(m).kv_model_shape(), 128);
    EngineConfig tight = config(96, 40, 16);
    // 3 blocks of 128 tokens for 16 sequences of up to ~160 tokens: admission waits and preemption.
    tight.kv_cache_bytes = 16 * spec.slot_bytes + 3 * spec.block_bytes;
    const std::vector<EngineConfig> settings = {config(2048, 1024, 16), config(64, 16, 16), config(200, 77, 5), tight};
    for (size_t si = 0; si < settings.size(); ++si) {
        const RunResult r = run_engine(m, w, settings[si]);
        ASSERT_FALSE(HasFailure()) << "setting " << si;
        for (auto& [id, toks] : alone) EXPECT_EQ(r.tokens.at(id), toks) << "request " << id << ", setting " << si;
        if (si == 3) {
            EXPECT_GT(r.n_preemptions, 0) << "tight KV never preempted";
        }
        if (si == 1) {
            EXPECT_EQ(r.largest_step_tokens, 64);
        }
    }
}

// Bitwise batch independence: replay each request alone with the chunk boundaries the engine used.
void check_batch_independence(const DeepSeekV4& m) {
    const Workload w = make_workload(8, 2);
    auto runner = std::make_unique<RecordingRunner>(m, 4096);
    RecordingRunner& rec = *runner;
    EngineCore core(config(120, 50, 10), std::move(runner));
    for (size_t i = 0; i < w.prompts.size(); ++i) {
        SamplingParams sp;
        sp.temperature = 0.0f;
        sp.max_tokens = w.max_tokens[i];
        core.add_request(i + 1, {w.prompts[i], sp});
    }
    std::map<RequestId, std::vector<int32_t>> out;
    while (core.has_unfinished())
        for (auto& ev : core.step())
            out[ev.request_id].insert(out[ev.request_id].end(), ev.token_ids.begin(), ev.token_ids.end());
    const int64_t V = m.config().vocab_size;
    for (auto& [id, chunks] : rec.chunks) {
        std::vector<int32_t> seq = w.prompts[id - 1];
        seq.insert(seq.end(), out[id].begin(), out[id].end());
        SequenceState st = m.new_sequence();
        std::vector<std::vector<float>> rows;
        for (auto [start, n] : chunks) {
            ASSERT_EQ(st.n_tokens(), start);
            auto l = m.forward(st, std::span<const int32_t>(seq.data() + start, static_cast<size_t>(n)));
            // A chunk that ends at the last known token was sampled (prefill chunks before it were not).
            if (start + n >= static_cast<int64_t>(w.prompts[id - 1].size())) rows.emplace_back(l.end() - V, l.end());
        }
        ASSERT_EQ(rows.size(), rec.rows[id].size()) << "request " << id;
        for (size_t i = 0; i < rows.size(); ++i)
            ASSERT_EQ(0, std::memcmp(rows[i].data(), rec.rows[id][i].data(), sizeof(float) * V))
                << "request " << id << " row " << i << " differs from its solo replay";
    }
}

TEST(EngineCpuModel, RowsIndependentOfBatchExact) {
    check_batch_independence(*g_tiny->exact);
}
TEST(EngineCpuModel, RowsIndependentOfBatchReference) {
    check_batch_independence(*g_tiny->reference);
}

TEST(EngineCpuModel, ThreadedEngineMatchesAlone) {
    const DeepSeekV4& m = *g_tiny->exact;
    const Workload w = make_workload(6, 3);
    Engine engine(config(128, 48, 4), std::make_unique<CpuModelRunner>(m, 4096));
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (size_t i = 0; i < w.prompts.size(); ++i) {
        SamplingParams sp;
        sp.temperature = 0.0f;
        sp.max_tokens = w.max_tokens[i];
        streams.push_back(engine.submit({w.prompts[i], sp}));
    }
    for (size_t i = 0; i < streams.size(); ++i) {
        std::vector<int32_t> toks;
        FinishReason reason = FinishReason::None;
        while (auto ev = streams[i]->next()) {
            toks.insert(toks.end(), ev->token_ids.begin(), ev->token_ids.end());
            if (ev->finished()) reason = ev->finish_reason;
        }
        EXPECT_EQ(reason, FinishReason::Length);
        EXPECT_EQ(toks, greedy_alone(m, w.prompts[i], w.max_tokens[i])) << "request " << i;
    }
}

}  // namespace
}  // namespace onecard
