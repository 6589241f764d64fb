#include "engine/stop_checker.h"

#include "core/error.h"

#include <algorithm>

namespace onecard {

StopChecker::StopChecker(std::vector<std::string> stop_strings, bool include_stop_str)
    : stops_(std::move(stop_strings)), include_stop_str_(include_stop_str) {
    for (const auto& s : stops_) ONECARD_CHECK(!s.empty(), "stop checker: empty stop string");
}

StopChecker::Result StopChecker::push(std::string_view delta) {
    ONECARD_CHECK(!stopped_, "stop checker: push after a stop string matched");
    pending_.append(delta);
    Result r;
    // Earliest match wins; at the same start, the longer stop string (it ends later, so the shorter
    // one would have matched first only if it started earlier).
    size_t best_pos = std::string::npos;
    const std::string* best = nullptr;
    for (const auto& s : stops_) {
        const size_t pos = pending_.find(s);
        if (pos != std::string::npos && (pos < best_pos || (pos == best_pos && s.size() > best->size()))) {
            best_pos = pos;
            best = &s;
        }
    }
    if (best != nullptr) {
        r.stopped = true;
        r.matched = *best;
        r.text = pending_.substr(0, include_stop_str_ ? best_pos + best->size() : best_pos);
        pending_.clear();
        stopped_ = true;
        return r;
    }
    // Hold back the longest suffix of pending_ that is a proper prefix of a stop string.
    size_t hold = 0;
    for (const auto& s : stops_) {
        const size_t max_len = std::min(s.size() - 1, pending_.size());
        for (size_t len = max_len; len > hold; --len) {
            if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
                hold = len;
                break;
            }
        }
    }
    r.text = pending_.substr(0, pending_.size() - hold);
    pending_.erase(0, pending_.size() - hold);
    return r;
}

std::string StopChecker::flush() {
    std::string out = std::move(pending_);
    pending_.clear();
    return out;
}

}  // namespace onecard
