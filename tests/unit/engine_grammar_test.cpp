// Grammar-constrained sampling in the engine: a random "model" (FakeModelRunner) can only produce
// documents of the schema and ends with EOS exactly when the grammar is complete, whether the engine
// samples constrained rows on the host or hands their masks to the runner (the device path, here the
// fake runner's sample_rows mode): both give the same tokens, with one mask per row per step.
#include "engine/engine_core.h"
#include "engine/grammar_constraint.h"
#include "grammar/json_schema.h"
#include "grammar_test_util.h"
#include "testing/fake_runner.h"

#include <gtest/gtest.h>

namespace onecard {
namespace {

constexpr int32_t kEos = 300;  // an id with no bytes, like the real EOS
constexpr int64_t kVocab = 320;

std::shared_ptr<const grammar::TokenTrie> vocab() {
    // 256 single bytes, then multi-byte pieces; ids 300.. have no bytes (special tokens).
    std::vector<std::string> bytes = test::synthetic_vocab(300, 17);
    bytes[1] = "\x01";  // synthetic_vocab empties id 1; keep every byte reachable here
    bytes.resize(kVocab);
    return std::make_shared<const grammar::TokenTrie>(std::move(bytes));
}

EngineConfig config() {
    EngineConfig c;
    c.max_num_batched_tokens = 256;
    c.long_prefill_token_threshold = 64;
    c.max_num_seqs = 4;
    c.kv_block_size = 16;
    c.kv_cache_bytes = 64LL << 20;
    c.eos_token_id = kEos;
    return c;
}

struct Finished {
    std::string text;
    EngineEvent final;
};

// Runs requests 1..n_requests to the end; returns each one's text (token bytes) and final event.
std::map<RequestId, Finished> run(EngineCore& core, const grammar::TokenTrie& trie, int max_steps = 2000) {
    std::map<RequestId, Finished> out;
    for (int i = 0; i < max_steps && core.has_unfinished(); ++i) {
        for (auto& ev : core.step()) {
            for (int32_t t : ev.token_ids) out[ev.request_id].text += trie.token_bytes(t);
            if (ev.finished()) out[ev.request_id].final = ev;
        }
        core.check_integrity();
    }
    return out;
}

TEST(EngineGrammar, RandomModelOutputFollowsTheSchema) {
    const auto trie = vocab();
    const std::string schema_text =
        R"({"type":"object","properties":{"id":{"type":"integer","minimum":1,"maximum":999},
            "kind":{"enum":["cat","dog"]},"tags":{"type":"array","items":{"type":"string","maxLength":4},"maxItems":3},
            "ok":{"type":"boolean"}},"required":["id","kind","tags","ok"],"additionalProperties":false})";
    const auto schema = test::ojson::parse(schema_text);
    const auto masks = std::make_shared<const grammar::TokenMasks>(grammar::compile_json_schema(schema), trie);
    test::PolicyValidator validator(schema);
    for (bool device_sampling : {false, true}) {
        FakeRunnerConfig rc;
        rc.vocab_size = kVocab;
        rc.sample_rows = device_sampling;
        EngineCore core(config(), std::make_unique<FakeModelRunner>(rc));
        for (RequestId id = 1; id <= 6; ++id) {
            SamplingParams sp;
            sp.temperature = id % 2 ? 1.0f : 0.0f;
            sp.seed = id;
            sp.max_tokens = 400;
            core.add_request(id, {{5, 6, 7}, sp}, std::make_unique<GrammarConstraint>(masks));
        }
        // An unconstrained neighbour in the same batches.
        SamplingParams free;
        free.max_tokens = 30;
        free.seed = 99;
        core.add_request(7, {{1, 2}, free});
        const auto done = run(core, *trie);
        ASSERT_EQ(done.size(), 7u);
        for (RequestId id = 1; id <= 6; ++id) {
            const auto& f = done.at(id);
            EXPECT_EQ(f.final.finish_reason, FinishReason::Stop) << f.text << " " << f.final.error;
            EXPECT_EQ(f.final.stop_token, kEos);
            EXPECT_TRUE(validator.validate_text(f.text)) << "request " << id << ": " << f.text;
        }
        EXPECT_EQ(done.at(7).final.finish_reason, FinishReason::Length);
    }
}

