// vLLM's --speculative-config for `onecard serve`: a JSON object such as
// {"method": "mtp", "num_speculative_tokens": 3}. vLLM's DeepSeek MTP spelling "deepseek_mtp" is
// the same method; vLLM's "disable_by_batch_size" is read too. onecard's own key "draft_length":
// "adaptive" (default: num_speculative_tokens is the most a step drafts, engine/spec_policy.h) or
// "fixed" (always that many, as vLLM); "confidence_threshold" (dspark only: a draft stops before the first
// slot whose confidence is below it, DeepSpec's early stop). Keys onecard does not act on are refused by name rather
// than ignored, so a config never silently means something else here.
#pragma once

#include "onecard/engine.h"

#include <string>

namespace onecard::server {

// Throws onecard::Error naming the key or value at fault.
SpeculativeConfig parse_speculative_config(const std::string& json_text);

}  // namespace onecard::server
