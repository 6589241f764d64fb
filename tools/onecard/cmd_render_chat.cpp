// `onecard render-chat --model DIR [--ids]`: an OpenAI chat-completions request (JSON) on stdin -> the
// DeepSeek-V4 prompt string on stdout (byte-exact, no newline added), or with --ids its token ids as a JSON
// array. The encoder variant (V4 or 0731 reasoning-effort prompts) comes from DIR/config.json;
// --variant overrides it (and makes --model optional unless --ids needs DIR/tokenizer.json).
// --jsonl renders many requests in one process (data generation: scripts/demo_model/make_data.py): one
// request per input line, one output line each, the prompt as a JSON string (or with --ids its id array).
#include "commands.h"
#include "core/error.h"
#include "model/config.h"
#include "tokenizer/chat_encoding.h"
#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>

namespace onecard::cli {

namespace {

ChatVariant chat_variant_of(ModelVariant v) {
    // V4-Pro ships the same encoder file as V4-Flash; only the 0731 release changed the effort prompts.
    return v == ModelVariant::V4Flash0731 ? ChatVariant::V40731 : ChatVariant::V4;
}

}  // namespace

void add_cmd_render_chat(CLI::App& app) {
    struct Args {
        std::string model;
        std::string variant;
        bool ids = false;
        bool jsonl = false;
    };
    auto args = std::make_shared<Args>();
    CLI::App* cmd = app.add_subcommand("render-chat", "Render an OpenAI chat request (stdin) as a DeepSeek-V4 prompt");
    cmd->add_option("--model", args->model, "checkpoint directory (config.json picks the encoder variant)");
    cmd->add_option("--variant", args->variant, "encoder variant instead of config.json: v4 or 0731")
        ->check(CLI::IsMember({"v4", "0731"}));
    cmd->add_flag("--ids", args->ids, "print token ids (JSON array) using DIR/tokenizer.json");
    cmd->add_flag("--jsonl", args->jsonl,
                  "one request per input line; one JSON line (string, or id array) per request");
    cmd->callback([args]() {
        ONECARD_CHECK(!args->model.empty() || !args->variant.empty(), "render-chat: give --model DIR or --variant");
        ONECARD_CHECK(!args->ids || !args->model.empty(), "render-chat: --ids needs --model DIR (its tokenizer.json)");
        const std::filesystem::path dir = args->model;
        ChatVariant variant = ChatVariant::V4;
        if (!args->variant.empty())
            variant = args->variant == "0731" ? ChatVariant::V40731 : ChatVariant::V4;
        else
            variant = chat_variant_of(load_config(dir / "config.json").variant);

        std::ios::sync_with_stdio(false);
        if (args->jsonl) {
            std::optional<Tokenizer> tok;
            if (args->ids) tok.emplace(Tokenizer::from_file(dir / "tokenizer.json"));
            std::string line;
            while (std::getline(std::cin, line)) {
                if (line.empty()) continue;
                const ChatPrompt prompt = render_chat_request_text(line, variant);
                const nlohmann::json out = tok ? nlohmann::json(tok->encode(prompt.text, /*allow_special=*/true))
                                               : nlohmann::json(prompt.text);
                std::cout << out.dump() << '\n';
            }
            return;
        }
        const std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
        const ChatPrompt prompt = render_chat_request_text(input, variant);
        if (!args->ids) {
            std::fwrite(prompt.text.data(), 1, prompt.text.size(), stdout);
            return;
        }
        // The prompt's control tokens are written as text, so special tokens must be matched when encoding.
        const Tokenizer tok = Tokenizer::from_file(dir / "tokenizer.json");
        std::printf("%s\n", nlohmann::json(tok.encode(prompt.text, /*allow_special=*/true)).dump().c_str());
    });
}

}  // namespace onecard::cli
