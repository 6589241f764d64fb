// AfterTokenConstraint: no restriction until a gate token is sampled, then an inner constraint.
// DeepSeek's thinking mode writes `{reasoning}</think>{answer}`: structured output constrains the
// answer only, so the reasoning stays free and the JSON can never land in it (the inner grammar starts
// at the token after </think>). Before the gate EOS is refused (can_terminate() is false): ending
// inside the reasoning would leave no answer at all, so the request runs until it writes the gate or
// reaches max_tokens ("length"). Tokens in `reserved` are refused before the gate too: with tools held
// to their grammar the DSML marker is one of them, since a tool call inside the reasoning is never
// parsed as a call (DeepSeek's encoder writes calls after </think>) and would reach the client as
// markup in reasoning_content.
#pragma once

#include "engine/token_constraint.h"

#include <memory>
#include <vector>

namespace onecard {

class AfterTokenConstraint : public TokenConstraint {
public:
    // vocab_size: the ids the free phase allows ([0, vocab_size)) but `reserved`; gate_token: the token
    // that ends it (allowed, like every other, before the gate; never reserved).
    AfterTokenConstraint(int32_t gate_token, int64_t vocab_size, std::unique_ptr<TokenConstraint> inner,
                         std::vector<int32_t> reserved = {});

    void fill_mask(std::span<uint32_t> mask) override;
    bool can_terminate() const override { return gated_ && inner_->can_terminate(); }
    bool accept(int32_t token) override;
    void check_integrity() const override;

    bool gated() const { return gated_; }  // the gate token was sampled: the inner constraint rules

private:
    bool is_reserved(int32_t token) const;

    int32_t gate_token_;
    int64_t vocab_size_;
    std::unique_ptr<TokenConstraint> inner_;
    std::vector<int32_t> reserved_;  // refused before the gate
    bool gated_ = false;
};

}  // namespace onecard
