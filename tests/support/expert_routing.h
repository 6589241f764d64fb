#pragma once
// Random MoE routings for the expert-parallel tests (expert_parallel_test.cpp on the CPU,
// expert_parallel_nccl_test.cpp on 2 GPUs): K distinct experts per token in a shuffled order, as a
// router emits them, each with a positive weight.
#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

namespace onecard::test {

struct Routing {
    std::vector<int32_t> experts;  // [n_tokens * k]
    std::vector<float> weights;    // [n_tokens * k]
};

// Experts drawn from [lo, hi) (hi < 0: n_experts).
inline Routing random_routing(std::mt19937& rng, int64_t n_tokens, int64_t n_experts, int64_t k, int64_t lo = 0,
                              int64_t hi = -1) {
    if (hi < 0) hi = n_experts;
    Routing r;
    std::uniform_int_distribution<int64_t> pick(lo, hi - 1);
    std::uniform_real_distribution<float> w(0.05f, 1.0f);
    for (int64_t t = 0; t < n_tokens; ++t) {
        std::set<int64_t> chosen;
        while (static_cast<int64_t>(chosen.size()) < k) chosen.insert(pick(rng));
        std::vector<int32_t> row(chosen.begin(), chosen.end());
        std::shuffle(row.begin(), row.end(), rng);  // the router's order is by score, not by id
        for (int32_t e : row) {
            r.experts.push_back(e);
            r.weights.push_back(w(rng));
        }
    }
    return r;
}

}  // namespace onecard::test
