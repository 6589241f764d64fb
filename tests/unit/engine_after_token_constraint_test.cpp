// AfterTokenConstraint (structured output with thinking on): every token is allowed and EOS is not
// until the gate token (</think>) is sampled; from the next token the inner grammar rules, and EOS only
// when it can terminate. Also the public route: SamplingParams::make_constraint through EngineCore and
// the threaded Engine, with a random fake model whose output must follow the grammar after the gate.
#include "engine/after_token_constraint.h"
#include "engine/engine_core.h"
#include "engine/grammar_constraint.h"
#include "grammar/json_schema.h"
#include "grammar_test_util.h"
#include "onecard/engine.h"
#include "testing/fake_runner.h"

#include <gtest/gtest.h>

#include <cmath>

namespace onecard {
namespace {

constexpr int32_t kEos = 300;   // no bytes, like the real EOS
constexpr int32_t kGate = 301;  // no bytes, like the real </think> (an added token, outside the trie)
constexpr int64_t kVocab = 320;

std::shared_ptr<const grammar::TokenTrie> vocab() {
    std::vector<std::string> bytes = test::synthetic_vocab(300, 17);
    bytes[1] = "\x01";
    bytes.resize(kVocab);
    return std::make_shared<const grammar::TokenTrie>(std::move(bytes));
}

std::shared_ptr<const grammar::TokenMasks> masks_for(const std::string& schema,
                                                     const std::shared_ptr<const grammar::TokenTrie>& trie) {
    return std::make_shared<const grammar::TokenMasks>(grammar::compile_json_schema_text(schema), trie);
}

int64_t n_set(const std::vector<uint32_t>& mask) {
    int64_t n = 0;
    for (uint32_t w : mask) n += __builtin_popcount(w);
    return n;
}

TEST(AfterTokenConstraint, FreeUntilTheGateThenTheGrammar) {
    const auto trie = vocab();
    const auto masks = masks_for(R"({"enum":["ab","c"]})", trie);
    AfterTokenConstraint c(kGate, kVocab, std::make_unique<GrammarConstraint>(masks));
    std::vector<uint32_t> mask((kVocab + 31) / 32 + 1, 0xdeadbeefu);  // longer than the vocabulary
    c.fill_mask(mask);
    EXPECT_EQ(n_set(mask), kVocab);   // every id, none past the vocabulary
    EXPECT_FALSE(c.can_terminate());  // no EOS inside the reasoning
    // Anything goes before the gate, even text the grammar refuses and other special ids.
    for (int32_t t : {int32_t{'x'}, int32_t{'}'}, int32_t{310}, int32_t{'"'}}) EXPECT_TRUE(c.accept(t)) << t;
    EXPECT_FALSE(c.accept(static_cast<int32_t>(kVocab)));
    EXPECT_FALSE(c.gated());
    ASSERT_TRUE(c.accept(kGate));
    EXPECT_TRUE(c.gated());
    // Now exactly the inner grammar's mask: the opening quote, not '{', not the gate again.
    c.fill_mask(mask);
    GrammarConstraint fresh(masks);
    std::vector<uint32_t> want(mask.size(), 0u);
    fresh.fill_mask(want);
    EXPECT_EQ(mask, want);
    EXPECT_TRUE(grammar::test_bit(mask, '"'));
    EXPECT_FALSE(grammar::test_bit(mask, '{'));
    EXPECT_FALSE(grammar::test_bit(mask, kGate));
    EXPECT_FALSE(c.can_terminate());
    EXPECT_FALSE(c.accept('x'));
    ASSERT_TRUE(c.accept('"'));
    ASSERT_TRUE(c.accept('c'));
    EXPECT_FALSE(c.can_terminate());
    ASSERT_TRUE(c.accept('"'));
    EXPECT_TRUE(c.can_terminate());
    // Complete: apply_token_constraint keeps EOS alone.
    std::vector<float> row(kVocab, 0.5f);
    std::vector<uint32_t> scratch;
    EXPECT_EQ(apply_token_constraint(c, row, kEos, scratch), 1);
    EXPECT_EQ(row[kEos], 0.5f);
    c.check_integrity();
}

TEST(AfterTokenConstraint, ReservedTokensAreRefusedUntilTheGateOnly) {
    // The server reserves the DSML marker in the reasoning when tools are held to their grammar.
    const auto trie = vocab();
    constexpr int32_t kReserved = 305;
    AfterTokenConstraint c(kGate, kVocab, std::make_unique<GrammarConstraint>(masks_for(R"({"enum":["ab"]})", trie)),
                           {kReserved, 'q'});
    std::vector<uint32_t> mask((kVocab + 31) / 32, 0u);
    c.fill_mask(mask);
    EXPECT_EQ(n_set(mask), kVocab - 2);
    EXPECT_FALSE(grammar::test_bit(mask, kReserved));
    EXPECT_FALSE(grammar::test_bit(mask, 'q'));
    EXPECT_TRUE(grammar::test_bit(mask, kGate));
    EXPECT_FALSE(c.accept(kReserved));
    EXPECT_FALSE(c.accept('q'));
    EXPECT_TRUE(c.accept('x'));
    ASSERT_TRUE(c.accept(kGate));
    // After the gate the inner grammar alone decides.
    c.fill_mask(mask);
    EXPECT_TRUE(grammar::test_bit(mask, '"'));
    ASSERT_TRUE(c.accept('"'));
    ASSERT_TRUE(c.accept('a'));
    ASSERT_TRUE(c.accept('b'));
    // A reserved gate or an id outside the vocabulary is a caller's bug.
    EXPECT_THROW(
        AfterTokenConstraint(kGate, kVocab, std::make_unique<GrammarConstraint>(masks_for("{}", trie)), {kGate}),
        Error);
    EXPECT_THROW(AfterTokenConstraint(kGate, kVocab, std::make_unique<GrammarConstraint>(masks_for("{}", trie)),
                                      {static_cast<int32_t>(kVocab)}),
                 Error);
}

TEST(AfterTokenConstraint, EosIsMaskedBeforeTheGate) {
    const auto trie = vocab();
    AfterTokenConstraint c(kGate, kVocab, std::make_unique<GrammarConstraint>(masks_for(R"({"type":"null"})", trie)));
    std::vector<float> row(kVocab, 0.0f);
    std::vector<uint32_t> scratch;
    EXPECT_EQ(apply_token_constraint(c, row, kEos, scratch), kVocab - 1);
    EXPECT_EQ(row[kEos], -INFINITY);
    EXPECT_EQ(row[kGate], 0.0f);
}

TEST(AfterTokenConstraint, RefusesABadGate) {
    const auto trie = vocab();
    EXPECT_THROW(AfterTokenConstraint(static_cast<int32_t>(kVocab), kVocab,
                                      std::make_unique<GrammarConstraint>(masks_for("{}", trie))),
                 Error);
    EXPECT_THROW(AfterTokenConstraint(kGate, kVocab, nullptr), Error);
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

const char* kSchema =
    R"({"type":"object","properties":{"n":{"type":"integer","minimum":0,"maximum":99},
        "xs":{"type":"array","items":{"enum":["p","q"]},"minItems":1,"maxItems":2}},"required":["n","xs"]})";

