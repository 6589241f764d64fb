#include "engine/request.h"

#include "core/error.h"

#include <algorithm>

namespace onecard {

int64_t max_total_tokens(int64_t prompt_tokens, int64_t max_tokens, int64_t max_model_len) {
    ONECARD_CHECK(prompt_tokens > 0 && prompt_tokens < max_model_len && max_tokens > 0,
                  "request: {} prompt tokens, max_tokens {}, max_model_len {}", prompt_tokens, max_tokens,
                  max_model_len);
    return prompt_tokens + std::min(max_tokens, max_model_len - prompt_tokens);
}

void check_fits_kv_pool(int64_t max_total_tokens, const KvCacheManager& kv) {
    ONECARD_CHECK(max_total_tokens <= kv.max_tokens_per_sequence(),
                  "request: prompt + max_tokens = {} tokens exceeds the KV pool ({} tokens); lower max_tokens",
                  max_total_tokens, kv.max_tokens_per_sequence());
}

}  // namespace onecard
