// `onecard serve`'s other ways in: a config file (JSON or vLLM-style YAML) under the command line and
// environment, vLLM's flags that onecard accepts with no effect (registered and named here, once), and
// vLLM's --allowed-origins forms.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace onecard::cli {

// Registers vLLM's flags (no value) and options (one value) that change nothing in onecard, each in
// the "vLLM compatibility" group; their values land in `flag_target` / `value_target`, never read.
void add_no_effect_vllm_flags(CLI::App* cmd, bool& flag_target, std::string& value_target);

// The vLLM flags given on this command line (or environment, or config file) that have no effect: the
// ones above and `checked`, vLLM flags registered elsewhere whose accepted values are what onecard does
// anyway (server::check_vllm_flags refuses the others). For serve's one startup line naming them.
std::vector<std::string> no_effect_vllm_flags_given(CLI::App* cmd, const std::vector<std::string>& checked);

// Applies a JSON or YAML config file to every option the command line and environment left unset;
// an unknown key or a bad value is an error naming the file and the key.
void apply_config_file(CLI::App* cmd, const std::string& path);

// --allowed-origins takes vLLM's JSON list ('["https://a.example"]') or plain origins, repeatable.
std::vector<std::string> parse_allowed_origins(const std::vector<std::string>& given);

}  // namespace onecard::cli
