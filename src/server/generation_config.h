// The model's recommended sampling defaults from its generation_config.json, applied as vLLM applies
// them (`--generation-config auto|vllm|DIR`): temperature, top_p, top_k, min_p and repetition_penalty
// replace the neutral defaults of requests that leave them out; max_new_tokens bounds max_tokens
// (the smallest of the context left, the request's max_tokens and this).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace onecard::server {

struct SamplingDefaults {
    std::optional<float> temperature, top_p, min_p, repetition_penalty;
    std::optional<int32_t> top_k;
    std::optional<int64_t> max_tokens;  // generation_config's max_new_tokens

    bool empty() const { return !temperature && !top_p && !min_p && !repetition_penalty && !top_k && !max_tokens; }
    // "temperature=0.6, top_p=0.95" for the startup line ("" when empty).
    std::string describe() const;
};

// Reads <dir>/generation_config.json; no file -> no defaults. Keys other than the six above (eos ids,
// do_sample, ...) are ignored, as vLLM ignores them for sampling; null means absent. Throws
// onecard::Error naming the file and key for unreadable JSON or a value of the wrong type or range.
SamplingDefaults read_generation_config(const std::string& dir);

// `--generation-config`: "auto" reads the model directory, "vllm" uses none, anything else is a
// directory holding generation_config.json (which must exist there).
SamplingDefaults resolve_generation_config(const std::string& flag, const std::string& model_dir);

}  // namespace onecard::server