TEST(EngineGrammar, CompleteOutputWithoutUsableEosEndsTheRequest) {
    const auto trie = vocab();
    const auto masks = std::make_shared<const grammar::TokenMasks>(
        grammar::compile_json_schema_text(R"({"enum":["yes","no"]})"), trie);
    FakeRunnerConfig rc;
    rc.vocab_size = kVocab;
    EngineCore core(config(), std::make_unique<FakeModelRunner>(rc));
    SamplingParams sp;
    sp.ignore_eos = true;
    sp.max_tokens = 50;
    core.add_request(1, {{3}, sp}, std::make_unique<GrammarConstraint>(masks));
    const auto done = run(core, *trie);
    const auto& f = done.at(1);
    EXPECT_TRUE(f.text == "\"yes\"" || f.text == "\"no\"") << f.text;
    EXPECT_EQ(f.final.finish_reason, FinishReason::Error);
    EXPECT_NE(f.final.error.find("EOS cannot be sampled"), std::string::npos) << f.final.error;
}

TEST(EngineGrammar, ApplyTokenConstraintMasksRowAndEos) {
    const auto trie = vocab();
    const auto masks = std::make_shared<const grammar::TokenMasks>(
        grammar::compile_json_schema_text(R"({"type":"array","items":{"type":"null"},"maxItems":1})"), trie);
    GrammarConstraint c(masks);
    std::vector<float> row(kVocab, 1.0f);
    std::vector<uint32_t> scratch;
    const int64_t n_allowed = apply_token_constraint(c, row, kEos, scratch);
    EXPECT_GE(n_allowed, 1);
    EXPECT_EQ(row['['], 1.0f);
    EXPECT_EQ(row[kEos], -INFINITY);
    int64_t n_kept = 0;
    for (int32_t t = 0; t < kVocab; ++t) {
        if (row[t] == -INFINITY) continue;
        ++n_kept;
        EXPECT_TRUE(c.matcher().can_accept_bytes(trie->token_bytes(t))) << t;
    }
    EXPECT_EQ(n_kept, n_allowed);
    ASSERT_TRUE(c.accept('['));
    ASSERT_TRUE(c.accept(']'));
    row.assign(kVocab, 1.0f);
    EXPECT_EQ(apply_token_constraint(c, row, kEos, scratch), 1);  // complete: EOS alone
    EXPECT_EQ(row[kEos], 1.0f);
    EXPECT_FALSE(c.accept('x'));
    c.check_integrity();
}

// Counts the masks asked of a constraint (one per sampled token, EOS included, is the contract).
class CountingConstraint : public TokenConstraint {
public:
    CountingConstraint(std::shared_ptr<const grammar::TokenMasks> masks, int64_t* n_masks)
        : inner_(std::move(masks)), n_masks_(n_masks) {}
    void fill_mask(std::span<uint32_t> mask) override {
        ++*n_masks_;
        inner_.fill_mask(mask);
    }
    bool can_terminate() const override { return inner_.can_terminate(); }
    bool accept(int32_t token) override { return inner_.accept(token); }
    void check_integrity() const override { inner_.check_integrity(); }

private:
    GrammarConstraint inner_;
    int64_t* n_masks_;
};

struct PathRun {
    std::map<RequestId, Finished> done;
    std::map<RequestId, int64_t> n_masks;  // fill_mask calls per request
    int64_t n_runner_masked = 0, n_runner_sampled = 0, n_masks_built = 0;
};

