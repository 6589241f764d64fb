// Grammar-constrained sampling in the engine (CPU path): a random "model" (FakeModelRunner) can only
// produce documents of the schema, ends with EOS exactly when the grammar is complete, and constrained
// rows are never handed to the device sampler.
#include "engine/engine_core.h"
#include "engine/fake_runner.h"
#include "engine/grammar_constraint.h"
#include "grammar/json_schema.h"
#include "grammar_test_util.h"

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
    const auto masks =
        std::make_shared<const grammar::TokenMasks>(grammar::compile_json_schema_text(R"({"enum":["yes","no"]})"), trie);
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

}  // namespace
}  // namespace onecard
