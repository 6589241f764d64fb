// `serve --speculative-config` (vLLM's JSON spelling): what it accepts and what it refuses by name.
#include "core/error.h"
#include "server/speculative_config.h"

#include <gtest/gtest.h>

namespace onecard {
namespace {

std::string error_of(const std::string& json) {
    try {
        server::parse_speculative_config(json);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(SpeculativeConfig, ParsesVllmSpelling) {
    const SpeculativeConfig c = server::parse_speculative_config(R"({"method":"mtp","num_speculative_tokens":3})");
    EXPECT_EQ(c.method, "mtp");
    EXPECT_EQ(c.num_speculative_tokens, 3);
    EXPECT_TRUE(c.enabled());
    EXPECT_EQ(server::parse_speculative_config(R"({"method":"deepseek_mtp","num_speculative_tokens":1})").method,
              "mtp");
    EXPECT_FALSE(c.fixed_draft_length) << "the draft length adapts unless asked not to";
    EXPECT_EQ(c.disable_by_batch_size, 0);
    const SpeculativeConfig f = server::parse_speculative_config(
        R"({"method":"mtp","num_speculative_tokens":2,"draft_length":"fixed","disable_by_batch_size":8})");
    EXPECT_TRUE(f.fixed_draft_length);
    EXPECT_EQ(f.disable_by_batch_size, 8);
    const SpeculativeConfig d = server::parse_speculative_config(R"({"method":"dspark","num_speculative_tokens":5})");
    EXPECT_EQ(d.method, "dspark");
    EXPECT_EQ(d.num_speculative_tokens, 5);
    EXPECT_EQ(d.confidence_threshold, 0.0) << "no early stop unless asked";
    EXPECT_EQ(
        server::parse_speculative_config(R"({"method":"dspark","num_speculative_tokens":5,"confidence_threshold":0.4})")
            .confidence_threshold,
        0.4);
}

TEST(SpeculativeConfig, ConfidenceThresholdIsDSparksAndAProbability) {
    EXPECT_NE(error_of(R"({"method":"mtp","num_speculative_tokens":2,"confidence_threshold":0.5})").find("DSpark"),
              std::string::npos);
    for (const char* bad : {"1.0", "-0.1", "\"high\""})
        EXPECT_NE(error_of(std::string(R"({"method":"dspark","num_speculative_tokens":2,"confidence_threshold":)") +
                           bad + "}")
                      .find("confidence_threshold"),
                  std::string::npos)
            << bad;
}

TEST(SpeculativeConfig, RefusesWhatItDoesNotDo) {
    EXPECT_NE(error_of(R"({"method":"eagle3","num_speculative_tokens":5})").find("'eagle3'"), std::string::npos);
    EXPECT_NE(error_of(R"({"method":"mtp","num_speculative_tokens":3,"draft_tensor_parallel_size":1})")
                  .find("'draft_tensor_parallel_size'"),
              std::string::npos);
    EXPECT_NE(error_of(R"({"method":"mtp"})").find("num_speculative_tokens"), std::string::npos);
    EXPECT_NE(error_of(R"({"method":"mtp","num_speculative_tokens":0})").find("[1, 16]"), std::string::npos);
    EXPECT_NE(error_of(R"({"method":"mtp","num_speculative_tokens":2,"draft_length":"auto"})").find("draft_length"),
              std::string::npos);
    EXPECT_NE(error_of(R"({"method":"mtp","num_speculative_tokens":2,"disable_by_batch_size":-1})")
                  .find("disable_by_batch_size"),
              std::string::npos);
    EXPECT_NE(error_of("mtp").find("not JSON"), std::string::npos);
    EXPECT_NE(error_of("[1]").find("JSON object"), std::string::npos);
}

}  // namespace
}  // namespace onecard
