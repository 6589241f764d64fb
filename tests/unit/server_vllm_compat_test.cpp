// vLLM compatibility of `onecard serve`'s configuration: YAML and JSON --config files read alike, and
// the policy for vLLM's flags (what is accepted with no effect, what is refused and why).
#include "core/error.h"
#include "server/config_file.h"
#include "server/vllm_compat.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

using namespace onecard;
using namespace onecard::server;

namespace {

std::string write_file(const std::string& name, const std::string& text) {
    const auto dir = std::filesystem::temp_directory_path() / ("onecard_vllm_compat_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const auto p = dir / name;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
}

std::string error_of(const std::function<void()>& fn) {
    try {
        fn();
    } catch (const Error& e) {
        return e.what();
    }
    return {};
}

}  // namespace

TEST(ServeConfigFile, YamlAsVllmWritesIt) {
    const std::string path = write_file("serve.yaml",
                                        "# vLLM config\n"
                                        "model: /models/ds\n"
                                        "served-model-name: ds\n"
                                        "max_model_len: 4096\n"
                                        "gpu-memory-utilization: 0.9\n"
                                        "enable-prefix-caching: true\n"
                                        "trust-remote-code: yes\n"
                                        "tool-call-parser: \"deepseek_v4\"\n"
                                        "allow-cidr:\n  - 10.0.0.0/8\n  - 127.0.0.0/8\n");
    const auto v = read_config_file(path);
    ASSERT_EQ(v.size(), 8u);
    EXPECT_EQ(v[0].key, "model");
    EXPECT_EQ(v[0].values, std::vector<std::string>{"/models/ds"});
    EXPECT_EQ(config_key_to_flag(v[2].key), "max-model-len");
    EXPECT_EQ(v[2].values[0], "4096");
    EXPECT_EQ(v[3].values[0], "0.9");
    EXPECT_EQ(v[4].values[0], "true");
    EXPECT_EQ(v[5].values[0], "true");  // YAML 1.1's yes is a boolean
    EXPECT_EQ(v[6].values[0], "deepseek_v4");
    EXPECT_EQ(v[7].values, (std::vector<std::string>{"10.0.0.0/8", "127.0.0.0/8"}));
}

TEST(ServeConfigFile, JsonStillReadsAndErrorsNameTheFile) {
    const auto j =
        read_config_file(write_file("serve.json", R"({"port": 8001, "allow_cidr": ["::1/128"], "x": true})"));
    ASSERT_EQ(j.size(), 3u);
    EXPECT_EQ(j[0].values[0], "8001");
    EXPECT_EQ(config_key_to_flag(j[1].key), "allow-cidr");
    EXPECT_EQ(j[2].values[0], "true");
    EXPECT_NE(error_of([&] { read_config_file(write_file("bad.yaml", "port: [1, {a: 2}]\n")); }).find("bad.yaml"),
              std::string::npos);
    EXPECT_NE(error_of([&] { read_config_file(write_file("list.yaml", "- a\n- b\n")); }).find("mapping"),
              std::string::npos);
    EXPECT_NE(error_of([&] { read_config_file(write_file("broken.yaml", "port: [1\n")); }).find("not valid YAML"),
              std::string::npos);
    EXPECT_NE(error_of([&] { read_config_file("/nonexistent/x.yaml"); }).find("cannot open"), std::string::npos);
    EXPECT_TRUE(read_config_file(write_file("empty.yaml", "")).empty());
}

TEST(VllmFlags, WhatOnecardDoesAnywayIsAccepted) {
    VllmFlags f;
    f.tool_call_parser = "deepseek_v4";
    f.reasoning_parser = "deepseek_v4";
    f.kv_cache_dtype = "fp8";
    f.dtype = "auto";
    f.tensor_parallel_size = 1;
    f.log_level = "warning";
    EXPECT_EQ(error_of([&] { check_vllm_flags(f, "/models/ds"); }), "");
    f.kv_cache_dtype = "auto";
    f.dtype = "bfloat16";
    EXPECT_EQ(error_of([&] { check_vllm_flags(f, "/models/ds"); }), "");
}

TEST(VllmFlags, WhatWouldSilentlyDifferIsRefusedNamingTheFlag) {
    auto refused = [](auto set, const std::string& flag) {
        VllmFlags f;
        set(f);
        const std::string e = error_of([&] { check_vllm_flags(f, "/models/ds"); });
        EXPECT_NE(e.find(flag), std::string::npos) << "'" << e << "' should name " << flag;
    };
    refused([](VllmFlags& f) { f.tensor_parallel_size = 8; }, "--tensor-parallel-size 8");
    refused([](VllmFlags& f) { f.pipeline_parallel_size = 2; }, "--pipeline-parallel-size");
    refused([](VllmFlags& f) { f.kv_cache_dtype = "fp16"; }, "--kv-cache-dtype 'fp16'");
    refused([](VllmFlags& f) { f.dtype = "float16"; }, "--dtype 'float16'");
    refused([](VllmFlags& f) { f.tool_call_parser = "hermes"; }, "--tool-call-parser 'hermes'");
    refused([](VllmFlags& f) { f.reasoning_parser = "qwen3"; }, "--reasoning-parser 'qwen3'");
    refused([](VllmFlags& f) { f.chat_template = "/tmp/other.jinja"; }, "--chat-template");
    refused([](VllmFlags& f) { f.log_level = "loud"; }, "log level 'loud'");
}

TEST(VllmFlags, ChatTemplateOnlyTheModelsOwn) {
    const auto dir = std::filesystem::path(write_file("model/chat_template.jinja", "{{ x }}")).parent_path();
    VllmFlags f;
    f.chat_template = (dir / "chat_template.jinja").string();
    EXPECT_EQ(error_of([&] { check_vllm_flags(f, dir.string()); }), "");
    f.chat_template = write_file("mine.jinja", "{{ y }}");
    EXPECT_NE(error_of([&] { check_vllm_flags(f, dir.string()); }).find("cannot apply another template"),
              std::string::npos);
}

TEST(VllmFlags, LogLevelsAndTheIgnoredLine) {
    EXPECT_EQ(parse_log_level(""), LogLevel::Info);
    EXPECT_EQ(parse_log_level("DEBUG"), LogLevel::Debug);
    EXPECT_EQ(parse_log_level("critical"), LogLevel::Critical);
    EXPECT_EQ(ignored_flags_line({}), "");
    EXPECT_EQ(ignored_flags_line({"--trust-remote-code", "--enable-prefix-caching"}),
              "serve: accepted for vLLM compatibility, no effect in onecard: --trust-remote-code, "
              "--enable-prefix-caching\n");
}
