#include "engine/grammar_constraint.h"

#include "core/error.h"

namespace onecard {

void GrammarConstraint::fill_mask(std::span<uint32_t> mask) {
    // The grammar's vocabulary may be shorter than the model's rows (padding ids): those stay 0.
    const size_t n = matcher_.masks().n_mask_words();
    ONECARD_CHECK(n <= mask.size(), "grammar constraint: vocabulary of {} words, logits of {}", n, mask.size());
    std::fill(mask.begin(), mask.end(), 0u);
    matcher_.fill_next_token_mask(mask.first(n));
}

}  // namespace onecard
