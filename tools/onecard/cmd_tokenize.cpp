// `onecard tokenize --tokenizer PATH [--decode | --jsonl]`: UTF-8 text on stdin -> token ids as a JSON
// array on stdout, or (--decode) a JSON array of ids on stdin -> the text, byte-exact, no newline added,
// or (--jsonl) one JSON string per stdin line -> one JSON array of ids per stdout line: scripts without
// the `tokenizers` library (scripts/demo_model/data_tokens.py) encode a whole data set in one process.
#include "commands.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <memory>

namespace onecard::cli {

namespace {

std::string read_stdin() {
    std::ios::sync_with_stdio(false);
    return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

// Line-at-a-time, so memory stays one text's worth however large the input; a bad line names its number.
void encode_lines(const Tokenizer& tok, bool special) {
    std::ios::sync_with_stdio(false);
    std::string line;
    for (size_t n = 1; std::getline(std::cin, line); ++n) {
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(line);
        } catch (const nlohmann::json::exception& e) {
            fail("tokenize --jsonl: line {} is not JSON: {}", n, e.what());
        }
        ONECARD_CHECK(j.is_string(), "tokenize --jsonl: line {} must be a JSON string, got {}", n,
                      j.dump().substr(0, 80));
        std::cout << nlohmann::json(tok.encode(j.get<std::string>(), special)).dump() << '\n';
    }
    std::cout.flush();
}

}  // namespace

void add_cmd_tokenize(CLI::App& app) {
    struct Args {
        std::string tokenizer;
        bool decode = false;
        bool no_special = false;
        bool skip_special = false;
        bool jsonl = false;
    };
    auto args = std::make_shared<Args>();
    CLI::App* cmd = app.add_subcommand("tokenize", "Encode stdin text to token ids (JSON), or --decode ids to text");
    cmd->add_option("--tokenizer", args->tokenizer, "tokenizer.json, or a checkpoint directory containing one")
        ->required();
    cmd->add_flag("--decode", args->decode, "read a JSON array of ids on stdin and print the text");
    cmd->add_flag("--no-special", args->no_special, "encode: treat added/special token strings as plain text");
    cmd->add_flag("--skip-special", args->skip_special, "decode: drop special tokens (BOS/EOS, placeholders)");
    cmd->add_flag("--jsonl", args->jsonl, "encode many texts: each stdin line a JSON string, each output line its ids");
    cmd->get_option("--jsonl")->excludes(cmd->get_option("--decode"));
    cmd->callback([args]() {
        std::filesystem::path path = args->tokenizer;
        if (std::filesystem::is_directory(path)) path /= "tokenizer.json";
        const Tokenizer tok = Tokenizer::from_file(path);
        if (args->jsonl) {
            encode_lines(tok, !args->no_special);
            return;
        }
        const std::string input = read_stdin();
        if (!args->decode) {
            const auto ids = tok.encode(input, !args->no_special);
            std::printf("%s\n", nlohmann::json(ids).dump().c_str());
            return;
        }
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(input);
        } catch (const nlohmann::json::exception& e) {
            fail("tokenize --decode: stdin is not JSON: {}", e.what());
        }
        ONECARD_CHECK(j.is_array(), "tokenize --decode: stdin must be a JSON array of ids, got {}",
                      j.dump().substr(0, 80));
        std::vector<int32_t> ids;
        ids.reserve(j.size());
        for (const auto& v : j) {
            ONECARD_CHECK(v.is_number_integer(), "tokenize --decode: {} is not an integer id", v.dump());
            const auto id = v.get<int64_t>();
            ONECARD_CHECK(id >= 0 && static_cast<size_t>(id) < tok.vocab_size(),
                          "tokenize --decode: id {} is outside the vocabulary (size {})", id, tok.vocab_size());
            ids.push_back(static_cast<int32_t>(id));
        }
        const std::string text = tok.decode(ids, args->skip_special);
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fflush(stdout);
    });
}

}  // namespace onecard::cli
