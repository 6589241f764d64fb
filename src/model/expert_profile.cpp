#include "model/expert_profile.h"

#include "core/error.h"
#include "loader/json_strict.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>

#include <unistd.h>

namespace onecard {

ExpertUseProfile::ExpertUseProfile(int64_t n_layers, int64_t n_experts) : n_layers_(n_layers), n_experts_(n_experts) {
    ONECARD_CHECK(n_layers >= 0 && n_experts >= 0, "expert profile: negative shape {} layers x {} experts", n_layers,
                  n_experts);
    counts_.assign(static_cast<size_t>(n_layers * n_experts), 0);
}

ExpertUseProfile ExpertUseProfile::from_counts(int64_t n_layers, int64_t n_experts, std::vector<uint64_t> counts) {
    ExpertUseProfile p(n_layers, n_experts);
    ONECARD_CHECK(counts.size() == p.counts_.size(), "expert profile: {} counts for {} layers x {} experts",
                  counts.size(), n_layers, n_experts);
    p.counts_ = std::move(counts);
    return p;
}

size_t ExpertUseProfile::index(int64_t layer, int64_t expert) const {
    ONECARD_CHECK(layer >= 0 && layer < n_layers_ && expert >= 0 && expert < n_experts_,
                  "expert profile: (layer {}, expert {}) outside {} layers x {} experts", layer, expert, n_layers_,
                  n_experts_);
    return static_cast<size_t>(layer * n_experts_ + expert);
}

uint64_t ExpertUseProfile::count(int64_t layer, int64_t expert) const {
    return counts_[index(layer, expert)];
}

uint64_t ExpertUseProfile::total() const {
    uint64_t t = 0;
    for (uint64_t c : counts_) t += c;
    return t;
}

void ExpertUseProfile::add(int64_t layer, int64_t expert, uint64_t n) {
    counts_[index(layer, expert)] += n;
}

void ExpertUseProfile::add_picks(int64_t layer, const int32_t* experts, int64_t n) {
    for (int64_t i = 0; i < n; ++i) add(layer, experts[i]);
}

void ExpertUseProfile::merge(const ExpertUseProfile& other) {
    ONECARD_CHECK(other.n_layers_ == n_layers_ && other.n_experts_ == n_experts_,
                  "expert profile: cannot merge a {} layers x {} experts profile into a {} x {} one", other.n_layers_,
                  other.n_experts_, n_layers_, n_experts_);
    for (size_t i = 0; i < counts_.size(); ++i) counts_[i] += other.counts_[i];
}

ExpertUseProfile ExpertUseProfile::first_experts(int64_t n_experts) const {
    ONECARD_CHECK(n_experts >= 0 && n_experts <= n_experts_, "expert profile: first {} of {} experts", n_experts,
                  n_experts_);
    ExpertUseProfile p(n_layers_, n_experts);
    for (int64_t l = 0; l < n_layers_; ++l)
        for (int64_t e = 0; e < n_experts; ++e) p.counts_[p.index(l, e)] = count(l, e);
    return p;
}

double ExpertUseProfile::coverage(const ExpertPlacement& placement) const {
    ONECARD_CHECK(placement.n_layers() == n_layers_ && placement.n_experts == n_experts_,
                  "expert profile: {} layers x {} experts, the placement has {} x {}", n_layers_, n_experts_,
                  placement.n_layers(), placement.n_experts);
    uint64_t on_gpu = 0;
    for (int64_t l = 0; l < n_layers_; ++l)
        for (int64_t e = 0; e < n_experts_; ++e)
            if (placement.on_gpu[static_cast<size_t>(l)][static_cast<size_t>(e)]) on_gpu += count(l, e);
    const uint64_t all = total();
    return all == 0 ? 1.0 : static_cast<double>(on_gpu) / static_cast<double>(all);
}

std::string ExpertUseProfile::to_json() const {
    nlohmann::ordered_json j;
    j["format"] = kFormat;
    j["version"] = kVersion;
    j["n_layers"] = n_layers_;
    j["n_experts"] = n_experts_;
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (int64_t l = 0; l < n_layers_; ++l) {
        auto first = counts_.begin() + l * n_experts_;
        rows.push_back(std::vector<uint64_t>(first, first + n_experts_));
    }
    j["counts"] = std::move(rows);
    return j.dump() + "\n";
}

ExpertUseProfile ExpertUseProfile::from_json(const std::string& text, const std::string& label) {
    const nlohmann::json j = parse_json_strict(text, label);  // throws "<label>: invalid JSON ..."
    ONECARD_CHECK(j.is_object(), "expert profile {}: top level must be an object", label);
    auto field = [&](const char* key) -> const nlohmann::json& {
        ONECARD_CHECK(j.contains(key), "expert profile {}: missing \"{}\"", label, key);
        return j.at(key);
    };
    ONECARD_CHECK(field("format").is_string() && field("format").get<std::string>() == kFormat,
                  "expert profile {}: \"format\" must be \"{}\"", label, kFormat);
    ONECARD_CHECK(field("version").is_number_integer() && field("version").get<int64_t>() == kVersion,
                  "expert profile {}: \"version\" {} is not the supported version {}", label, field("version").dump(),
                  kVersion);
    ONECARD_CHECK(field("n_layers").is_number_unsigned() && field("n_experts").is_number_unsigned(),
                  "expert profile {}: \"n_layers\" and \"n_experts\" must be non-negative integers", label);
    const auto L = field("n_layers").get<int64_t>(), E = field("n_experts").get<int64_t>();
    ONECARD_CHECK(L <= (1 << 16) && E <= (1 << 16), "expert profile {}: shape {} x {} is absurd", label, L, E);
    const nlohmann::json& rows = field("counts");
    ONECARD_CHECK(rows.is_array() && static_cast<int64_t>(rows.size()) == L,
                  "expert profile {}: \"counts\" must be an array of {} layer rows, got {}", label, L,
                  rows.is_array() ? std::to_string(rows.size()) + " rows" : std::string(rows.type_name()));
    ExpertUseProfile p(L, E);
    for (int64_t l = 0; l < L; ++l) {
        const nlohmann::json& row = rows[static_cast<size_t>(l)];
        ONECARD_CHECK(row.is_array() && static_cast<int64_t>(row.size()) == E,
                      "expert profile {}: counts row {} must hold {} expert counts", label, l, E);
        for (int64_t e = 0; e < E; ++e) {
            const nlohmann::json& c = row[static_cast<size_t>(e)];
            ONECARD_CHECK(c.is_number_unsigned(),
                          "expert profile {}: count (layer {}, expert {}) is {}, not a non-negative integer", label, l,
                          e, c.dump());
            p.counts_[p.index(l, e)] = c.get<uint64_t>();
        }
    }
    return p;
}

void ExpertUseProfile::save(const std::filesystem::path& path) const {
    check_integrity();
    const std::string text = to_json();
    std::filesystem::path tmp = path;
    tmp += fmt::format(".tmp.{}", ::getpid());
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        ONECARD_CHECK(out.good(), "expert profile: cannot write '{}': {}", tmp.string(), std::strerror(errno));
        out.write(text.data(), static_cast<std::streamsize>(text.size()));
        out.flush();
        if (!out.good()) {
            std::error_code ec;
            std::filesystem::remove(tmp, ec);
            fail("expert profile: writing '{}' failed", tmp.string());
        }
    }
    // rename() within one directory replaces the old file atomically (POSIX).
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        const std::string why = std::strerror(errno);
        std::error_code ec;
        std::filesystem::remove(tmp, ec);
        fail("expert profile: cannot move '{}' to '{}': {}", tmp.string(), path.string(), why);
    }
}

