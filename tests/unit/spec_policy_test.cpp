// The draft-length policy of speculative decoding (engine/spec_policy.h, issue 17): it drafts the
// most where verifying is nearly free (a memory-bound step) and acceptance is high, fewer as the
// batch nears the step's saturation, none where every token costs its own time (compute-bound) or
// the drafts are rejected, and it probes now and then while off. Step costs here are recorded, not
// timed, so every figure is exact.
#include "engine/spec_policy.h"
#include "core/error.h"

#include <gtest/gtest.h>

#include <functional>

namespace onecard {
namespace {

SpecPolicy make(int64_t max_drafts, DraftLength length = DraftLength::Adaptive, int64_t disable_by = 0) {
    SpecPolicyConfig c;
    c.max_drafts = max_drafts;
    c.length = length;
    c.disable_by_batch_size = disable_by;
    return SpecPolicy(c);
}

// Steps of every token count a choice may read, each costing cost(n) seconds.
void record_costs(SpecPolicy& p, const std::function<double(int64_t)>& cost, int64_t max_tokens) {
    for (int64_t n = 1; n <= max_tokens; n *= 2) p.record_step(n, cost(n));
}

// Rows offered k drafts of which the first `accepted` were kept, n times.
void record_rows(SpecPolicy& p, int64_t n, int64_t k, int64_t accepted) {
    for (int64_t i = 0; i < n; ++i) p.record_verify(k, accepted);
}

TEST(SpecPolicy, DraftsTheMostWhereVerifyingIsFreeAndDraftsAreKept) {
    SpecPolicy p = make(5);
    record_costs(
        p, [](int64_t) { return 0.010; }, 4096);  // memory-bound: any step costs 10 ms
    record_rows(p, 2000, 5, 5);                   // every draft accepted
    EXPECT_NEAR(p.expected_tokens(5), 6.0, 0.05);
    EXPECT_EQ(p.drafts_for_step(4, 4), 5);
    p.check_integrity();
}

TEST(SpecPolicy, NoDraftsWhereEveryTokenCostsItsOwnTime) {
    SpecPolicy p = make(4);
    record_costs(
        p, [](int64_t n) { return 0.001 * static_cast<double>(n); }, 4096);  // compute-bound
    record_rows(p, 2000, 4, 3);  // even with 3 of 4 accepted: 4 tokens for the price of 5
    for (int64_t b : {1, 8, 64}) EXPECT_EQ(p.drafts_for_step(b, b), 0) << "batch " << b;
}

TEST(SpecPolicy, FewerDraftsAsTheBatchNearsSaturation) {
    SpecPolicy p = make(7);
    // Flat up to 64 tokens a step (weights dominate), then linear (compute dominates).
    record_costs(
        p, [](int64_t n) { return 0.010 * std::max(1.0, static_cast<double>(n) / 64.0); }, 4096);
    record_rows(p, 2000, 7, 7);
    EXPECT_EQ(p.drafts_for_step(8, 8), 7) << "8 rows x 8 tokens still fit the flat part";
    const int64_t k16 = p.drafts_for_step(16, 16);
    EXPECT_GE(k16, 3);
    EXPECT_LE(k16, 7);
    EXPECT_EQ(p.drafts_for_step(64, 64), 0) << "a saturated batch pays for every draft";
    EXPECT_DOUBLE_EQ(p.gain(64, 0), 1.0);
    EXPECT_LE(p.gain(64, 1), 1.0 + 1e-9);
}

TEST(SpecPolicy, RejectedDraftsTurnItOffAndProbesTurnItBackOn) {
    SpecPolicy p = make(3);
    record_costs(
        p, [](int64_t) { return 0.010; }, 64);
    EXPECT_EQ(p.drafts_for_step(1, 1), 3) << "the prior drafts before anything is measured";
    record_rows(p, 400, 3, 0);
    EXPECT_LT(p.expected_tokens(3), 1.05);
    int64_t probes = 0;
    for (int i = 0; i < 2 * SpecPolicy::kProbeEvery; ++i) {
        const int64_t k = p.drafts_for_step(1, 1);
        EXPECT_LE(k, 1);
        probes += k;
    }
    EXPECT_EQ(probes, 2) << "one single-draft probe every " << SpecPolicy::kProbeEvery << " steps";
    // The traffic changes: drafts are kept again (what the probes measure), so drafting resumes.
    record_rows(p, 600, 1, 1);
    record_rows(p, 600, 3, 3);
    EXPECT_EQ(p.drafts_for_step(1, 1), 3);
}

TEST(SpecPolicy, AcceptanceFollowsTheMeasuredShares) {
    SpecPolicy p = make(2);
    record_rows(p, 3000, 2, 1);  // always the first draft, never the second
    const std::vector<double> a = p.acceptance();
    ASSERT_EQ(a.size(), 2u);
    EXPECT_NEAR(a[0], 1.0, 0.01);
    EXPECT_NEAR(a[1], 0.0, 0.01);
    EXPECT_NEAR(p.expected_tokens(2), 2.0, 0.02);
    EXPECT_EQ(p.step_seconds(100), 0.0) << "no step recorded yet";
    p.record_step(10, 0.5);
    p.record_step(40, 2.0);  // buckets 16 and 64: points (10, 0.5) and (40, 2.0)
    EXPECT_DOUBLE_EQ(p.step_seconds(5), 0.5);
    EXPECT_NEAR(p.step_seconds(25), 1.25, 1e-9);
    EXPECT_DOUBLE_EQ(p.step_seconds(1000), 2.0);
    EXPECT_THROW(p.record_verify(2, 3), Error);
}

TEST(SpecPolicy, FixedLengthAndDisableByBatchSize) {
    SpecPolicy fixed = make(4, DraftLength::Fixed);
    record_costs(
        fixed, [](int64_t n) { return 0.001 * static_cast<double>(n); }, 4096);
    record_rows(fixed, 500, 4, 0);
    EXPECT_EQ(fixed.drafts_for_step(64, 64), 4) << "fixed: always num_speculative_tokens, as vLLM";
    SpecPolicy capped = make(4, DraftLength::Fixed, 8);
    EXPECT_EQ(capped.drafts_for_step(4, 8), 4);
    EXPECT_EQ(capped.drafts_for_step(4, 9), 0) << "more than disable_by_batch_size requests live";
    EXPECT_THROW(make(0), Error);
    EXPECT_THROW(make(17), Error);
}

}  // namespace
}  // namespace onecard
