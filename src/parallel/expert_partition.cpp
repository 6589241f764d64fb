#include "parallel/expert_partition.h"

#include "core/error.h"

#include <limits>

namespace onecard::parallel {

ExpertPartition::ExpertPartition(int64_t n_experts, int n_ranks) : n_experts_(n_experts), n_ranks_(n_ranks) {
    ONECARD_CHECK(n_experts > 0 && n_ranks > 0, "expert partition: {} experts over {} ranks: both must be positive",
                  n_experts, n_ranks);
    ONECARD_CHECK(n_experts % n_ranks == 0,
                  "expert partition: {} routed experts do not split evenly over {} GPUs ({} % {} = {}); use a GPU "
                  "count that divides the expert count",
                  n_experts, n_ranks, n_experts, n_ranks, n_experts % n_ranks);
    per_rank_ = n_experts / n_ranks;
}

int ExpertPartition::rank_of(int64_t expert) const {
    ONECARD_CHECK(expert >= 0 && expert < n_experts_, "expert partition: expert id {} outside [0, {})", expert,
                  n_experts_);
    return static_cast<int>(expert / per_rank_);
}

int64_t ExpertPartition::local_index(int64_t expert) const {
    ONECARD_CHECK(expert >= 0 && expert < n_experts_, "expert partition: expert id {} outside [0, {})", expert,
                  n_experts_);
    return expert % per_rank_;
}

int64_t ExpertPartition::global_expert(int rank, int64_t local) const {
    ONECARD_CHECK(rank >= 0 && rank < n_ranks_ && local >= 0 && local < per_rank_,
                  "expert partition: (rank {}, local expert {}) outside {} ranks x {} experts", rank, local, n_ranks_,
                  per_rank_);
    return static_cast<int64_t>(rank) * per_rank_ + local;
}

ExpertPartition::Range ExpertPartition::experts_of(int rank) const {
    ONECARD_CHECK(rank >= 0 && rank < n_ranks_, "expert partition: rank {} outside [0, {})", rank, n_ranks_);
    return {static_cast<int64_t>(rank) * per_rank_, static_cast<int64_t>(rank + 1) * per_rank_};
}

DispatchPlan make_dispatch_plan(const ExpertPartition& part, const int32_t* experts, const float* weights,
                                int64_t n_tokens, int64_t top_k) {
    ONECARD_CHECK(n_tokens >= 0 && top_k > 0, "dispatch plan: n_tokens {} and top_k {} (need >= 0 and > 0)", n_tokens,
                  top_k);
    // Pair and row fields are int32 (they travel to the GPU as int32); the whole step must index in it.
    ONECARD_CHECK(n_tokens * top_k <= std::numeric_limits<int32_t>::max(),
                  "dispatch plan: {} tokens x {} picks exceed int32 indexing", n_tokens, top_k);
    ONECARD_CHECK(n_tokens == 0 || experts != nullptr, "dispatch plan: no expert ids for {} tokens", n_tokens);
    const int N = part.n_ranks();
    const int64_t epr = part.experts_per_rank();
    const int64_t n_pairs = n_tokens * top_k;

    DispatchPlan plan;
    plan.n_tokens = n_tokens;
    plan.top_k = top_k;
    plan.n_ranks = N;
    plan.experts_per_rank = epr;
    plan.token_counts.assign(static_cast<size_t>(N), 0);
    plan.token_offsets.assign(static_cast<size_t>(N) + 1, 0);
    plan.pair_counts.assign(static_cast<size_t>(N), 0);
    plan.pair_offsets.assign(static_cast<size_t>(N) + 1, 0);
    plan.expert_counts.assign(static_cast<size_t>(N * epr), 0);
    plan.expert_offsets.assign(static_cast<size_t>(N * epr) + 1, 0);
    plan.combine_index.assign(static_cast<size_t>(n_pairs), -1);
    plan.pairs.resize(static_cast<size_t>(n_pairs));

    // Pass 1: counts. A token goes to a rank once: tokens are visited in ascending order, so "last
    // token sent to r" dedupes without a set.
    std::vector<int64_t> last_token(static_cast<size_t>(N), -1);
    for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t k = 0; k < top_k; ++k) {
            const int64_t e = experts[t * top_k + k];
            ONECARD_CHECK(e >= 0 && e < part.n_experts(),
                          "dispatch plan: token {} pick {} names expert {} outside [0, {})", t, k, e, part.n_experts());
            const int r = static_cast<int>(e / epr);
            plan.expert_counts[static_cast<size_t>(e)] += 1;  // global id == r·epr + local: the bucket index
            plan.pair_counts[static_cast<size_t>(r)] += 1;
            if (last_token[static_cast<size_t>(r)] != t) {
                last_token[static_cast<size_t>(r)] = t;
                plan.token_counts[static_cast<size_t>(r)] += 1;
            }
        }
    }
    for (int r = 0; r < N; ++r) {
        plan.token_offsets[static_cast<size_t>(r) + 1] =
            plan.token_offsets[static_cast<size_t>(r)] + plan.token_counts[static_cast<size_t>(r)];
        plan.pair_offsets[static_cast<size_t>(r) + 1] =
            plan.pair_offsets[static_cast<size_t>(r)] + plan.pair_counts[static_cast<size_t>(r)];
    }
    for (int64_t b = 0; b < N * epr; ++b)
        plan.expert_offsets[static_cast<size_t>(b) + 1] =
            plan.expert_offsets[static_cast<size_t>(b)] + plan.expert_counts[static_cast<size_t>(b)];
    plan.send_tokens.resize(static_cast<size_t>(plan.token_offsets[static_cast<size_t>(N)]));

    // Pass 2: fill. Visiting (t, k) in ascending order appends to each (rank, expert) bucket in
    // ascending (token, k) order, which is the sort order the plan promises.
    std::vector<int64_t> expert_cursor(plan.expert_offsets.begin(), plan.expert_offsets.end() - 1);
    std::vector<int64_t> token_cursor(plan.token_offsets.begin(), plan.token_offsets.end() - 1);
    last_token.assign(static_cast<size_t>(N), -1);
    std::vector<int32_t> row_of_current(static_cast<size_t>(N), -1);  // row of token t on rank r
    for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t k = 0; k < top_k; ++k) {
            const int64_t p = t * top_k + k;
            const int64_t e = experts[p];
            const auto r = static_cast<size_t>(e / epr);
            if (last_token[r] != t) {
                last_token[r] = t;
                row_of_current[r] = static_cast<int32_t>(token_cursor[r] - plan.token_offsets[r]);
                plan.send_tokens[static_cast<size_t>(token_cursor[r]++)] = static_cast<int32_t>(t);
            }
            const int64_t slot = expert_cursor[static_cast<size_t>(e)]++;
            DispatchPair& dp = plan.pairs[static_cast<size_t>(slot)];
            dp.token = static_cast<int32_t>(t);
            dp.k = static_cast<int32_t>(k);
            dp.local_expert = static_cast<int32_t>(e % epr);
            dp.row = row_of_current[r];
            dp.weight = weights ? weights[p] : 1.0f;
            plan.combine_index[static_cast<size_t>(p)] = slot;
        }
    }
    return plan;
}

