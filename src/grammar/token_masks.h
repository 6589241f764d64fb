// TokenMasks: a Grammar bound to a vocabulary, with the per-node token sets cached.
//
// What a token does to a stack depends only on the stack's top frame until the token's bytes end
// the rule of that frame (a pop below it). So for each consuming node t, walking the trie once from
// the one-frame stack [t] splits the vocabulary into:
//   accepted:  some path stays live without ever leaving t's rule frame (live in every context),
//   escapes:   trie nodes where a path ends t's rule (the rest depends on the frames below),
//   rejected:  everything else (dead in every context).
// The mask of a real stack S with top t is then accepted(t) OR, from the popped stack E (S without
// its top, closed), each escape node's own tokens (when E is live) and its subtree walked from E.
// The escape sets are small (for a string body: tokens carrying the closing quote), so a mask is a
// few bitset ORs and short walks. Entries are built lazily on first use and then shared by every
// matcher of the grammar (this is the "context-independent token cache" of xgrammar/llguidance).
#pragma once

#include "grammar/grammar.h"
#include "grammar/stack_set.h"
#include "grammar/token_trie.h"

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

namespace onecard::grammar {

class TokenMasks {
public:
    TokenMasks(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> trie);

    const Grammar& grammar() const { return *grammar_; }
    const TokenTrie& trie() const { return *trie_; }
    size_t n_mask_words() const { return trie_->n_mask_words(); }

    // mask: [n_mask_words] ORed with the tokens allowed from `state` (bit id%32 of word id/32).
    // Does not clear `mask` first. Thread-safe (cache entries are built under a lock).
    void fill_mask(const StackSet& state, std::span<uint32_t> mask) const;

    // Cache statistics, for the benchmark and tests.
    size_t n_cached_nodes() const;

    // Throws onecard::Error when a cached entry's shape disagrees with the vocabulary.
    void check_integrity() const;

    // Bytes held by the cached entries (the benchmark reports it).
    size_t cache_bytes() const;

private:
    // A token set stored densely (a bitset) or, when it has few members, as their ids: most
    // structural nodes allow a handful of tokens, and 129,280 bits per node would be 16 KiB each.
    struct TokenSet {
        std::vector<uint32_t> words;  // [n_mask_words] or empty
        std::vector<int32_t> ids;     // used when words is empty
        void compact_from(std::vector<uint32_t>&& dense);
        void or_into(std::span<uint32_t> mask) const;
        bool empty() const { return words.empty() && ids.empty(); }
        size_t bytes() const { return words.size() * 4 + ids.size() * 4; }
    };
    struct Entry {
        TokenSet accepted;                   // live without leaving the frame
        TokenSet escape_tokens;              // tokens ending exactly where the frame ends
        std::vector<uint32_t> escape_walks;  // trie nodes with children where the frame ended
        bool has_escape = false;
    };
    const Entry& entry(uint32_t node) const;
    std::unique_ptr<Entry> build_entry(uint32_t node) const;
    // Walks the children of trie node `tn` from `state` (a real stack set), setting live tokens.
    void walk_live(uint32_t tn, const StackSet& state, std::span<uint32_t> mask, std::vector<StackSet>& levels,
                   size_t depth, std::vector<uint32_t>& work) const;

    std::shared_ptr<const Grammar> grammar_;
    std::shared_ptr<const TokenTrie> trie_;
    mutable std::mutex mu_;
    mutable std::vector<std::unique_ptr<Entry>> entries_;  // [n_nodes] built on first use, under mu_
};

inline void set_bit(std::span<uint32_t> mask, int32_t id) {
    mask[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
}
inline bool test_bit(std::span<const uint32_t> mask, int32_t id) {
    return (mask[static_cast<size_t>(id) >> 5] >> (id & 31)) & 1u;
}

}  // namespace onecard::grammar