// Requests 1..8 under one schema (greedy and sampled, varied top-k / top-p / min-p; request 7 with
// logprobs and 8 with a penalty, which keep their rows on the host), plus an unconstrained one (9).
PathRun run_constrained(const std::shared_ptr<const grammar::TokenMasks>& masks, bool device_sampling) {
    FakeRunnerConfig rc;
    rc.vocab_size = kVocab;
    rc.sample_rows = device_sampling;
    auto runner = std::make_unique<FakeModelRunner>(rc);
    const FakeModelRunner* fake = runner.get();
    EngineCore core(config(), std::move(runner));
    PathRun r;
    for (RequestId id = 1; id <= 8; ++id) {
        SamplingParams sp;
        sp.temperature = id == 1 ? 0.0f : 0.6f + 0.1f * static_cast<float>(id);
        sp.top_k = id == 3 ? 5 : 0;
        sp.top_p = id == 4 ? 0.8f : 1.0f;
        sp.min_p = id == 5 ? 0.05f : 0.0f;
        if (id == 7) sp.logprobs = 2;
        if (id == 8) sp.presence_penalty = 0.5f;
        sp.seed = 1000 + id;
        sp.max_tokens = 300;
        r.n_masks[id] = 0;
        core.add_request(id, {{4, static_cast<int32_t>(id)}, sp},
                         std::make_unique<CountingConstraint>(masks, &r.n_masks[id]));
    }
    SamplingParams free;
    free.max_tokens = 20;
    free.seed = 5;
    core.add_request(9, {{1, 2}, free});
    const auto trie = vocab();
    r.done = run(core, *trie);
    for (const auto& rec : fake->log()) {
        r.n_runner_masked += rec.n_runner_masked;
        r.n_runner_sampled += rec.n_runner_sampled;
    }
    r.n_masks_built = core.n_masks_built();
    return r;
}

TEST(EngineGrammar, RunnerSampledConstrainedRowsMatchTheHostPath) {
    const auto trie = vocab();
    const auto schema = test::ojson::parse(
        R"({"type":"object","properties":{"n":{"type":"integer"},"s":{"type":"string","maxLength":6},
            "b":{"type":"array","items":{"type":"boolean"},"maxItems":4}},"required":["n","s","b"]})");
    const auto masks = std::make_shared<const grammar::TokenMasks>(grammar::compile_json_schema(schema), trie);
    test::PolicyValidator validator(schema);
    const PathRun host = run_constrained(masks, false);
    const PathRun device = run_constrained(masks, true);
    EXPECT_EQ(host.n_runner_masked, 0);
    int64_t device_only_tokens = 0;  // tokens of requests 1..6, whose rows the runner samples
    for (RequestId id = 1; id <= 9; ++id) {
        const Finished& h = host.done.at(id);
        const Finished& d = device.done.at(id);
        EXPECT_EQ(d.text, h.text) << "request " << id;
        EXPECT_EQ(d.final.finish_reason, h.final.finish_reason) << "request " << id << " " << d.final.error;
        EXPECT_EQ(d.final.usage.completion_tokens, h.final.usage.completion_tokens) << "request " << id;
        if (id == 9) continue;
        EXPECT_EQ(d.final.finish_reason, FinishReason::Stop) << d.text << " " << d.final.error;
        EXPECT_TRUE(validator.validate_text(d.text)) << "request " << id << ": " << d.text;
        // One mask per sampled token (EOS included) on either path: never twice for a row.
        EXPECT_EQ(host.n_masks.at(id), h.final.usage.completion_tokens) << "request " << id;
        EXPECT_EQ(device.n_masks.at(id), d.final.usage.completion_tokens) << "request " << id;
        if (id <= 6) device_only_tokens += d.final.usage.completion_tokens;
    }
    // Requests 1..6 went through the runner's masked sampling, 7 (logprobs) and 8 (penalty) did not.
    EXPECT_EQ(device.n_runner_masked, device_only_tokens);
    EXPECT_EQ(device.n_masks_built, host.n_masks_built);
    int64_t all_masks = 0;
    for (const auto& [id, n] : device.n_masks) all_masks += n;
    EXPECT_EQ(device.n_masks_built, all_masks);
    EXPECT_GT(device.n_runner_sampled, device.n_runner_masked);  // request 9 is sampled there too
}

