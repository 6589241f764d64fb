// Expert parallelism on the CPU (src/parallel, docs/PARALLEL.md):
//  * ExpertPartition: contiguous E/N blocks, the E % N refusal, index round trips;
//  * DispatchPlan: random routings (E = 256, N = 2/4/8, K = 6, 1..4096 tokens), all tokens on one
//    rank, empty ranks, zero tokens; every property checked twice, by check_integrity() and by a
//    brute-force restatement here; check_integrity() shown to catch corrupted plans;
//  * a simulated expert-parallel MoE (D = 64, inter = 32, E = 16, K = 4) over N = 1/2/4/8 "ranks" whose
//    outputs travel through the plan: bit-identical to the single-rank layer;
//  * the id-file bootstrap of `onecard serve --gpus N`, with threads as ranks;
//  * the per-GPU memory plan: the full 256-expert Flash fits on 2 H200s, byte accounting.
// NCCL on 2 GPUs is expert_parallel_nccl_test.cpp.
#include "backend/cpu/linear.h"
#include "backend/cpu/moe.h"
#include "core/error.h"
#include "engine/memory_plan.h"
#include "model/config.h"
#include "model/weights.h"
#include "parallel/bootstrap_file.h"
#include "parallel/expert_partition.h"
#include "parallel/parallel_plan.h"
#include "support/expert_routing.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cstring>
#include <random>
#include <thread>

