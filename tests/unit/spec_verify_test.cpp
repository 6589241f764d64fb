// Lossless speculative sampling (issue 17, step 3): the tokens a speculative step emits are
// distributed exactly as the target model's. On the tiny model, p (target) and q (draft) are real
// distributions of its main model and MTP block at every context the draws reach; each draw runs
// the speculative step (k = 2 drafts from q, verify_drafts against p, a second step when the first
// emitted only one token) and keeps the first two emitted tokens. Their joint frequency over many
// seeded draws is compared with the target's exact joint p(t1) · p(t2 | t1) by Pearson's chi-square.
//
// Power: with N draws the statistic's noncentrality for a joint off by total variation δ is at least
// N · Σ Δ²/p >= N · (Σ|Δ|)² = 4Nδ² (Cauchy-Schwarz, Σ p = 1). The target is cut to top-k 4, so the
// joint has at most 16 cells (df <= 15); at α = 0.001 (critical value 37.70 for df 15) a
// noncentrality of 39.6 gives power 0.9 (noncentral chi-square, df 15, computed as a Poisson
// mixture of central ones), so N = 40000 detects δ >= sqrt(39.6 / 160000) = 0.016 with
// probability >= 0.9. The test also runs a broken verifier
// (drafts always accepted) and a subtly wrong one (rejections resampled from p, not the residual)
// through the same harness and requires both to be rejected.
#include "engine/spec_verify.h"
#include "core/error.h"
#include "engine/sampler.h"

#include "support/chi_square.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <random>

namespace onecard {
namespace {

test::TinyModel* g_tiny = nullptr;

class TinyEnv : public ::testing::Environment {
public:
    void SetUp() override { g_tiny = new test::TinyModel(77, "onecard_spec_verify"); }
    void TearDown() override {
        delete g_tiny;
        g_tiny = nullptr;
    }
};
const auto* const g_env = ::testing::AddGlobalTestEnvironment(new TinyEnv);

// p and q of the tiny model at a context (the tokens fed so far), memoised: p from the main
// model's last row under the request's parameters; q from the MTP block (fed the main model's
// real streams) under the same parameters, mixed half and half with the target at temperature 2
// so that drafts are accepted often and rejected often.
class Oracle {
public:
    // The base context is computed once: the main model over all of it, the MTP block over its
    // positions 0..L-3; each context base + extra then costs a copy of that state and a few tokens.
    explicit Oracle(std::vector<int32_t> base) : base_(std::move(base)), state_(g_tiny->exact->new_sequence()) {
        params_.temperature = 1.0f;
        params_.top_k = 4;
        flat_ = params_;
        flat_.temperature = 2.0f;
        flat_.top_k = 4;
        const DeepSeekV4& m = *g_tiny->exact;
        const auto L = static_cast<int64_t>(base_.size()), per = g_tiny->cfg.hc_mult * g_tiny->cfg.hidden_size;
        const ForwardOutput out = m.forward_with_streams(state_, base_);
        m.forward_mtp(state_, std::span(out.streams.data(), static_cast<size_t>((L - 2) * per)),
                      std::span(base_.data() + 1, static_cast<size_t>(L - 2)));
        tail_streams_.assign(out.streams.end() - 2 * per, out.streams.end());  // positions L-2, L-1
        last_logits_.assign(out.logits.end() - g_tiny->cfg.vocab_size, out.logits.end());
    }
    const std::vector<double>& p(const std::vector<int32_t>& extra) { return get(extra).first; }
    const std::vector<double>& q(const std::vector<int32_t>& extra) { return get(extra).second; }

private:
    const std::pair<std::vector<double>, std::vector<double>>& get(const std::vector<int32_t>& extra) {
        auto it = memo_.find(extra);
        if (it != memo_.end()) return it->second;
        const DeepSeekV4& m = *g_tiny->exact;
        const int64_t V = g_tiny->cfg.vocab_size, per = g_tiny->cfg.hc_mult * g_tiny->cfg.hidden_size;
        const auto e = static_cast<int64_t>(extra.size());
        SequenceState s = state_;
        std::vector<float> last = last_logits_, streams = tail_streams_;  // MTP input streams from L-2 on
        if (e > 0) {
            const ForwardOutput out = m.forward_with_streams(s, extra);
            last.assign(out.logits.end() - V, out.logits.end());
            streams.insert(streams.end(), out.streams.begin(), out.streams.end() - per);
        } else {
            streams.resize(static_cast<size_t>(per));  // only position L-2
        }
        std::vector<double> p = dense_distribution(sampler_.target_distribution(last, params_, {}, {}), V);
        // The MTP block at positions L-2 .. n-2 (n = L + e: streams of p, token p + 1); its last row
        // predicts the token at n, as p does.
        std::vector<int32_t> next{base_.back()};
        next.insert(next.end(), extra.begin(), extra.end());
        const std::vector<float> ml = m.forward_mtp(s, streams, next);
        const std::span<const float> mlast(ml.data() + e * V, static_cast<size_t>(V));
        const std::vector<double> qm = dense_distribution(sampler_.target_distribution(mlast, params_, {}, {}), V);
        const std::vector<double> qf = dense_distribution(sampler_.target_distribution(last, flat_, {}, {}), V);
        std::vector<double> q(static_cast<size_t>(V));
        for (size_t t = 0; t < q.size(); ++t) q[t] = 0.5 * qm[t] + 0.5 * qf[t];
        return memo_.emplace(extra, std::make_pair(std::move(p), std::move(q))).first->second;
    }

