// Non-finite logits: the sampler is total over any row (NaN, infinities, filters that would leave
// nothing), and the engine fails only the request whose row went non-finite while the others and the
// engine carry on.
#include "core/error.h"
#include "engine/engine_core.h"
#include "engine/sampler.h"
#include "onecard/engine.h"
#include "testing/fake_runner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <vector>

namespace onecard {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<SamplingParams> every_filter() {
    std::vector<SamplingParams> out;
    for (float temperature : {0.0f, 1.0f, 0.3f})
        for (int32_t top_k : {0, 1, 3})
            for (float top_p : {1.0f, 0.5f, 1e-6f})
                for (float min_p : {0.0f, 0.5f, 1.0f}) {
                    SamplingParams p;
                    p.temperature = temperature;
                    p.top_k = top_k;
                    p.top_p = top_p;
                    p.min_p = min_p;
                    p.logprobs = 2;
                    out.push_back(p);
                }
    return out;
}

TEST(SamplerTotal, DegenerateRowsStillGiveATokenInRange) {
    const std::vector<std::vector<float>> rows = {
        std::vector<float>(8, kNaN),
        std::vector<float>(8, -kInf),
        {kNaN, -kInf, kNaN, -kInf, kNaN, -kInf, kNaN, -kInf},
        {0.0f, 1.0f, kInf, 2.0f, kNaN, 0.0f, 0.0f, 0.0f},
        {kInf, kInf, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f},
        std::vector<float>(8, 3.0e38f),  // finite, but penalties or softmax arithmetic may overflow
    };
    Sampler s;
    const std::vector<int32_t> prompt = {1, 2}, output = {2, 2};
    for (const auto& row : rows)
        for (SamplingParams p : every_filter()) {
            for (float rep : {1.0f, 0.1f}) {
                p.repetition_penalty = rep;
                const SampleResult r = s.sample(row, p, prompt, output, 42);
                EXPECT_GE(r.token, 0);
                EXPECT_LT(r.token, 8);
                const Candidates c = s.target_distribution(row, p, prompt, output);
                ASSERT_FALSE(c.tokens.empty());
                EXPECT_EQ(c.tokens.size(), c.probs.size());
            }
        }
}

TEST(SamplerTotal, NaNNeverWinsAndInfinityIsTheLimit) {
    Sampler s;
    SamplingParams greedy;
    greedy.temperature = 0.0f;
    // NaN first: an argmax that compares with '<' would keep it.
    const std::vector<float> nan_first = {kNaN, 0.5f, 3.0f, 1.0f};
    EXPECT_EQ(s.sample(nan_first, greedy, {}, {}, 1).token, 2);
    SamplingParams warm;
    warm.temperature = 1.0f;
    for (uint64_t seed = 0; seed < 200; ++seed) EXPECT_NE(s.sample(nan_first, warm, {}, {}, seed).token, 0);
    // One +inf logit: the softmax limit puts all mass there.
    const std::vector<float> one_inf = {0.0f, 1.0f, kInf, 2.0f};
    for (uint64_t seed = 0; seed < 20; ++seed) EXPECT_EQ(s.sample(one_inf, warm, {}, {}, seed).token, 2);
}

TEST(SamplerTotal, TruncationNeverEmpty) {
    SamplingParams p;
    p.min_p = 1.0f;
    p.top_p = 1e-9f;
    p.top_k = 1;
    for (const std::vector<double>& probs :
         {std::vector<double>{0.0, 0.0, 0.0}, std::vector<double>{std::nan(""), std::nan(""), 0.0},
          std::vector<double>{0.25, 0.25, 0.5}, std::vector<double>{1e-320, 0.0, 0.0}}) {
        const Candidates c = truncate_distribution(probs, p);
        ASSERT_EQ(c.tokens.size(), 1u);
        EXPECT_GE(c.tokens[0], 0);
        EXPECT_LT(c.tokens[0], 3);
        EXPECT_DOUBLE_EQ(c.probs[0], 1.0);
    }
    EXPECT_EQ(truncate_distribution(std::vector<double>{0.25, 0.25, 0.5}, p).tokens[0], 2);
}

// FakeModelRunner whose logits row for one request turns non-finite from that request's
// `at_output`-th sampled token on.
class PoisonedRunner : public FakeModelRunner {
public:
    PoisonedRunner(RequestId victim, int64_t at_output, float value)
        : victim_(victim), at_output_(at_output), value_(value) {}
    RunnerOutput execute(const SchedulerOutput& b) override {
        RunnerOutput out = FakeModelRunner::execute(b);
        for (size_t i = 0; i < out.row_ids.size(); ++i) {
            if (out.row_ids[i] != victim_ || n_sampled_++ < at_output_) continue;
            float* row = out.logits.data() + i * static_cast<size_t>(out.vocab_size);
            row[5] = value_;  // one bad entry is enough
        }
        return out;
    }

private:
    RequestId victim_;
    int64_t at_output_;
    float value_;
    int64_t n_sampled_ = 0;
};

EngineConfig config() {
    EngineConfig c;
    c.max_num_batched_tokens = 128;
    c.long_prefill_token_threshold = 64;
    c.max_num_seqs = 8;
    c.kv_block_size = 16;
    c.kv_cache_bytes = 32LL << 20;
    c.eos_token_id = -1;
    return c;
}

std::map<RequestId, std::pair<std::vector<int32_t>, EngineEvent>> run(EngineCore& core) {
    std::map<RequestId, std::pair<std::vector<int32_t>, EngineEvent>> out;
    for (int i = 0; i < 1000 && core.has_unfinished(); ++i) {
        for (auto& ev : core.step()) {
            auto& [tokens, final] = out[ev.request_id];
            tokens.insert(tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
            if (ev.finished()) final = ev;
        }
        core.check_integrity();
    }
    return out;
}

TEST(EngineNonFinite, OnlyTheRequestWithTheBadRowFails) {
    SamplingParams sp;
    sp.max_tokens = 12;
    sp.temperature = 0.8f;
    sp.seed = 7;
    auto add_three = [&](EngineCore& core) {
        core.add_request(1, {{1, 2, 3}, sp});
        core.add_request(2, {{4, 5, 6, 7}, sp});
        core.add_request(3, {{8, 9}, sp});
    };
    EngineCore clean(config(), std::make_unique<FakeModelRunner>());
    add_three(clean);
    const auto want = run(clean);
    for (float bad : {kNaN, kInf, -kInf}) {
        EngineCore core(config(), std::make_unique<PoisonedRunner>(2, 3, bad));
        add_three(core);
        const auto got = run(core);
        ASSERT_EQ(got.size(), 3u);
        for (RequestId id : {RequestId{1}, RequestId{3}}) {
            EXPECT_EQ(got.at(id).second.finish_reason, FinishReason::Length) << bad;
            EXPECT_EQ(got.at(id).first, want.at(id).first) << "request " << id << " changed, bad value " << bad;
        }
        const auto& [tokens, final] = got.at(2);
        EXPECT_EQ(final.finish_reason, FinishReason::Error);
        EXPECT_EQ(final.error.rfind(kNonFiniteLogitsError, 0), 0u) << final.error;
        EXPECT_NE(final.error.find("output token 3"), std::string::npos) << final.error;
        EXPECT_EQ(tokens, std::vector<int32_t>(want.at(2).first.begin(), want.at(2).first.begin() + 3));
        EXPECT_EQ(final.usage.completion_tokens, 3);
        EXPECT_EQ(core.kv().n_free_blocks(), core.kv().n_total_blocks());
        // The engine takes new work afterwards.
        core.add_request(4, {{1, 2, 3}, sp});
        const auto after = run(core);
        EXPECT_EQ(after.at(4).second.finish_reason, FinishReason::Length);
        EXPECT_EQ(after.at(4).first, want.at(1).first);
    }
}

TEST(EngineNonFinite, ThreadedEngineKeepsServing) {
    Engine engine(config(), std::make_unique<PoisonedRunner>(2, 0, kNaN));
    SamplingParams sp;
    sp.max_tokens = 5;
    auto a = engine.submit({{1, 2, 3}, sp});  // id 1
    auto b = engine.submit({{4, 5}, sp});     // id 2: poisoned from its first token
    FinishReason ra = FinishReason::None, rb = FinishReason::None;
    std::string error;
    while (auto ev = a->next())
        if (ev->finished()) ra = ev->finish_reason;
    while (auto ev = b->next())
        if (ev->finished()) {
            rb = ev->finish_reason;
            error = ev->error;
        }
    EXPECT_EQ(ra, FinishReason::Length);
    EXPECT_EQ(rb, FinishReason::Error);
    EXPECT_NE(error.find("non-finite logits"), std::string::npos) << error;
    auto c = engine.submit({{7, 8}, sp});
    FinishReason rc = FinishReason::None;
    while (auto ev = c->next())
        if (ev->finished()) rc = ev->finish_reason;
    EXPECT_EQ(rc, FinishReason::Length);
}

}  // namespace
}  // namespace onecard
