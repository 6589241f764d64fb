// Per-request scheduling state. Token ranges of a request, as the scheduler sees them:
//
//   | prompt ................ | output ......... |
//   |<---- num_computed_tokens ---->|<- to compute ->|
//   0                                              num_tokens()
//
// A step computes a contiguous range [num_computed_tokens, num_computed_tokens + n) and, when that
// range reaches num_tokens(), the runner returns logits and one new token is appended. Preemption
// (recompute) frees the KV and resets num_computed_tokens to 0; the generated tokens are kept, so the
// resumed request re-prefills prompt + output and continues exactly where it stopped. With prefix
// caching, admission (first or after a preemption) may start num_computed_tokens at a cached prefix.
#pragma once

#include "kvcache/kv_manager.h"
#include "onecard/engine.h"

#include <cstdint>
#include <vector>

namespace onecard {

enum class RequestStatus { Waiting, Running, Finished };

struct Request {
    RequestId id = 0;
    std::vector<int32_t> prompt;
    std::vector<int32_t> output;
    SamplingParams params;
    uint64_t seed = 0;  // resolved seed (params.seed or one the engine drew)
    // max_total_tokens(prompt, max_tokens, max_model_len), set at admission: the request ends ("length")
    // when num_tokens() reaches it, and it is the KV the request may ever need.
    int64_t max_total_tokens = 0;

    RequestStatus status = RequestStatus::Waiting;
    int64_t num_computed_tokens = 0;
    KvHandle kv;                  // valid only while Running
    int64_t num_sent_blocks = 0;  // blocks of kv's table the runner has been sent (0: send it whole)
    bool paused = false;          // the engine's event queue for it is full: skip it this step
    int64_t n_preemptions = 0;
    // Prefix caching: chain hashes of the full blocks of prompt + output known so far, and the prompt
    // tokens its first admission found cached (-1 until admitted; usage.cached_tokens).
    std::vector<BlockHash> block_hashes;
    int64_t num_cached_tokens = -1;
    // Set by EngineCore (the scheduler keeps no clock): taken in, first scheduled.
    RequestTimes times;

    int64_t num_tokens() const { return static_cast<int64_t>(prompt.size() + output.size()); }
    int64_t num_prompt_tokens() const { return static_cast<int64_t>(prompt.size()); }
    SequenceTokens tokens() const { return SequenceTokens(prompt, output); }
    int32_t token_at(int64_t pos) const {
        const auto np = num_prompt_tokens();
        return pos < np ? prompt[static_cast<size_t>(pos)] : output[static_cast<size_t>(pos - np)];
    }
};

// min(prompt + max_tokens, max_model_len) without overflow (max_tokens may be kMaxTokensRemainingRoom):
// the most tokens a request's sequence reaches. Needs 0 < prompt_tokens < max_model_len and max_tokens > 0.
int64_t max_total_tokens(int64_t prompt_tokens, int64_t max_tokens, int64_t max_model_len);

// The one check that a request fits the KV pool on its own (else it could only ever be preempted):
// throws onecard::Error unless max_total_tokens is at most what the pool's blocks hold.
void check_fits_kv_pool(int64_t max_total_tokens, const KvCacheManager& kv);

}  // namespace onecard
