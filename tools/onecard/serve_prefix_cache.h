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

// serve's prefix-cache flags (-1: the default).
struct PrefixTierFlags {
    int64_t snapshot_bytes = -1;  // --prefix-snapshot-bytes (default: max(KV pool / 4, 2 GiB))
    int64_t offload_bytes = -1;   // --kv-offload-bytes (default: choose_kv_offload_bytes on the GPU, off on the CPU)
    std::string disk_dir;         // --kv-disk-dir
    int64_t disk_bytes = 0;       // --kv-disk-bytes (0 with a dir: half its filesystem's free space, <= 256 GiB)
};

// Sets config's snapshot, host-tier and disk-tier fields from the flags (config.kv_cache_bytes already
// set; host RAM is read now, after the weights are loaded); returns the line that says what it chose.
// Throws onecard::Error for a disk tier without a host tier, or sizes the host cannot hold.
std::string configure_prefix_tiers(EngineConfig& config, const PrefixTierFlags& flags, bool on_gpu,
                                   uint64_t disk_model_id);

// One line: the tiers' sizes, and what opening the disk tier found (entries reused, leftovers of a
// crashed process removed).
std::string prefix_cache_report(const Engine& engine, const EngineConfig& config);

}  // namespace onecard::cli
