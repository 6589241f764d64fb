// place_experts: exactly the asked number of (layer, expert) pairs on the GPU; with a profile the
// most-picked ones, ties broken by (layer, expert); without one a uniform spread of the lowest ids;
// and the synthetic skewed profile's coverage curve against the published V4.1-Flash traces.
#include "model/expert_placement.h"
#include "core/error.h"
#include "model/expert_profile.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

namespace onecard {
namespace {

TEST(ExpertPlacement, KeepsExactlyTheAskedPairCount) {
    const ExpertUseProfile prof = synthetic_skewed_profile(5, 16, 7);
    for (const ExpertUseProfile* p : {static_cast<const ExpertUseProfile*>(nullptr), &prof}) {
        for (int64_t n : {0, 1, 4, 5, 6, 37, 79, 80}) {
            const ExpertPlacement pl = place_experts(5, 16, n, p);
            pl.check_integrity();
            EXPECT_EQ(pl.n_layers(), 5);
            EXPECT_EQ(pl.n_experts, 16);
            EXPECT_EQ(pl.total_gpu(), n) << n;
            EXPECT_EQ(pl.total_host(), 80 - n);
        }
        EXPECT_EQ(place_experts(5, 16, -3, p).total_gpu(), 0);    // clamped
        EXPECT_EQ(place_experts(5, 16, 500, p).total_gpu(), 80);  // clamped
        EXPECT_TRUE(place_experts(5, 16, 500, p).all_gpu());
    }
    EXPECT_THROW(place_experts(5, 17, 10, &prof), Error);  // profile of another shape
}

TEST(ExpertPlacement, MostPickedPairsAreKept) {
    ExpertUseProfile p(3, 4);
    p.add(2, 3, 50);
    p.add(0, 1, 40);
    p.add(1, 0, 30);
    p.add(1, 2, 20);
    p.add(0, 0, 10);
    const ExpertPlacement pl = place_experts(3, 4, 3, &p);
    EXPECT_TRUE(pl.is_on_gpu(2, 3));
    EXPECT_TRUE(pl.is_on_gpu(0, 1));
    EXPECT_TRUE(pl.is_on_gpu(1, 0));
    EXPECT_EQ(pl.total_gpu(), 3);
    EXPECT_DOUBLE_EQ(p.coverage(pl), 120.0 / 150.0);
    // No other placement of 3 pairs covers more.
    EXPECT_EQ(pl.gpu_experts(1), (std::vector<int32_t>{0}));
    EXPECT_EQ(pl.host_experts(1), (std::vector<int32_t>{1, 2, 3}));
}

TEST(ExpertPlacement, TiesGoToTheLowerLayerThenTheLowerExpert) {
    ExpertUseProfile p(3, 4);
    for (int64_t l = 0; l < 3; ++l)
        for (int64_t e = 0; e < 4; ++e) p.add(l, e, 5);
    p.add(2, 2, 1);  // the one hotter pair goes first
    const ExpertPlacement pl = place_experts(3, 4, 6, &p);
    EXPECT_TRUE(pl.is_on_gpu(2, 2));
    EXPECT_EQ(pl.gpu_experts(0), (std::vector<int32_t>{0, 1, 2, 3}));
    EXPECT_EQ(pl.gpu_experts(1), (std::vector<int32_t>{0}));
    EXPECT_EQ(pl.gpu_experts(2), (std::vector<int32_t>{2}));
    // Deterministic: the same inputs give the same placement.
    EXPECT_EQ(place_experts(3, 4, 6, &p).on_gpu, pl.on_gpu);
}

TEST(ExpertPlacement, UniformSpreadsTheRemainderOverTheFirstLayers) {
    const ExpertPlacement pl = place_experts(4, 8, 10, nullptr);
    EXPECT_EQ(pl.gpu_experts(0), (std::vector<int32_t>{0, 1, 2}));
    EXPECT_EQ(pl.gpu_experts(1), (std::vector<int32_t>{0, 1, 2}));
    EXPECT_EQ(pl.gpu_experts(2), (std::vector<int32_t>{0, 1}));
    EXPECT_EQ(pl.gpu_experts(3), (std::vector<int32_t>{0, 1}));
    EXPECT_NE(pl.summary().find("2-3 of 8 experts per layer"), std::string::npos) << pl.summary();
    const ExpertPlacement even = place_experts(43, 256, 43 * 200, nullptr);
    for (int64_t l = 0; l < 43; ++l) EXPECT_EQ(even.n_gpu(l), 200);
    EXPECT_EQ(place_experts(0, 256, 10, nullptr).total_gpu(), 0);  // no layers, nothing to place
}

// Cumulative share of picks on the hottest `share` of all pairs.
double curve_at(const ExpertUseProfile& p, double share) {
    const int64_t n_pairs = p.n_layers() * p.n_experts();
    const auto k = static_cast<int64_t>(std::llround(share * static_cast<double>(n_pairs)));
    return p.coverage(place_experts(p.n_layers(), p.n_experts(), k, &p));
}

TEST(ExpertPlacement, SkewedProfileMatchesThePublishedCurve) {
    const ExpertUseProfile p = synthetic_skewed_profile(43, 256, 1);
    // Published V4.1-Flash traces: hottest 52% of pairs take 90% of picks, 65% take 95%, 78% take 98.5%.
    EXPECT_NEAR(curve_at(p, 0.52), 0.900, 0.015);
    EXPECT_NEAR(curve_at(p, 0.65), 0.950, 0.015);
    EXPECT_NEAR(curve_at(p, 0.78), 0.985, 0.015);
    // The curve rises monotonically and every pair is picked at least once.
    double last = 0;
    for (double s = 0.05; s <= 1.0001; s += 0.05) {
        const double c = curve_at(p, s);
        EXPECT_GE(c, last);
        last = c;
    }
    EXPECT_DOUBLE_EQ(curve_at(p, 1.0), 1.0);
    for (int64_t e = 0; e < 256; ++e) EXPECT_GE(p.count(7, e), 1u);
    // Seeded: the same seed gives the same profile, another seed other hot ids per layer.
    const ExpertUseProfile same = synthetic_skewed_profile(43, 256, 1), other = synthetic_skewed_profile(43, 256, 2);
    bool all_same = true, any_diff = false;
    for (int64_t l = 0; l < 43; ++l)
        for (int64_t e = 0; e < 256; ++e) {
            all_same = all_same && same.count(l, e) == p.count(l, e);
            any_diff = any_diff || other.count(l, e) != p.count(l, e);
        }
    EXPECT_TRUE(all_same);
    EXPECT_TRUE(any_diff);
    // Hot ids differ between layers (a per-layer permutation).
    const ExpertPlacement top = place_experts(43, 256, 43, &p);
    EXPECT_NE(top.gpu_experts(0), top.gpu_experts(1));
}

}  // namespace
}  // namespace onecard
