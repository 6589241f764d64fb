// How often each routed expert of each main layer is picked: the use counts the memory planner
// (engine/memory_plan.h) ranks (layer, expert) pairs by when the whole model does not fit the GPU.
// Filled while serving (the engine counts routing picks) or offline (`onecard profile-experts`,
// through DeepSeekV4::set_expert_use_sink), persisted as JSON (`--expert-profile FILE`).
//
// File schema (version 1), one object:
//   {"format": "onecard-expert-profile", "version": 1, "n_layers": L, "n_experts": E,
//    "counts": [[c(0,0), ..., c(0,E-1)], ..., [c(L-1,0), ...]]}     counts: unsigned 64-bit integers
// Pure data, no CUDA; not thread-safe (one writer: the engine thread or the offline tool).
#pragma once

#include "model/expert_placement.h"

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace onecard {

class ExpertUseProfile {
public:
    static constexpr int kVersion = 1;
    static constexpr const char* kFormat = "onecard-expert-profile";

    ExpertUseProfile() = default;
    ExpertUseProfile(int64_t n_layers, int64_t n_experts);  // all counts 0
    // From counts [n_layers * n_experts] row-major (e.g. the GPU's pick counters); throws when the
    // length does not match the shape.
    static ExpertUseProfile from_counts(int64_t n_layers, int64_t n_experts, std::vector<uint64_t> counts);

    int64_t n_layers() const { return n_layers_; }
    int64_t n_experts() const { return n_experts_; }
    uint64_t count(int64_t layer, int64_t expert) const;
    uint64_t total() const;  // picks over all pairs

    void add(int64_t layer, int64_t expert, uint64_t n = 1);
    // One layer's routing picks, `n` expert ids (any order; a token's top-k picks are n = k ids).
    void add_picks(int64_t layer, const int32_t* experts, int64_t n);
    // Adds `other`'s counts; throws onecard::Error naming both shapes when they differ.
    void merge(const ExpertUseProfile& other);
    // The first n_experts expert columns (a model whose expert count was reduced keeps ids < n).
    ExpertUseProfile first_experts(int64_t n_experts) const;

    // Share of all picks that land on pairs `placement` keeps on the GPU, in [0, 1]; 1 when there
    // are no picks (none lands on the host). Throws when the shapes differ.
    double coverage(const ExpertPlacement& placement) const;

    std::string to_json() const;
    // Parses the schema above; `label` (a file name) prefixes every error. Throws onecard::Error
    // for malformed text, a wrong format/version, or counts that do not match n_layers x n_experts.
    static ExpertUseProfile from_json(const std::string& text, const std::string& label);
    // Writes atomically: a temp file in the same directory, then rename(), so a reader never sees
    // half a profile and a crash leaves the old file intact.
    void save(const std::filesystem::path& path) const;
    static ExpertUseProfile load(const std::filesystem::path& path);
    // load() that also refuses a profile of another model shape, naming both shapes.
    static ExpertUseProfile load_for(const std::filesystem::path& path, int64_t n_layers, int64_t n_experts);

    // Throws onecard::Error unless counts has n_layers x n_experts entries.
    void check_integrity() const;

private:
    size_t index(int64_t layer, int64_t expert) const;

    int64_t n_layers_ = 0, n_experts_ = 0;
    std::vector<uint64_t> counts_;  // [n_layers, n_experts] row-major
};

// A synthetic profile whose cumulative coverage curve (pairs sorted hottest first) follows the
// published V4.1-Flash routing traces: the hottest 52% of (layer, expert) pairs take 90% of the
// picks, 65% take 95%, 78% take 98.5% (expert_profile.cpp states the distribution). Every layer has
// the same curve over its own seeded permutation of expert ids, so the hot ids differ per layer.
// For benchmarks and tests of the offload path without a real trace.
ExpertUseProfile synthetic_skewed_profile(int64_t n_layers, int64_t n_experts, uint64_t seed);

}  // namespace onecard