namespace onecard::parallel {
namespace {

using test::random_routing;
using test::Routing;

// ---- partition ---------------------------------------------------------------------------------

TEST(ExpertPartition, ContiguousBlocksRoundTrip) {
    for (int n : {1, 2, 4, 8}) {
        const ExpertPartition part(256, n);
        EXPECT_EQ(part.experts_per_rank(), 256 / n);
        int64_t next = 0;
        for (int r = 0; r < n; ++r) {
            const auto range = part.experts_of(r);
            EXPECT_EQ(range.begin, next);  // blocks tile [0, E) in rank order
            EXPECT_EQ(range.size(), 256 / n);
            next = range.end;
            for (int64_t e = range.begin; e < range.end; ++e) {
                EXPECT_EQ(part.rank_of(e), r);
                EXPECT_EQ(part.local_index(e), e - range.begin);
                EXPECT_EQ(part.global_expert(r, part.local_index(e)), e);
            }
        }
        EXPECT_EQ(next, 256);
    }
}

TEST(ExpertPartition, RefusesUnevenSplitsAndBadIds) {
    try {
        ExpertPartition(256, 3);
        FAIL() << "256 experts over 3 GPUs must be refused";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("do not split evenly"), std::string::npos) << e.what();
    }
    EXPECT_THROW(ExpertPartition(256, 0), Error);
    EXPECT_THROW(ExpertPartition(0, 2), Error);
    const ExpertPartition part(16, 4);
    EXPECT_THROW(part.rank_of(16), Error);
    EXPECT_THROW(part.rank_of(-1), Error);
    EXPECT_THROW(part.experts_of(4), Error);
    EXPECT_THROW(part.global_expert(0, 4), Error);
}

// ---- dispatch plan -----------------------------------------------------------------------------

// Router-like picks: K distinct experts per token (uniform), weights positive.
// Restates every promise of the plan by brute force (independent of check_integrity's code).
void expect_plan_matches_routing(const DispatchPlan& plan, const ExpertPartition& part, const Routing& rt,
                                 int64_t n_tokens, int64_t k) {
    ASSERT_EQ(plan.pairs.size(), static_cast<size_t>(n_tokens * k));
    for (int r = 0; r < part.n_ranks(); ++r) {
        // Expected pairs on r, in (local expert, token, k) order; expected token rows, ascending.
        std::vector<std::tuple<int64_t, int64_t, int64_t>> want;
        std::vector<int32_t> want_tokens;
        for (int64_t t = 0; t < n_tokens; ++t) {
            bool any = false;
            for (int64_t j = 0; j < k; ++j) {
                const int64_t e = rt.experts[static_cast<size_t>(t * k + j)];
                if (part.rank_of(e) != r) continue;
                want.emplace_back(part.local_index(e), t, j);
                any = true;
            }
            if (any) want_tokens.push_back(static_cast<int32_t>(t));
        }
        std::sort(want.begin(), want.end());
        ASSERT_EQ(plan.pair_counts[static_cast<size_t>(r)], static_cast<int64_t>(want.size())) << "rank " << r;
        ASSERT_EQ(plan.token_counts[static_cast<size_t>(r)], static_cast<int64_t>(want_tokens.size())) << "rank " << r;
        const int64_t t0 = plan.token_offsets[static_cast<size_t>(r)];
        for (size_t i = 0; i < want_tokens.size(); ++i)
            ASSERT_EQ(plan.send_tokens[static_cast<size_t>(t0) + i], want_tokens[i]);
        for (size_t i = 0; i < want.size(); ++i) {
            const DispatchPair& p = plan.pairs[static_cast<size_t>(plan.pair_offsets[static_cast<size_t>(r)]) + i];
            const auto [l, t, j] = want[i];
            ASSERT_EQ(p.local_expert, l);
            ASSERT_EQ(p.token, t);
            ASSERT_EQ(p.k, j);
            ASSERT_EQ(plan.send_tokens[static_cast<size_t>(t0 + p.row)], t);
            ASSERT_EQ(p.weight, rt.weights[static_cast<size_t>(t * k + j)]);
        }
        for (int64_t l = 0; l < part.experts_per_rank(); ++l) {
            const int64_t n_l =
                std::count_if(want.begin(), want.end(), [&](const auto& w) { return std::get<0>(w) == l; });
            ASSERT_EQ(plan.expert_counts[static_cast<size_t>(r * part.experts_per_rank() + l)], n_l);
        }
    }
    for (int64_t p = 0; p < n_tokens * k; ++p) {
        const DispatchPair& q = plan.pairs[static_cast<size_t>(plan.combine_index[static_cast<size_t>(p)])];
        ASSERT_EQ(q.token * k + q.k, p);
    }
}

TEST(DispatchPlan, RandomRoutingsFlashShape) {
    std::mt19937 rng(20261129);
    const int64_t E = 256, K = 6;
    for (int n : {2, 4, 8}) {
        const ExpertPartition part(E, n);
        for (int64_t n_tokens : {1, 2, 7, 64, 513, 4096}) {
            SCOPED_TRACE(testing::Message() << "N=" << n << " tokens=" << n_tokens);
            const Routing rt = random_routing(rng, n_tokens, E, K);
            const DispatchPlan plan = make_dispatch_plan(part, rt.experts.data(), rt.weights.data(), n_tokens, K);
            ASSERT_NO_THROW(plan.check_integrity());
            expect_plan_matches_routing(plan, part, rt, n_tokens, K);
            // A token is sent to a rank once, however many of its picks that rank holds.
            EXPECT_LE(plan.token_offsets.back(), n_tokens * std::min<int64_t>(n, K));
            EXPECT_GE(plan.token_offsets.back(), n_tokens);
        }
    }
}

TEST(DispatchPlan, AllTokensOnOneRankLeaveTheOthersEmpty) {
    std::mt19937 rng(7);
    const int64_t E = 256, K = 6;
    const ExpertPartition part(E, 4);
    for (int64_t n_tokens : {1, 300, 4096}) {
        // Every pick in rank 1's block [64, 128): the skew an adversarial prompt could cause.
        const Routing rt = random_routing(rng, n_tokens, E, K, 64, 128);
        const DispatchPlan plan = make_dispatch_plan(part, rt.experts.data(), rt.weights.data(), n_tokens, K);
        ASSERT_NO_THROW(plan.check_integrity());
        expect_plan_matches_routing(plan, part, rt, n_tokens, K);
        for (int r : {0, 2, 3}) {
            EXPECT_EQ(plan.token_counts[static_cast<size_t>(r)], 0);
            EXPECT_EQ(plan.pair_counts[static_cast<size_t>(r)], 0);
        }
        EXPECT_EQ(plan.token_counts[1], n_tokens);  // each token once, though it has K picks there
        EXPECT_EQ(plan.pair_counts[1], n_tokens * K);
    }
}

TEST(DispatchPlan, ZeroTokensAndUnusedRanks) {
    const ExpertPartition part(256, 8);
    const DispatchPlan empty = make_dispatch_plan(part, nullptr, nullptr, 0, 6);
    ASSERT_NO_THROW(empty.check_integrity());
    EXPECT_EQ(empty.pairs.size(), 0u);
    EXPECT_EQ(empty.token_offsets.back(), 0);
    // One token, all picks on ranks 0 and 7: ranks 1..6 get nothing; weights default to 1.
    const std::vector<int32_t> ex = {255, 0, 31, 224, 1, 250};
    const DispatchPlan p = make_dispatch_plan(part, ex.data(), nullptr, 1, 6);
    ASSERT_NO_THROW(p.check_integrity());
    EXPECT_EQ(p.token_counts, (std::vector<int64_t>{1, 0, 0, 0, 0, 0, 0, 1}));
    EXPECT_EQ(p.pair_counts, (std::vector<int64_t>{3, 0, 0, 0, 0, 0, 0, 3}));
    for (const auto& q : p.pairs) EXPECT_EQ(q.weight, 1.0f);
    // Rank 0's pairs by local expert: 0 (k=1), 1 (k=4), 31 (k=2).
    EXPECT_EQ(p.pairs[0].k, 1);
    EXPECT_EQ(p.pairs[1].k, 4);
    EXPECT_EQ(p.pairs[2].k, 2);
    EXPECT_EQ(p.combine_index[0], 5);  // expert 255 is rank 7's last local expert, the last pair
}

TEST(DispatchPlan, RepeatedPickAndBadIds) {
    const ExpertPartition part(16, 2);
    const std::vector<int32_t> dup = {3, 3, 12};  // a hash table could repeat an expert
    const std::vector<float> w = {0.5f, 0.25f, 0.125f};
    const DispatchPlan p = make_dispatch_plan(part, dup.data(), w.data(), 1, 3);
    ASSERT_NO_THROW(p.check_integrity());
    EXPECT_EQ(p.token_counts[0], 1);
    EXPECT_EQ(p.pair_counts[0], 2);
    const std::vector<int32_t> bad = {3, 16, 1};
    EXPECT_THROW(make_dispatch_plan(part, bad.data(), nullptr, 1, 3), Error);
    const std::vector<int32_t> neg = {-1, 2, 1};
    EXPECT_THROW(make_dispatch_plan(part, neg.data(), nullptr, 1, 3), Error);
    EXPECT_THROW(make_dispatch_plan(part, bad.data(), nullptr, 1, 0), Error);
}

TEST(DispatchPlan, IntegrityCheckCatchesCorruption) {
    std::mt19937 rng(11);
    const ExpertPartition part(256, 4);
    const Routing rt = random_routing(rng, 50, 256, 6);
    const DispatchPlan good = make_dispatch_plan(part, rt.experts.data(), rt.weights.data(), 50, 6);
    ASSERT_NO_THROW(good.check_integrity());
    auto expect_broken = [&](const char* what, auto&& corrupt) {
        DispatchPlan p = good;
        corrupt(p);
        EXPECT_THROW(p.check_integrity(), Error) << what;
    };
    expect_broken("two pairs swapped", [](DispatchPlan& p) { std::swap(p.pairs[0], p.pairs[1]); });
    expect_broken("row of another token", [](DispatchPlan& p) {
        for (auto& q : p.pairs)
            if (q.row > 0) {
                q.row -= 1;
                return;
            }
    });
    expect_broken("token sent twice", [](DispatchPlan& p) { p.send_tokens[1] = p.send_tokens[0]; });
    expect_broken("combine index off by one", [](DispatchPlan& p) { p.combine_index[3] = p.combine_index[4]; });
    expect_broken("counts vs offsets", [](DispatchPlan& p) { p.token_counts[2] += 1; });
    expect_broken("wrong local expert", [](DispatchPlan& p) { p.pairs[0].local_expert += 1; });
    expect_broken("pair dropped", [](DispatchPlan& p) { p.pairs.pop_back(); });
    expect_broken("k out of range", [](DispatchPlan& p) { p.pairs[5].k = 6; });
}

// ---- simulated expert-parallel MoE -------------------------------------------------------------

// A tiny MoE layer with fp32 experts: w1/w3 [inter, D], w2 [D, inter] per expert, a router [E, D].
struct TinyMoe {
    int64_t D = 64, inter = 32, E = 16, K = 4;
    float limit = 10.0f;  // SwiGLU clamp, as the model's
    std::vector<float> router, w1, w3, w2, shared;
};

TinyMoe make_tiny_moe(std::mt19937& rng) {
    TinyMoe m;
    std::normal_distribution<float> n1(0.0f, 0.125f);  // ~1/sqrt(D): activations of order 1
    auto fill = [&](std::vector<float>& v, size_t count) {
        v.resize(count);
        for (auto& x : v) x = n1(rng);
    };
    fill(m.router, static_cast<size_t>(m.E * m.D));
    fill(m.w1, static_cast<size_t>(m.E * m.inter * m.D));
    fill(m.w3, static_cast<size_t>(m.E * m.inter * m.D));
    fill(m.w2, static_cast<size_t>(m.E * m.D * m.inter));
    fill(m.shared, 0);
    return m;
}

using Matmul = void (*)(const float*, const float*, float*, int64_t, int64_t, int64_t);
void matmul_rowstable(const float* x, const float* w, float* y, int64_t n, int64_t k, int64_t m) {
    cpu::matmul_nt(x, w, y, n, k, m);
}

// One expert over rows x [m, D] -> y [m, D]; row_w scales the hidden activation before w2 (REF) when
// given. Weight pointers are this expert's matrices.
void run_expert(const TinyMoe& moe, Matmul mm, const float* w1, const float* w3, const float* w2, const float* x,
                int64_t m, const float* row_w, float* y) {
    std::vector<float> g(static_cast<size_t>(m * moe.inter)), u(g.size()), h(g.size());
    mm(x, w1, g.data(), m, moe.D, moe.inter);
    mm(x, w3, u.data(), m, moe.D, moe.inter);
    cpu::swiglu_clamped(g.data(), u.data(), m * moe.inter, moe.limit, h.data());
    if (row_w)
        for (int64_t r = 0; r < m; ++r)
            for (int64_t j = 0; j < moe.inter; ++j) h[static_cast<size_t>(r * moe.inter + j)] *= row_w[r];
    mm(h.data(), w2, y, m, moe.inter, moe.D);
}

// Router on the CPU backend's functions: logits = x · router^T, sqrtsoftplus, top-K.
Routing route(const TinyMoe& moe, const std::vector<float>& x, int64_t n) {
    std::vector<float> logits(static_cast<size_t>(n * moe.E)), scores(logits.size());
    cpu::matmul_nt(x.data(), moe.router.data(), logits.data(), n, moe.D, moe.E);
    cpu::sqrtsoftplus(logits.data(), n * moe.E, scores.data());
    Routing rt;
    rt.experts.resize(static_cast<size_t>(n * moe.K));
    rt.weights.resize(rt.experts.size());
    for (int64_t t = 0; t < n; ++t)
        cpu::route_topk(scores.data() + t * moe.E, nullptr, moe.E, moe.K, 1.5f, rt.experts.data() + t * moe.K,
                        rt.weights.data() + t * moe.K);
    return rt;
}

// Single GPU: each expert (ascending id) over its (token, k) rows in ascending order, one output row
// per pair, then out = shared + Σ_k in k order from 0 (cuda::moe_combine's order), written out here.
std::vector<float> single_rank_moe(const TinyMoe& moe, Matmul mm, const std::vector<float>& x,
                                   const std::vector<float>& shared_out, const Routing& rt, int64_t n,
                                   bool weight_before_w2) {
    const int64_t D = moe.D, K = moe.K;
    std::vector<float> pair_out(static_cast<size_t>(n * K * D));
    std::vector<float> xs, ws, ys;
    for (int64_t e = 0; e < moe.E; ++e) {
        std::vector<int64_t> ps;
        for (int64_t p = 0; p < n * K; ++p)
            if (rt.experts[static_cast<size_t>(p)] == e) ps.push_back(p);
        if (ps.empty()) continue;
        const auto m = static_cast<int64_t>(ps.size());
        xs.resize(static_cast<size_t>(m * D));
        ws.resize(static_cast<size_t>(m));
        ys.resize(static_cast<size_t>(m * D));
        for (int64_t i = 0; i < m; ++i) {
            std::copy_n(x.begin() + (ps[static_cast<size_t>(i)] / K) * D, D, xs.begin() + i * D);
            ws[static_cast<size_t>(i)] = rt.weights[static_cast<size_t>(ps[static_cast<size_t>(i)])];
        }
        run_expert(moe, mm, moe.w1.data() + e * moe.inter * D, moe.w3.data() + e * moe.inter * D,
                   moe.w2.data() + e * D * moe.inter, xs.data(), m, weight_before_w2 ? ws.data() : nullptr, ys.data());
        for (int64_t i = 0; i < m; ++i)
            std::copy_n(ys.begin() + i * D, D, pair_out.begin() + ps[static_cast<size_t>(i)] * D);
    }
    std::vector<float> out(static_cast<size_t>(n * D));
    for (int64_t t = 0; t < n; ++t)
        for (int64_t d = 0; d < D; ++d) {
            float acc = 0.0f;
            for (int64_t k = 0; k < K; ++k) {
                const float v = pair_out[static_cast<size_t>((t * K + k) * D + d)];
                acc = acc + (weight_before_w2 ? v : v * rt.weights[static_cast<size_t>(t * K + k)]);
            }
            out[static_cast<size_t>(t * D + d)] = shared_out[static_cast<size_t>(t * D + d)] + acc;
        }
    return out;
}

// N ranks: each holds only its experts' matrices (copied out of the layer, indexed locally), gets its
// token rows through the plan (the all-to-all), computes its pairs expert by expert from the
// received rows, and returns one row per pair to pair_offsets[r] (the way back); then the combine.
std::vector<float> expert_parallel_moe(const TinyMoe& moe, Matmul mm, int n_ranks, const std::vector<float>& x,
                                       const std::vector<float>& shared_out, const Routing& rt, int64_t n,
                                       bool weight_before_w2) {
    const int64_t D = moe.D;
    const ExpertPartition part(moe.E, n_ranks);
    const DispatchPlan plan = make_dispatch_plan(part, rt.experts.data(), rt.weights.data(), n, moe.K);
    plan.check_integrity();
    std::vector<float> returned(static_cast<size_t>(plan.n_pairs() * D));
    std::memset(returned.data(), 0xFF, returned.size() * sizeof(float));  // NaN poison: every row must arrive
    for (int r = 0; r < n_ranks; ++r) {
        const auto range = part.experts_of(r);
        const int64_t epr = part.experts_per_rank();
        // This rank's weights only.
        const std::vector<float> w1(moe.w1.begin() + range.begin * moe.inter * D,
                                    moe.w1.begin() + range.end * moe.inter * D);
        const std::vector<float> w3(moe.w3.begin() + range.begin * moe.inter * D,
                                    moe.w3.begin() + range.end * moe.inter * D);
        const std::vector<float> w2(moe.w2.begin() + range.begin * D * moe.inter,
                                    moe.w2.begin() + range.end * D * moe.inter);
        // Dispatch: the rows this rank receives.
        const auto tr = static_cast<size_t>(r);
        std::vector<float> recv(static_cast<size_t>(plan.token_counts[tr] * D));
        for (int64_t i = 0; i < plan.token_counts[tr]; ++i)
            std::copy_n(x.begin() + plan.send_tokens[static_cast<size_t>(plan.token_offsets[tr] + i)] * D, D,
                        recv.begin() + i * D);
        std::vector<float> local_out(static_cast<size_t>(plan.pair_counts[tr] * D));
        // (std::fill, not memset: a rank with no pairs has an empty vector, whose data() may be null.)
        std::fill(local_out.begin(), local_out.end(), std::bit_cast<float>(0xFFFFFFFFu));
        for (int64_t l = 0; l < epr; ++l) {
            const int64_t b0 = plan.expert_offsets[static_cast<size_t>(r * epr + l)];
            const int64_t m = plan.expert_counts[static_cast<size_t>(r * epr + l)];
            if (m == 0) continue;
            std::vector<float> xs(static_cast<size_t>(m * D)), ws(static_cast<size_t>(m)),
                ys(static_cast<size_t>(m * D));
            for (int64_t i = 0; i < m; ++i) {
                const DispatchPair& p = plan.pairs[static_cast<size_t>(b0 + i)];
                std::copy_n(recv.begin() + int64_t{p.row} * D, D, xs.begin() + i * D);
                ws[static_cast<size_t>(i)] = p.weight;
            }
            run_expert(moe, mm, w1.data() + l * moe.inter * D, w3.data() + l * moe.inter * D,
                       w2.data() + l * D * moe.inter, xs.data(), m, weight_before_w2 ? ws.data() : nullptr, ys.data());
            std::copy(ys.begin(), ys.end(), local_out.begin() + (b0 - plan.pair_offsets[tr]) * D);
        }
        // Back to the owner.
        std::copy(local_out.begin(), local_out.end(), returned.begin() + plan.pair_offsets[tr] * D);
    }
    std::vector<float> out(static_cast<size_t>(n * D));
    std::memset(out.data(), 0xFF, out.size() * sizeof(float));
    combine_pair_outputs(plan, returned.data(), D, !weight_before_w2, shared_out.data(), out.data());
    return out;
}

TEST(ExpertParallelSim, BitIdenticalToSingleRank) {
    std::mt19937 rng(424242);
    const TinyMoe moe = make_tiny_moe(rng);
    std::normal_distribution<float> nx(0.0f, 1.0f);
    // Two expert kernels: the row-stable one the model uses, and OpenBLAS, whose row bits may depend on
    // the row count: the plan hands each expert the same rows in the same order, so both must match.
    const std::pair<const char*, Matmul> kernels[] = {{"matmul_nt", matmul_rowstable}, {"blas", cpu::matmul_nt_blas}};
    for (const auto& [kname, mm] : kernels) {
        for (int64_t n : {1, 5, 33, 200}) {
            std::vector<float> x(static_cast<size_t>(n * moe.D)), shared_out(x.size());
            for (auto& v : x) v = nx(rng);
            for (auto& v : shared_out) v = nx(rng);
            const Routing rt = route(moe, x, n);
            for (bool before_w2 : {false, true}) {
                const std::vector<float> ref = single_rank_moe(moe, mm, x, shared_out, rt, n, before_w2);
                for (int n_ranks : {1, 2, 4, 8}) {
                    SCOPED_TRACE(testing::Message() << kname << " tokens=" << n << " ranks=" << n_ranks
                                                    << " weight_before_w2=" << before_w2);
                    const std::vector<float> ep =
                        expert_parallel_moe(moe, mm, n_ranks, x, shared_out, rt, n, before_w2);
                    ASSERT_EQ(ep.size(), ref.size());
                    // Bitwise: same operations in the same order (NaN poison would also differ here).
                    EXPECT_EQ(std::memcmp(ep.data(), ref.data(), ref.size() * sizeof(float)), 0);
                    size_t n_diff = 0;
                    for (size_t i = 0; i < ref.size(); ++i) n_diff += std::memcmp(&ep[i], &ref[i], sizeof(float)) != 0;
                    EXPECT_EQ(n_diff, 0u);
                }
            }
        }
    }
}

TEST(ExpertParallelSim, CombineOrderMatters) {
    // The test above could pass vacuously if any summation order gave the same bits. Show that on
    // these values a different order (descending k) does change some outputs, so k order is real.
    std::mt19937 rng(5);
    const ExpertPartition part(16, 2);
    const Routing rt = random_routing(rng, 64, 16, 4);
    const DispatchPlan plan = make_dispatch_plan(part, rt.experts.data(), rt.weights.data(), 64, 4);
    const int64_t D = 64;
    std::vector<float> y(static_cast<size_t>(plan.n_pairs() * D));
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto& v : y) v = nd(rng);
    std::vector<float> out(static_cast<size_t>(64 * D));
    combine_pair_outputs(plan, y.data(), D, true, nullptr, out.data());
    size_t differs = 0;
    for (int64_t t = 0; t < 64; ++t)
        for (int64_t d = 0; d < D; ++d) {
            float fwd = 0.0f, bwd = 0.0f;
            for (int64_t k = 0; k < 4; ++k) {
                const int64_t a = plan.combine_index[static_cast<size_t>(t * 4 + k)];
                fwd = fwd + y[static_cast<size_t>(a * D + d)] * plan.pairs[static_cast<size_t>(a)].weight;
                const int64_t b = plan.combine_index[static_cast<size_t>(t * 4 + 3 - k)];
                bwd = bwd + y[static_cast<size_t>(b * D + d)] * plan.pairs[static_cast<size_t>(b)].weight;
            }
            EXPECT_EQ(out[static_cast<size_t>(t * D + d)], 0.0f + fwd);
            differs += bwd != fwd;
        }
    EXPECT_GT(differs, 0u);
}

