// Expert parallelism, the host-side logic (docs/PARALLEL.md): which GPU (rank) holds which routed
// experts, and, for one step's router output, which (token, pick) pairs each rank computes, what
// the all-to-all moves, and how the per-pair results come back in the single-GPU order.
//
// Pure C++ (no CUDA, no NCCL), so every rule here is unit-tested on the CPU.
#pragma once

#include <cstdint>
#include <vector>

namespace onecard::parallel {

// Routed experts of one layer over N ranks in contiguous blocks: rank r holds experts
// [r·E/N, (r+1)·E/N). Contiguous blocks keep a rank's experts one slice of the checkpoint's expert
// arrays (expert e at e·bytes_per_expert), so a rank loads and indexes them with one offset.
class ExpertPartition {
public:
    // Throws onecard::Error unless n_experts > 0, n_ranks > 0 and n_experts % n_ranks == 0 (uneven
    // blocks would give one GPU more weights and more work than the others, for no benefit).
    ExpertPartition(int64_t n_experts, int n_ranks);

    int64_t n_experts() const { return n_experts_; }
    int n_ranks() const { return n_ranks_; }
    int64_t experts_per_rank() const { return per_rank_; }

    // Rank holding `expert`; throws onecard::Error for an id outside [0, E).
    int rank_of(int64_t expert) const;
    // Index of `expert` among its rank's experts, in [0, E/N).
    int64_t local_index(int64_t expert) const;
    // Inverse of (rank_of, local_index).
    int64_t global_expert(int rank, int64_t local) const;

    struct Range {
        int64_t begin = 0;  // first expert id
        int64_t end = 0;    // one past the last
        int64_t size() const { return end - begin; }
        bool contains(int64_t e) const { return e >= begin && e < end; }
    };
    // The experts rank `rank` holds; throws for a rank outside [0, N).
    Range experts_of(int rank) const;

private:
    int64_t n_experts_ = 0;
    int n_ranks_ = 0;
    int64_t per_rank_ = 0;
};

// One (token, pick) pair a destination rank computes.
struct DispatchPair {
    int32_t token = 0;         // source token index in [0, n_tokens)
    int32_t k = 0;             // pick index in [0, K)
    int32_t local_expert = 0;  // expert on the destination rank (ExpertPartition::local_index)
    int32_t row = 0;           // row of the token in the destination's received block: index into
                               // send_tokens[token_offsets[r] ..]
    float weight = 0.0f;       // router weight of the pick
};

// The dispatch of one step's routed tokens from one source (the ranks that hold these tokens'
// activations) to the expert ranks.
//
// Token rows (the all-to-all "dispatch"): rank r receives send_tokens[token_offsets[r] ..
// token_offsets[r+1]), ascending token ids, each token ONCE even when r holds several of its K
// experts. token_counts / token_offsets are the send counts and displacements in rows (multiply by
// the row size for bytes).
//
// Pairs: rank r computes pairs[pair_offsets[r] .. pair_offsets[r+1]), sorted by (local_expert,
// token, k): each local expert's rows are contiguous (expert_offsets) and in ascending (token, k)
// order, i.e. exactly the rows and the row order a single GPU's expert-grouped GEMM would give that
// expert, so the per-pair outputs are bit-identical to the single-GPU ones even when a GEMM's
// arithmetic depends on its row count.
//
// Combine (the all-to-all back, or an all-gather when every rank needs every token): every rank
// returns one output row per pair, in its pair order, to pair_offsets[r] of a [n_pairs, D] buffer;
// combine_index[t·K + k] is the row of pair (t, k) in that buffer. The owner of token t sums
// w_k · out[combine_index[t·K + k]] for k = 0, 1, ..., K−1 in that order (combine_pair_outputs), the
// same operations in the same order as the single-GPU moe_combine, hence a bit-identical result.
struct DispatchPlan {
    int64_t n_tokens = 0;
    int64_t top_k = 0;
    int n_ranks = 0;
    int64_t experts_per_rank = 0;

    std::vector<int32_t> send_tokens;    // [Σ token_counts] token ids, grouped by destination rank
    std::vector<int64_t> token_counts;   // [N] token rows sent to each rank
    std::vector<int64_t> token_offsets;  // [N + 1] exclusive prefix sum of token_counts

    std::vector<DispatchPair> pairs;      // [n_tokens·K] grouped by rank, then (local_expert, token, k)
    std::vector<int64_t> pair_counts;     // [N] pairs each rank computes (= output rows it returns)
    std::vector<int64_t> pair_offsets;    // [N + 1]
    std::vector<int64_t> expert_counts;   // [N · E/N] pairs per (rank, local expert)
    std::vector<int64_t> expert_offsets;  // [N · E/N + 1] into pairs (global index)

    std::vector<int64_t> combine_index;  // [n_tokens·K] pair (t, k) -> its row in pairs / the output buffer

    int64_t n_pairs() const { return n_tokens * top_k; }
    // Throws onecard::Error naming the first broken invariant: counts vs offsets, every (t, k)
    // exactly once, sort order, rows pointing at the right token, each token once per rank, the
    // inverse map.
    void check_integrity() const;
};

// experts [n_tokens, K] (global ids in [0, E); router output), weights [n_tokens, K] (nullptr: all 1).
// n_tokens may be 0. Throws onecard::Error for an expert id out of range. A token may pick one
// expert twice (a hash table could hold that): both pairs are computed, in k order.
DispatchPlan make_dispatch_plan(const ExpertPartition& partition, const int32_t* experts, const float* weights,
                                int64_t n_tokens, int64_t top_k);

// out [n_tokens, D] = (base ? base[t] : 0) + Σ_k (apply_weights ? w_k · y : y), y = pair_outputs[combine_index[t·K +
// k]]
// ([n_pairs, D] fp32), accumulated in fp32 from 0 in ascending k, the base added last: the order of
// cuda::moe_combine (apply_weights = false when the weight was applied before w2, as REF does).
void combine_pair_outputs(const DispatchPlan& plan, const float* pair_outputs, int64_t dim, bool apply_weights,
                          const float* base, float* out);

}  // namespace onecard::parallel
