#include "grammar/matcher.h"

#include "core/error.h"

namespace onecard::grammar {

GrammarMatcher::GrammarMatcher(std::shared_ptr<const TokenMasks> masks, size_t max_rollback_bytes)
    : masks_(std::move(masks)), grammar_(&masks_->grammar()), max_rollback_bytes_(max_rollback_bytes) {
    reset();
}

void GrammarMatcher::reset() {
    history_.clear();
    token_starts_.clear();
    n_bytes_ = 0;
    StackSet start;
    work_.assign({Grammar::kAcceptNode, grammar_->rule(grammar_->root()).start});
    bool escaped = false;
    close_stack(*grammar_, work_, start, escaped);
    history_.push_back(std::move(start));
}

bool GrammarMatcher::accept_byte(uint8_t b) {
    StackSet next;
    advance(*grammar_, state(), b, next, work_);
    if (next.empty()) return false;
    history_.push_back(std::move(next));
    ++n_bytes_;
    if (history_.size() > max_rollback_bytes_ + 1) history_.pop_front();
    return true;
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
    if (!can_accept_bytes(bytes)) return false;
    for (const char c : bytes) accept_byte(static_cast<uint8_t>(c));
    return true;
}

bool GrammarMatcher::can_accept_bytes(std::string_view bytes) const {
    StackSet a = state(), b;
    std::vector<uint32_t> work;
    for (const char c : bytes) {
        advance(*grammar_, a, static_cast<uint8_t>(c), b, work);
        if (b.empty()) return false;
        std::swap(a, b);
    }
    return true;
}

bool GrammarMatcher::accept_token(int32_t id) {
    if (id < 0 || static_cast<size_t>(id) >= masks_->trie().vocab_size()) return false;
    const std::string& bytes = masks_->trie().token_bytes(id);
    const size_t start = n_bytes_;
    if (bytes.empty() || !accept_bytes(bytes)) return false;
    token_starts_.push_back(start);
    // A token whose start state has left the history can no longer be rolled back.
    while (!token_starts_.empty() && n_bytes_ - token_starts_.front() >= history_.size()) token_starts_.pop_front();
    return true;
}

void GrammarMatcher::fill_next_token_mask(std::span<uint32_t> mask) const {
    std::fill(mask.begin(), mask.end(), 0u);
    masks_->fill_mask(state(), mask);
}

void GrammarMatcher::rollback_bytes(size_t n) {
    ONECARD_CHECK(n < history_.size(), "grammar matcher: cannot roll back {} bytes (history keeps {})", n,
                  history_.size() - 1);
    history_.resize(history_.size() - n);
    n_bytes_ -= n;
    while (!token_starts_.empty() && token_starts_.back() >= n_bytes_) token_starts_.pop_back();
}

void GrammarMatcher::rollback_tokens(size_t n) {
    if (n == 0) return;
    ONECARD_CHECK(n <= token_starts_.size(), "grammar matcher: cannot roll back {} tokens (history keeps {})", n,
                  token_starts_.size());
    rollback_bytes(n_bytes_ - token_starts_[token_starts_.size() - n]);
}

void GrammarMatcher::check_integrity() const {
    ONECARD_CHECK(!history_.empty() && history_.size() <= max_rollback_bytes_ + 1 && history_.size() <= n_bytes_ + 1,
                  "grammar matcher: {} states kept for {} bytes (limit {})", history_.size(), n_bytes_,
                  max_rollback_bytes_);
    size_t prev = n_bytes_ - (history_.size() - 1);
    for (const size_t t : token_starts_) {
        ONECARD_CHECK(t >= prev && t < n_bytes_, "grammar matcher: token start {} out of order", t);
        prev = t;
    }
    for (const auto& s : history_) {
        s.check_integrity();
        for (size_t i = 0; i < s.size(); ++i) {
            const auto st = s.stack(i);
            ONECARD_CHECK(st.front() == Grammar::kAcceptNode, "grammar matcher: a stack lost its accept frame");
            for (uint32_t v : st) ONECARD_CHECK(v < grammar_->n_nodes(), "grammar matcher: node {} out of range", v);
        }
    }
}

}  // namespace onecard::grammar
