// DSpark's sampled output is distributed as the target's (issue 17), on the tiny 0731 checkpoint.
//
// A DSpark speculative step is draft_with_dspark (one block pass, the Markov bias slot by slot,
// draws from the row's distribution, the confidence stop) then verify_draft (one verify forward,
// standard speculative sampling, rollback of the rejected positions, the kept positions' taps pushed
// into the drafter's rings). A draw runs such steps from one state, with its own seed, until two
// tokens came out after the known `next`; the joint of those two is compared with the target's exact
// p(t1) · p(t2 | t1) by Pearson's chi-square (tests/support/chi_square.h). A draw whose first step
// emitted one token drafts again from the rolled-back state, so t2 also covers a draft made after a
// rejection.
//
// The real pipeline costs ~9 ms a draw on this model, so the chi-square runs on an oracle that makes
// the same draws from memoised pieces: the drafter's block output per state, the target's p per
// context, each computed once by the model, and the slot-by-slot loop, the draws and
// verify_drafts per draw. The test first shows that the pipeline and the oracle draft and emit the same
// tokens draw for draw (300 seeds), then runs 40000 oracle draws.
//
// Power: the target is cut to top-k 4 (at most 16 cells, df <= 15); as in spec_verify_test.cpp, a
// joint off by total variation δ has noncentrality >= 4Nδ², and at α = 0.001 a noncentrality of
// 39.6 gives power 0.9, so N = 40000 detects δ >= 0.016 with probability >= 0.9. The same harness
// must reject a drafter that reports a q other than the one it drew from (the Markov bias left out of
// the reported q: the bug that would break losslessness).
//
// Random weights make the drafter and the target disagree: the test picks, from the vocabulary in
// order, the first `next` after which the first draft's and the target's top-4 sets share mass
// (sum of min(p, q) >= 0.15), so drafts are both accepted and rejected, and checks that they are.
#include "core/error.h"
#include "engine/sampler.h"
#include "engine/spec_decoder.h"
#include "model/dspark_heads.h"

#include "support/chi_square.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <memory>

namespace onecard {
namespace {

test::TinyModel* g_model = nullptr;

class Env : public ::testing::Environment {
public:
    void SetUp() override {
        SynthOptions opt = test::tiny_options(731);
        opt.dspark = true;
        g_model = new test::TinyModel(opt, "onecard_dspark_chi2");
    }
    void TearDown() override {
        delete g_model;
        g_model = nullptr;
    }
};
const auto* const g_env = ::testing::AddGlobalTestEnvironment(new Env);

SamplingParams top4() {
    SamplingParams p;
    p.temperature = 1.0f;
    p.top_k = 4;
    return p;
}

std::vector<double> target_of(std::span<const float> logits) {
    Sampler s;
    return dense_distribution(s.target_distribution(logits, top4(), {}, {}), g_model->cfg.vocab_size);
}

// What the oracle's drafter reports: the distributions it drew from, or (the mutation) the block's
// base logits' distributions, without the Markov bias, mixed with a tenth of the true ones so that
// every drawn token keeps q > 0.
enum class ReportedQ { True, MarkovBiasLeftOut };

struct Draw {
    std::pair<int32_t, int32_t> first_two;
    int64_t drafts = 0, accepted = 0;
    std::vector<int32_t> drafted;  // every draft of every step, in order
    bool operator==(const Draw&) const = default;
};

const std::vector<int32_t> kContext = {11, 402, 7, 933, 64, 1000, 5};

class Harness {
public:
    // The sequence after kContext, with `next` known and not fed.
    explicit Harness(int32_t next) : m_(*g_model->exact), next_(next), base_(m_.new_sequence()) {
        forward_tracked(m_, base_, base_.own_kv(), base_trail_, kContext);
    }
    int32_t next() const { return next_; }

