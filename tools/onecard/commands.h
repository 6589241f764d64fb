// Subcommands of the `onecard` binary: each file cmd_<name>.cpp adds one to the CLI11 app.
// A command's callback throws onecard::Error for user-facing failures; main() prints it.
#pragma once

#include <CLI/CLI.hpp>

namespace onecard::cli {

void add_cmd_synth(CLI::App& app);
void add_cmd_inspect(CLI::App& app);
void add_cmd_manifest(CLI::App& app);  // also adds `verify`
void add_cmd_tokenize(CLI::App& app);
void add_cmd_render_chat(CLI::App& app);
void add_cmd_logits(CLI::App& app);  // also adds `generate`
void add_cmd_serve(CLI::App& app);   // OpenAI-compatible server (src/server)

void add_cmd_plan(CLI::App& app);             // memory plan (engine/memory_plan.h)
void add_cmd_bench(CLI::App& app);            // whole-model GPU benchmark (model_cuda)
void add_cmd_profile_experts(CLI::App& app);  // expert-use profile from prompts (model/expert_profile.h)
void add_cmd_bench_serve(CLI::App& app);      // serving benchmark against an OpenAI-compatible endpoint (client/)
void add_cmd_validate(CLI::App& app);         // validation gates against an OpenAI-compatible endpoint (client/)

}  // namespace onecard::cli
