// `onecard serve`'s prefix-cache tiers (kvcache/kv_host_tier.h): how much host RAM the host KV tier
// takes by default, which model a disk tier's entries belong to, and the startup report's line.
#pragma once

#include "onecard/engine.h"

#include <cstdint>
#include <filesystem>
#include <string>

namespace onecard::cli {

struct KvOffloadChoice {
    int64_t bytes = 0;
    std::string why;  // for the startup report
};

// --kv-offload-bytes: `asked` >= 0 is taken as given (0: off); -1 (the default) is a quarter of the
// host RAM available (MemAvailable) after what the process pins for weights (host experts, a host
// embedding table) and the snapshot store, at most 64 GiB (room for ~17M tokens of Flash KV, far
// beyond any one agent's context). Throws onecard::Error when an explicit size plus the rest exceeds
// what the host has available.
KvOffloadChoice choose_kv_offload_bytes(int64_t asked, uint64_t pinned_weight_bytes, uint64_t snapshot_bytes,
                                        uint64_t mem_available_bytes);

// What a disk tier's entries are of: the checkpoint's config.json text and every safetensors file's
// name, size and modification time (a re-written checkpoint is another model), or for dummy weights
// the config and the seed. Hashed, not cryptographic: the layout fingerprint and per-entry checksums
// guard the bytes; this guards their meaning.
uint64_t kv_disk_model_id(const std::filesystem::path& model_dir, bool dummy_weights, uint64_t seed);

// One line: the tiers' sizes, and what opening the disk tier found (entries reused, leftovers of a
// crashed process removed).
std::string prefix_cache_report(const Engine& engine, const EngineConfig& config);

}  // namespace onecard::cli
