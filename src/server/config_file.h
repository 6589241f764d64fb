// `onecard serve --config FILE`: the flag values a config file gives, as text, in file order. Both
// formats vLLM users bring are read: JSON ({"port": 8001, "allow-cidr": ["10.0.0.0/8"]}) and vLLM's
// YAML (`port: 8001`, `enable-prefix-caching: true`, lists as YAML sequences). The caller applies
// the values to its command-line options, so every value goes through the flag's own validation.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace onecard::server {

struct ConfigValue {
    std::string key;                  // as written in the file ("max_model_len", "max-model-len")
    std::vector<std::string> values;  // one per array/sequence element; scalars give one
};

// Reads `path`: JSON when it ends in ".json" or its first non-blank character is '{', YAML otherwise.
// The top level must be a mapping of scalars or lists of scalars; booleans come back as "true" or
// "false", numbers as written. Throws onecard::Error naming the file and the offending key.
std::vector<ConfigValue> read_config_file(const std::string& path);

// The flag name a config key means: '_' -> '-', leading "--" dropped ("max_model_len" -> "max-model-len").
std::string config_key_to_flag(const std::string& key);

}  // namespace onecard::server
