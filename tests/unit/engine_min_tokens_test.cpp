// min_tokens (vLLM's meaning): EOS and stop_token_ids cannot be sampled before that many output
// tokens; after it they end generation as usual. A runner whose every row makes one token by far the
// most likely shows it: without min_tokens the request stops at once, with it the token is held back.
#include "core/error.h"
#include "engine/engine_core.h"
#include "testing/fake_runner.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace onecard {
namespace {

// Every row strongly prefers `favourite` (the rows a device sampler would take are sampled with the
// same preference, so a row the engine wrongly lets the device sample would pick it).
class FavouriteRunner : public FakeModelRunner {
public:
    FavouriteRunner(int32_t favourite, bool sample_rows)
        : FakeModelRunner([&] {
              FakeRunnerConfig c;
              c.sample_rows = sample_rows;
              return c;
          }()),
          favourite_(favourite) {}
    RunnerOutput execute(const SchedulerOutput& b) override {
        RunnerOutput out = FakeModelRunner::execute(b);
        for (size_t i = 0; i < out.n_logits_rows(); ++i)
            out.logits[i * static_cast<size_t>(out.vocab_size) + static_cast<size_t>(favourite_)] = 100.0f;
        for (auto& t : out.tokens)
            if (t >= 0) t = favourite_;  // what a device sampler would draw from these rows
        return out;
    }

private:
    int32_t favourite_;
};

EngineConfig config(int32_t eos) {
    EngineConfig c;
    c.max_num_batched_tokens = 128;
    c.long_prefill_token_threshold = 64;
    c.max_num_seqs = 4;
    c.kv_block_size = 16;
    c.kv_cache_bytes = 32LL << 20;
    c.eos_token_id = eos;
    return c;
}

// Output tokens (without the stop token) and the final event.
std::pair<std::vector<int32_t>, EngineEvent> run_one(EngineCore& core, const SamplingParams& sp) {
    core.add_request(1, {{1, 2, 3}, sp});
    std::vector<int32_t> tokens;
    EngineEvent final;
    for (int i = 0; i < 200 && core.has_unfinished(); ++i)
        for (auto& ev : core.step()) {
            tokens.insert(tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
            if (ev.finished()) final = ev;
        }
    return {tokens, final};
}

TEST(EngineMinTokens, EosIsHeldBackUntilMinTokens) {
    for (bool device_sampling : {false, true}) {
        SamplingParams sp;
        sp.temperature = 0;
        sp.max_tokens = 20;
        {
            EngineCore core(config(7), std::make_unique<FavouriteRunner>(7, device_sampling));
            const auto [tokens, final] = run_one(core, sp);
            EXPECT_TRUE(tokens.empty());
            EXPECT_EQ(final.finish_reason, FinishReason::Stop);
        }
        sp.min_tokens = 4;
        EngineCore core(config(7), std::make_unique<FavouriteRunner>(7, device_sampling));
        const auto [tokens, final] = run_one(core, sp);
        ASSERT_EQ(tokens.size(), 4u) << "device sampling " << device_sampling;
        EXPECT_TRUE(std::none_of(tokens.begin(), tokens.end(), [](int32_t t) { return t == 7; }));
        EXPECT_EQ(final.finish_reason, FinishReason::Stop);
        EXPECT_EQ(final.usage.completion_tokens, 5);  // the four plus the EOS that ended it
    }
}

TEST(EngineMinTokens, StopTokenIdsAreHeldBackToo) {
    SamplingParams sp;
    sp.temperature = 0.7f;
    sp.seed = 3;
    sp.max_tokens = 20;
    sp.stop_token_ids = {9};
    sp.min_tokens = 6;
    EngineCore core(config(-1), std::make_unique<FavouriteRunner>(9, false));
    const auto [tokens, final] = run_one(core, sp);
    ASSERT_EQ(tokens.size(), 6u);
    EXPECT_TRUE(std::none_of(tokens.begin(), tokens.end(), [](int32_t t) { return t == 9; }));
    EXPECT_EQ(final.finish_reason, FinishReason::Stop);
}

TEST(EngineMinTokens, MinTokensAboveMaxTokensIsRefused) {
    SamplingParams sp;
    sp.max_tokens = 4;
    sp.min_tokens = 5;
    EngineCore core(config(7), std::make_unique<FakeModelRunner>());
    EXPECT_THROW(core.add_request(1, {{1, 2, 3}, sp}), Error);
}

}  // namespace
}  // namespace onecard
