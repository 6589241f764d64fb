#include "engine/after_token_constraint.h"

#include "core/error.h"

#include <algorithm>

namespace onecard {

AfterTokenConstraint::AfterTokenConstraint(int32_t gate_token, int64_t vocab_size,
                                           std::unique_ptr<TokenConstraint> inner, std::vector<int32_t> reserved)
    : gate_token_(gate_token), vocab_size_(vocab_size), inner_(std::move(inner)), reserved_(std::move(reserved)) {
    ONECARD_CHECK(inner_ != nullptr, "after-token constraint: no inner constraint");
    ONECARD_CHECK(gate_token >= 0 && gate_token < vocab_size, "after-token constraint: gate token {} outside [0, {})",
                  gate_token, vocab_size);
    for (int32_t t : reserved_)
        ONECARD_CHECK(t >= 0 && t < vocab_size && t != gate_token,
                      "after-token constraint: reserved token {} is the gate or outside [0, {})", t, vocab_size);
}

bool AfterTokenConstraint::is_reserved(int32_t token) const {
    return std::find(reserved_.begin(), reserved_.end(), token) != reserved_.end();
}

void AfterTokenConstraint::fill_mask(std::span<uint32_t> mask) {
    if (gated_) {
        inner_->fill_mask(mask);
        return;
    }
    // Every id below vocab_size_ (the last word partly), nothing above.
    std::fill(mask.begin(), mask.end(), 0u);
    const size_t n = std::min(mask.size() * 32, static_cast<size_t>(vocab_size_));
    std::fill(mask.begin(), mask.begin() + static_cast<std::ptrdiff_t>(n / 32), ~0u);
    if (n % 32 != 0) mask[n / 32] = (1u << (n % 32)) - 1u;
    for (int32_t t : reserved_)
        if (static_cast<size_t>(t) / 32 < mask.size()) mask[static_cast<size_t>(t) / 32] &= ~(1u << (t % 32));
}

bool AfterTokenConstraint::accept(int32_t token) {
    if (gated_) return inner_->accept(token);
    if (token < 0 || token >= vocab_size_ || is_reserved(token)) return false;
    if (token == gate_token_) gated_ = true;
    return true;
}

void AfterTokenConstraint::check_integrity() const {
    ONECARD_CHECK(inner_ != nullptr, "after-token constraint: no inner constraint");
    inner_->check_integrity();
}

}  // namespace onecard
