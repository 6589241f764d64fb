// GrammarMatcher: one request's position in a grammar. Advances byte by byte (or token by token),
// answers whether the value is finished, fills the next token's mask, and rolls back.
//
// Rollback keeps the state after every byte (a StackSet is a few dozen words), so rolling back N
// bytes or N tokens is popping history; speculative decoding can accept draft tokens, then roll the
// rejected ones back. History is bounded by max_rollback_bytes: older states are dropped.
#pragma once

#include "grammar/stack_set.h"
#include "grammar/token_masks.h"

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string_view>

namespace onecard::grammar {

class GrammarMatcher {
public:
    static constexpr size_t kDefaultMaxRollbackBytes = 1 << 16;

    explicit GrammarMatcher(std::shared_ptr<const TokenMasks> masks,
                            size_t max_rollback_bytes = kDefaultMaxRollbackBytes);

    // Consumes `bytes` if every byte keeps the matcher live; otherwise changes nothing and returns
    // false. (Use accept_byte to find the first bad byte.)
    bool accept_bytes(std::string_view bytes);
    bool accept_byte(uint8_t b);
    // The token's bytes (the vocabulary's); false (nothing consumed) when it would kill the matcher
    // or has no bytes (a special token: EOS is the caller's business, see can_terminate()).
    bool accept_token(int32_t id);
    // Would `bytes` keep the matcher live? Does not modify it. (Byte-path check, independent of the
    // token-mask cache: the tests compare the two.)
    bool can_accept_bytes(std::string_view bytes) const;

    // The root value may end here: EOS is allowed now.
    bool can_terminate() const { return state().has_accept(); }
    // The root value has ended and no byte can follow: only EOS is allowed.
    bool is_complete() const { return can_terminate() && !state().has_consumer(*grammar_); }
    // No byte and no EOS can follow (only after a caller ignored the mask; accept_* never gets here).
    bool is_dead() const { return state().empty(); }

    // mask: [n_mask_words] overwritten; bit id set when token id keeps the matcher live. EOS is not
    // included: the caller allows it when can_terminate().
    void fill_next_token_mask(std::span<uint32_t> mask) const;

    // Bytes consumed since construction (or reset), and how many of them can still be rolled back.
    size_t n_bytes() const { return n_bytes_; }
    size_t n_tokens() const { return token_starts_.size(); }
    // Undo the last n bytes / n accepted tokens. Throws onecard::Error beyond the kept history. Rolling
    // bytes back into the middle of a token keeps that token counted (it now ends where the bytes do).
    void rollback_bytes(size_t n);
    void rollback_tokens(size_t n);
    void reset();

    const TokenMasks& masks() const { return *masks_; }
    const StackSet& state() const { return history_.back(); }
    // Throws onecard::Error when history, token boundaries and byte count disagree, or a stack is bad.
    void check_integrity() const;

private:
    std::shared_ptr<const TokenMasks> masks_;
    const Grammar* grammar_;
    size_t max_rollback_bytes_;
    std::deque<StackSet> history_;     // [kept bytes + 1] the state after each kept byte; back() is now
    std::deque<size_t> token_starts_;  // [n kept tokens] n_bytes_ before each accepted token
    size_t n_bytes_ = 0;
    std::vector<uint32_t> work_;
};

}  // namespace onecard::grammar
