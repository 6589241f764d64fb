// `vllm serve` command lines start `onecard serve` unchanged. This is the policy for vLLM's flags
// that have no onecard counterpart of their own: each value is either what onecard does anyway
// (accepted; listed once at startup as having no effect), or would make onecard silently behave
// differently from what the flag asks (refused, saying why). The flags themselves are declared in
// tools/onecard/cmd_serve.cpp; the flags onecard shares with vLLM (--port, --max-model-len, ...)
// keep their own meaning and are not handled here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace onecard::server {

struct VllmFlags {
    std::string tool_call_parser;  // "" = not given
    std::string reasoning_parser;
    std::string kv_cache_dtype;  // auto | fp8 | fp8_e4m3 (onecard's KV cache is always FP8)
    std::string dtype;           // auto | bfloat16 | bf16
    std::string chat_template;   // only the model's own template file
    std::string log_level;       // --log-level / --uvicorn-log-level
    int64_t tensor_parallel_size = 1;
    int64_t pipeline_parallel_size = 1;
    int64_t data_parallel_size = 1;
};

// Throws onecard::Error, naming the flag, the value and what onecard accepts, when a flag asks for
// something onecard would not do. `model_dir` is the checkpoint (for --chat-template).
void check_vllm_flags(const VllmFlags& f, const std::string& model_dir);

// Log levels, as vLLM/uvicorn spell them: trace, debug, info, warning, error, critical.
enum class LogLevel { Trace, Debug, Info, Warning, Error, Critical };
// "" -> Info. Throws onecard::Error for another spelling.
LogLevel parse_log_level(const std::string& text);

// The one startup line naming the vLLM flags that were given but change nothing here
// ("" when `flags` is empty).
std::string ignored_flags_line(const std::vector<std::string>& flags);

}  // namespace onecard::server