    std::vector<int32_t> base_;
    SequenceState state_;              // after the base: main at L tokens, MTP at L - 2 positions
    std::vector<float> tail_streams_;  // [2, hc, D] main streams of positions L-2, L-1
    std::vector<float> last_logits_;   // [vocab] the base's last row
    SamplingParams params_, flat_;
    Sampler sampler_;
    std::map<std::vector<int32_t>, std::pair<std::vector<double>, std::vector<double>>> memo_;
};

using Verifier = SpecVerdict (*)(std::span<const int32_t>, std::span<const double>, std::span<const double>, int64_t,
                                 uint64_t, uint64_t);

// A wrong rule for the power check: every draft is accepted.
SpecVerdict accept_all(std::span<const int32_t> drafts, std::span<const double>, std::span<const double> p,
                       int64_t vocab, uint64_t seed, uint64_t counter) {
    const auto k = static_cast<int64_t>(drafts.size());
    const std::span<const double> pk = p.subspan(static_cast<size_t>(k * vocab), static_cast<size_t>(vocab));
    return {k, draw_token(pk, spec_uniform(seed, SpecStream::Resample, counter + static_cast<uint64_t>(k)))};
}

// Another wrong rule: a rejection draws from p itself rather than from max(0, p - q).
SpecVerdict resample_from_p(std::span<const int32_t> drafts, std::span<const double> q, std::span<const double> p,
                            int64_t vocab, uint64_t seed, uint64_t counter) {
    const auto V = static_cast<size_t>(vocab);
    for (size_t i = 0; i < drafts.size(); ++i) {
        const auto d = static_cast<size_t>(drafts[i]);
        if (spec_uniform(seed, SpecStream::Accept, counter + i) * q[i * V + d] < p[i * V + d]) continue;
        return {static_cast<int64_t>(i),
                draw_token(p.subspan(i * V, V), spec_uniform(seed, SpecStream::Resample, counter + i))};
    }
    const size_t k = drafts.size();
    return {static_cast<int64_t>(k),
            draw_token(p.subspan(k * V, V), spec_uniform(seed, SpecStream::Resample, counter + k))};
}

// The first two tokens of one speculative decode with k drafts per step, seed `seed`.
std::pair<int32_t, int32_t> first_two(Oracle& o, Verifier verify, int64_t k, uint64_t seed) {
    const int64_t V = g_tiny->cfg.vocab_size;
    std::vector<int32_t> out;
    while (out.size() < 2) {
        std::vector<int32_t> drafts, ctx = out;
        std::vector<double> q, p;
        for (int64_t j = 0; j < k; ++j) {
            const std::vector<double>& qj = o.q(ctx);
            drafts.push_back(draw_token(qj, spec_uniform(seed, SpecStream::Draft, out.size() + j)));
            q.insert(q.end(), qj.begin(), qj.end());
            ctx.push_back(drafts.back());
        }
        ctx = out;
        for (int64_t j = 0; j <= k; ++j) {
            const std::vector<double>& pj = o.p(ctx);
            p.insert(p.end(), pj.begin(), pj.end());
            if (j < k) ctx.push_back(drafts[static_cast<size_t>(j)]);
        }
        const SpecVerdict v = verify(drafts, q, p, V, seed, out.size());
        out.insert(out.end(), drafts.begin(), drafts.begin() + v.n_accepted);
        out.push_back(v.token);
    }
    return {out[0], out[1]};
}

test::ChiSquare run(Oracle& o, Verifier verify, int64_t k, int64_t n_draws) {
    std::map<std::pair<int32_t, int32_t>, int64_t> counts;
    for (int64_t i = 0; i < n_draws; ++i) ++counts[first_two(o, verify, k, 0x5eed0000ull + static_cast<uint64_t>(i))];
    return test::pair_chi_square(std::move(counts), n_draws, o.p({}),
                                 [&o](int32_t t1) -> const std::vector<double>& { return o.p({t1}); });
}

TEST(SpecVerify, ChiSquareOfTheTestItself) {
    // Known values: Q(df=15) at the 0.001 critical value 37.697, and at the median 14.339.
    EXPECT_NEAR(test::chi2_sf(37.697, 15), 0.001, 1e-5);
    EXPECT_NEAR(test::chi2_sf(14.339, 15), 0.5, 1e-3);
    EXPECT_NEAR(test::chi2_sf(2.706, 1), 0.1, 1e-4);
}

TEST(SpecVerify, EmittedTokensAreDistributedAsTheTarget) {
    const std::vector<int32_t> prompt = {11, 402, 7, 933, 64, 1000, 5, 18};
    Oracle o(prompt);
    constexpr int64_t kDraws = 40000;
    const test::ChiSquare good = run(o, verify_drafts, 2, kDraws);
    EXPECT_EQ(good.df, 15) << "top-k 4 twice: 16 cells";
    EXPECT_GE(good.min_expected, 5.0);
    EXPECT_GT(good.p_value, 0.001) << "chi2 " << good.stat << " df " << good.df;
    // The harness has the power to see wrong rules: a classic bug (a rejection resampled from p
    // instead of the residual: too few of the draft's tokens) and accepting every draft.
    const test::ChiSquare bad = run(o, resample_from_p, 2, kDraws);
    EXPECT_LT(bad.p_value, 0.001) << "chi2 " << bad.stat;
    EXPECT_LT(run(o, accept_all, 2, kDraws).p_value, 0.001);
    std::printf("speculative sampling, %lld draws: chi2 %.2f (df %d, p %.3f); resampling from p instead: chi2 %.1f\n",
                static_cast<long long>(kDraws), good.stat, good.df, good.p_value, bad.stat);
}

TEST(SpecVerify, GreedyIsArgmaxMatching) {
    // One-hot p and q: a draft is kept exactly when it is the target's token, and a rejection emits it.
    const int64_t V = 5;
    auto one_hot = [&](int t) {
        std::vector<double> v(V, 0.0);
        v[static_cast<size_t>(t)] = 1.0;
        return v;
    };
    std::vector<double> p, q;
    for (int t : {2, 4, 1, 3}) {
        const auto v = one_hot(t);
        p.insert(p.end(), v.begin(), v.end());
    }
    for (int t : {2, 4, 0}) {
        const auto v = one_hot(t);
        q.insert(q.end(), v.begin(), v.end());
    }
    for (uint64_t seed = 0; seed < 50; ++seed) {
        const SpecVerdict r = verify_drafts(std::vector<int32_t>{2, 4, 0}, q, p, V, seed, 3);
        EXPECT_EQ(r.n_accepted, 2);
        EXPECT_EQ(r.token, 1);
        const SpecVerdict all =
            verify_drafts(std::vector<int32_t>{2, 4, 1}, std::vector<double>(p.begin(), p.end() - V), p, V, seed, 3);
        EXPECT_EQ(all.n_accepted, 3);
        EXPECT_EQ(all.token, 3);
    }
    // A draft the drafter could not have drawn is refused.
    EXPECT_THROW(verify_drafts(std::vector<int32_t>{1, 4, 0}, q, p, V, 0, 0), Error);
}

TEST(SpecVerify, DrawTokenFollowsTheMass) {
    const std::vector<double> w = {0.0, 0.25, 0.0, 0.75};
    EXPECT_EQ(draw_token(w, 0.0), 1);
    EXPECT_EQ(draw_token(w, 0.2499), 1);
    EXPECT_EQ(draw_token(w, 0.25), 3);
    EXPECT_EQ(draw_token(w, 0.999999), 3);
    EXPECT_THROW(draw_token(std::vector<double>{0.0, 0.0}, 0.5), Error);
    // Independent streams: the same (seed, counter) gives different draws on each.
    EXPECT_NE(spec_uniform(1, SpecStream::Draft, 0), spec_uniform(1, SpecStream::Accept, 0));
    EXPECT_NE(spec_uniform(1, SpecStream::Accept, 0), sampler_uniform(1, 0));
}

}  // namespace
}  // namespace onecard
