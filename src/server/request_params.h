// Validation of OpenAI request bodies: typed field readers that throw ApiError(400) naming the field,
// and the sampling/streaming options shared by /v1/chat/completions and /v1/completions.
#pragma once

#include "onecard/engine.h"
#include "server/generation_config.h"
#include "server/request_json.h"

#include <cstdint>
#include <optional>
#include <string>

namespace onecard::server {

// Field readers: a missing or null field gives nullopt; a present field of the wrong type or outside
// [lo, hi] throws ApiError 400 with param = `key`. Integers also accept integral floats (2.0), as
// OpenAI's own validation does; booleans are never numbers.
std::optional<int64_t> opt_int(const Json& body, const char* key, int64_t lo, int64_t hi);
std::optional<double> opt_number(const Json& body, const char* key, double lo, double hi);
std::optional<bool> opt_bool(const Json& body, const char* key);
std::optional<std::string> opt_string(const Json& body, const char* key);

enum class ApiKind { Chat, Completion };

// The most choices one request may ask for (`n`); the server also bounds it by --max-num-seqs.
inline constexpr int64_t kMaxChoices = 16;

// /v1/completions' max_tokens when the body has none: OpenAI's legacy default, which vLLM's
// CompletionRequest keeps (and `onecard generate`'s). Every other API leaves it to the room the context
// has left, the engine's own default (kMaxTokensRemainingRoom).
inline constexpr int64_t kCompletionsDefaultMaxTokens = 16;

// What a generation request asks for besides its prompt.
struct GenerationOptions {
    ApiKind kind = ApiKind::Chat;
    SamplingParams sampling;
    int64_t n = 1;                      // choices, each an independent sequence (its own engine request)
    std::optional<int64_t> max_tokens;  // as given (max_completion_tokens for chat wins over max_tokens)
    bool stream = false;
    bool include_usage = false;  // stream_options.include_usage
    bool logprobs = false;
    int32_t top_logprobs = 0;
    std::optional<int64_t> default_max_tokens;  // the server's bound on max_tokens (generation_config)
};

// Reads every sampling and streaming field (temperature, top_p, top_k, min_p, presence/frequency/
// repetition penalties, seed, stop, stop_token_ids, ignore_eos, include_stop_str_in_output, logprobs,
// top_logprobs, n, stream, stream_options, max_tokens / max_completion_tokens, logit_bias, best_of).
// /v1/completions reads echo itself. Text is always decoded without special tokens (BOS/EOS), as
// vLLM's default skip_special_tokens does; the chat markers the parsers need are not special in the
// V4 vocabulary. Throws ApiError 400 naming the field.
// `defaults` (the model's generation_config) replaces the neutral value of every sampling field
// the body leaves out, as vLLM does.
GenerationOptions parse_generation_options(const Json& body, ApiKind kind, const SamplingDefaults& defaults = {});

// max_tokens as vLLM resolves it: the smallest of the context left (`room`), the request's own and the
// server's default bound (generation_config). A body without one asks for its API's default: the room,
// or kCompletionsDefaultMaxTokens on /v1/completions. The one place a request's max_tokens is decided.
int64_t resolve_max_tokens(const GenerationOptions& o, int64_t room);

}  // namespace onecard::server
