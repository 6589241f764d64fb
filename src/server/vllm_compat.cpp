#include "server/vllm_compat.h"

#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>

namespace onecard::server {

namespace {

bool one_of(const std::string& v, std::initializer_list<const char*> names) {
    return std::any_of(names.begin(), names.end(), [&](const char* n) { return v == n; });
}

std::string lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

}  // namespace

void check_vllm_flags(const VllmFlags& f, const std::string& model_dir) {
    // onecard always parses DeepSeek's DSML tool calls and <think> reasoning; another parser name
    // asks for a different output format, which onecard would silently not produce.
    ONECARD_CHECK(f.tool_call_parser.empty() || one_of(f.tool_call_parser, {"deepseek_v4", "deepseek_v32"}),
                  "serve: --tool-call-parser '{}': onecard parses DeepSeek-V4's DSML tool calls only "
                  "(accepted: deepseek_v4, deepseek_v32)",
                  f.tool_call_parser);
    ONECARD_CHECK(f.reasoning_parser.empty() ||
                      one_of(f.reasoning_parser, {"deepseek_v4", "deepseek_v3", "deepseek_r1", "deepseek_v32"}),
                  "serve: --reasoning-parser '{}': onecard splits DeepSeek's <think> reasoning only "
                  "(accepted: deepseek_v4, deepseek_v32, deepseek_v3, deepseek_r1)",
                  f.reasoning_parser);
    ONECARD_CHECK(f.kv_cache_dtype.empty() || one_of(lower(f.kv_cache_dtype), {"auto", "fp8", "fp8_e4m3"}),
                  "serve: --kv-cache-dtype '{}': onecard's KV cache is always FP8 (e4m3, DeepSeek-V4's own "
                  "format); accepted: auto, fp8, fp8_e4m3",
                  f.kv_cache_dtype);
    ONECARD_CHECK(f.dtype.empty() || one_of(lower(f.dtype), {"auto", "bfloat16", "bf16"}),
                  "serve: --dtype '{}': onecard computes in the checkpoint's own formats (FP8/MXFP4 weights, "
                  "bf16 activations); accepted: auto, bfloat16",
                  f.dtype);
    ONECARD_CHECK(f.tensor_parallel_size == 1,
                  "serve: --tensor-parallel-size {}: onecard serves from one GPU (only 1 is accepted; see `onecard "
                  "plan --gpus` for multi-GPU planning)",
                  f.tensor_parallel_size);
    ONECARD_CHECK(f.pipeline_parallel_size == 1,
                  "serve: --pipeline-parallel-size {}: onecard serves from one GPU (only 1 is accepted)",
                  f.pipeline_parallel_size);
    ONECARD_CHECK(f.data_parallel_size == 1,
                  "serve: --data-parallel-size {}: run one onecard per GPU instead (only 1 is accepted)",
                  f.data_parallel_size);
    if (!f.chat_template.empty()) {
        // The prompt is rendered by onecard's own DeepSeek-V4 encoder (tokenizer/chat_encoding), not by
        // a Jinja template: only the model's own template file is accepted, since that is what the
        // encoder reproduces; any other template would be silently not applied.
        namespace fs = std::filesystem;
        std::error_code ec;
        const fs::path given = fs::weakly_canonical(f.chat_template, ec);
        bool own = false;
        for (const char* name : {"chat_template.jinja", "tokenizer_config.json"}) {
            const fs::path p = fs::path(model_dir) / name;
            std::error_code ec2;
            if (!model_dir.empty() && fs::exists(p, ec2) && fs::weakly_canonical(p, ec2) == given) own = true;
        }
        ONECARD_CHECK(own,
                      "serve: --chat-template '{}': onecard renders DeepSeek-V4's chat format with its own encoder "
                      "and cannot apply another template; leave the flag out (or pass the model's own "
                      "chat_template.jinja)",
                      f.chat_template);
    }
    (void)parse_log_level(f.log_level);
}

LogLevel parse_log_level(const std::string& text) {
    const std::string v = lower(text);
    if (v.empty() || v == "info") return LogLevel::Info;
    if (v == "trace") return LogLevel::Trace;
    if (v == "debug") return LogLevel::Debug;
    if (v == "warning" || v == "warn") return LogLevel::Warning;
    if (v == "error") return LogLevel::Error;
    if (v == "critical") return LogLevel::Critical;
    fail("serve: log level '{}': expected one of trace, debug, info, warning, error, critical", text);
}

std::string ignored_flags_line(const std::vector<std::string>& flags) {
    if (flags.empty()) return {};
    std::string list;
    for (const auto& f : flags) list += (list.empty() ? "" : ", ") + f;
    return fmt::format("serve: accepted for vLLM compatibility, no effect in onecard: {}\n", list);
}

}  // namespace onecard::server