    // The target after kContext, next and `after`.
    const std::vector<double>& p(const std::vector<int32_t>& after) {
        auto it = p_.find(after);
        if (it != p_.end()) return it->second;
        const Live& s = live(after);
        return p_.emplace(after, target_of(s.last_logits)).first->second;
    }

    // The real pipeline: DSpark steps of k drafts from the state, as CpuModelRunner runs them.
    Draw pipeline(uint64_t seed, int64_t k, double threshold) const {
        SequenceState s = base_;
        SpecTrail trail = base_trail_;
        std::vector<int32_t> out;
        int32_t next = next_;
        Draw r;
        while (out.size() < 2) {
            const uint64_t counter = 1 + out.size();  // `next` is output token 0
            const Draft d = draft_with_dspark(m_, s, next, top4(), seed, counter, k, threshold);
            const SpecVerdict v = verify_draft(m_, s, s.own_kv(), trail, next, d, top4(), seed, counter);
            r.drafts += static_cast<int64_t>(d.tokens.size());
            r.accepted += v.n_accepted;
            r.drafted.insert(r.drafted.end(), d.tokens.begin(), d.tokens.end());
            out.insert(out.end(), d.tokens.begin(), d.tokens.begin() + v.n_accepted);
            out.push_back(v.token);
            next = v.token;
        }
        r.first_two = {out[0], out[1]};
        return r;
    }

    // The same draw from memoised pieces (see the file comment).
    Draw oracle(uint64_t seed, int64_t k, double threshold, ReportedQ reported) {
        const DenseDSpark& w = m_.dspark_weights();
        const int64_t D = g_model->cfg.hidden_size;
        const auto V = static_cast<size_t>(g_model->cfg.vocab_size);
        std::vector<int32_t> out;
        Draw r;
        std::vector<float> mk(static_cast<size_t>(w.rank)), logits(V);
        while (out.size() < 2) {
            const uint64_t counter = 1 + out.size();
            // The step starts where `out` ends: the state has fed next and out but its last token,
            // which is the step's `next`.
            const int32_t next = out.empty() ? next_ : out.back();
            const DSparkBlockOutput& blk = block(out);
            std::vector<int32_t> drafts;
            std::vector<float> conf;
            std::vector<double> q;
            int32_t prev = next;
            for (int64_t j = 0; j < k; ++j) {
                markov_step(w.markov_w1, w.markov_w2, w.rank, prev, mk.data(), logits.data());
                for (size_t v = 0; v < V; ++v) logits[v] += blk.base_logits[static_cast<size_t>(j) * V + v];
                conf.push_back(confidence_logit(w.confidence, std::span(blk.hidden.data() + j * D, D), mk));
                std::vector<double> qj = target_of(logits);
                prev = draw_token(qj, spec_uniform(seed, SpecStream::Draft, counter + static_cast<uint64_t>(j)));
                drafts.push_back(prev);
                if (reported == ReportedQ::MarkovBiasLeftOut) {
                    const std::vector<double> base = target_of(std::span(blk.base_logits.data() + j * V, V));
                    for (size_t t = 0; t < V; ++t) qj[t] = 0.1 * qj[t] + 0.9 * base[t];
                }
                q.insert(q.end(), qj.begin(), qj.end());
            }
            const auto keep = static_cast<size_t>(std::max<int64_t>(1, confident_prefix_length(conf, threshold)));
            drafts.resize(keep);
            q.resize(keep * V);
            std::vector<double> p_rows;
            std::vector<int32_t> ctx = out;
            for (size_t i = 0; i <= keep; ++i) {
                const std::vector<double>& pi = p(ctx);
                p_rows.insert(p_rows.end(), pi.begin(), pi.end());
                if (i < keep) ctx.push_back(drafts[i]);
            }
            const SpecVerdict v = verify_drafts(drafts, q, p_rows, static_cast<int64_t>(V), seed, counter);
            r.drafts += static_cast<int64_t>(keep);
            r.accepted += v.n_accepted;
            r.drafted.insert(r.drafted.end(), drafts.begin(), drafts.end());
            out.insert(out.end(), drafts.begin(), drafts.begin() + v.n_accepted);
            out.push_back(v.token);
        }
        r.first_two = {out[0], out[1]};
        return r;
    }

