// `onecard synth`: write a synthetic DeepSeek-V4 checkpoint in the official format.
#include "commands.h"
#include "core/error.h"
#include "model/synth.h"
#include "tokenizer/deepseek_v4_vocab.h"

#include <cstdio>
#include <memory>

namespace onecard::cli {

namespace {

struct SynthArgs {
    std::string preset = "tiny";
    std::string out;
    uint64_t seed = 0;
    double shard_mb = 0;  // 0 = preset default
    bool quiet = false;
    bool config_only = false;
    SynthOptions opt;
};

// CLI11 cannot bind std::optional<int64_t> directly in every version: go through a plain int64
// and a "was given" check.
void add_dim(CLI::App* cmd, const char* flag, std::optional<int64_t>& target, const char* help) {
    cmd->add_option_function<int64_t>(
        flag, [&target](const int64_t& v) { target = v; }, help);
}

}  // namespace

void add_cmd_synth(CLI::App& app) {
    auto args = std::make_shared<SynthArgs>();
    CLI::App* cmd =
        app.add_subcommand("synth", "Write a synthetic DeepSeek-V4 checkpoint (official format, random weights)");
    cmd->add_option("--preset", args->preset, "tiny | small | flash")->check(CLI::IsMember({"tiny", "small", "flash"}));
    cmd->add_option("--out", args->out, "output directory")->required();
    cmd->add_option("--seed", args->seed, "PRNG seed (same seed, same bytes)");
    cmd->add_option("--shard-mb", args->shard_mb,
                    "target shard size in MB (default: tiny 2 MiB, small 32 MiB, flash 5 GB)");
    cmd->add_flag("--quiet", args->quiet, "no progress output");
    cmd->add_flag("--tame", args->opt.tame,
                  "tame drawing rule: sub-blocks add 0.5% of their output to the residual stream, experts reach "
                  "the SwiGLU clamp (a non-chaotic model for tight GPU parity bars; src/model/synth.cpp)");
    cmd->add_flag("--config-only", args->config_only,
                  "write config.json and generation_config.json but no weights: a model directory for `serve "
                  "--load-format dummy` (give it a tokenizer with --tokenizer, or copy one in)");
    SynthOptions& o = args->opt;
    add_dim(cmd, "--layers", o.layers, "main decoder layers (schedule: 2 SWA, then CSA/HCA alternating)");
    add_dim(cmd, "--experts", o.experts, "routed experts per layer");
    add_dim(cmd, "--experts-per-tok", o.experts_per_tok, "routed experts per token (top-k)");
    add_dim(cmd, "--hash-layers", o.hash_layers, "leading hash-routed layers");
    add_dim(cmd, "--hidden", o.hidden, "hidden size (multiple of 128)");
    add_dim(cmd, "--vocab", o.vocab, "vocabulary size");
    add_dim(cmd, "--heads", o.heads, "attention heads");
    add_dim(cmd, "--head-dim", o.head_dim, "head dim");
    add_dim(cmd, "--rope-dim", o.rope_dim, "RoPE dims per head (qk_rope_head_dim)");
    add_dim(cmd, "--q-lora-rank", o.q_lora_rank, "q_lora_rank");
    add_dim(cmd, "--o-groups", o.o_groups, "output projection groups");
    add_dim(cmd, "--o-lora-rank", o.o_lora_rank, "o_lora_rank");
    add_dim(cmd, "--moe-inter", o.moe_inter, "expert intermediate size");
    add_dim(cmd, "--window", o.window, "sliding window");
    add_dim(cmd, "--index-heads", o.index_heads, "indexer heads");
    add_dim(cmd, "--index-head-dim", o.index_head_dim, "indexer head dim");
    add_dim(cmd, "--index-topk", o.index_topk, "indexer top-k");
    add_dim(cmd, "--mtp", o.mtp, "MTP blocks (num_nextn_predict_layers)");
    cmd->add_flag("--dspark", o.dspark,
                  "a DeepSeek-V4-Flash-0731 checkpoint: the DSpark drafter (three stages tapping the last three "
                  "layers, block 5, Markov head, confidence head) in mtp.0..2 instead of the MTP block");
    cmd->callback([args]() {
        SynthOptions opt = args->opt;
        opt.preset = *synth_preset_from_name(args->preset);
        opt.seed = args->seed;
        const ModelConfig cfg = synth_config(opt);
        ONECARD_CHECK(args->shard_mb >= 0, "synth: --shard-mb must be positive");
        const uint64_t shard_bytes =
            args->shard_mb > 0 ? static_cast<uint64_t>(args->shard_mb * 1e6) : synth_default_shard_bytes(opt.preset);
        if (args->config_only) {
            synth_write_config(cfg, args->out);
            std::printf("wrote %s: preset %s, config only (no weights)\n", args->out.c_str(), args->preset.c_str());
            return;
        }
        const SynthResult res = synth_write(cfg, args->seed, args->out, shard_bytes, !args->quiet, 0, opt.tame);
        // The demo preset has the full DeepSeek vocabulary, so it ships the real V4 tokenizer files:
        // a checkpoint dir that render-chat, tokenize and serve can use as it is.
        if (opt.preset == SynthPreset::Small) write_demo_tokenizer(args->out);
        std::printf("wrote %s: preset %s%s, seed %llu, %zu tensors, %.3f GB in %zu shard(s)\n", args->out.c_str(),
                    args->preset.c_str(), opt.tame ? " (tame)" : "", static_cast<unsigned long long>(args->seed),
                    res.n_tensors, static_cast<double>(res.n_bytes) / 1e9, res.n_shards);
    });
}

}  // namespace onecard::cli
