#include "grammar/stack_set.h"

#include "core/error.h"

#include <algorithm>

namespace onecard::grammar {

namespace {
uint64_t hash_stack(std::span<const uint32_t> s) {
    uint64_t h = 1469598103934665603ull ^ s.size();
    for (uint32_t v : s) h = (h ^ v) * 1099511628211ull;
    return h;
}
}  // namespace

void StackSet::add(std::span<const uint32_t> s) {
    const uint64_t h = hash_stack(s);
    for (size_t i = 0; i < starts_.size(); ++i) {
        if (hashes_[i] != h) continue;
        const auto o = stack(i);
        if (o.size() == s.size() && std::equal(o.begin(), o.end(), s.begin())) return;
    }
    starts_.push_back(static_cast<uint32_t>(data_.size()));
    hashes_.push_back(h);
    data_.push_back(static_cast<uint32_t>(s.size()));
    data_.insert(data_.end(), s.begin(), s.end());
}

bool StackSet::has_accept() const {
    for (size_t i = 0; i < size(); ++i) {
        const auto s = stack(i);
        if (s.size() == 1 && s[0] == Grammar::kAcceptNode) return true;
    }
    return false;
}

bool StackSet::has_consumer(const Grammar& g) const {
    for (size_t i = 0; i < size(); ++i)
        if (!g.node(stack(i).back()).bytes.empty()) return true;
    return false;
}

bool StackSet::operator==(const StackSet& o) const {
    if (size() != o.size()) return false;
    for (size_t i = 0; i < size(); ++i) {
        bool found = false;
        for (size_t j = 0; j < o.size() && !found; ++j) {
            const auto a = stack(i), b = o.stack(j);
            found = a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
        }
        if (!found) return false;
    }
    return true;
}

void StackSet::check_integrity() const {
    ONECARD_CHECK(starts_.size() == hashes_.size(), "stack set: {} starts, {} hashes", starts_.size(), hashes_.size());
    size_t pos = 0;
    for (size_t i = 0; i < starts_.size(); ++i) {
        ONECARD_CHECK(starts_[i] == pos && pos < data_.size(), "stack set: stack {} misplaced", i);
        const auto s = stack(i);
        ONECARD_CHECK(!s.empty() && hashes_[i] == hash_stack(s), "stack set: stack {} empty or stale hash", i);
        for (size_t j = 0; j < i; ++j) {
            const auto o = stack(j);
            ONECARD_CHECK(!(o.size() == s.size() && std::equal(o.begin(), o.end(), s.begin())),
                          "stack set: stacks {} and {} are equal", j, i);
        }
        pos += s.size() + 1;
    }
    ONECARD_CHECK(pos == data_.size(), "stack set: {} words used of {}", pos, data_.size());
}

void close_stack(const Grammar& g, std::vector<uint32_t>& work, StackSet& out, bool& escaped) {
    if (work.size() > kMaxStackDepth) return;
    const uint32_t n = work.back();
    const Node& nd = g.node(n);
    if (!nd.bytes.empty() || (n == Grammar::kAcceptNode && work.size() == 1)) out.add(work);
    for (uint32_t e : nd.eps) {
        work.back() = e;
        close_stack(g, work, out, escaped);
    }
    for (const auto& c : nd.calls) {
        work.back() = c.ret;
        work.push_back(g.rule(c.rule).start);
        close_stack(g, work, out, escaped);
        work.pop_back();
    }
    work.back() = n;
    if (nd.is_end) {
        if (work.size() == 1) {
            escaped = true;
        } else {
            work.pop_back();  // return: the caller's frame already holds its continuation node
            close_stack(g, work, out, escaped);
            work.push_back(n);
        }
    }
}

bool advance(const Grammar& g, const StackSet& in, uint8_t b, StackSet& out, std::vector<uint32_t>& work) {
    out.clear();
    bool escaped = false;
    for (size_t i = 0; i < in.size(); ++i) {
        const auto s = in.stack(i);
        for (const auto& e : g.node(s.back()).bytes) {
            if (b < e.lo || b > e.hi) continue;
            work.assign(s.begin(), s.end());
            work.back() = e.to;
            close_stack(g, work, out, escaped);
        }
    }
    return escaped;
}

}  // namespace onecard::grammar
