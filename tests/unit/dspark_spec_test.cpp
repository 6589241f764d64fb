// DSpark speculative decoding on the CPU backend (issue 17; docs/dspark.md) on a tiny synthetic
// DeepSeek-V4-Flash-0731 checkpoint (`synth --dspark`: three stages tapping the last three layers,
// block 5, window 32 so the drafter's rings wrap within a test): the taps are the hc mean of the
// target layers' outputs; a draft's logits are the block's base logits plus the Markov bias of the
// previous draft, and its confidences the head's projection; the block attends bidirectionally;
// greedy output with DSpark drafts is the plain greedy output bit for bit, directly and through the
// engine; after drafts and partly accepted verify steps the sequence (main state, stored KV, the
// drafter's rings) equals one that never drafted; k above dspark_block_size is refused by name.
#include "core/error.h"
#include "engine/cpu_model_runner.h"
#include "engine/spec_decoder.h"
#include "model/dspark_heads.h"
#include "onecard/engine.h"

#include "support/test_support.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

namespace onecard {
namespace {

test::TinyModel* g_model = nullptr;

class Env : public ::testing::Environment {
public:
    void SetUp() override {
        SynthOptions opt = test::tiny_options(731);
        opt.dspark = true;
        g_model = new test::TinyModel(opt, "onecard_dspark_spec");
    }
    void TearDown() override {
        delete g_model;
        g_model = nullptr;
    }
};
const auto* const g_env = ::testing::AddGlobalTestEnvironment(new Env);

using test::bitwise_equal;

std::vector<int32_t> random_tokens(int64_t n, uint32_t seed) {
    return test::random_tokens(n, seed, g_model->cfg.vocab_size);
}

SamplingParams greedy() {
    SamplingParams p;
    p.temperature = 0.0f;
    return p;
}

std::vector<int32_t> plain_run(const DeepSeekV4& m, const std::vector<int32_t>& prompt, int64_t n_out) {
    SpecDecoder d(m, greedy(), 1);
    d.start(prompt);
    while (static_cast<int64_t>(d.output().size()) < n_out) d.plain_step();
    return d.output();
}

TEST(DSpark, SynthWritesA0731CheckpointTheDrafterRuns) {
    const ModelConfig& c = g_model->cfg;
    ASSERT_EQ(c.variant, ModelVariant::V4Flash0731);
    ASSERT_TRUE(c.dspark.has_value());
    EXPECT_EQ(c.dspark->block_size, 5);
    EXPECT_EQ(c.dspark->noise_token_id, c.vocab_size - 1);
    EXPECT_EQ(c.dspark->target_layer_ids, (std::vector<int64_t>{3, 4, 5}));
    EXPECT_EQ(c.sliding_window, 32);
    ASSERT_TRUE(g_model->exact->has_dspark());
    EXPECT_FALSE(g_model->exact->has_mtp());
    for (int64_t s = 0; s < 3; ++s) EXPECT_EQ(c.compress_ratio(c.num_hidden_layers + s), 0);

    SequenceState st = g_model->exact->new_sequence();
    const ForwardOutput out = g_model->exact->forward_with_streams(st, random_tokens(9, 1));
    EXPECT_EQ(out.taps.size(), static_cast<size_t>(9 * 3 * c.hidden_size));
    g_model->exact->dspark_push_context(st, out.taps);
    EXPECT_EQ(st.n_mtp_tokens(), 9);
    const DSparkBlockOutput b = g_model->exact->dspark_block(st, 7);
    EXPECT_EQ(b.base_logits.size(), static_cast<size_t>(5 * c.vocab_size));
    EXPECT_EQ(b.hidden.size(), static_cast<size_t>(5 * c.hidden_size));
    for (float v : b.base_logits) ASSERT_TRUE(std::isfinite(v));
    st.check_integrity();
}

// The last target layer is the last layer, whose output streams the forward returns: its tap is their
// plain mean over the hc streams (not the learned hc_head collapse).
TEST(DSpark, TheLastTapIsTheHcMeanOfTheFinalStreams) {
    const ModelConfig& c = g_model->cfg;
    const int64_t n = 6, D = c.hidden_size, hc = c.hc_mult;
    SequenceState st = g_model->exact->new_sequence();
    const ForwardOutput out = g_model->exact->forward_with_streams(st, random_tokens(n, 2));
    for (int64_t i = 0; i < n; ++i)
        for (int64_t d = 0; d < D; ++d) {
            float sum = 0.0f;
            for (int64_t j = 0; j < hc; ++j) sum += out.streams[(i * hc + j) * D + d];
            ASSERT_EQ(out.taps[(i * 3 + 2) * D + d], sum / static_cast<float>(hc)) << i << " " << d;
        }
    // The other taps are earlier layers: not the final streams' mean.
    EXPECT_NE(out.taps[0], out.taps[2 * D]);
}

// A draft's rows: base logits of slot j + markov_w2 · markov_w1[previous token], where the previous
// token of slot 0 is `next` and of slot j the draft of slot j-1; greedy drafts are their argmax; the
// confidences are the head's projection of [hidden_j ; markov embedding].
TEST(DSpark, DraftRowsAreBaseLogitsPlusTheMarkovBiasOfThePreviousDraft) {
    const DeepSeekV4& m = *g_model->reference;
    const ModelConfig& c = g_model->cfg;
    const auto V = static_cast<size_t>(c.vocab_size);
    const int64_t D = c.hidden_size;
    SpecDecoder dec(m, greedy(), 5);
    const int32_t next = dec.start(random_tokens(40, 3));
    const Draft d = dec.dspark_draft(5);
    ASSERT_EQ(d.tokens.size(), 5u);
    ASSERT_EQ(d.confidence.size(), 5u);
    const DSparkBlockOutput b = m.dspark_block(dec.state(), next);
    const DenseDSpark& w = m.dspark_weights();
    std::vector<float> mk(static_cast<size_t>(w.rank)), bias(V);
    int32_t prev = next;
    int64_t markov_moved = 0;
    for (size_t j = 0; j < 5; ++j) {
        markov_step(w.markov_w1, w.markov_w2, w.rank, prev, mk.data(), bias.data());
        for (size_t v = 0; v < V; ++v) {
            ASSERT_EQ(d.mtp_logits[j * V + v], b.base_logits[j * V + v] + bias[v]) << "slot " << j << " token " << v;
        }
        const auto row = d.mtp_logits.begin() + static_cast<long>(j * V);
        EXPECT_EQ(d.tokens[j], std::max_element(row, row + static_cast<long>(V)) - row);
        markov_moved += std::max_element(row, row + static_cast<long>(V)) - row !=
                        std::max_element(b.base_logits.begin() + static_cast<long>(j * V),
                                         b.base_logits.begin() + static_cast<long>((j + 1) * V)) -
                            (b.base_logits.begin() + static_cast<long>(j * V));
        EXPECT_EQ(d.confidence[j],
                  confidence_logit(w.confidence, std::span(b.hidden.data() + static_cast<int64_t>(j) * D, D), mk));
        prev = d.tokens[j];
    }
    std::printf("[dspark] the Markov bias changed the argmax of %lld of 5 slots\n",
                static_cast<long long>(markov_moved));
}

// Slot 0 holds `next` and every other slot the noise token. With a causal mask slot 0 would not see
// the noise slots; the block attends bidirectionally, so another noise token changes slot 0 too.
TEST(DSpark, TheBlockAttendsBidirectionally) {
    ModelConfig other = g_model->cfg;
    other.dspark->noise_token_id = 5;
    const DeepSeekV4 a(g_model->cfg, g_model->weights, Numerics::Exact);
    const DeepSeekV4 b(other, g_model->weights, Numerics::Exact);
    SequenceState sa = a.new_sequence(), sb = b.new_sequence();
    const std::vector<int32_t> prompt = random_tokens(20, 4);
    a.dspark_push_context(sa, a.forward_with_streams(sa, prompt).taps);
    b.dspark_push_context(sb, b.forward_with_streams(sb, prompt).taps);
    const auto V = static_cast<size_t>(g_model->cfg.vocab_size);
    const DSparkBlockOutput oa = a.dspark_block(sa, 11), ob = b.dspark_block(sb, 11);
    EXPECT_FALSE(bitwise_equal(std::span(oa.base_logits.data(), V), std::span(ob.base_logits.data(), V)))
        << "slot 0 did not see the noise slots after it";
    // The same model twice gives the same block (no hidden state).
    const DSparkBlockOutput oa2 = a.dspark_block(sa, 11);
    EXPECT_TRUE(bitwise_equal(oa.base_logits, oa2.base_logits));
}

TEST(DSpark, GreedyWithDSparkDraftsEqualsPlainDecoding) {
    const int64_t n_out = 30;
    for (const DeepSeekV4* m : {g_model->exact.get(), g_model->reference.get()}) {
        for (uint32_t s : {1u, 2u}) {
            const std::vector<int32_t> prompt = random_tokens(13 + 17 * s, s);  // 30, 47: beyond the window of 32
            const std::vector<int32_t> want = plain_run(*m, prompt, n_out);
            for (int64_t k : {1, 3, 5}) {
                SpecDecoder d(*m, greedy(), 1);
                d.start(prompt);
                while (static_cast<int64_t>(d.output().size()) < n_out) {
                    const SpecStepResult r = d.verify(d.dspark_draft(k));
                    EXPECT_EQ(r.n_drafts, k);
                    d.check_integrity();
                }
                std::vector<int32_t> got = d.output();
                got.resize(static_cast<size_t>(n_out));
                EXPECT_EQ(got, want) << numerics_name(m->numerics()) << " prompt " << s << " k " << k;
            }
        }
    }
}

// Drafts that are mostly right (the true continuation with planted errors) are accepted in part,
// so verify steps keep 1..k+1 positions and the drafter's rings get exactly the kept ones; DSpark
// drafts run in between. Afterwards the sequence equals a plainly decoded twin bit for bit: main
// stored KV and state counts, the drafter's rings, the next block and the next logits.
TEST(DSpark, AfterDraftsAndPartialAcceptsTheSequenceEqualsOneThatNeverDrafted) {
    const ModelConfig& c = g_model->cfg;
    const int64_t V = c.vocab_size, n_out = 70;
    for (const DeepSeekV4* m : {g_model->exact.get(), g_model->reference.get()}) {
        const std::vector<int32_t> prompt = random_tokens(21, 9);
        const std::vector<int32_t> want = plain_run(*m, prompt, n_out + 8);
        SpecDecoder spec(*m, greedy(), 1);
        spec.start(prompt);
        std::mt19937 rng(77);
        int64_t accepted = 0, partial = 0, step = 0;
        while (static_cast<int64_t>(spec.output().size()) < n_out) {
            const int64_t k = 1 + static_cast<int64_t>(rng() % 5);
            if (step % 3 == 2) {
                spec.verify(spec.dspark_draft(k));  // the drafter's own (rejected) drafts
            } else {
                const int64_t wrong = static_cast<int64_t>(rng() % static_cast<uint32_t>(k + 1));
                Draft dr;
                for (int64_t j = 0; j < k; ++j) {
                    int32_t t = want[spec.output().size() + static_cast<size_t>(j)];
                    if (j == wrong) t = static_cast<int32_t>((t + 1) % V);
                    dr.tokens.push_back(t);
                    std::vector<double> q(static_cast<size_t>(V), 0.0);
                    q[static_cast<size_t>(t)] = 1.0;
                    dr.q.insert(dr.q.end(), q.begin(), q.end());
                }
                const SpecStepResult r = spec.verify(dr);
                EXPECT_EQ(r.n_accepted, std::min(wrong, k));
                accepted += r.n_accepted;
                partial += r.n_accepted > 0 && r.n_accepted < k;
            }
            spec.check_integrity();
            ++step;
        }
        EXPECT_GT(accepted, 0);
        EXPECT_GT(partial, 0);
        // The twin: plain decoding of the same output (one token per forward; each kept position's
        // context pushed as it is kept).
        SpecDecoder plain(*m, greedy(), 1);
        plain.start(prompt);
        while (plain.output().size() < spec.output().size()) plain.plain_step();
        ASSERT_EQ(plain.output(), spec.output());
        const SequenceState &x = spec.state(), &y = plain.state();
        ASSERT_EQ(x.n_tokens(), y.n_tokens());
        ASSERT_EQ(x.n_mtp_tokens(), x.n_tokens());
        ASSERT_EQ(y.n_mtp_tokens(), y.n_tokens());
        EXPECT_GT(x.n_tokens(), 2 * c.sliding_window) << "the rings wrapped";
        EXPECT_TRUE(bitwise_equal(x.dspark_ring(), y.dspark_ring())) << numerics_name(m->numerics());
        for (const LayerState& l : x.layers()) {
            std::vector<float> u(static_cast<size_t>(c.head_dim)), v(u.size());
            ASSERT_EQ(x.own_kv().n_entries(l.layer_id), y.own_kv().n_entries(l.layer_id));
            for (int64_t p = x.n_tokens() - c.sliding_window; p < x.n_tokens(); ++p) {
                x.own_kv().read_window(l.layer_id, p, u.data());
                y.own_kv().read_window(l.layer_id, p, v.data());
                ASSERT_TRUE(bitwise_equal(u, v)) << "layer " << l.layer_id << " window row " << p;
            }
        }
        const int32_t next = spec.output().back();
        const DSparkBlockOutput bx = m->dspark_block(x, next), by = m->dspark_block(y, next);
        EXPECT_TRUE(bitwise_equal(bx.base_logits, by.base_logits));
        EXPECT_TRUE(bitwise_equal(bx.hidden, by.hidden));
        SequenceState x2 = x, y2 = y;
        const std::vector<int32_t> more = random_tokens(40, 10);  // closes windows of every kind again
        EXPECT_TRUE(bitwise_equal(m->forward(x2, more), m->forward(y2, more)));
    }
}

// Sampled drafts: each slot's q (what the verifier's rule divides by) is the row's sampling
// distribution of that slot's logits (base + Markov bias of the previous draft) under the request's
// temperature / top-k / top-p, and the draft was drawn from it; sampled speculative decoding then
// keeps the sequence consistent step after step.
TEST(DSpark, SampledDraftsCarryTheDistributionTheyWereDrawnFrom) {
    const DeepSeekV4& m = *g_model->reference;
    const auto V = static_cast<size_t>(g_model->cfg.vocab_size);
    SamplingParams p;
    p.temperature = 0.8f;
    p.top_k = 40;
    p.top_p = 0.95f;
    SpecDecoder d(m, p, 99);
    d.start(random_tokens(30, 13));
    for (int step = 0; step < 6; ++step) {
        const Draft dr = d.dspark_draft(5);
        Sampler sampler;
        for (size_t j = 0; j < dr.tokens.size(); ++j) {
            const std::vector<double> q =
                dense_distribution(sampler.target_distribution(std::span(dr.mtp_logits.data() + j * V, V), p, {}, {}),
                                   static_cast<int64_t>(V));
            ASSERT_TRUE(std::equal(q.begin(), q.end(), dr.q.begin() + static_cast<long>(j * V))) << "slot " << j;
            EXPECT_GT(q[static_cast<size_t>(dr.tokens[j])], 0.0) << "slot " << j;
        }
        d.verify(dr);
        d.check_integrity();
    }
}

// DeepSpec's early stop: with a threshold the draft stops before the first slot whose sigmoid(c)
// is below it (keeping one), and what it keeps is the prefix of the full draft.
TEST(DSpark, TheConfidenceThresholdShortensTheDraft) {
    const DeepSeekV4& m = *g_model->exact;
    SpecDecoder d(m, greedy(), 3);
    d.start(random_tokens(35, 12));
    const Draft full = d.dspark_draft(5);
    std::vector<double> sig;
    for (float cl : full.confidence) sig.push_back(sigmoid(cl));
    std::vector<double> sorted = sig;
    std::sort(sorted.begin(), sorted.end());
    int64_t shortened = 0;
    for (double threshold : {sorted[1] + 1e-9, sorted[3] + 1e-9, 1.0 - 1e-12}) {
        const Draft cut = d.dspark_draft(5, threshold);
        const int64_t want = std::max<int64_t>(1, confident_prefix_length(full.confidence, threshold));
        ASSERT_EQ(static_cast<int64_t>(cut.tokens.size()), want) << threshold;
        EXPECT_TRUE(std::equal(cut.tokens.begin(), cut.tokens.end(), full.tokens.begin()));
        EXPECT_EQ(cut.q.size(), cut.tokens.size() * static_cast<size_t>(g_model->cfg.vocab_size));
        shortened += want < 5;
    }
    EXPECT_GT(shortened, 0);
    EXPECT_EQ(d.dspark_draft(5, 0.0).tokens, full.tokens);
}

EngineConfig engine_config(const std::string& method, int64_t k) {
    EngineConfig c;
    c.max_num_batched_tokens = 96;
    c.long_prefill_token_threshold = 40;
    c.max_num_seqs = 4;
    c.kv_block_size = 128;
    c.kv_cache_bytes = 256LL << 20;
    if (k > 0) {
        c.speculative = SpeculativeConfig{method, k};
        c.speculative.fixed_draft_length = true;  // every decode step drafts k (the rejection paths run)
    }
    return c;
}

struct EngineRun {
    std::vector<std::vector<int32_t>> tokens;
    EngineStats stats;
};

EngineRun run_engine(const DeepSeekV4& m, const EngineConfig& cfg, const std::vector<std::vector<int32_t>>& prompts,
                     int64_t max_tokens) {
    Engine engine(cfg, std::make_unique<CpuModelRunner>(m, 4096));
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const auto& p : prompts) {
        SamplingParams sp = greedy();
        sp.max_tokens = max_tokens;
        streams.push_back(engine.submit({p, sp}));
    }
    EngineRun r;
    for (auto& s : streams) {
        std::vector<int32_t> toks;
        while (auto ev = s->next()) {
            toks.insert(toks.end(), ev->token_ids.begin(), ev->token_ids.end());
            EXPECT_TRUE(ev->error.empty()) << ev->error;
        }
        r.tokens.push_back(std::move(toks));
    }
    engine.wait_idle();
    r.stats = engine.stats();
    return r;
}

TEST(DSparkEngine, GreedyOutputIdenticalWithAndWithoutDSpark) {
    std::vector<std::vector<int32_t>> ps;
    for (uint32_t i = 0; i < 3; ++i) ps.push_back(random_tokens(8 + 23 * i, 40 + i));
    // Exact numerics keep the KV in each sequence's own store, reference numerics in the engine's
    // paged pool; a partial block (k = 2) and the whole block (k = 5).
    for (const auto& [m, k] :
         {std::pair{g_model->exact.get(), int64_t{2}}, std::pair{g_model->reference.get(), int64_t{5}}}) {
        const EngineRun plain = run_engine(*m, engine_config("", 0), ps, 20);
        const EngineRun spec = run_engine(*m, engine_config("dspark", k), ps, 20);
        EXPECT_EQ(spec.tokens, plain.tokens) << numerics_name(m->numerics()) << " k " << k;
        EXPECT_GT(spec.stats.spec_num_drafts, 0);
        EXPECT_GE(spec.stats.spec_num_draft_tokens, spec.stats.spec_num_drafts);
        ASSERT_EQ(spec.stats.spec_num_accepted_tokens_per_pos.size(), static_cast<size_t>(k));
    }
}

// --speculative-config's confidence_threshold reaches the drafter: above every slot's confidence each
// draft keeps one token, and the output stays the plain greedy one at any threshold.
TEST(DSparkEngine, TheConfidenceThresholdShortensEveryDraftThroughTheEngine) {
    std::vector<std::vector<int32_t>> ps;
    for (uint32_t i = 0; i < 2; ++i) ps.push_back(random_tokens(9 + 17 * i, 60 + i));
    const DeepSeekV4& m = *g_model->exact;
    const EngineRun plain = run_engine(m, engine_config("", 0), ps, 16);
    for (const double threshold : {0.5, 1.0 - 1e-12}) {
        EngineConfig cfg = engine_config("dspark", 4);
        cfg.speculative.confidence_threshold = threshold;
        const EngineRun spec = run_engine(m, cfg, ps, 16);
        EXPECT_EQ(spec.tokens, plain.tokens) << "threshold " << threshold;
        EXPECT_GT(spec.stats.spec_num_drafts, 0);
        if (threshold > 0.99) {
            EXPECT_EQ(spec.stats.spec_num_draft_tokens, spec.stats.spec_num_drafts) << "one token a draft";
        }
    }
}

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(DSparkEngine, MoreDraftsThanTheBlockAreRefusedByName) {
    const DeepSeekV4& m = *g_model->exact;
    SpecDecoder d(m, greedy(), 1);
    d.start(random_tokens(10, 5));
    EXPECT_NE(error_of([&] { d.dspark_draft(6); }).find("dspark_block_size"), std::string::npos);
    EXPECT_NE(error_of([&] { d.dspark_draft(0); }).find("0 DSpark drafts"), std::string::npos);

    const std::string runner = error_of([&] { CpuModelRunner(m, 4096).enable_speculation({"dspark", 6}); });
    EXPECT_NE(runner.find("num_speculative_tokens = 6 exceeds the DSpark drafter's block of 5"), std::string::npos)
        << runner;
    const std::string engine =
        error_of([&] { Engine e(engine_config("dspark", 6), std::make_unique<CpuModelRunner>(m, 4096)); });
    EXPECT_NE(engine.find("dspark_block_size"), std::string::npos) << engine;
    // A 0731 checkpoint has no mtp.0 block: 'mtp' is refused, naming 'dspark'.
    const std::string mtp = error_of([&] { CpuModelRunner(m, 4096).enable_speculation({"mtp", 2}); });
    EXPECT_NE(mtp.find("use 'dspark'"), std::string::npos) << mtp;
    // Up to the block is fine.
    EXPECT_EQ(error_of([&] { CpuModelRunner(m, 4096).enable_speculation({"dspark", 5}); }), "");
    SpeculativeConfig bad{"dspark", 3};
    bad.confidence_threshold = 1.5;
    EXPECT_NE(error_of([&] { CpuModelRunner(m, 4096).enable_speculation(bad); }).find("confidence_threshold"),
              std::string::npos);
}

}  // namespace
}  // namespace onecard
