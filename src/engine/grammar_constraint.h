// The TokenConstraint of a compiled grammar (src/grammar): a GrammarMatcher per request. The server
// gets the TokenMasks from its GrammarCache (one per schema) and hands the engine this constraint.
#pragma once

#include "engine/token_constraint.h"
#include "grammar/matcher.h"

#include <memory>

namespace onecard {

class GrammarConstraint : public TokenConstraint {
public:
    explicit GrammarConstraint(std::shared_ptr<const grammar::TokenMasks> masks) : matcher_(std::move(masks)) {}

    void fill_mask(std::span<uint32_t> mask) override;
    bool can_terminate() const override { return matcher_.can_terminate(); }
    bool accept(int32_t token) override { return matcher_.accept_token(token); }
    void check_integrity() const override { matcher_.check_integrity(); }

    const grammar::GrammarMatcher& matcher() const { return matcher_; }

private:
    grammar::GrammarMatcher matcher_;
};

}  // namespace onecard
