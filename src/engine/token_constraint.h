// TokenConstraint: a per-request restriction on which token may be sampled next (grammar-constrained
// decoding: JSON mode, JSON Schema, strict tool arguments). Before a request's row is sampled the
// engine builds its allowed-token bitmask once (build_token_mask) and either applies it to the logits
// on the host (apply_token_mask) or hands it to the runner, which applies it in its device sampler;
// then it advances the constraint with the sampled token. EOS is the engine's business: allowed
// exactly when can_terminate().
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

// Words of a bitmask over `vocab` tokens.
inline int64_t token_mask_words(int64_t vocab) {
    return (vocab + 31) / 32;
}

// Fills `mask` ([token_mask_words(vocab)]) with the tokens `c` allows next: its fill_mask, EOS set
// exactly when can_terminate() and eos_token_id >= 0 (whatever the constraint's own bit says), bits at
// or past `vocab` cleared. Returns how many tokens are allowed. The host and device paths both take
// their mask from here, so they exclude the same tokens.
int64_t build_token_mask(TokenConstraint& c, std::span<uint32_t> mask, int64_t vocab, int32_t eos_token_id);

// Sets every logit of `row` whose bit in `mask` is clear to -inf (what a sampler then never picks).
void apply_token_mask(std::span<float> row, std::span<const uint32_t> mask);

// build_token_mask into `mask` (scratch, resized) then apply_token_mask on `row` ([vocab]). Returns
// how many tokens stay allowed.
int64_t apply_token_constraint(TokenConstraint& c, std::span<float> row, int32_t eos_token_id,
                               std::vector<uint32_t>& mask);

}  // namespace onecard
