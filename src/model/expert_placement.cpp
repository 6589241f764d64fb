#include "model/expert_placement.h"

#include "core/error.h"
#include "model/expert_profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

namespace onecard {

ExpertPlacement ExpertPlacement::all_on_gpu(int64_t n_layers, int64_t n_experts) {
    ExpertPlacement p;
    p.n_experts = n_experts;
    p.on_gpu.assign(static_cast<size_t>(n_layers), std::vector<uint8_t>(static_cast<size_t>(n_experts), 1));
    return p;
}

bool ExpertPlacement::is_on_gpu(int64_t layer, int64_t expert) const {
    ONECARD_CHECK(layer >= 0 && layer < n_layers() && expert >= 0 && expert < n_experts,
                  "expert placement: (layer {}, expert {}) outside {} layers x {} experts", layer, expert, n_layers(),
                  n_experts);
    return on_gpu[static_cast<size_t>(layer)][static_cast<size_t>(expert)] != 0;
}

int64_t ExpertPlacement::n_gpu(int64_t layer) const {
    const auto& row = on_gpu.at(static_cast<size_t>(layer));
    return std::count_if(row.begin(), row.end(), [](uint8_t v) { return v != 0; });
}

int64_t ExpertPlacement::total_gpu() const {
    int64_t n = 0;
    for (int64_t l = 0; l < n_layers(); ++l) n += n_gpu(l);
    return n;
}

std::vector<int32_t> ExpertPlacement::gpu_experts(int64_t layer) const {
    std::vector<int32_t> ids;
    const auto& row = on_gpu.at(static_cast<size_t>(layer));
    for (size_t e = 0; e < row.size(); ++e)
        if (row[e]) ids.push_back(static_cast<int32_t>(e));
    return ids;
}

std::vector<int32_t> ExpertPlacement::host_experts(int64_t layer) const {
    std::vector<int32_t> ids;
    const auto& row = on_gpu.at(static_cast<size_t>(layer));
    for (size_t e = 0; e < row.size(); ++e)
        if (!row[e]) ids.push_back(static_cast<int32_t>(e));
    return ids;
}

int64_t ExpertPlacement::min_gpu() const {
    int64_t lo = n_experts;
    for (int64_t l = 0; l < n_layers(); ++l) lo = std::min(lo, n_gpu(l));
    return lo;
}

int64_t ExpertPlacement::max_gpu() const {
    int64_t hi = 0;
    for (int64_t l = 0; l < n_layers(); ++l) hi = std::max(hi, n_gpu(l));
    return hi;
}

std::string ExpertPlacement::summary() const {
    if (on_gpu.empty()) return "no layers";
    const int64_t lo = min_gpu(), hi = max_gpu();
    const std::string per = lo == hi ? fmt::format("{}", lo) : fmt::format("{}-{}", lo, hi);
    return fmt::format("{} of {} experts per layer on the GPU over {} layers ({} (layer, expert) pairs in host RAM)",
                       per, n_experts, n_layers(), total_host());
}

void ExpertPlacement::check_integrity() const {
    ONECARD_CHECK(n_experts >= 0, "expert placement: negative expert count {}", n_experts);
    for (size_t l = 0; l < on_gpu.size(); ++l)
        ONECARD_CHECK(static_cast<int64_t>(on_gpu[l].size()) == n_experts,
                      "expert placement: layer {} lists {} experts, expected {}", l, on_gpu[l].size(), n_experts);
}

ExpertPlacement place_experts(int64_t n_layers, int64_t n_experts, int64_t gpu_pairs, const ExpertUseProfile* profile) {
    ONECARD_CHECK(n_layers >= 0 && n_experts >= 0, "place_experts: negative shape {} layers x {} experts", n_layers,
                  n_experts);
    const int64_t n_pairs = n_layers * n_experts;
    gpu_pairs = std::clamp<int64_t>(gpu_pairs, 0, n_pairs);
    ExpertPlacement p;
    p.n_experts = n_experts;
    p.on_gpu.assign(static_cast<size_t>(n_layers), std::vector<uint8_t>(static_cast<size_t>(n_experts), 0));
    if (profile != nullptr) {
        ONECARD_CHECK(profile->n_layers() == n_layers && profile->n_experts() == n_experts,
                      "place_experts: the profile is for {} layers x {} experts, the model has {} x {}",
                      profile->n_layers(), profile->n_experts(), n_layers, n_experts);
        // Pair index l*E + e ascending is (lower layer, lower expert) first: a stable sort by count
        // descending breaks ties in exactly that order.
        std::vector<int64_t> order(static_cast<size_t>(n_pairs));
        std::iota(order.begin(), order.end(), int64_t{0});
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
            return profile->count(a / n_experts, a % n_experts) > profile->count(b / n_experts, b % n_experts);
        });
        for (int64_t i = 0; i < gpu_pairs; ++i) {
            const int64_t pair = order[static_cast<size_t>(i)];
            p.on_gpu[static_cast<size_t>(pair / n_experts)][static_cast<size_t>(pair % n_experts)] = 1;
        }
    } else if (n_layers > 0) {
        const int64_t per = gpu_pairs / n_layers, extra = gpu_pairs % n_layers;
        for (int64_t l = 0; l < n_layers; ++l) {
            const int64_t k = per + (l < extra ? 1 : 0);  // <= n_experts since gpu_pairs <= n_pairs
            std::fill_n(p.on_gpu[static_cast<size_t>(l)].begin(), k, uint8_t{1});
        }
    }
    return p;
}

}  // namespace onecard
