// Workloads for `onecard bench-serve` (and the long prompts of `validate`): random-word prompts of an
// exact token length (through the endpoint's /tokenize when it has one), a JSONL prompt file, and a
// multi-turn agent trace whose sessions re-send the conversation plus a new user message each turn.
#pragma once

#include "http_client.h"
#include "stream_request.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace onecard::client {

// One unit of work a benchmark worker runs start to finish: a single request, or the turns of a
// conversation sent one after another (each turn's body holds the whole conversation so far).
struct Session {
    std::string system;                   // chat system prompt ("" for none)
    std::vector<std::string> user_turns;  // one entry for a single request
    int64_t max_tokens = 128;
    int64_t expected_prompt_tokens = -1;  // the length the prompt was built to (-1: unknown)
};

// Random words drawn from a fixed list, `n_words` long, separated by spaces.
std::string random_words(std::mt19937_64& rng, int64_t n_words);

// Builds prompts of an exact token count. With /tokenize and /detokenize (onecard, vLLM) the text is
// cut to the length token-exactly; without them (the plain OpenAI API) the length is approximated
// from a word count and reported as unknown.
class PromptBuilder {
public:
    PromptBuilder(HttpClient& http, ApiKind kind, std::string model);
    bool has_tokenize() const { return has_tokenize_; }
    // Why there is no usable /tokenize ("HTTP 404", "transport: ...", ...); "" when there is one.
    const std::string& no_tokenize_reason() const { return no_tokenize_reason_; }
    // A prompt of `n_tokens` as the server counts it (template and BOS included) that starts with
    // `prefix` (a per-prompt nonce, so no two prompts share a cached prefix). `exact` is set when
    // /tokenize confirmed the count.
    std::string build(std::mt19937_64& rng, const std::string& prefix, int64_t n_tokens, bool* exact);
    // How many tokens the server counts for `user_text` sent alone (-1 without /tokenize).
    int64_t count(const std::string& user_text);

private:
    Json tokenize_body(const std::string& user_text) const;
    HttpClient& http_;
    ApiKind kind_;
    std::string model_;
    bool has_tokenize_ = false;
    std::string no_tokenize_reason_;
    int64_t overhead_ = 0;  // tokens the server adds around the text (BOS, chat template)
};

struct DatasetOptions {
    std::string name = "random";  // random | jsonl | agent-trace
    std::string path;             // jsonl / agent-trace file ("" for agent-trace: the built-in trace)
    int64_t num_prompts = 100;
    int64_t input_len = 1024, output_len = 128;
    uint64_t seed = 0;
};

// The sessions of one benchmark point. `salt` makes prompts distinct between points so a later
// point gets no cache hits from an earlier one (within an agent-trace session, turns share prefixes).
std::vector<Session> make_sessions(const DatasetOptions& o, PromptBuilder& pb, uint64_t salt);

// The request body of turn `i_turn` of `s`, given the assistant replies of the earlier turns.
Json session_body(const Session& s, size_t i_turn, const std::vector<std::string>& replies, ApiKind kind,
                  const std::string& model);

}  // namespace onecard::client
