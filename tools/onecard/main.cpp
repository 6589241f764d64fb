// onecard: one binary, many subcommands (synth, inspect, manifest, verify, tokenize, ...).
#include "commands.h"
#include "core/error.h"

#include <spdlog/spdlog.h>

#include <cstdio>

int main(int argc, char** argv) {
    CLI::App app{"onecard: DeepSeek-V4-Flash inference on one GPU"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "onecard 0.1.0");
    // Each line below is one subcommand group; see commands.h.
    // [commands]
    onecard::cli::add_cmd_bench(app);
    onecard::cli::add_cmd_bench_serve(app);
    onecard::cli::add_cmd_validate(app);
    onecard::cli::add_cmd_plan(app);
    onecard::cli::add_cmd_profile_experts(app);
    onecard::cli::add_cmd_serve(app);
    onecard::cli::add_cmd_render_chat(app);
    onecard::cli::add_cmd_tokenize(app);
    onecard::cli::add_cmd_logits(app);
    onecard::cli::add_cmd_manifest(app);
    onecard::cli::add_cmd_synth(app);
    onecard::cli::add_cmd_inspect(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    } catch (const onecard::Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "internal error: %s\n", e.what());
        return 2;
    }
    return 0;
}
