// `onecard inspect`: what an official-format DeepSeek-V4 checkpoint directory holds — config
// summary, layer schedule, tensor counts/bytes by dtype and by component, weight-binding result
// and the GPU memory the weights need.
#pragma once

#include "model/config.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace onecard {

struct TensorGroupStats {
    std::string name;  // dtype name or component name
    int64_t n_tensors = 0;
    uint64_t n_bytes = 0;
};

struct InspectReport {
    std::filesystem::path dir;
    ModelConfig config;
    size_t n_shards = 0;
    int64_t n_tensors = 0;
    uint64_t n_bytes = 0;                        // weights as stored
    std::vector<TensorGroupStats> by_dtype;      // sorted by dtype name
    std::vector<TensorGroupStats> by_component;  // fixed component order, empty groups omitted
    bool weights_ok = false;
    std::string weights_error;  // bind_weights' message when !weights_ok
    // Estimates from the config (vLLM fp8_ds_mla layout: FP8 non-RoPE dims + BF16 RoPE dims +
    // one UE8M0 byte per 64 dims; indexer keys FP8 + an fp32 scale).
    uint64_t kv_bytes_per_token = 0;           // growth per token over all main layers
    uint64_t kv_bytes_fixed_per_sequence = 0;  // sliding windows (main + MTP blocks)
};

// Component of a checkpoint tensor name: "embeddings/head", "attention", "compressor", "indexer",
// "router", "routed experts", "shared expert", "HC", "norms", "MTP", or "other".
const char* tensor_component(const std::string& name);

// Loads config.json (throws onecard::Error naming the key if invalid), opens every shard (throws
// naming file/tensor), then binds: binding problems are recorded in the report, not thrown.
InspectReport inspect_checkpoint(const std::filesystem::path& dir);

std::string inspect_text(const InspectReport& r);
nlohmann::json inspect_json(const InspectReport& r);

}  // namespace onecard
