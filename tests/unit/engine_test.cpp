// Engine: finish conditions and text streaming in EngineCore, then the threaded Engine with many
// concurrent submitters, mid-stream cancellations and slow readers, checking everything is freed.
#include "onecard/engine.h"
#include "core/error.h"
#include "engine/engine_core.h"
#include "engine/request.h"
#include "testing/fake_runner.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <random>
#include <thread>

namespace onecard {
namespace {

// Token t decodes to one letter 'a' + t % 26; tokens >= 60 decode to a 2-byte UTF-8 char in two
// halves (the first push returns nothing), like a byte-level BPE splitting a character.
class LetterDecoder : public TextDecoder {
public:
    std::string push(int32_t t) override {
        if (t >= 60) {
            if (half_) {
                half_ = false;
                return "\xc3\xa9";
            }
            half_ = true;
            return "";
        }
        std::string out = half_ ? "?" : "";
        half_ = false;
        return out + static_cast<char>('a' + t % 26);
    }
    std::string flush() override {
        std::string out = half_ ? "?" : "";
        half_ = false;
        return out;
    }

private:
    bool half_ = false;
};

EngineConfig base_config() {
    EngineConfig c;
    c.max_num_batched_tokens = 128;
    c.long_prefill_token_threshold = 64;
    c.max_num_seqs = 8;
    c.kv_block_size = 16;
    c.kv_cache_bytes = 32LL << 20;
    c.make_text_decoder = [] { return std::make_unique<LetterDecoder>(); };
    return c;
}

struct Collected {
    std::vector<int32_t> tokens;
    std::string text;
    EngineEvent final;
    std::vector<TokenLogprobs> logprobs;
};

std::map<RequestId, Collected> run_core(EngineCore& core) {
    std::map<RequestId, Collected> out;
    for (int i = 0; i < 10000 && core.has_unfinished(); ++i) {
        for (auto& ev : core.step()) {
            auto& c = out[ev.request_id];
            c.tokens.insert(c.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
            c.logprobs.insert(c.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
            c.text += ev.text_delta;
            if (ev.finished()) c.final = ev;
        }
        core.check_integrity();
    }
    return out;
}

std::string letters(const std::vector<int32_t>& toks) {
    LetterDecoder d;
    std::string s;
    for (int32_t t : toks) s += d.push(t);
    return s + d.flush();
}

// Greedy tokens from the fake model (no engine).
std::vector<int32_t> greedy_ref(const FakeModelRunner& m, std::vector<int32_t> h, int n) {
    std::vector<int32_t> out;
    for (int i = 0; i < n; ++i) {
        auto row = m.logits_for(h);
        out.push_back(static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin()));
        h.push_back(out.back());
    }
    return out;
}

TEST(EngineCore, EosStopTokenAndLength) {
    FakeModelRunner model;
    const std::vector<int32_t> prompt = {5, 9, 13, 2};
    const auto ref = greedy_ref(model, prompt, 12);
    EngineConfig cfg = base_config();
    cfg.eos_token_id = ref[5];
    // Request 1 stops at EOS; 2 ignores EOS and runs to max_tokens; 3 stops on a stop token id.
    EngineCore core(cfg, std::make_unique<FakeModelRunner>());
    SamplingParams sp;
    sp.temperature = 0.0f;
    sp.max_tokens = 12;
    core.add_request(1, {prompt, sp});
    sp.ignore_eos = true;
    core.add_request(2, {prompt, sp});
    sp.ignore_eos = false;
    sp.stop_token_ids = {ref[2]};
    core.add_request(3, {prompt, sp});
    auto out = run_core(core);
    // The first occurrence of the EOS/stop token decides; it is counted but not emitted.
    const auto first = [&](int32_t t) { return std::find(ref.begin(), ref.end(), t) - ref.begin(); };
    const auto eos_at = first(ref[5]);
    EXPECT_EQ(out[1].final.finish_reason, FinishReason::Stop);
    EXPECT_EQ(out[1].final.stop_token, ref[5]);
    EXPECT_EQ(out[1].tokens, std::vector<int32_t>(ref.begin(), ref.begin() + eos_at));
    EXPECT_EQ(out[1].final.usage.completion_tokens, eos_at + 1);
    EXPECT_EQ(out[2].final.finish_reason, FinishReason::Length);
    EXPECT_EQ(out[2].tokens, ref);
    EXPECT_EQ(out[2].text, letters(ref));
    const auto stop_at = std::min(first(ref[2]), eos_at);
    EXPECT_EQ(out[3].final.finish_reason, FinishReason::Stop);
    EXPECT_EQ(out[3].tokens, std::vector<int32_t>(ref.begin(), ref.begin() + stop_at));
    EXPECT_EQ(core.kv().n_free_blocks(), core.kv().n_total_blocks());
}

// A runner that samples rows itself (as the CUDA runner does on the GPU) gets only the rows whose
// parameters need no host work, and the engine gives every request the same tokens either way:
// greedy, seeded random draws, and the rows the engine keeps (penalties, logprobs) mixed in one batch.
TEST(EngineCore, RunnerSampledRowsGiveTheSameTokens) {
    auto run = [](bool runner_samples, int64_t* n_runner_sampled) {
        FakeRunnerConfig fc;
        fc.sample_rows = runner_samples;
        fc.logit_scale = 1.0f;  // flat: the draws decide
        auto runner = std::make_unique<FakeModelRunner>(fc);
        const FakeModelRunner* r = runner.get();
        EngineCore core(base_config(), std::move(runner));
        SamplingParams sp;
        sp.max_tokens = 10;
        sp.ignore_eos = true;
        sp.temperature = 0.0f;
        core.add_request(1, {{5, 9, 13}, sp});  // greedy
        sp.temperature = 0.9f;
        sp.top_p = 0.8f;
        sp.top_k = 20;
        sp.seed = 7;
        core.add_request(2, {{5, 9, 13}, sp});  // seeded draw
        sp.min_p = 0.05f;
        sp.seed = 8;
        core.add_request(3, {{1, 2}, sp});
        sp.repetition_penalty = 1.3f;  // penalties: the engine samples
        core.add_request(4, {{5, 9, 13}, sp});
        sp.repetition_penalty = 1.0f;
        sp.logprobs = 2;  // logprobs: the engine samples
        core.add_request(5, {{5, 9, 13}, sp});
        auto out = run_core(core);
        *n_runner_sampled = 0;
        for (const auto& rec : r->log()) *n_runner_sampled += rec.n_runner_sampled;
        return out;
    };
    int64_t n_host = 0, n_runner = 0;
    auto host = run(false, &n_host);
    auto dev = run(true, &n_runner);
    EXPECT_EQ(n_host, 0);
    EXPECT_EQ(n_runner, 30);  // requests 1-3, 10 tokens each; 4 and 5 stay with the engine
    ASSERT_EQ(host.size(), 5u);
    for (RequestId id = 1; id <= 5; ++id) {
        EXPECT_EQ(dev[id].tokens, host[id].tokens) << "request " << id;
        EXPECT_EQ(dev[id].tokens.size(), 10u) << "request " << id;
    }
    EXPECT_EQ(dev[5].logprobs.size(), 10u);
    EXPECT_NE(host[2].tokens, host[1].tokens);  // the draws are not the greedy path
}

// last_step_timing(): what the step computed (the slow-step log's figures) and non-negative parts.
TEST(EngineCore, LastStepTimingCountsWhatTheStepComputed) {
    EngineCore core(base_config(), std::make_unique<FakeModelRunner>());
    SamplingParams sp;
    sp.max_tokens = 3;
    std::vector<int32_t> long_prompt(100, 5);  // chunks of 64 (long_prefill_token_threshold)
    core.add_request(1, {long_prompt, sp});
    core.add_request(2, {{1, 2, 3}, sp});
    core.step();
    const EngineCore::StepTiming& t = core.last_step_timing();
    EXPECT_EQ(t.rows, 2);
    EXPECT_EQ(t.tokens, 64 + 3);
    EXPECT_EQ(t.prompt_rows, 2);
    EXPECT_EQ(t.prompt_tokens, 67);
    EXPECT_EQ(t.max_position, 63);
    EXPECT_GE(t.schedule_s, 0.0);
    EXPECT_GE(t.execute_s, 0.0);
    EXPECT_GE(t.outputs_s, 0.0);
    core.step();  // the long prompt's last 36 tokens, request 2's first decode token
    EXPECT_EQ(core.last_step_timing().tokens, 36 + 1);
    EXPECT_EQ(core.last_step_timing().prompt_rows, 1);
    EXPECT_EQ(core.last_step_timing().max_position, 99);
}

TEST(EngineCore, StopStringsHoldBackAndTruncate) {
    FakeModelRunner model;
    const std::vector<int32_t> prompt = {1, 2, 3};
    const auto ref = greedy_ref(model, prompt, 20);
    const std::string full = letters(ref);
    // A stop string cut from the middle of the greedy text.
    EngineConfig cfg = base_config();
    EngineCore core(cfg, std::make_unique<FakeModelRunner>());
    SamplingParams sp;
    sp.temperature = 0.0f;
    sp.max_tokens = 20;
    const std::string stop = full.substr(full.size() / 2, 3);
    sp.stop = {stop};
    core.add_request(1, {prompt, sp});
    sp.include_stop_str_in_output = true;
    core.add_request(2, {prompt, sp});
    sp.stop = {"\x01never"};
    core.add_request(3, {prompt, sp});
    auto out = run_core(core);
    const size_t at = full.find(stop);  // the first occurrence, possibly before the middle
    EXPECT_EQ(out[1].final.finish_reason, FinishReason::Stop);
    EXPECT_EQ(out[1].text, full.substr(0, at));
    EXPECT_EQ(out[1].final.stop_string, stop);
    EXPECT_EQ(out[2].text, full.substr(0, at + 3));
    EXPECT_EQ(out[3].final.finish_reason, FinishReason::Length);
    EXPECT_EQ(out[3].text, full);
}

TEST(EngineCore, LogprobsAndMaxModelLen) {
    EngineConfig cfg = base_config();
    cfg.max_model_len = 20;
    EngineCore core(cfg, std::make_unique<FakeModelRunner>());
    EXPECT_THROW(core.add_request(9, {std::vector<int32_t>(20, 1), {}}), Error);  // no room for one token
    SamplingParams sp;
    sp.logprobs = 3;
    sp.seed = 5;
    sp.max_tokens = 100;
    core.add_request(1, {std::vector<int32_t>(15, 4), sp});
    auto out = run_core(core);
    EXPECT_EQ(out[1].final.finish_reason, FinishReason::Length);
    EXPECT_EQ(out[1].tokens.size(), 5u);  // 15 + 5 = max_model_len
    ASSERT_EQ(out[1].logprobs.size(), 5u);
    for (size_t i = 0; i < 5; ++i) {
        EXPECT_EQ(out[1].logprobs[i].sampled.token, out[1].tokens[i]);
        EXPECT_EQ(out[1].logprobs[i].top.size(), 3u);
        EXPECT_LE(out[1].logprobs[i].sampled.logprob, out[1].logprobs[i].top[0].logprob);
    }
}

TEST(EngineCore, RunnerFailureFailsTheBatchAndFreesKv) {
    class Exploding : public FakeModelRunner {
        RunnerOutput execute(const SchedulerOutput& b) override {
            if (b.step == 2) throw Error("boom in step 2");
            return FakeModelRunner::execute(b);
        }
    };
    EngineCore core(base_config(), std::make_unique<Exploding>());
    SamplingParams sp;
    sp.max_tokens = 50;
    core.add_request(1, {{1, 2, 3}, sp});
    core.add_request(2, {{4, 5}, sp});
    auto out = run_core(core);
    EXPECT_EQ(out[1].final.finish_reason, FinishReason::Error);
    EXPECT_NE(out[1].final.error.find("boom"), std::string::npos);
    EXPECT_EQ(out[2].final.finish_reason, FinishReason::Error);
    EXPECT_EQ(core.kv().n_free_blocks(), core.kv().n_total_blocks());
}

// ---- threaded engine -------------------------------------------------------------------------

struct StreamResult {
    std::vector<int32_t> tokens;
    FinishReason reason = FinishReason::None;
    int64_t n_events_after_final = 0;
};

StreamResult drain(RequestStream& s, std::chrono::microseconds per_event_delay = {}) {
    StreamResult r;
    while (auto ev = s.next()) {
        r.tokens.insert(r.tokens.end(), ev->token_ids.begin(), ev->token_ids.end());
        if (ev->finished()) r.reason = ev->finish_reason;
        if (per_event_delay.count()) std::this_thread::sleep_for(per_event_delay);
    }
    r.n_events_after_final = s.try_next().has_value();
    return r;
}

// The final event carries when the request was taken in and first scheduled: a request waiting for
// the only sequence slot shows the wait; one cancelled while waiting was never scheduled.
TEST(EngineCore, FinalEventsCarryQueueAndFirstScheduleTimes) {
    EngineConfig cfg = base_config();
    cfg.max_num_seqs = 1;
    FakeRunnerConfig rc;
    rc.step_delay = std::chrono::milliseconds(2);
    EngineCore core(cfg, std::make_unique<FakeModelRunner>(rc));
    SamplingParams sp;
    sp.max_tokens = 10;
    sp.ignore_eos = true;
    const auto before = std::chrono::steady_clock::now();
    core.add_request(1, {{1, 2, 3}, sp});
    core.add_request(2, {{4, 5}, sp});
    core.add_request(3, {{6}, sp});
    const std::optional<EngineEvent> aborted = core.abort_request(3);
    ASSERT_TRUE(aborted);
    EXPECT_GE(aborted->times.queued, before);
    EXPECT_FALSE(aborted->times.first_scheduled);
    auto out = run_core(core);
    ASSERT_EQ(out.size(), 2u);
    const RequestTimes& t1 = out[1].final.times;
    const RequestTimes& t2 = out[2].final.times;
    ASSERT_TRUE(t1.first_scheduled && t2.first_scheduled);
    EXPECT_GE(t1.queued, before);
    EXPECT_GE(*t1.first_scheduled, t1.queued);
    // Request 2 waited for request 1's ten steps of >= 2 ms each.
    EXPECT_GE(*t2.first_scheduled - t2.queued, std::chrono::milliseconds(18));
    EXPECT_LT(*t1.first_scheduled - t1.queued, *t2.first_scheduled - t2.queued);
}

TEST(Engine, ConcurrentSubmittersCancellationsAndSlowReaders) {
    EngineConfig cfg = base_config();
    cfg.event_queue_capacity = 4;  // small: slow readers get their requests paused
    cfg.submit_queue_capacity = 8;
    FakeRunnerConfig rc;
    rc.step_delay = std::chrono::microseconds(100);
    FakeModelRunner ref_model(rc);
    Engine engine(cfg, std::make_unique<FakeModelRunner>(rc));
    const int n_threads = 8, per_thread = 6;
    std::atomic<int> n_cancelled{0}, n_ok{0}, n_bad{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < n_threads; ++t) {
        threads.emplace_back([&, t] {
            std::mt19937 rng(100 + t);
            for (int i = 0; i < per_thread; ++i) {
                std::vector<int32_t> prompt(1 + rng() % 150);
                for (auto& x : prompt) x = static_cast<int32_t>(rng() % 64);
                SamplingParams sp;
                sp.temperature = 0.0f;
                sp.max_tokens = 10 + static_cast<int64_t>(rng() % 40);
                auto stream = engine.submit({prompt, sp});
                const int mode = static_cast<int>(rng() % 4);
                StreamResult r;
                if (mode == 0) {
                    // Cancel mid-stream after the first tokens arrive.
                    r.tokens = {};
                    auto ev = stream->next();
                    ASSERT_TRUE(ev.has_value());
                    stream->cancel();
                    auto rest = drain(*stream);
                    r.reason = ev->finished() ? ev->finish_reason : rest.reason;
                    if (r.reason == FinishReason::Cancelled) ++n_cancelled;
                    continue;
                }
                r = drain(*stream, mode == 1 ? std::chrono::microseconds(500) : std::chrono::microseconds(0));
                const auto want = greedy_ref(ref_model, prompt, static_cast<int>(sp.max_tokens));
                if (r.reason == FinishReason::Length && r.tokens == want && r.n_events_after_final == 0) {
                    ++n_ok;
                } else {
                    ++n_bad;
                }
            }
        });
    }
    for (auto& th : threads) th.join();
    engine.wait_idle();
    EXPECT_EQ(n_bad.load(), 0);
    EXPECT_GT(n_ok.load(), 0);
    EXPECT_GT(n_cancelled.load(), 0);
    // Give the engine thread one idle turn to publish the final state.
    EngineStats st;
    for (int i = 0; i < 100; ++i) {
        st = engine.stats();
        if (st.n_running == 0 && st.n_waiting == 0 && st.n_free_kv_blocks == st.n_total_kv_blocks) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_EQ(st.n_running, 0);
    EXPECT_EQ(st.n_waiting, 0);
    EXPECT_EQ(st.n_free_kv_blocks, st.n_total_kv_blocks);
    EXPECT_EQ(st.n_free_kv_slots, cfg.max_num_seqs);
}

TEST(Engine, ShutdownEndsOpenStreams) {
    EngineConfig cfg = base_config();
    FakeRunnerConfig rc;
    rc.step_delay = std::chrono::microseconds(200);
    std::vector<std::shared_ptr<RequestStream>> streams;
    {
        Engine engine(cfg, std::make_unique<FakeModelRunner>(rc));
        SamplingParams sp;
        sp.max_tokens = 1000;
        sp.ignore_eos = true;
        for (int i = 0; i < 4; ++i) streams.push_back(engine.submit({{1, 2, 3}, sp}));
        ASSERT_TRUE(streams[0]->next().has_value());
    }
    for (auto& s : streams) EXPECT_EQ(drain(*s).reason, FinishReason::Cancelled);
}

TEST(EngineCore, MaxTokensLeftOutRunsToTheRoomLeft) {
    // vLLM's max_tokens=None: the request generates until prompt + output reaches max_model_len (past
    // the 256 tokens the engine's default once was).
    EngineConfig cfg = base_config();
    cfg.max_model_len = 300;
    EngineCore core(cfg, std::make_unique<FakeModelRunner>());
    SamplingParams sp;
    EXPECT_EQ(sp.max_tokens, kMaxTokensRemainingRoom);
    sp.temperature = 0;
    core.add_request(1, {std::vector<int32_t>(15, 4), sp});
    auto out = run_core(core);
    EXPECT_EQ(out[1].final.finish_reason, FinishReason::Length);
    EXPECT_EQ(out[1].tokens.size(), 285u);
    EXPECT_EQ(out[1].final.usage.completion_tokens, 285);
}

TEST(EngineCore, MaxTotalTokens) {
    EXPECT_EQ(max_total_tokens(10, 5, 100), 15);
    EXPECT_EQ(max_total_tokens(10, 90, 100), 100);
    EXPECT_EQ(max_total_tokens(10, 500, 100), 100);
    EXPECT_EQ(max_total_tokens(10, kMaxTokensRemainingRoom, 100), 100);  // no overflow
    EXPECT_THROW(max_total_tokens(100, 1, 100), Error);                  // no room left
    EXPECT_THROW(max_total_tokens(10, 0, 100), Error);
}

TEST(Engine, RequestsThatCannotFitTheKvPoolAreRefusedInTheCallerThread) {
    EngineConfig cfg = base_config();
    FakeModelRunner probe;
    const auto spec = make_kv_cache_spec(probe.kv_model_shape(), cfg.kv_block_size);
    cfg.kv_cache_bytes = cfg.max_num_seqs * spec.slot_bytes + 4 * spec.block_bytes;  // 4 blocks of 16: 64 tokens
    Engine engine(cfg, std::make_unique<FakeModelRunner>());
    SamplingParams sp;
    sp.max_tokens = 20;
    try {
        engine.submit({std::vector<int32_t>(50, 3), sp});
        ADD_FAILURE() << "50 + 20 tokens cannot fit a 64-token pool";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(
                      "request: prompt + max_tokens = 70 tokens exceeds the KV pool (64 tokens); lower max_tokens"),
                  std::string::npos)
            << e.what();
    }
    // Without max_tokens the request may grow to max_model_len (4096 here), which the pool cannot hold.
    EXPECT_THROW(engine.submit({std::vector<int32_t>(10, 3), SamplingParams{}}), Error);
    sp.max_tokens = 14;  // 50 + 14 = 64 fits
    sp.temperature = 0;
    auto stream = engine.submit({std::vector<int32_t>(50, 3), sp});
    int64_t n = 0;
    while (auto ev = stream->next()) {
        n += static_cast<int64_t>(ev->token_ids.size());
        if (ev->finished()) {
            EXPECT_EQ(ev->finish_reason, FinishReason::Length);
            break;
        }
    }
    EXPECT_EQ(n, 14);
}

TEST(Engine, SubmitValidatesInTheCallerThread) {
    Engine engine(base_config(), std::make_unique<FakeModelRunner>());
    SamplingParams sp;
    EXPECT_THROW(engine.submit({{}, sp}), Error);
    EXPECT_THROW(engine.submit({{1000}, sp}), Error);  // outside the vocabulary
    sp.top_k = -3;
    EXPECT_THROW(engine.submit({{1}, sp}), Error);
}

}  // namespace
}  // namespace onecard
