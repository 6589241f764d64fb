#include "grammar/token_masks.h"

#include "core/error.h"

namespace onecard::grammar {

TokenMasks::TokenMasks(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> trie)
    : grammar_(std::move(grammar)), trie_(std::move(trie)), entries_(grammar_->n_nodes()) {}

namespace {
// Sets with fewer members than this are stored as ids (4 bytes each) instead of a bitset.
constexpr size_t kSparseMax = 2048;

// The walk from a one-frame stack: records accepted tokens and where the frame ends.
struct EntryWalk {
    const Grammar& g;
    const TokenTrie& trie;
    std::vector<StackSet> levels;  // [max_token_len + 1] the state after each prefix length
    std::vector<uint32_t> work;
    std::vector<uint32_t>* accepted;
    std::vector<uint32_t>* escape_tokens;
    std::vector<uint32_t>* escape_walks;

    void visit(uint32_t tn, size_t depth) {
        for (uint32_t c = tn + 1; c < trie.subtree_end(tn); c = trie.subtree_end(c)) {
            const bool escaped = advance(g, levels[depth], trie.byte(c), levels[depth + 1], work);
            if (escaped) {
                for (const int32_t id : trie.tokens(c)) set_bit(*escape_tokens, id);
                if (trie.has_children(c)) escape_walks->push_back(c);
            }
            if (levels[depth + 1].empty()) continue;  // prune: no token below c is live inside the frame
            for (const int32_t id : trie.tokens(c)) set_bit(*accepted, id);
            visit(c, depth + 1);
        }
    }
};
}  // namespace

void TokenMasks::TokenSet::compact_from(std::vector<uint32_t>&& dense) {
    size_t n = 0;
    for (const uint32_t w : dense) n += static_cast<size_t>(__builtin_popcount(w));
    if (n > kSparseMax) {
        words = std::move(dense);
        return;
    }
    ids.reserve(n);
    for (size_t w = 0; w < dense.size(); ++w)
        for (uint32_t bits = dense[w]; bits != 0; bits &= bits - 1)
            ids.push_back(static_cast<int32_t>(w * 32 + static_cast<size_t>(__builtin_ctz(bits))));
}

void TokenMasks::TokenSet::or_into(std::span<uint32_t> mask) const {
    for (size_t i = 0; i < words.size(); ++i) mask[i] |= words[i];
    for (const int32_t id : ids) set_bit(mask, id);
}

std::unique_ptr<TokenMasks::Entry> TokenMasks::build_entry(uint32_t node) const {
    auto e = std::make_unique<Entry>();
    std::vector<uint32_t> accepted(n_mask_words(), 0), escape_tokens(n_mask_words(), 0);  // [n_mask_words]
    EntryWalk w{*grammar_,      *trie_,          std::vector<StackSet>(trie_->max_token_len() + 1), {}, &accepted,
                &escape_tokens, &e->escape_walks};
    const uint32_t top[1] = {node};
    w.levels[0].add(top);
    w.visit(0, 0);
    e->accepted.compact_from(std::move(accepted));
    e->escape_tokens.compact_from(std::move(escape_tokens));
    e->has_escape = !e->escape_walks.empty() || !e->escape_tokens.empty();
    return e;
}

const TokenMasks::Entry& TokenMasks::entry(uint32_t node) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto& slot = entries_[node];
    if (!slot) slot = build_entry(node);
    return *slot;  // entries are never replaced or freed while the TokenMasks lives
}

void TokenMasks::walk_live(uint32_t tn, const StackSet& state, std::span<uint32_t> mask, std::vector<StackSet>& levels,
                           size_t depth, std::vector<uint32_t>& work) const {
    for (uint32_t c = tn + 1; c < trie_->subtree_end(tn); c = trie_->subtree_end(c)) {
        StackSet& next = levels[depth + 1];
        advance(*grammar_, depth == 0 ? state : levels[depth], trie_->byte(c), next, work);
        if (next.empty()) continue;
        for (const int32_t id : trie_->tokens(c)) set_bit(mask, id);
        walk_live(c, state, mask, levels, depth + 1, work);
    }
}

void TokenMasks::fill_mask(const StackSet& state, std::span<uint32_t> mask) const {
    ONECARD_CHECK(mask.size() == n_mask_words(), "token mask: {} words for a vocabulary of {} tokens", mask.size(),
                  trie_->vocab_size());
    std::vector<uint32_t> work;
    std::vector<StackSet> levels;  // [max_token_len + 1] built only when an escape needs a walk
    StackSet popped;
    for (size_t i = 0; i < state.size(); ++i) {
        const auto s = state.stack(i);
        if (s.size() == 1) continue;  // [kAcceptNode]: only EOS, which the caller adds
        const Entry& e = entry(s.back());
        e.accepted.or_into(mask);
        if (!e.has_escape) continue;
        // The context: the frames below the top, continuing at the caller's return node.
        popped.clear();
        work.assign(s.begin(), s.end() - 1);
        bool escaped = false;
        close_stack(*grammar_, work, popped, escaped);
        if (popped.empty()) continue;
        e.escape_tokens.or_into(mask);
        if (e.escape_walks.empty()) continue;
        if (levels.empty()) levels.resize(trie_->max_token_len() + 1);
        // walk_live reads levels[0] as the start state only through `state`; seed it with `popped`.
        for (const uint32_t tn : e.escape_walks) walk_live(tn, popped, mask, levels, 0, work);
    }
}

size_t TokenMasks::cache_bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    size_t n = 0;
    for (const auto& e : entries_)
        if (e) n += sizeof(Entry) + e->accepted.bytes() + e->escape_tokens.bytes() + e->escape_walks.size() * 4;
    return n;
}

size_t TokenMasks::n_cached_nodes() const {
    std::lock_guard<std::mutex> lock(mu_);
    size_t n = 0;
    for (const auto& e : entries_) n += e != nullptr;
    return n;
}

void TokenMasks::check_integrity() const {
    std::lock_guard<std::mutex> lock(mu_);
    ONECARD_CHECK(entries_.size() == grammar_->n_nodes(), "token masks: {} entries for {} nodes", entries_.size(),
                  grammar_->n_nodes());
    for (const auto& e : entries_) {
        if (!e) continue;
        for (const TokenSet* t : {&e->accepted, &e->escape_tokens}) {
            ONECARD_CHECK(t->words.empty() || (t->words.size() == n_mask_words() && t->ids.empty()),
                          "token masks: entry bitset of the wrong size");
            for (const int32_t id : t->ids)
                ONECARD_CHECK(id >= 0 && static_cast<size_t>(id) < trie_->vocab_size(),
                              "token masks: id {} out of range", id);
        }
        for (const uint32_t tn : e->escape_walks)
            ONECARD_CHECK(tn < trie_->n_nodes() && trie_->has_children(tn), "token masks: bad escape walk node {}", tn);
    }
}

}  // namespace onecard::grammar
