// `onecard profile-experts`: an expert-use profile built offline. Runs each prompt through the CPU
// reference forward (model/deepseek_v4.h) and counts every routing pick of the main layers per
// (layer, expert); writes the profile (model/expert_profile.h) that `onecard plan|serve
// --expert-profile FILE` rank (layer, expert) pairs by when not all experts fit the GPU.
//
// Prompts FILE: one prompt per line, as plain text (BOS + the text's ids, as /v1/completions
// tokenises a raw prompt), or as a JSON object per line (JSONL) with "prompt" (text) or
// "prompt_tokens" (ids, used as they are). Blank lines are skipped.
#include "commands.h"
#include "core/error.h"
#include "loader/checkpoint.h"
#include "model/config.h"
#include "model/deepseek_v4.h"
#include "model/expert_profile.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>

namespace onecard::cli {
namespace {

namespace fs = std::filesystem;

struct ProfileArgs {
    std::string model, prompts, out, tokenizer, numerics = "reference";
    int64_t max_tokens_per_prompt = 4096;
    int64_t chunk = 512;  // tokens per forward call: bounds the activations, results are the same
};

// The prompts of FILE as token ids. The tokenizer is opened only when a line holds text.
std::vector<std::vector<int32_t>> read_prompts(const ProfileArgs& a, const ModelConfig& cfg) {
    std::ifstream in(a.prompts);
    ONECARD_CHECK(in.good(), "profile-experts: cannot open --prompts '{}'", a.prompts);
    std::optional<Tokenizer> tok;
    auto encode_text = [&](const std::string& text) {
        if (!tok) {
            const fs::path path = a.tokenizer.empty() ? fs::path(a.model) / "tokenizer.json" : fs::path(a.tokenizer);
            ONECARD_CHECK(fs::exists(path),
                          "profile-experts: a text prompt needs a tokenizer, and '{}' does not exist "
                          "(pass --tokenizer FILE, or give \"prompt_tokens\" lines)",
                          path.string());
            tok = Tokenizer::from_file(path);
        }
        std::vector<int32_t> ids = {static_cast<int32_t>(cfg.bos_token_id)};
        const std::vector<int32_t> body = tok->encode(text);
        ids.insert(ids.end(), body.begin(), body.end());
        return ids;
    };
    std::vector<std::vector<int32_t>> out;
    std::string line;
    for (int64_t no = 1; std::getline(in, line); ++no) {
        const auto first = line.find_first_not_of(" \t\r");
        if (first == std::string::npos) continue;
        std::vector<int32_t> ids;
        if (line[first] == '{') {
            nlohmann::json j;
            try {
                j = nlohmann::json::parse(line);
            } catch (const nlohmann::json::exception& e) {
                fail("profile-experts: {} line {}: not valid JSON: {}", a.prompts, no, e.what());
            }
            if (j.contains("prompt_tokens")) {
                ONECARD_CHECK(j["prompt_tokens"].is_array(),
                              "profile-experts: {} line {}: \"prompt_tokens\" must be "
                              "an array of token ids",
                              a.prompts, no);
                for (const auto& t : j["prompt_tokens"]) {
                    ONECARD_CHECK(t.is_number_integer(), "profile-experts: {} line {}: token id {} is not an integer",
                                  a.prompts, no, t.dump());
                    ids.push_back(t.get<int32_t>());
                }
            } else {
                ONECARD_CHECK(j.contains("prompt") && j["prompt"].is_string(),
                              "profile-experts: {} line {}: a JSON line needs \"prompt\" (text) or \"prompt_tokens\"",
                              a.prompts, no);
                ids = encode_text(j["prompt"].get<std::string>());
            }
        } else {
            ids = encode_text(line);
        }
        for (int32_t t : ids)
            ONECARD_CHECK(t >= 0 && t < cfg.vocab_size,
                          "profile-experts: {} line {}: token id {} outside the "
                          "model's vocabulary [0, {})",
                          a.prompts, no, t, cfg.vocab_size);
        if (static_cast<int64_t>(ids.size()) > a.max_tokens_per_prompt)
            ids.resize(static_cast<size_t>(a.max_tokens_per_prompt));
        if (!ids.empty()) out.push_back(std::move(ids));
    }
    ONECARD_CHECK(!out.empty(), "profile-experts: --prompts '{}' holds no prompt", a.prompts);
    return out;
}

void run_profile(const ProfileArgs& a) {
    ONECARD_CHECK(a.max_tokens_per_prompt >= 1 && a.chunk >= 1,
                  "profile-experts: --max-tokens-per-prompt and --chunk must be >= 1");
    const ModelConfig cfg = load_config(fs::path(a.model) / "config.json");
    const std::vector<std::vector<int32_t>> prompts = read_prompts(a, cfg);
    const Checkpoint ckpt = Checkpoint::open(a.model);
    DeepSeekV4 model(cfg, bind_weights(cfg, ckpt), a.numerics == "exact" ? Numerics::Exact : Numerics::Reference);
    ExpertUseProfile profile(cfg.num_hidden_layers, cfg.n_routed_experts);
    model.set_expert_use_sink(&profile);
    int64_t n_tokens = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
        const std::vector<int32_t>& ids = prompts[i];
        SequenceState st = model.new_sequence();
        for (size_t at = 0; at < ids.size(); at += static_cast<size_t>(a.chunk)) {
            const size_t n = std::min(ids.size() - at, static_cast<size_t>(a.chunk));
            model.forward(st, std::span<const int32_t>(ids.data() + at, n));
        }
        n_tokens += static_cast<int64_t>(ids.size());
        std::fprintf(stderr, "profile-experts: prompt %zu/%zu, %zu tokens\n", i + 1, prompts.size(), ids.size());
    }
    model.set_expert_use_sink(nullptr);
    profile.check_integrity();
    profile.save(a.out);
    nlohmann::ordered_json j = {{"out", a.out},
                                {"prompts", prompts.size()},
                                {"tokens", n_tokens},
                                {"picks", profile.total()},
                                {"n_layers", profile.n_layers()},
                                {"n_experts", profile.n_experts()},
                                {"experts_per_token", cfg.num_experts_per_tok}};
    std::printf("%s\n", j.dump().c_str());
}

}  // namespace

void add_cmd_profile_experts(CLI::App& app) {
    auto a = std::make_shared<ProfileArgs>();
    CLI::App* cmd = app.add_subcommand(
        "profile-experts", "Count routing picks per (layer, expert) over prompts (CPU forward): an expert-use profile");
    cmd->add_option("--model", a->model, "checkpoint directory")->required();
    cmd->add_option("--prompts", a->prompts,
                    "prompts, one per line: text, or JSONL with \"prompt\" (text) or \"prompt_tokens\" (ids)")
        ->required();
    cmd->add_option("--out", a->out, "profile JSON to write (atomically)")->required();
    cmd->add_option("--max-tokens-per-prompt", a->max_tokens_per_prompt,
                    "tokens of each prompt that are run and counted (default 4096)");
    cmd->add_option("--tokenizer", a->tokenizer, "tokenizer.json for text prompts (default: <model>/tokenizer.json)");
    cmd->add_option("--numerics", a->numerics, "reference | exact (default reference, the GPU's)")
        ->check(CLI::IsMember({"reference", "exact"}));
    cmd->add_option("--chunk", a->chunk, "tokens per forward call (default 512; counts do not depend on it)");
    cmd->callback([a] { run_profile(*a); });
}

}  // namespace onecard::cli