ExpertUseProfile ExpertUseProfile::load(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    ONECARD_CHECK(in.good(), "expert profile '{}': cannot open", path.string());
    std::ostringstream ss;
    ss << in.rdbuf();
    return from_json(ss.str(), "'" + path.string() + "'");
}

ExpertUseProfile ExpertUseProfile::load_for(const std::filesystem::path& path, int64_t n_layers, int64_t n_experts) {
    ExpertUseProfile p = load(path);
    ONECARD_CHECK(p.n_layers() == n_layers && p.n_experts() == n_experts,
                  "expert profile '{}' is for {} layers x {} experts, but the model has {} layers x {} experts",
                  path.string(), p.n_layers(), p.n_experts(), n_layers, n_experts);
    return p;
}

void ExpertUseProfile::check_integrity() const {
    ONECARD_CHECK(n_layers_ >= 0 && n_experts_ >= 0 && counts_.size() == static_cast<size_t>(n_layers_ * n_experts_),
                  "expert profile: {} counts for {} layers x {} experts", counts_.size(), n_layers_, n_experts_);
}

// The expert at rank r (0 = hottest) of a layer with E experts gets picks proportional to a
// stretched exponential of its rank fraction x = (r + 0.5) / E:
//     count(r) = round(1e6 * exp(-(x / 0.376)^1.5))
// Fitted to the three published points (least max error over the exponent and scale): for E = 256
// its curve is 89.7% at 52% of the pairs, 95.3% at 65%, 98.2% at 78% (within 0.4 points of the
// traces), the coldest expert getting ~1/75 of the hottest's picks. A plain exponential misses the
// 78% point by 0.7, a power law (1 - (1-x)^a) the 65% point by 1.3. Since every layer has the same
// curve, the global curve over all pairs is that curve too.
ExpertUseProfile synthetic_skewed_profile(int64_t n_layers, int64_t n_experts, uint64_t seed) {
    ExpertUseProfile p(n_layers, n_experts);
    std::mt19937_64 rng(seed);  // its sequence is fixed by the standard: the same ids everywhere
    std::vector<int64_t> ids(static_cast<size_t>(n_experts));
    for (int64_t l = 0; l < n_layers; ++l) {
        std::iota(ids.begin(), ids.end(), int64_t{0});
        // Fisher-Yates written out: std::shuffle's draw order differs between standard libraries.
        for (int64_t i = n_experts - 1; i > 0; --i)
            std::swap(ids[static_cast<size_t>(i)], ids[static_cast<size_t>(rng() % static_cast<uint64_t>(i + 1))]);
        for (int64_t r = 0; r < n_experts; ++r) {
            const double x = (static_cast<double>(r) + 0.5) / static_cast<double>(n_experts);
            const auto c = static_cast<uint64_t>(std::llround(1e6 * std::exp(-std::pow(x / 0.376, 1.5))));
            p.add(l, ids[static_cast<size_t>(r)], std::max<uint64_t>(c, 1));
        }
    }
    return p;
}

}  // namespace onecard
