// StackSet: the matcher's state, a deduplicated set of rule stacks over a Grammar, and the two
// operations every other part is built from: closure (expand epsilons, calls and returns until each
// stack's top can consume a byte) and advance (consume one byte).
//
// Why a set of explicit stacks (a nondeterministic pushdown automaton) and not an Earley parser:
// JSON Schema grammars are nearly deterministic (anyOf of differently-shaped objects is the main
// ambiguity, and it resolves within a few bytes), so the set stays at one to a few stacks of depth
// ~nesting, and a byte costs a few edge scans and small copies with no chart to grow. Earley's
// generality (any CFG, ambiguity without blow-up) buys nothing here and costs a chart per byte.
// It also makes the per-node token cache (token_masks.h) exact: what a token does to a stack
// depends only on the top frame until the token pops that frame.
#pragma once

#include "grammar/grammar.h"

#include <cstdint>
#include <span>
#include <vector>

namespace onecard::grammar {

// Stacks deeper than this are dropped (a safety bound for adversarial nesting; the server's own
// JSON limit is 128 levels, so valid output never gets near it).
inline constexpr size_t kMaxStackDepth = 1024;

class StackSet {
public:
    void clear() {
        data_.clear();
        starts_.clear();
        hashes_.clear();
    }
    bool empty() const { return starts_.empty(); }
    size_t size() const { return starts_.size(); }
    // Stack i, bottom first: [depth] node ids; the last one is the top.
    std::span<const uint32_t> stack(size_t i) const { return {data_.data() + starts_[i] + 1, data_[starts_[i]]}; }
    // Adds a copy of `s` unless an equal stack is already in the set.
    void add(std::span<const uint32_t> s);
    // True when some stack is [kAcceptNode]: the root rule has ended.
    bool has_accept() const;
    // True when some stack can still consume a byte.
    bool has_consumer(const Grammar& g) const;
    bool operator==(const StackSet& o) const;
    // Throws onecard::Error when the layout is inconsistent or two stacks are equal.
    void check_integrity() const;

private:
    std::vector<uint32_t> data_;    // [sum(depth + 1)] each stack as depth, then its nodes bottom first
    std::vector<uint32_t> starts_;  // [n_stacks] offset of each stack's depth word in data_
    std::vector<uint64_t> hashes_;  // [n_stacks] for fast dedup
};

// Expands `stack` (its top is any node) into the consuming stacks it stands for and adds them to
// `out`. A stack whose bottom frame ends sets `escaped` instead (only possible when the bottom is not
// kAcceptNode: token_masks.h runs stacks cut off below the top frame). `work` is scratch.
void close_stack(const Grammar& g, std::vector<uint32_t>& work, StackSet& out, bool& escaped);

// out = every stack of `in` after consuming byte `b`, closed. Returns whether some stack escaped its
// bottom frame (see close_stack). `work` is scratch.
bool advance(const Grammar& g, const StackSet& in, uint8_t b, StackSet& out, std::vector<uint32_t>& work);

}  // namespace onecard::grammar