    // Sum over tokens of min(p, q1): the chance the first draft is accepted, from the base state.
    double first_draft_overlap() {
        const std::vector<double>& p0 = p({});
        const DenseDSpark& w = m_.dspark_weights();
        const auto V = static_cast<size_t>(g_model->cfg.vocab_size);
        std::vector<float> mk(static_cast<size_t>(w.rank)), logits(V);
        markov_step(w.markov_w1, w.markov_w2, w.rank, next_, mk.data(), logits.data());
        const DSparkBlockOutput& blk = block({});
        for (size_t v = 0; v < V; ++v) logits[v] += blk.base_logits[v];
        const std::vector<double> q1 = target_of(logits);
        double s = 0;
        for (size_t t = 0; t < V; ++t) s += std::min(p0[t], q1[t]);
        return s;
    }

private:
    struct Live {
        SequenceState state;
        SpecTrail trail;
        std::vector<float> last_logits;  // [vocab] after the last token fed
    };
    // The sequence after kContext, next and `after` (drafter rings pushed), memoised.
    const Live& live(const std::vector<int32_t>& after) {
        auto it = live_.find(after);
        if (it != live_.end()) return *it->second;
        auto l = std::make_unique<Live>(Live{base_, base_trail_, {}});
        std::vector<int32_t> feed{next_};
        feed.insert(feed.end(), after.begin(), after.end());
        const std::vector<float> logits = forward_tracked(m_, l->state, l->state.own_kv(), l->trail, feed);
        l->last_logits.assign(logits.end() - g_model->cfg.vocab_size, logits.end());
        return *live_.emplace(after, std::move(l)).first->second;
    }
    // The drafter's block of the step that starts once `out` was emitted: from the base state with
    // next_ (out empty), else from the state that fed kContext, next_ and out but its last token,
    // which is the step's next.
    const DSparkBlockOutput& block(const std::vector<int32_t>& out) {
        auto it = blocks_.find(out);
        if (it != blocks_.end()) return it->second;
        const SequenceState& s = out.empty() ? base_ : live(std::vector<int32_t>(out.begin(), out.end() - 1)).state;
        return blocks_.emplace(out, m_.dspark_block(s, out.empty() ? next_ : out.back())).first->second;
    }

