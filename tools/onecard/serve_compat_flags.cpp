#include "serve_compat_flags.h"

#include "core/error.h"
#include "server/config_file.h"

#include <nlohmann/json.hpp>

namespace onecard::cli {
namespace {

// vLLM flags accepted with no effect here. Every one of them is either what onecard does anyway or
// does not change what a client gets back.
constexpr const char* kNoEffectFlags[] = {
    "--trust-remote-code", "--enable-auto-tool-choice", "--disable-log-requests",      "--disable-log-stats",
    "--enforce-eager",     "--enable-chunked-prefill",  "--no-enable-chunked-prefill", "--disable-fastapi-docs",
};
constexpr const char* kNoEffectOptions[] = {
    "--swap-space", "--block-size", "--download-dir", "--tokenizer-mode", "--distributed-executor-backend",
};

}  // namespace

void add_no_effect_vllm_flags(CLI::App* cmd, bool& flag_target, std::string& value_target) {
    for (const char* f : kNoEffectFlags)
        cmd->add_flag(f, flag_target, "vLLM: accepted, no effect in onecard")->group("vLLM compatibility");
    for (const char* f : kNoEffectOptions)
        cmd->add_option(f, value_target, "vLLM: accepted, no effect in onecard")->group("vLLM compatibility");
}

std::vector<std::string> no_effect_vllm_flags_given(CLI::App* cmd, const std::vector<std::string>& checked) {
    std::vector<std::string> given;
    auto note = [&](const std::string& f) {
        if (cmd->get_option(f)->count() > 0) given.push_back(f);
    };
    for (const char* f : kNoEffectFlags) note(f);
    for (const char* f : kNoEffectOptions) note(f);
    for (const auto& f : checked) note(f);
    return given;
}

void apply_config_file(CLI::App* cmd, const std::string& path) {
    for (const server::ConfigValue& cv : server::read_config_file(path)) {
        const std::string name = server::config_key_to_flag(cv.key);
        // vLLM's YAML names the model as `model:`; the positional argument has no flag name.
        CLI::Option* opt = cmd->get_option_no_throw("--" + name);
        ONECARD_CHECK(opt != nullptr && name != "config", "--config '{}': unknown option '{}'", path, cv.key);
        if (opt->count() > 0) continue;  // the command line or environment wins
        // A boolean flag set to false in the file is simply not set.
        // (--enable-prefix-caching and --new-requests-first default to on: false there turns them off.)
        if (opt->get_expected_max() == 0 && cv.values.size() == 1 && cv.values[0] == "false" &&
            name != "enable-prefix-caching" && name != "new-requests-first")
            continue;
        for (const auto& v : cv.values) opt->add_result(v);
        try {
            opt->run_callback();
        } catch (const CLI::Error& e) {
            fail("--config '{}': option '{}': {}", path, cv.key, e.what());
        }
    }
}

std::vector<std::string> parse_allowed_origins(const std::vector<std::string>& given) {
    std::vector<std::string> out;
    for (const auto& g : given) {
        if (!g.empty() && g.front() == '[') {
            nlohmann::json j;
            try {
                j = nlohmann::json::parse(g);
            } catch (const nlohmann::json::exception&) {
                fail("serve: --allowed-origins '{}': not a JSON list of origins", g);
            }
            for (const auto& o : j) {
                ONECARD_CHECK(o.is_string(), "serve: --allowed-origins '{}': not a JSON list of origins", g);
                out.push_back(o.get<std::string>());
            }
        } else {
            out.push_back(g);
        }
    }
    return out;
}

}  // namespace onecard::cli
