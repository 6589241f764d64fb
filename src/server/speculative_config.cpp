#include "server/speculative_config.h"

#include "core/error.h"

#include <nlohmann/json.hpp>

namespace onecard::server {

SpeculativeConfig parse_speculative_config(const std::string& json_text) {
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(json_text);
    } catch (const nlohmann::json::exception& e) {
        fail("--speculative-config: not JSON ({})", e.what());
    }
    ONECARD_CHECK(j.is_object(), "--speculative-config: expected a JSON object, got '{}'", json_text);
    SpeculativeConfig c;
    for (const auto& [key, v] : j.items()) {
        if (key == "method") {
            ONECARD_CHECK(v.is_string(), "--speculative-config: method must be a string");
            c.method = v.get<std::string>();
        } else if (key == "num_speculative_tokens") {
            ONECARD_CHECK(v.is_number_integer(), "--speculative-config: num_speculative_tokens must be an integer");
            c.num_speculative_tokens = v.get<int64_t>();
        } else if (key == "draft_length") {
            ONECARD_CHECK(v.is_string() && (v == "adaptive" || v == "fixed"),
                          "--speculative-config: draft_length must be \"adaptive\" or \"fixed\"");
            c.fixed_draft_length = v == "fixed";
        } else if (key == "disable_by_batch_size") {
            ONECARD_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0,
                          "--speculative-config: disable_by_batch_size must be a non-negative integer");
            c.disable_by_batch_size = v.get<int64_t>();
        } else if (key == "confidence_threshold") {
            ONECARD_CHECK(v.is_number() && v.get<double>() >= 0.0 && v.get<double>() < 1.0,
                          "--speculative-config: confidence_threshold must be a number in [0, 1)");
            c.confidence_threshold = v.get<double>();
        } else {
            fail(
                "--speculative-config: key '{}' is not supported (onecard reads method, num_speculative_tokens, "
                "draft_length, disable_by_batch_size and confidence_threshold)",
                key);
        }
    }
    if (c.method == "deepseek_mtp") c.method = "mtp";
    ONECARD_CHECK(c.method == "mtp" || c.method == "dspark",
                  "--speculative-config: method '{}' is not supported (onecard has 'mtp' and 'dspark')", c.method);
    ONECARD_CHECK(c.confidence_threshold == 0.0 || c.method == "dspark",
                  "--speculative-config: confidence_threshold is DSpark's early stop (its confidence head); method "
                  "'{}' has none",
                  c.method);
    ONECARD_CHECK(c.num_speculative_tokens >= 1 && c.num_speculative_tokens <= 16,
                  "--speculative-config: num_speculative_tokens must be in [1, 16], got {}", c.num_speculative_tokens);
    return c;
}

}  // namespace onecard::server
