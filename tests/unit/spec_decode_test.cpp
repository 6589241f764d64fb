// Speculative decoding on the CPU model (issue 17, steps 2-3): MTP drafts (mtp.0, its own window
// rolled back like the main model's state) verified in one multi-token step give, under greedy
// sampling, exactly the tokens of plain one-token decoding; so do drafts that are mostly right
// (the true continuation with planted errors, including a rejection of the very first draft), which
// exercise acceptance, bonus tokens and partial rollbacks; and every MTP row the drafter keeps is
// bit for bit the MTP row of a sequence that fed the block only the main model's real streams.
#include "core/error.h"
#include "engine/spec_decoder.h"
#include "model/spec_step.h"

#include "support/test_support.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

namespace onecard {
namespace {

test::TinyModel* g_tiny = nullptr;  // tiny preset: window 32, so the MTP ring wraps within a test

class TinyEnv : public ::testing::Environment {
public:
    void SetUp() override { g_tiny = new test::TinyModel(2024, "onecard_spec_decode"); }
    void TearDown() override {
        delete g_tiny;
        g_tiny = nullptr;
    }
};
const auto* const g_env = ::testing::AddGlobalTestEnvironment(new TinyEnv);

std::vector<int32_t> random_tokens(int64_t n, uint32_t seed) {
    return test::random_tokens(n, seed, g_tiny->cfg.vocab_size);
}

SamplingParams greedy() {
    SamplingParams p;
    p.temperature = 0.0f;
    return p;
}

// Plain decoding: n_out tokens, one forward per token.
std::vector<int32_t> plain_run(const DeepSeekV4& m, const std::vector<int32_t>& prompt, int64_t n_out) {
    SpecDecoder d(m, greedy(), 1);
    d.start(prompt);
    while (static_cast<int64_t>(d.output().size()) < n_out) d.plain_step();
    return d.output();
}

// A greedy draft that is the true continuation `truth` (from output index `at`) with a wrong token
// at draft index `wrong` (>= k: none), one-hot q.
Draft planted_draft(const std::vector<int32_t>& truth, size_t at, int64_t k, int64_t wrong, int64_t vocab) {
    Draft d;
    for (int64_t j = 0; j < k; ++j) {
        const size_t i = at + static_cast<size_t>(j);
        int32_t t = i < truth.size() ? truth[i] : 0;
        if (j == wrong) t = static_cast<int32_t>((t + 1) % vocab);
        d.tokens.push_back(t);
        std::vector<double> q(static_cast<size_t>(vocab), 0.0);
        q[static_cast<size_t>(t)] = 1.0;
        d.q.insert(d.q.end(), q.begin(), q.end());
    }
    return d;
}

TEST(SpecDecode, GreedyWithMtpDraftsEqualsPlainDecoding) {
    const int64_t n_out = 28;
    for (const DeepSeekV4* m : {g_tiny->exact.get(), g_tiny->reference.get()}) {
        for (uint32_t s : {1u, 2u, 3u}) {
            const std::vector<int32_t> prompt = random_tokens(11 + 7 * s, s);
            const std::vector<int32_t> want = plain_run(*m, prompt, n_out);
            for (int64_t k : {1, 4}) {
                SpecDecoder d(*m, greedy(), 1);
                d.start(prompt);
                int64_t steps = 0;
                while (static_cast<int64_t>(d.output().size()) < n_out) {
                    const SpecStepResult r = d.verify(d.mtp_draft(k));
                    EXPECT_EQ(r.n_drafts, k);
                    d.check_integrity();
                    ++steps;
                }
                std::vector<int32_t> got = d.output();
                got.resize(static_cast<size_t>(n_out));
                EXPECT_EQ(got, want) << numerics_name(m->numerics()) << " prompt " << s << " k " << k;
                EXPECT_LE(steps, n_out);
            }
        }
    }
}

TEST(SpecDecode, GreedyWithPlantedDraftsEqualsPlainAndAccepts) {
    const DeepSeekV4& m = *g_tiny->reference;
    const int64_t V = g_tiny->cfg.vocab_size, n_out = 60;
    for (uint32_t s : {4u, 5u}) {
        const std::vector<int32_t> prompt = random_tokens(25, s);
        const std::vector<int32_t> want = plain_run(m, prompt, n_out + 8);
        for (int64_t k : {2, 4, 7}) {
            SpecDecoder d(m, greedy(), 1);
            d.start(prompt);
            std::mt19937 rng(s * 31 + static_cast<uint32_t>(k));
            int64_t accepted = 0, full = 0, first_rejected = 0, step = 0;
            while (static_cast<int64_t>(d.output().size()) < n_out) {
                // The first step rejects its first draft; later ones plant an error anywhere, or none.
                const int64_t wrong = step == 0 ? 0 : static_cast<int64_t>(rng() % static_cast<uint32_t>(k + 1));
                // The drafter sees the output so far; `want` says what the target will pick.
                const Draft dr = planted_draft(want, d.output().size(), k, wrong, V);
                const SpecStepResult r = d.verify(dr);
                EXPECT_EQ(r.n_accepted, std::min(wrong, k)) << "step " << step;
                accepted += r.n_accepted;
                full += r.n_accepted == k;
                first_rejected += r.n_accepted == 0;
                d.check_integrity();
                // The MTP drafter picks up behind planted drafts too (its pending streams).
                if (step % 5 == 4) (void)d.mtp_draft(2);
                ++step;
            }
            std::vector<int32_t> got = d.output(), exp = want;
            got.resize(static_cast<size_t>(n_out));
            exp.resize(static_cast<size_t>(n_out));
            EXPECT_EQ(got, exp) << "prompt " << s << " k " << k;
            EXPECT_GT(accepted, 0);
            EXPECT_GT(full, 0);
            EXPECT_GT(first_rejected, 0);
            EXPECT_GT(d.last_step_bytes(), 0);
        }
    }
}

TEST(SpecDecode, MtpRowsEqualTheBlockFedRealStreams) {
    // After drafting and rolling back, the MTP block's first row of every draft (the catch-up's last
    // row, which used the main model's real streams) equals the row of a sequence whose MTP block
    // was only ever fed real streams: its window never kept a drafted position.
    const DeepSeekV4& m = *g_tiny->exact;
    const ModelConfig& cfg = g_tiny->cfg;
    const auto V = static_cast<size_t>(cfg.vocab_size);
    const std::vector<int32_t> prompt = random_tokens(9, 7);
    SpecDecoder d(m, greedy(), 1);
    d.start(prompt);
    std::vector<std::pair<int64_t, std::vector<float>>> rows;  // (MTP position, row)
    while (d.output().size() < 50) {
        const int64_t n = d.state().n_tokens();
        const Draft dr = d.mtp_draft(3);
        EXPECT_EQ(d.state().n_mtp_tokens(), n);
        rows.emplace_back(n - 1, std::vector<float>(dr.mtp_logits.begin(), dr.mtp_logits.begin() + V));
        d.verify(dr);
    }
    // The reference: every position through the main model, then the MTP block over all of them.
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), d.output().begin(), d.output().end());
    SequenceState ref = m.new_sequence();
    const auto n = static_cast<int64_t>(all.size()) - 1;
    const ForwardOutput main = m.forward_with_streams(ref, std::span(all.data(), static_cast<size_t>(n)));
    const std::vector<float> mtp = m.forward_mtp(ref, main.streams, std::span(all.data() + 1, static_cast<size_t>(n)));
    ASSERT_GT(rows.size(), 10u);
    EXPECT_GT(rows.back().first, cfg.sliding_window);  // the MTP ring wrapped
    for (const auto& [pos, row] : rows)
        ASSERT_EQ(std::memcmp(row.data(), mtp.data() + pos * V, V * sizeof(float)), 0) << "MTP position " << pos;
}

TEST(SpecDecode, UnfinishedStepRollsBackEverything) {
    const DeepSeekV4& m = *g_tiny->exact;
    SequenceState s = m.new_sequence(), t = m.new_sequence();
    const std::vector<int32_t> toks = random_tokens(40, 9);
    m.forward(s, std::span(toks.data(), 30));
    m.forward(t, std::span(toks.data(), 30));
    {
        SpeculativeStep step(s, s.own_kv(), g_tiny->cfg);
        m.forward(s, step.kv(), std::span(toks.data() + 30, 6));
        EXPECT_THROW(step.finish(29, 0), Error);  // below the start
    }
    EXPECT_EQ(s.n_tokens(), 30);
    s.check_integrity();
    const auto a = m.forward(s, std::span(toks.data() + 30, 10));
    const auto b = m.forward(t, std::span(toks.data() + 30, 10));
    EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace onecard