// ---- bootstrap file ----------------------------------------------------------------------------

TEST(BootstrapFile, RanksReadWhatRankZeroPublishes) {
    test::TempDir dir("ep_boot");
    const auto path = dir / "nccl.id";
    std::vector<uint8_t> id(128);
    std::mt19937 rng(3);
    for (auto& b : id) b = static_cast<uint8_t>(rng());
    // Three waiting ranks start before rank 0 publishes.
    std::vector<std::vector<uint8_t>> got(3);
    std::vector<std::thread> ranks;
    for (int r = 0; r < 3; ++r)
        ranks.emplace_back(
            [&, r] { got[static_cast<size_t>(r)] = wait_bootstrap_id(path, 128, std::chrono::seconds(20)); });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    publish_bootstrap_id(path, id.data(), id.size());
    for (auto& t : ranks) t.join();
    for (const auto& g : got) EXPECT_EQ(g, id);
    // A second publish to the same path is refused (a stale id would hang NCCL init instead).
    EXPECT_THROW(publish_bootstrap_id(path, id.data(), id.size()), Error);
    // No temporary files left beside it.
    size_t n_files = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path())) ++n_files;
    EXPECT_EQ(n_files, 1u);
}

TEST(BootstrapFile, TimesOutAndRejectsWrongSize) {
    test::TempDir dir("ep_boot");
    try {
        wait_bootstrap_id(dir / "never", 128, std::chrono::milliseconds(60));
        FAIL() << "must time out";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("no id at"), std::string::npos) << e.what();
    }
    const std::vector<uint8_t> small(16, 7);
    publish_bootstrap_id(dir / "small", small.data(), small.size());
    EXPECT_THROW(wait_bootstrap_id(dir / "small", 128, std::chrono::milliseconds(100)), Error);
}