TEST(EngineGrammar, RunnerPathEndsARequestWhoseMaskIsEmpty) {
    // The same refusal as on the host path (CompleteOutputWithoutUsableEosEndsTheRequest): the mask
    // the runner got allowed nothing, so its drawn id is not used.
    const auto trie = vocab();
    const auto masks = std::make_shared<const grammar::TokenMasks>(
        grammar::compile_json_schema_text(R"({"enum":["yes","no"]})"), trie);
    FakeRunnerConfig rc;
    rc.vocab_size = kVocab;
    rc.sample_rows = true;
    auto runner = std::make_unique<FakeModelRunner>(rc);
    const FakeModelRunner* fake = runner.get();
    EngineCore core(config(), std::move(runner));
    SamplingParams sp;
    sp.ignore_eos = true;
    sp.max_tokens = 50;
    core.add_request(1, {{3}, sp}, std::make_unique<GrammarConstraint>(masks));
    const auto done = run(core, *trie);
    const auto& f = done.at(1);
    EXPECT_TRUE(f.text == "\"yes\"" || f.text == "\"no\"") << f.text;
    EXPECT_EQ(f.final.finish_reason, FinishReason::Error);
    EXPECT_NE(f.final.error.find("EOS cannot be sampled"), std::string::npos) << f.final.error;
    int64_t masked = 0;
    for (const auto& rec : fake->log()) masked += rec.n_runner_masked;
    EXPECT_EQ(masked, static_cast<int64_t>(f.final.usage.completion_tokens) + 1);  // + the empty mask
}

TEST(EngineGrammar, BuildTokenMaskSetsEosByTerminationAndClearsPadding) {
    const auto trie = vocab();
    const auto masks = std::make_shared<const grammar::TokenMasks>(
        grammar::compile_json_schema_text(R"({"type":"array","items":{"type":"null"},"maxItems":1})"), trie);
    GrammarConstraint c(masks);
    const int64_t vocab_size = kVocab - 5;  // not a multiple of 32: the last word is partial
    std::vector<uint32_t> mask(static_cast<size_t>(token_mask_words(vocab_size)), ~0u);
    const int64_t n = build_token_mask(c, mask, vocab_size, kEos);
    int64_t n_set = 0;
    for (int64_t t = 0; t < vocab_size; ++t) {
        if (!((mask[t / 32] >> (t % 32)) & 1u)) continue;
        ++n_set;
        EXPECT_TRUE(c.matcher().can_accept_bytes(trie->token_bytes(static_cast<int32_t>(t)))) << t;
    }
    EXPECT_EQ(n, n_set);
    EXPECT_EQ(mask.back() >> (vocab_size % 32), 0u);  // nothing past the vocabulary
    EXPECT_TRUE((mask['[' / 32] >> ('[' % 32)) & 1u);
    EXPECT_FALSE((mask[kEos / 32] >> (kEos % 32)) & 1u);
    ASSERT_TRUE(c.accept('['));
    ASSERT_TRUE(c.accept(']'));
    EXPECT_EQ(build_token_mask(c, mask, vocab_size, kEos), 1);  // complete: EOS alone
    EXPECT_TRUE((mask[kEos / 32] >> (kEos % 32)) & 1u);
    std::vector<float> row(static_cast<size_t>(vocab_size), 0.5f);
    apply_token_mask(row, mask);
    for (int64_t t = 0; t < vocab_size; ++t) EXPECT_EQ(row[t], t == kEos ? 0.5f : -INFINITY) << t;
}

}  // namespace
}  // namespace onecard
