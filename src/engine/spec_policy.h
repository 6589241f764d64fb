// How many drafts a decode row gets this step (issue 17): speculation pays only while a verify step
// of B·(k+1) tokens costs less than the tokens it is expected to yield, and both sides move: the
// acceptance with the traffic, the step cost with the batch (a memory-bound GPU verifies k + 1 tokens
// at nearly the price of one; at saturation, or on a compute-bound CPU, it pays for every token).
// So both are measured while serving:
//   * acceptance: per draft position j, the decayed share of rows offered >= j drafts whose first j
//     were all accepted (p_j); a row with k drafts is expected to emit E(k) = 1 + p_1 + ... + p_k;
//   * step cost: the decayed mean wall time of steps per token-count bucket (powers of two), read by
//     linear interpolation; a token count past every observed one costs what the largest observed
//     step cost (optimism: it gets tried, then measured).
// The choice for a decode batch of B rows: k* = argmax E(k) · t(B) / t(B·(k+1)) over k in [0, max],
// k = 0 (plain decode) unless some k gains at least kMinGain. When k* is 0, every kProbeEvery-th step
// still drafts one token, so a changed acceptance or cost can switch speculation back on.
// DraftLength::Fixed always drafts the configured number (vLLM's behaviour); disable_by_batch_size
// (vLLM's key) turns drafting off while more requests than that are running or waiting.
#pragma once

#include <cstdint>
#include <vector>

namespace onecard {

enum class DraftLength { Adaptive, Fixed };

struct SpecPolicyConfig {
    int64_t max_drafts = 0;  // num_speculative_tokens: the most drafts a row may get
    DraftLength length = DraftLength::Adaptive;
    int64_t disable_by_batch_size = 0;  // > 0: no drafts while more requests than this are live
};

class SpecPolicy {
public:
    static constexpr double kMinGain = 1.05;     // expected speed-up a draft length must promise
    static constexpr int64_t kProbeEvery = 64;   // steps between one-draft probes while off
    static constexpr double kDecay = 1.0 / 256;  // per observation: memory of ~256 rows / steps
    static constexpr double kPriorWeight = 2.0;  // pseudo-rows behind the acceptance prior

    explicit SpecPolicy(SpecPolicyConfig config);

    // Drafts per decode row for a step with `decode_rows` decode rows and `live` requests running
    // or waiting. Not const: the probe counter advances.
    int64_t drafts_for_step(int64_t decode_rows, int64_t live);
    // One verified row: it was offered n_drafts and its first n_accepted were kept.
    void record_verify(int64_t n_drafts, int64_t n_accepted);
    // One executed step: n_tokens computed (drafts included) in `seconds` of wall time.
    void record_step(int64_t n_tokens, double seconds);

    // p_j for j in [1, max_drafts] (index j - 1).
    std::vector<double> acceptance() const;
    // E(k): tokens a row with k drafts is expected to emit.
    double expected_tokens(int64_t k) const;
    // Seconds of a step of n tokens by the measured model; 0 before any step was recorded.
    double step_seconds(int64_t n_tokens) const;
    // The gain E(k) · t(B) / t(B·(k+1)) the choice maximises (1 for k = 0).
    double gain(int64_t decode_rows, int64_t k) const;
    const SpecPolicyConfig& config() const { return config_; }

    // Throws onecard::Error unless the counts are finite, non-negative and consistent.
    void check_integrity() const;

private:
    struct Bucket {
        double weight = 0, tokens = 0, seconds = 0;  // decayed sums
    };
    SpecPolicyConfig config_;
    std::vector<double> offered_, reached_;  // [max_drafts] decayed row counts per draft position
    std::vector<Bucket> buckets_;            // [64] by ceil(log2(n_tokens))
    int64_t steps_off_ = 0;                  // consecutive steps that chose k = 0 (probe schedule)
};

}  // namespace onecard
