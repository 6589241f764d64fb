#include "engine/token_constraint.h"

#include <cmath>

namespace onecard {

int64_t apply_token_constraint(TokenConstraint& c, std::span<float> row, int32_t eos_token_id,
                               std::vector<uint32_t>& mask) {
    mask.assign((row.size() + 31) / 32, 0u);
    c.fill_mask(mask);
    // EOS exactly when the constraint can terminate, whatever its mask says (a wrapper that lets
    // every id through, AfterTokenConstraint, leaves EOS to this).
    if (eos_token_id >= 0 && static_cast<size_t>(eos_token_id) < row.size()) {
        const uint32_t bit = 1u << (eos_token_id & 31);
        uint32_t& word = mask[static_cast<size_t>(eos_token_id) >> 5];
        word = c.can_terminate() ? word | bit : word & ~bit;
    }
    int64_t n_allowed = 0;
    for (size_t w = 0; w < mask.size(); ++w) {
        const uint32_t bits = mask[w];
        const size_t end = std::min(row.size(), (w + 1) * 32);
        if (bits == ~0u && end == (w + 1) * 32) {
            n_allowed += 32;
            continue;
        }
        for (size_t t = w * 32; t < end; ++t) {
            if ((bits >> (t & 31)) & 1u) {
                ++n_allowed;
            } else {
                row[t] = -INFINITY;
            }
        }
    }
    return n_allowed;
}

}  // namespace onecard