// ---- memory plan per GPU -----------------------------------------------------------------------

std::vector<PlannedTensor> planned(const ModelConfig& cfg) {
    std::vector<PlannedTensor> out;
    for (const auto& t : checkpoint_layout(cfg)) out.push_back({t.name, t.dtype, t.nbytes()});
    return out;
}

TEST(ParallelPlan, FullFlashFitsOnTwoH200s) {
    const ModelConfig cfg = parse_config(test::flash_official_config_json());
    const auto tensors = planned(cfg);
    MemoryPlanOptions opt;  // one H200: 140.97 GB free, 2 GiB headroom, all 256 experts
    const MemoryPlan one = make_memory_plan(cfg, tensors, opt);
    ASSERT_FALSE(one.fits);  // the premise of issue 8: one card is not enough

    const ParallelMemoryPlan two = make_parallel_memory_plan(cfg, tensors, 2, opt);
    std::printf("%s%s\n", parallel_memory_plan_report(two).c_str(), parallel_memory_plan_json(two).c_str());
    ASSERT_TRUE(two.fits) << two.refusal;
    EXPECT_NO_THROW(require_parallel_plan_fits(two));
    ASSERT_EQ(two.gpus.size(), 2u);
    EXPECT_EQ(two.experts_per_gpu, 128);
    // Byte accounting: the GPUs' routed experts add up to the whole model's, the replicated part is
    // on both, and nothing is counted as not resident.
    uint64_t routed_sum = 0;
    for (const auto& g : two.gpus) {
        EXPECT_EQ(g.replicated_weight_bytes + g.routed_expert_bytes, g.plan.weight_bytes);
        EXPECT_EQ(g.replicated_weight_bytes, two.gpus[0].replicated_weight_bytes);
        EXPECT_EQ(g.plan.weight_bytes_not_resident, 0u);
        EXPECT_EQ(g.plan.kv_token_capacity, two.kv_token_capacity);  // KV replicated: the same pool
        EXPECT_LE(g.plan.planned_bytes, g.plan.device_bytes);
        routed_sum += g.routed_expert_bytes;
    }
    EXPECT_EQ(routed_sum, one.routed_expert_bytes_per_expert * 256);
    EXPECT_EQ(two.gpus[0].replicated_weight_bytes + routed_sum, one.weight_bytes);
    EXPECT_EQ(two.gpus[1].first_expert, 128);
    EXPECT_EQ(two.gpus[1].end_expert, 256);
    // A useful KV pool is left on each GPU (well over a million tokens at ~3.85 kB/token).
    EXPECT_GT(two.kv_token_capacity, 1'000'000);
    const nlohmann::json j = nlohmann::json::parse(parallel_memory_plan_json(two));
    EXPECT_TRUE(j.at("fits").get<bool>());
    EXPECT_EQ(j.at("gpus").size(), 2u);
    EXPECT_EQ(j.at("gpus")[1].at("routed_expert_bytes").get<uint64_t>(), two.gpus[1].routed_expert_bytes);

    // More GPUs: fewer expert bytes each, more KV tokens.
    const ParallelMemoryPlan four = make_parallel_memory_plan(cfg, tensors, 4, opt);
    ASSERT_TRUE(four.fits);
    EXPECT_EQ(four.gpus[0].routed_expert_bytes * 2, two.gpus[0].routed_expert_bytes);
    EXPECT_GT(four.kv_token_capacity, two.kv_token_capacity);
}

