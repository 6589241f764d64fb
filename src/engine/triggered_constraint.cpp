#include "engine/triggered_constraint.h"

#include "core/error.h"

#include <algorithm>

namespace onecard {

BytePattern::BytePattern(std::string pattern) : p_(std::move(pattern)) {
    const size_t m = p_.size();
    fail_.assign(m + 1, 0);
    for (size_t i = 1, k = 0; i < m; ++i) {
        while (k > 0 && p_[i] != p_[k]) k = fail_[k];
        if (p_[i] == p_[k]) ++k;
        fail_[i + 1] = k;
    }
}

size_t BytePattern::next(size_t k, uint8_t b) const {
    if (k == p_.size()) k = fail_[k];
    while (k > 0 && static_cast<uint8_t>(p_[k]) != b) k = fail_[k];
    return static_cast<uint8_t>(p_[k]) == b ? k + 1 : 0;
}

size_t BytePattern::completes_at(size_t k, std::string_view bytes, size_t* k_out) const {
    if (p_.empty()) {
        if (k_out) *k_out = 0;
        return std::string_view::npos;
    }
    for (size_t i = 0; i < bytes.size(); ++i) {
        k = next(k, static_cast<uint8_t>(bytes[i]));
        if (k == p_.size()) return i + 1;
    }
    if (k_out) *k_out = k;
    return std::string_view::npos;
}

TriggerTokens::TriggerTokens(std::shared_ptr<const grammar::TokenTrie> trie, std::string trigger, std::string guard)
    : trie_(std::move(trie)), trigger_(std::move(trigger)), guard_(std::move(guard)) {
    ONECARD_CHECK(trie_ != nullptr && trigger_.size() > 0, "trigger tokens: no vocabulary or an empty trigger");
    // The trigger's end is then always the guard's: the free phase tells the two apart by position.
    ONECARD_CHECK(guard_.size() <= trigger_.size() && trigger_.text().ends_with(guard_.text()),
                  "trigger tokens: the guard '{}' is not a suffix of the trigger '{}'", guard_.text(), trigger_.text());
    // A token completes a pattern from some state iff it does from one of its states: try all.
    auto completes_from_some_state = [](const BytePattern& p, const std::string& b) {
        for (size_t k = 0; k < p.size(); ++k)
            if (p.completes_at(k, b) != std::string_view::npos) return true;
        return false;
    };
    for (size_t id = 0; id < trie_->vocab_size(); ++id) {
        const std::string& b = trie_->token_bytes(static_cast<int32_t>(id));
        if (b.empty()) continue;
        if (completes_from_some_state(trigger_, b) || completes_from_some_state(guard_, b))
            candidates_.push_back(static_cast<int32_t>(id));
    }
}

TriggeredConstraint::TriggeredConstraint(std::shared_ptr<const TriggerTokens> trigger,
                                         std::shared_ptr<const grammar::TokenMasks> masks, int64_t vocab_size)
    : trigger_(std::move(trigger)), vocab_size_(vocab_size), matcher_(std::move(masks)) {
    ONECARD_CHECK(vocab_size_ > 0, "triggered constraint: vocabulary of {}", vocab_size_);
    ONECARD_CHECK(&matcher_.masks().trie() == &trigger_->trie(),
                  "triggered constraint: the grammar and the trigger are over different vocabularies");
}

std::string TriggeredConstraint::grammar_input(std::string_view bytes, size_t end) const {
    std::string in = trigger_->trigger();
    in.append(bytes.substr(end));
    return in;
}

bool TriggeredConstraint::breaks_guard(std::string_view bytes, size_t trigger_end, size_t* g_out) const {
    const size_t g_end = trigger_->guard().completes_at(g_, bytes, g_out);
    return g_end != std::string_view::npos && (trigger_end == std::string_view::npos || g_end < trigger_end);
}

void TriggeredConstraint::fill_mask(std::span<uint32_t> mask) {
    std::fill(mask.begin(), mask.end(), 0u);
    if (triggered_) {
        const size_t n = matcher_.masks().n_mask_words();
        ONECARD_CHECK(n <= mask.size(), "triggered constraint: vocabulary of {} words, logits of {}", n, mask.size());
        matcher_.fill_next_token_mask(mask.first(n));
        return;
    }
    // Every id below vocab_size_ (the last word partly), then out with the tokens that would write the
    // guard outside the trigger or complete the trigger into bytes the grammar refuses.
    const size_t n = std::min(mask.size() * 32, static_cast<size_t>(vocab_size_));
    std::fill(mask.begin(), mask.begin() + static_cast<std::ptrdiff_t>(n / 32), ~0u);
    if (n % 32 != 0) mask[n / 32] = (1u << (n % 32)) - 1u;
    const grammar::TokenTrie& trie = trigger_->trie();
    for (int32_t id : trigger_->candidates()) {
        if (static_cast<size_t>(id) >= n) continue;
        const std::string& b = trie.token_bytes(id);
        const size_t end = trigger_->completes_at(k_, b);
        if (breaks_guard(b, end) ||
            (end != std::string_view::npos && !matcher_.can_accept_bytes(grammar_input(b, end))))
            mask[static_cast<size_t>(id) / 32] &= ~(1u << (id % 32));
    }
}

bool TriggeredConstraint::accept(int32_t token) {
    if (triggered_) return matcher_.accept_token(token);
    if (token < 0 || token >= vocab_size_) return false;
    const grammar::TokenTrie& trie = trigger_->trie();
    if (static_cast<size_t>(token) >= trie.vocab_size() || trie.token_bytes(token).empty()) {
        k_ = g_ = 0;  // a special token: its text is not the trigger's
        return true;
    }
    const std::string& b = trie.token_bytes(token);
    size_t k = 0, g = 0;
    const size_t end = trigger_->completes_at(k_, b, &k);
    if (breaks_guard(b, end, &g)) return false;
    if (end == std::string_view::npos) {
        k_ = k;
        g_ = g;  // the guard did not complete (else it broke), so g is its match state after b
        return true;
    }
    triggered_ = true;
    return matcher_.accept_bytes(grammar_input(b, end));
}

void TriggeredConstraint::check_integrity() const {
    ONECARD_CHECK(k_ < trigger_->trigger().size(), "triggered constraint: partial match {} of a {}-byte trigger", k_,
                  trigger_->trigger().size());
    ONECARD_CHECK(g_ == 0 || g_ < trigger_->guard().size(), "triggered constraint: partial match {} of a {}-byte guard",
                  g_, trigger_->guard().size());
    ONECARD_CHECK(triggered_ || matcher_.n_bytes() == 0,
                  "triggered constraint: the grammar advanced before the trigger");
    matcher_.check_integrity();
}

}  // namespace onecard
