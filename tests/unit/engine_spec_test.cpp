// Speculative decoding through the public Engine API (issue 17, steps 3-4): with
// EngineConfig::speculative = {"mtp", k} the CPU runner drafts with the mtp.0 block and verifies in
// one multi-token step, and greedy output is identical to the engine without speculation, for
// several prompts running together, in both numerics modes (reference keeps the KV in the engine's
// paged pool). A runner that cannot speculate makes the engine refuse the option by name.
#include "core/error.h"
#include "engine/cpu_model_runner.h"
#include "onecard/engine.h"
#include "testing/fake_runner.h"

#include "support/test_support.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <random>

namespace onecard {
namespace {

test::TinyModel* g_tiny = nullptr;

class TinyEnv : public ::testing::Environment {
public:
    void SetUp() override { g_tiny = new test::TinyModel(909, "onecard_engine_spec"); }
    void TearDown() override {
        delete g_tiny;
        g_tiny = nullptr;
    }
};
const auto* const g_env = ::testing::AddGlobalTestEnvironment(new TinyEnv);

EngineConfig config(int64_t k) {
    EngineConfig c;
    c.max_num_batched_tokens = 96;
    c.long_prefill_token_threshold = 40;
    c.max_num_seqs = 4;
    c.kv_block_size = 128;
    c.kv_cache_bytes = 256LL << 20;
    if (k > 0) {
        c.speculative = SpeculativeConfig{"mtp", k};
        // Every decode step verifies k drafts, so the rejection paths run on every step (the adaptive
        // default would soon stop drafting on a random model: AdaptiveDraftLengthStopsWhereItLoses).
        c.speculative.fixed_draft_length = true;
    }
    return c;
}

struct Result {
    std::vector<std::vector<int32_t>> tokens;
    EngineStats stats;
};

Result run(const DeepSeekV4& m, const EngineConfig& cfg, const std::vector<std::vector<int32_t>>& prompts,
           int64_t max_tokens) {
    Engine engine(cfg, std::make_unique<CpuModelRunner>(m, 4096));
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const auto& p : prompts) {
        SamplingParams sp;
        sp.temperature = 0.0f;
        sp.max_tokens = max_tokens;
        streams.push_back(engine.submit({p, sp}));
    }
    Result r;
    for (auto& s : streams) {
        std::vector<int32_t> toks;
        FinishReason reason = FinishReason::None;
        while (auto ev = s->next()) {
            toks.insert(toks.end(), ev->token_ids.begin(), ev->token_ids.end());
            EXPECT_TRUE(ev->error.empty()) << ev->error;
            if (ev->finished()) reason = ev->finish_reason;
        }
        EXPECT_EQ(reason, FinishReason::Length);
        r.tokens.push_back(std::move(toks));
    }
    engine.wait_idle();
    r.stats = engine.stats();
    return r;
}
Result run(const DeepSeekV4& m, int64_t k, const std::vector<std::vector<int32_t>>& prompts, int64_t max_tokens) {
    return run(m, config(k), prompts, max_tokens);
}

std::vector<std::vector<int32_t>> prompts(int n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<std::vector<int32_t>> out;
    for (int i = 0; i < n; ++i) {
        std::vector<int32_t> p(5 + rng() % 60);
        for (auto& t : p) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(g_tiny->cfg.vocab_size));
        out.push_back(std::move(p));
    }
    return out;
}

TEST(EngineSpec, GreedyOutputIdenticalWithAndWithoutSpeculation) {
    const auto ps = prompts(4, 17);
    for (const DeepSeekV4* m : {g_tiny->exact.get(), g_tiny->reference.get()}) {
        const Result plain = run(*m, 0, ps, 24);
        EXPECT_EQ(plain.stats.spec_num_drafts, 0);
        for (int64_t k : {1, 3}) {
            const Result spec = run(*m, k, ps, 24);
            EXPECT_EQ(spec.tokens, plain.tokens) << numerics_name(m->numerics()) << " k " << k;
            // Drafts were made and verified (random weights: the first draft of a step is rejected
            // nearly always, which is the rejection-on-the-first-draft case).
            EXPECT_GT(spec.stats.spec_num_drafts, 0);
            EXPECT_GE(spec.stats.spec_num_draft_tokens, spec.stats.spec_num_drafts);
            EXPECT_LE(spec.stats.spec_num_accepted_tokens, spec.stats.spec_num_draft_tokens);
            ASSERT_EQ(spec.stats.spec_num_accepted_tokens_per_pos.size(), static_cast<size_t>(k));
            int64_t per_pos = 0;
            for (int64_t a : spec.stats.spec_num_accepted_tokens_per_pos) per_pos += a;
            EXPECT_EQ(per_pos, spec.stats.spec_num_accepted_tokens);
            EXPECT_FALSE(spec.stats.prefix_caching);
        }
    }
}

TEST(EngineSpec, RunnerWithoutSpeculationIsRefused) {
    EngineConfig c = config(2);
    try {
        Engine engine(c, std::make_unique<FakeModelRunner>());
        FAIL() << "the engine accepted speculation on a runner without it";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("speculative decoding method 'mtp' is not supported"), std::string::npos)
            << e.what();
    }
    c.speculative = SpeculativeConfig{"mtp", 0};
    EXPECT_THROW((Engine{c, std::make_unique<CpuModelRunner>(*g_tiny->exact, 4096)}), Error);
    c.speculative = SpeculativeConfig{"eagle", 2};
    EXPECT_THROW((Engine{c, std::make_unique<CpuModelRunner>(*g_tiny->exact, 4096)}), Error);
}

// The adaptive draft length (the default): on a random-weight model the drafts are rejected, so the
// measured acceptance falls and the policy stops drafting, apart from its one-draft probes; the
// greedy output stays identical all the same.
TEST(EngineSpec, AdaptiveDraftLengthStopsWhereItLoses) {
    const auto ps = prompts(2, 23);
    const DeepSeekV4& m = *g_tiny->exact;
    const Result plain = run(m, 0, ps, 96);
    const Result fixed = run(m, 3, ps, 96);
    EngineConfig cfg = config(3);
    cfg.speculative.fixed_draft_length = false;
    const Result adaptive = run(m, cfg, ps, 96);
    std::printf("[engine spec] draft tokens verified: fixed k=3 %lld (accepted %lld), adaptive %lld (accepted %lld)\n",
                static_cast<long long>(fixed.stats.spec_num_draft_tokens),
                static_cast<long long>(fixed.stats.spec_num_accepted_tokens),
                static_cast<long long>(adaptive.stats.spec_num_draft_tokens),
                static_cast<long long>(adaptive.stats.spec_num_accepted_tokens));
    EXPECT_EQ(adaptive.tokens, plain.tokens);
    EXPECT_EQ(fixed.tokens, plain.tokens);
    EXPECT_LT(fixed.stats.spec_num_accepted_tokens * 4, fixed.stats.spec_num_draft_tokens)
        << "the premise: a random model's drafts are mostly rejected";
    EXPECT_GT(adaptive.stats.spec_num_drafts, 0) << "the prior starts speculation before anything is measured";
    EXPECT_LT(adaptive.stats.spec_num_draft_tokens * 2, fixed.stats.spec_num_draft_tokens)
        << "adaptive " << adaptive.stats.spec_num_draft_tokens << " draft tokens, fixed "
        << fixed.stats.spec_num_draft_tokens;
}

}  // namespace
}  // namespace onecard