TEST(ParallelPlan, RefusalsNameTheShortGpuAndAFix) {
    const ModelConfig cfg = parse_config(test::flash_official_config_json());
    const auto tensors = planned(cfg);
    MemoryPlanOptions opt;
    opt.device_bytes = 60ull << 30;  // 60 GiB GPUs: 2 are not enough, 4 are
    opt.kv_tokens = 65536;
    const ParallelMemoryPlan p = make_parallel_memory_plan(cfg, tensors, 2, opt);
    ASSERT_FALSE(p.fits);
    EXPECT_NE(p.refusal.find("short by"), std::string::npos) << p.refusal;
    EXPECT_NE(p.refusal.find("--gpus 4"), std::string::npos) << p.refusal;
    EXPECT_THROW(require_parallel_plan_fits(p), Error);
    EXPECT_TRUE(make_parallel_memory_plan(cfg, tensors, 4, opt).fits);
    EXPECT_THROW(make_parallel_memory_plan(cfg, tensors, 3, opt), Error);  // 256 % 3
    MemoryPlanOptions partial = opt;
    partial.n_resident_experts = 200;
    EXPECT_THROW(make_parallel_memory_plan(cfg, tensors, 2, partial), Error);
    // One GPU through the parallel planner is the single-GPU plan plus its exchange buffers.
    MemoryPlanOptions big;
    big.kv_tokens = 65536;
    big.device_bytes = 200ull << 30;
    const ParallelMemoryPlan solo = make_parallel_memory_plan(cfg, tensors, 1, big);
    const MemoryPlan single = make_memory_plan(cfg, tensors, big);
    ASSERT_TRUE(solo.fits);
    EXPECT_EQ(solo.gpus[0].plan.weight_bytes, single.weight_bytes);
    EXPECT_EQ(solo.gpus[0].plan.kv_pool_bytes, single.kv_pool_bytes);
    EXPECT_EQ(solo.gpus[0].plan.planned_bytes, single.planned_bytes + solo.gpus[0].ep_buffer_bytes);
}