// kSchema checked by hand (independent of src/grammar): {"n": 0..99, "xs": 1 or 2 of "p"/"q"}, no other key.
bool follows_schema(const std::string& text) {
    const auto j = nlohmann::json::parse(text, nullptr, false);
    if (!j.is_object() || j.size() != 2 || !j.contains("n") || !j.contains("xs")) return false;
    if (!j["n"].is_number_integer() || j["n"].get<int64_t>() < 0 || j["n"].get<int64_t>() > 99) return false;
    if (!j["xs"].is_array() || j["xs"].empty() || j["xs"].size() > 2) return false;
    for (const auto& x : j["xs"])
        if (x != "p" && x != "q") return false;
    return true;
}

// Splits a finished request's tokens at the gate: (reasoning ids, answer text).
std::pair<std::vector<int32_t>, std::string> split(const std::vector<int32_t>& ids, const grammar::TokenTrie& trie) {
    std::vector<int32_t> before;
    std::string after;
    bool gated = false;
    for (int32_t t : ids) {
        if (!gated) {
            before.push_back(t);
            gated = t == kGate;
        } else if (t != kEos) {
            after += trie.token_bytes(t);
        }
    }
    return {before, after};
}

TEST(AfterTokenConstraint, EngineCoreBuildsTheConstraintFromSamplingParams) {
    const auto trie = vocab();
    const auto masks = masks_for(kSchema, trie);
    FakeRunnerConfig rc;
    rc.vocab_size = kVocab;
    EngineCore core(config(), std::make_unique<FakeModelRunner>(rc));
    for (RequestId id = 1; id <= 4; ++id) {
        SamplingParams sp;
        sp.temperature = id % 2 ? 1.0f : 0.0f;
        sp.seed = id;
        sp.max_tokens = 300;
        sp.logit_bias = {{kGate, 4.0f}};  // reach the gate after a few free tokens
        sp.make_constraint = [masks] {
            return std::make_unique<AfterTokenConstraint>(kGate, kVocab, std::make_unique<GrammarConstraint>(masks));
        };
        core.add_request(id, {{5, 6, 7}, sp});
    }
    std::map<RequestId, std::vector<int32_t>> ids;
    std::map<RequestId, EngineEvent> fin;
    for (int i = 0; i < 2000 && core.has_unfinished(); ++i)
        for (auto& ev : core.step()) {
            ids[ev.request_id].insert(ids[ev.request_id].end(), ev.token_ids.begin(), ev.token_ids.end());
            if (ev.finished()) fin[ev.request_id] = ev;
        }
    ASSERT_EQ(fin.size(), 4u);
    for (RequestId id = 1; id <= 4; ++id) {
        EXPECT_EQ(fin[id].finish_reason, FinishReason::Stop) << fin[id].error;
        const auto [before, after] = split(ids[id], *trie);
        ASSERT_FALSE(before.empty());
        EXPECT_EQ(before.back(), kGate);
        for (size_t i = 0; i + 1 < before.size(); ++i) EXPECT_NE(before[i], kEos);
        EXPECT_TRUE(follows_schema(after)) << "request " << id << ": " << after;
    }
}

