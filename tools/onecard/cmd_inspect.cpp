// `onecard inspect DIR [--json]`: summarise an official-format DeepSeek-V4 checkpoint.
#include "commands.h"
#include "core/error.h"
#include "model/inspect.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>

namespace onecard::cli {

void add_cmd_inspect(CLI::App& app) {
    struct Args {
        std::string dir;
        bool json = false;
    };
    auto args = std::make_shared<Args>();
    CLI::App* cmd = app.add_subcommand(
        "inspect", "Summarise a DeepSeek-V4 checkpoint directory (config, schedule, tensors, memory)");
    cmd->add_option("dir", args->dir, "checkpoint directory (config.json + safetensors shards)")->required();
    cmd->add_flag("--json", args->json, "machine-readable output");
    cmd->callback([args]() {
        const InspectReport r = inspect_checkpoint(args->dir);
        if (args->json) {
            std::printf("%s\n", inspect_json(r).dump(2).c_str());
        } else {
            std::fputs(inspect_text(r).c_str(), stdout);
        }
        std::fflush(stdout);
        // The report is printed either way; a checkpoint that does not bind is still an error.
        ONECARD_CHECK(r.weights_ok, "{}: weights do not match the config (see above)", args->dir);
    });
}

}  // namespace onecard::cli
