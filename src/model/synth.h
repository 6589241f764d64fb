// Synthetic DeepSeek-V4 checkpoints in the exact official format (names, dtypes, FP8 128x128
// blocks with UE8M0 scales, MXFP4 experts, shards + model.safetensors.index.json, config.json,
// generation_config.json) with random weights of sensible scale. Bit-deterministic: the bytes
// depend only on (config, seed, tame) — own PRNG, own Box-Muller, fixed write order, rows independent.
//
// Two drawing rules. The default one gives every sub-block unit gain: a chaotic network, where the
// smallest difference (one fp32 ulp on a hyper-connection bias) flips FP8 activation roundings,
// router and indexer picks and the flips spread to every later position (tests/ops/gpu_model_test.cpp).
// The tame rule (synth_master_rows) draws the same random numbers and rescales a few tensors so that a
// small difference stays small, while every op still does real work (tests/model/tame_model_test.cpp).
// Every tensor is streamed to disk in chunks, so full-size checkpoints need little RAM.
#pragma once

#include "loader/safetensors_writer.h"
#include "model/config.h"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace onecard {

enum class SynthPreset {
    Tiny,   // CPU golden tests: every layer kind, a few MB
    Small,  // demo: full 129280 vocab (real tokenizer), small everything else, tens of MB
    Flash,  // the real DeepSeek-V4-Flash dimensions (shrink with layers/experts)
};

// Preset plus optional overrides of single dimensions (unset = the preset's value).
struct SynthOptions {
    SynthPreset preset = SynthPreset::Tiny;
    uint64_t seed = 0;
    std::optional<int64_t> layers;           // main layers; the schedule is the preset's, truncated
    std::optional<int64_t> experts;          // n_routed_experts
    std::optional<int64_t> experts_per_tok;  // num_experts_per_tok (capped at experts)
    std::optional<int64_t> hash_layers;      // num_hash_layers (capped at layers)
    std::optional<int64_t> hidden;           // hidden_size
    std::optional<int64_t> vocab;            // vocab_size
    std::optional<int64_t> heads;            // num_attention_heads
    std::optional<int64_t> head_dim;
    std::optional<int64_t> rope_dim;  // qk_rope_head_dim
    std::optional<int64_t> q_lora_rank;
    std::optional<int64_t> o_groups;
    std::optional<int64_t> o_lora_rank;
    std::optional<int64_t> moe_inter;    // moe_intermediate_size
    std::optional<int64_t> window;       // sliding_window
    std::optional<int64_t> index_heads;  // index_n_heads
    std::optional<int64_t> index_head_dim;
    std::optional<int64_t> index_topk;
    std::optional<int64_t> mtp;  // num_nextn_predict_layers
    // A DeepSeek-V4-Flash-0731 checkpoint: the DSpark drafter (block 5, noise token 128799 or the last
    // id of a smaller vocabulary, three stages tapping the last three layers, Markov rank 256 at the
    // Flash preset and 16 below it) in mtp.0..2 instead of the MTP block.
    bool dspark = false;
    std::optional<uint64_t> shard_bytes;  // target shard size (a tensor never spans shards)
    bool tame = false;                    // the tame drawing rule (file comment, synth_master_rows)
};

std::optional<SynthPreset> synth_preset_from_name(const std::string& name);  // "tiny", "small", "flash"
const char* synth_preset_name(SynthPreset p);

// The validated config the options describe (throws onecard::Error naming the bad option/key).
ModelConfig synth_config(const SynthOptions& opt);
uint64_t synth_default_shard_bytes(SynthPreset p);

struct SynthShard {
    std::string file;                 // "model-00001-of-00003.safetensors"
    std::vector<TensorSpec> tensors;  // in write order
    uint64_t nbytes = 0;              // tensor bytes (headers excluded)
};
// How the layout is split into shards: consecutive tensors, a new shard when the next tensor
// would push the current one past shard_bytes (a .scale stays with its .weight).
std::vector<SynthShard> synth_shard_plan(const ModelConfig& cfg, uint64_t shard_bytes);

struct SynthResult {
    size_t n_tensors = 0;
    uint64_t n_bytes = 0;  // sum of tensor bytes (= index metadata.total_size)
    size_t n_shards = 0;
};

// Writes the checkpoint for `cfg` into `out_dir` (created if needed; shard files of an earlier
// run are replaced). Progress lines go to stderr when `progress` is set. `threads` (0 = all
// cores, at most 16) only changes the speed: rows are generated independently and written in a
// fixed order, so the bytes are the same for any thread count.
// `tame` picks the tame drawing rule (SynthOptions::tame).
SynthResult synth_write(const ModelConfig& cfg, uint64_t seed, const std::filesystem::path& out_dir,
                        uint64_t shard_bytes, bool progress, unsigned threads = 0, bool tame = false);
// Only config.json and generation_config.json (synth_write writes them too): a model directory for
// `serve --load-format dummy`, which makes the weights on the GPU.
void synth_write_config(const ModelConfig& cfg, const std::filesystem::path& out_dir);

// The fp32 "master" values tensor `spec` is generated from, rows [row0, row0 + n_rows) of its
// logical matrix: [shape[0], prod(shape[1:])] — for packed MXFP4 the logical width is 2x the
// stored one; 1-D tensors are one row. Quantised tensors store these values rounded to their
// format; BF16 tensors store them rounded to bf16. Not defined for I64/I32 (tid2eid) or scales.
// With `tame`, the tame rule: the same draws, a few tensors rescaled (synth.cpp, tame_gain).
void synth_master_rows(const ModelConfig& cfg, uint64_t seed, const TensorSpec& spec, int64_t row0, int64_t n_rows,
                       float* out, bool tame = false);

}  // namespace onecard