TEST(ParallelPlan, CliPlanGpus) {
    const auto bin = test::onecard_binary();
    if (!std::filesystem::exists(bin)) GTEST_SKIP() << "onecard binary not built at " << bin;
    // --device-gib pins the size: the result must not depend on the GPUs of the machine running it.
    const auto ok = test::run_command(bin.string() + " plan --synth flash --gpus 2 --device-gib 131.29 2>&1");
    EXPECT_EQ(ok.rc, 0) << ok.out;
    EXPECT_NE(ok.out.find("GPU 1: experts [128, 256)"), std::string::npos) << ok.out;
    const auto last = ok.out.rfind("{\"fits\"");
    ASSERT_NE(last, std::string::npos) << ok.out;
    const nlohmann::json j = nlohmann::json::parse(ok.out.substr(last));
    EXPECT_TRUE(j.at("fits").get<bool>());
    EXPECT_EQ(j.at("n_gpus").get<int>(), 2);
    // The same model on one GPU of that size is refused with every expert kept on the GPU (with host
    // experts allowed it depends on this machine's free RAM); 3 GPUs do not split 256 experts.
    EXPECT_NE(test::run_command(bin.string() + " plan --synth flash --device-gib 131.29 --no-host-experts 2>&1").rc, 0);
    const auto three = test::run_command(bin.string() + " plan --synth flash --gpus 3 --device-gib 131.29 2>&1");
    EXPECT_NE(three.rc, 0);
    EXPECT_NE(three.out.find("do not split evenly"), std::string::npos) << three.out;
}

}  // namespace
}  // namespace onecard::parallel
