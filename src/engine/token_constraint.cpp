#include "engine/token_constraint.h"

#include "core/error.h"

#include <bit>
#include <cmath>

namespace onecard {

int64_t build_token_mask(TokenConstraint& c, std::span<uint32_t> mask, int64_t vocab, int32_t eos_token_id) {
    ONECARD_CHECK(vocab >= 0 && static_cast<int64_t>(mask.size()) == token_mask_words(vocab),
                  "token mask: {} words for a vocabulary of {}", mask.size(), vocab);
    std::fill(mask.begin(), mask.end(), 0u);
    c.fill_mask(mask);
    // EOS exactly when the constraint can terminate, whatever its mask says (a wrapper that lets
    // every id through, AfterTokenConstraint, leaves EOS to this).
    if (eos_token_id >= 0 && eos_token_id < vocab) {
        const uint32_t bit = 1u << (eos_token_id & 31);
        uint32_t& word = mask[static_cast<size_t>(eos_token_id) >> 5];
        word = c.can_terminate() ? word | bit : word & ~bit;
    }
    if (vocab % 32 != 0) mask.back() &= (1u << (vocab % 32)) - 1u;
    int64_t n_allowed = 0;
    for (uint32_t w : mask) n_allowed += std::popcount(w);
    return n_allowed;
}

void apply_token_mask(std::span<float> row, std::span<const uint32_t> mask) {
    ONECARD_CHECK(mask.size() * 32 >= row.size(), "token mask: {} words for a row of {}", mask.size(), row.size());
    for (size_t w = 0; w * 32 < row.size(); ++w) {
        const uint32_t bits = mask[w];
        if (bits == ~0u) continue;
        const size_t end = std::min(row.size(), (w + 1) * 32);
        for (size_t t = w * 32; t < end; ++t)
            if (!((bits >> (t & 31)) & 1u)) row[t] = -INFINITY;
    }
}

int64_t apply_token_constraint(TokenConstraint& c, std::span<float> row, int32_t eos_token_id,
                               std::vector<uint32_t>& mask) {
    const auto vocab = static_cast<int64_t>(row.size());
    mask.resize(static_cast<size_t>(token_mask_words(vocab)));
    const int64_t n_allowed = build_token_mask(c, mask, vocab, eos_token_id);
    apply_token_mask(row, mask);
    return n_allowed;
}

}  // namespace onecard