    const DeepSeekV4& m_;
    int32_t next_;
    SequenceState base_;  // kContext fed
    SpecTrail base_trail_;
    std::map<std::vector<int32_t>, std::unique_ptr<Live>> live_;
    std::map<std::vector<int32_t>, std::vector<double>> p_;
    std::map<std::vector<int32_t>, DSparkBlockOutput> blocks_;
};

// The first `next` (in vocabulary order) whose first draft overlaps the target enough.
std::unique_ptr<Harness> harness_with_overlap() {
    for (int32_t t = 0; t < g_model->cfg.vocab_size - 1; ++t) {
        auto h = std::make_unique<Harness>(t);
        if (h->first_draft_overlap() >= 0.15) return h;
    }
    return nullptr;
}

struct Outcome {
    test::ChiSquare chi;
    double acceptance = 0;  // accepted drafts / drafts
};

Outcome run(Harness& h, int64_t k, double threshold, ReportedQ reported, int64_t n_draws) {
    std::map<std::pair<int32_t, int32_t>, int64_t> counts;
    int64_t drafts = 0, accepted = 0;
    for (int64_t i = 0; i < n_draws; ++i) {
        const Draw d = h.oracle(0xd5a4c000ull + static_cast<uint64_t>(i), k, threshold, reported);
        ++counts[d.first_two];
        drafts += d.drafts;
        accepted += d.accepted;
    }
    Outcome r;
    r.chi = test::pair_chi_square(std::move(counts), n_draws, h.p({}),
                                  [&h](int32_t t1) -> const std::vector<double>& { return h.p({t1}); });
    r.acceptance = drafts ? static_cast<double>(accepted) / static_cast<double>(drafts) : 0.0;
    return r;
}

constexpr int64_t kDraws = 40000;

TEST(DSparkChiSquare, EmittedTokensAreDistributedAsTheTarget) {
    const std::unique_ptr<Harness> h = harness_with_overlap();
    ASSERT_NE(h, nullptr) << "no next token whose first DSpark draft shares top-4 mass with the target";
    // The oracle is the pipeline: the same drafts, tokens and counts draw for draw.
    for (uint64_t i = 0; i < 300; ++i) {
        const uint64_t seed = 0xd5a4c000ull + i;
        ASSERT_EQ(h->pipeline(seed, 2, 0.0), h->oracle(seed, 2, 0.0, ReportedQ::True)) << "seed " << seed;
    }
    const Outcome good = run(*h, 2, 0.0, ReportedQ::True, kDraws);
    std::printf("DSpark k=2 after next %d, %lld draws: chi2 %.2f (df %d, p %.3f), acceptance %.3f\n", h->next(),
                static_cast<long long>(kDraws), good.chi.stat, good.chi.df, good.chi.p_value, good.acceptance);
    EXPECT_EQ(good.chi.df, 15) << "top-k 4 twice: 16 cells";
    EXPECT_GE(good.chi.min_expected, 5.0);
    EXPECT_GT(good.chi.p_value, 0.001) << "chi2 " << good.chi.stat;
    // Both branches of the rule ran: some drafts accepted, some rejected.
    EXPECT_GT(good.acceptance, 0.02);
    EXPECT_LT(good.acceptance, 0.98);

    // Power: a drafter that reports a q other than the one it drew from is caught.
    const Outcome bad = run(*h, 2, 0.0, ReportedQ::MarkovBiasLeftOut, kDraws);
    std::printf("the Markov bias left out of the reported q: chi2 %.1f (p %.3g)\n", bad.chi.stat, bad.chi.p_value);
    EXPECT_LT(bad.chi.p_value, 0.001) << "chi2 " << bad.chi.stat;
}

TEST(DSparkChiSquare, TheConfidenceStopKeepsTheDistribution) {
    // The early stop shortens drafts by the drafter's own confidences (a rule of the drafted prefix),
    // which must not bias what is emitted.
    const std::unique_ptr<Harness> h = harness_with_overlap();
    ASSERT_NE(h, nullptr);
    for (uint64_t i = 0; i < 100; ++i) {
        const uint64_t seed = 0xd5a4c000ull + i;
        ASSERT_EQ(h->pipeline(seed, 3, 0.5), h->oracle(seed, 3, 0.5, ReportedQ::True)) << "seed " << seed;
    }
    int64_t drafts = 0, steps = 0;
    for (uint64_t i = 0; i < 200; ++i) {
        const Draw d = h->oracle(0xc0ffee00ull + i, 3, 0.5, ReportedQ::True);
        drafts += d.drafts;
        steps += 1 + (d.accepted + 1 < 2);  // one step, or two when the first emitted a single token
    }
    const Outcome r = run(*h, 3, 0.5, ReportedQ::True, kDraws);
    std::printf(
        "DSpark k=3, confidence threshold 0.5: %.2f drafts a step; chi2 %.2f (df %d, p %.3f), acceptance %.3f\n",
        static_cast<double>(drafts) / static_cast<double>(steps), r.chi.stat, r.chi.df, r.chi.p_value, r.acceptance);
    EXPECT_EQ(r.chi.df, 15);
    EXPECT_GT(r.chi.p_value, 0.001) << "chi2 " << r.chi.stat;
}

}  // namespace
}  // namespace onecard