void DispatchPlan::check_integrity() const {
    const auto N = static_cast<size_t>(n_ranks);
    ONECARD_CHECK(n_ranks > 0 && experts_per_rank > 0 && n_tokens >= 0 && top_k > 0,
                  "dispatch plan: bad shape ({} ranks, {} experts per rank, {} tokens, top_k {})", n_ranks,
                  experts_per_rank, n_tokens, top_k);
    const size_t n_buckets = N * static_cast<size_t>(experts_per_rank);
    ONECARD_CHECK(token_counts.size() == N && token_offsets.size() == N + 1 && pair_counts.size() == N &&
                      pair_offsets.size() == N + 1 && expert_counts.size() == n_buckets &&
                      expert_offsets.size() == n_buckets + 1,
                  "dispatch plan: count/offset arrays do not match {} ranks x {} experts", n_ranks, experts_per_rank);
    ONECARD_CHECK(pairs.size() == static_cast<size_t>(n_pairs()) && combine_index.size() == pairs.size(),
                  "dispatch plan: {} pairs and {} combine entries for {} tokens x {} picks", pairs.size(),
                  combine_index.size(), n_tokens, top_k);
    ONECARD_CHECK(token_offsets[0] == 0 && pair_offsets[0] == 0 && expert_offsets[0] == 0,
                  "dispatch plan: offsets do not start at 0");
    for (size_t r = 0; r < N; ++r) {
        ONECARD_CHECK(token_counts[r] >= 0 && token_offsets[r + 1] == token_offsets[r] + token_counts[r],
                      "dispatch plan: token offsets of rank {} are not the prefix sum of the counts", r);
        ONECARD_CHECK(pair_counts[r] >= 0 && pair_offsets[r + 1] == pair_offsets[r] + pair_counts[r],
                      "dispatch plan: pair offsets of rank {} are not the prefix sum of the counts", r);
        ONECARD_CHECK(expert_offsets[r * static_cast<size_t>(experts_per_rank)] == pair_offsets[r],
                      "dispatch plan: rank {}'s first expert bucket does not start at its pair offset", r);
        ONECARD_CHECK(token_counts[r] <= pair_counts[r] && token_counts[r] <= n_tokens,
                      "dispatch plan: rank {} receives {} token rows for {} pairs of {} tokens", r, token_counts[r],
                      pair_counts[r], n_tokens);
    }
    for (size_t b = 0; b < n_buckets; ++b)
        ONECARD_CHECK(expert_counts[b] >= 0 && expert_offsets[b + 1] == expert_offsets[b] + expert_counts[b],
                      "dispatch plan: expert bucket {} offsets are not the prefix sum of the counts", b);
    ONECARD_CHECK(token_offsets[N] == static_cast<int64_t>(send_tokens.size()) &&
                      pair_offsets[N] == static_cast<int64_t>(pairs.size()) &&
                      expert_offsets[n_buckets] == static_cast<int64_t>(pairs.size()),
                  "dispatch plan: totals ({} rows, {} pairs) do not match the arrays ({}, {})", token_offsets[N],
                  pair_offsets[N], send_tokens.size(), pairs.size());

    std::vector<char> row_used(send_tokens.size(), 0);
    for (size_t r = 0; r < N; ++r) {
        // Each rank's token rows: ascending, in range, so each token at most once.
        for (int64_t i = token_offsets[r]; i < token_offsets[r + 1]; ++i) {
            const int32_t t = send_tokens[static_cast<size_t>(i)];
            ONECARD_CHECK(t >= 0 && t < n_tokens, "dispatch plan: rank {} row {} is token {} outside [0, {})", r,
                          i - token_offsets[r], t, n_tokens);
            ONECARD_CHECK(i == token_offsets[r] || send_tokens[static_cast<size_t>(i) - 1] < t,
                          "dispatch plan: rank {}'s token rows are not strictly ascending at row {}", r,
                          i - token_offsets[r]);
        }
        // Its pairs: in its expert buckets, sorted by (local_expert, token, k), rows naming the token.
        for (int64_t l = 0; l < experts_per_rank; ++l) {
            const size_t b = r * static_cast<size_t>(experts_per_rank) + static_cast<size_t>(l);
            for (int64_t i = expert_offsets[b]; i < expert_offsets[b + 1]; ++i) {
                const DispatchPair& p = pairs[static_cast<size_t>(i)];
                ONECARD_CHECK(p.local_expert == l, "dispatch plan: pair {} in rank {} bucket {} says local expert {}",
                              i, r, l, p.local_expert);
                ONECARD_CHECK(p.token >= 0 && p.token < n_tokens && p.k >= 0 && p.k < top_k,
                              "dispatch plan: pair {} is (token {}, k {}) outside {} x {}", i, p.token, p.k, n_tokens,
                              top_k);
                ONECARD_CHECK(p.row >= 0 && p.row < token_counts[r],
                              "dispatch plan: pair {} row {} outside rank {}'s {} rows", i, p.row, r, token_counts[r]);
                const size_t at = static_cast<size_t>(token_offsets[r] + p.row);
                ONECARD_CHECK(send_tokens[at] == p.token,
                              "dispatch plan: pair {} (token {}) points at row {} = token {}", i, p.token, p.row,
                              send_tokens[at]);
                row_used[at] = 1;
                if (i > expert_offsets[b]) {
                    const DispatchPair& q = pairs[static_cast<size_t>(i) - 1];
                    ONECARD_CHECK(q.token < p.token || (q.token == p.token && q.k < p.k),
                                  "dispatch plan: rank {} expert {} pairs not in ascending (token, k) order at {}", r,
                                  l, i);
                }
            }
        }
    }
    for (size_t i = 0; i < row_used.size(); ++i)
        ONECARD_CHECK(row_used[i], "dispatch plan: token row {} (token {}) is sent but no pair uses it", i,
                      send_tokens[i]);
    // Inverse map: (t, k) -> a pair that is (t, k). With as many entries as pairs, that makes it a
    // bijection: every (t, k) computed exactly once.
    for (int64_t p = 0; p < n_pairs(); ++p) {
        const int64_t at = combine_index[static_cast<size_t>(p)];
        ONECARD_CHECK(at >= 0 && at < n_pairs(), "dispatch plan: combine_index[{}] = {} outside [0, {})", p, at,
                      n_pairs());
        const DispatchPair& q = pairs[static_cast<size_t>(at)];
        ONECARD_CHECK(q.token * top_k + q.k == p, "dispatch plan: combine_index[{}] -> pair (token {}, k {})", p,
                      q.token, q.k);
    }
}

void combine_pair_outputs(const DispatchPlan& plan, const float* pair_outputs, int64_t dim, bool apply_weights,
                          const float* base, float* out) {
    ONECARD_CHECK(dim > 0, "combine: dim {} must be positive", dim);
    const int64_t K = plan.top_k;
    for (int64_t t = 0; t < plan.n_tokens; ++t) {
        for (int64_t d = 0; d < dim; ++d) {
            float acc = 0.0f;
            for (int64_t k = 0; k < K; ++k) {
                const int64_t at = plan.combine_index[static_cast<size_t>(t * K + k)];
                const float v = pair_outputs[at * dim + d];
                acc = acc + (apply_weights ? v * plan.pairs[static_cast<size_t>(at)].weight : v);
            }
            out[t * dim + d] = (base ? base[t * dim + d] : 0.0f) + acc;
        }
    }
}

}  // namespace onecard::parallel
