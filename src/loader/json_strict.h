// Strict JSON parsing for untrusted checkpoint metadata: nlohmann silently keeps one of two equal
// keys, which would let a hostile safetensors header or index hide a tensor. This parser rejects
// duplicate keys and absurd nesting, and turns every parse failure into an onecard::Error.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace onecard {

struct JsonStrictOptions {
    // How a duplicate top-level key is called in messages ("tensor name", "key").
    std::string top_level_key_noun = "key";
    int max_depth = 32;
};

// Parses `text`; `label` (a file name) prefixes every error message. Throws onecard::Error on
// invalid JSON ("invalid JSON"), duplicate keys at any depth ("duplicate <noun> \"K\"") and nesting
// deeper than max_depth.
nlohmann::json parse_json_strict(std::string_view text, const std::string& label,
                                 const JsonStrictOptions& options = {});

}  // namespace onecard