TEST(AfterTokenConstraint, PublicEngineCarriesTheFactoryToEveryCopy) {
    const auto trie = vocab();
    const auto masks = masks_for(kSchema, trie);
    FakeRunnerConfig rc;
    rc.vocab_size = kVocab;
    Engine engine(config(), std::make_unique<FakeModelRunner>(rc));
    SamplingParams sp;
    sp.temperature = 1.0f;
    sp.max_tokens = 300;
    int n_made = 0;  // the engine thread calls the factory; read after the streams end
    sp.make_constraint = [masks, &n_made] {
        ++n_made;
        return std::make_unique<GrammarConstraint>(masks);
    };
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (uint64_t seed = 1; seed <= 3; ++seed) {
        SamplingParams copy = sp;  // n > 1 choices copy the params: each gets its own matcher
        copy.seed = seed;
        streams.push_back(engine.submit({{4, 5}, copy}));
    }
    for (auto& s : streams) {
        std::string text;
        FinishReason why = FinishReason::None;
        while (auto ev = s->next()) {
            for (int32_t t : ev->token_ids) text += trie->token_bytes(t);
            if (ev->finished()) why = ev->finish_reason;
        }
        EXPECT_EQ(why, FinishReason::Stop);
        EXPECT_TRUE(follows_schema(text)) << text;
    }
    engine.wait_idle();
    EXPECT_EQ(n_made, 3);
    // A factory that throws fails only its own request.
    SamplingParams bad;
    bad.max_tokens = 5;
    bad.make_constraint = []() -> std::unique_ptr<TokenConstraint> { throw Error("no grammar today"); };
    auto s = engine.submit({{4}, bad});
    std::optional<EngineEvent> last;
    while (auto ev = s->next()) last = ev;
    ASSERT_TRUE(last);
    EXPECT_EQ(last->finish_reason, FinishReason::Error);
    EXPECT_NE(last->error.find("no grammar today"), std::string::npos) << last->error;
}

}  // namespace
}  // namespace onecard
