// TokenConstraint: a per-request restriction on which token may be sampled next (grammar-constrained
// decoding: JSON mode, JSON Schema, strict tool arguments). The engine asks it for a mask before
// sampling the request's row on the host, applies the mask to the logits, and advances it with the
// sampled token. EOS is the engine's business: allowed exactly when can_terminate().
// Rows of constrained requests are never sampled on the device (the GPU mask path is future work).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace onecard {

class TokenConstraint {
public:
    virtual ~TokenConstraint() = default;
    // mask: [ceil(vocab / 32)] overwritten; bit t (word t / 32, bit t % 32) set when token t may come
    // next. EOS is not included.
    virtual void fill_mask(std::span<uint32_t> mask) = 0;
    // The constrained text may end here: EOS may be sampled now.
    virtual bool can_terminate() const = 0;
    // Advances past a sampled token other than EOS. False when the token breaks the constraint
    // (the engine then fails the request: it only samples masked tokens, so this is a bug).
    virtual bool accept(int32_t token) = 0;
    virtual void check_integrity() const = 0;
};

// Sets every logit of `row` ([vocab]) the constraint forbids to -inf (EOS kept exactly when
// can_terminate() and eos_token_id >= 0, whether or not the mask has its bit). `mask` is scratch, resized as needed. Returns how many
// tokens stay allowed.
int64_t apply_token_constraint(TokenConstraint& c, std::span<float> row, int32_t eos_token_id,
                               std::vector<uint32_t>& mask);

}  // namespace onecard
