#include "serve_prefix_cache.h"

#include "core/error.h"
#include "engine/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

namespace onecard::cli {

namespace fs = std::filesystem;

namespace {
constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kDefaultOffloadCap = 64 * kGiB;

uint64_t fnv1a(uint64_t h, const std::string& s) {
    for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
    return (h ^ 0xff) * 0x100000001b3ULL;  // a separator, so ("ab","c") and ("a","bc") differ
}
}  // namespace

KvOffloadChoice choose_kv_offload_bytes(int64_t asked, uint64_t pinned_weight_bytes, uint64_t snapshot_bytes,
                                        uint64_t mem_available_bytes) {
    ONECARD_CHECK(asked >= -1, "serve: --kv-offload-bytes must be >= 0 (0 = off), got {}", asked);
    const uint64_t taken = pinned_weight_bytes + snapshot_bytes;
    const uint64_t left = mem_available_bytes > taken ? mem_available_bytes - taken : 0;
    if (asked >= 0) {
        ONECARD_CHECK(
            static_cast<uint64_t>(asked) <= left,
            "serve: --kv-offload-bytes {:.1f} GiB does not fit host RAM: {:.1f} GiB available less {:.1f} GiB "
            "of pinned weights and {:.1f} GiB of prefix-cache snapshots leaves {:.1f} GiB",
            asked / double(kGiB), mem_available_bytes / double(kGiB), pinned_weight_bytes / double(kGiB),
            snapshot_bytes / double(kGiB), left / double(kGiB));
        return {asked, asked == 0 ? "off (--kv-offload-bytes 0)" : "--kv-offload-bytes"};
    }
    const uint64_t bytes = std::min(left / 4, kDefaultOffloadCap);
    return {
        static_cast<int64_t>(bytes),
        fmt::format("a quarter of the {:.1f} GiB of host RAM left after pinned weights and snapshots, at most 64 GiB",
                    left / double(kGiB))};
}

uint64_t kv_disk_model_id(const fs::path& model_dir, bool dummy_weights, uint64_t seed) {
    uint64_t h = 0xcbf29ce484222325ULL;
    std::ifstream in(model_dir / "config.json", std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    h = fnv1a(h, text.str());
    if (dummy_weights) return fnv1a(h, fmt::format("dummy weights, seed {}", seed));
    std::vector<std::string> files;
    for (const auto& f : fs::directory_iterator(model_dir)) {
        if (f.path().extension() != ".safetensors") continue;
        const auto mtime = f.last_write_time().time_since_epoch().count();
        files.push_back(fmt::format("{} {} {}", f.path().filename().string(), f.file_size(), mtime));
    }
    std::sort(files.begin(), files.end());
    for (const std::string& f : files) h = fnv1a(h, f);
    return h;
}

std::string configure_prefix_tiers(EngineConfig& config, const PrefixTierFlags& flags, bool on_gpu,
                                   uint64_t disk_model_id) {
    // Snapshots (15 MB each at the Flash shape on the GPU) are cheap in host RAM: at least 2 GiB of them.
    config.prefix_snapshot_bytes = flags.snapshot_bytes >= 0
                                       ? flags.snapshot_bytes
                                       : std::max<int64_t>(config.kv_cache_bytes / 4, int64_t{2} << 30);
    // On the CPU the KV pool is host RAM already: a host tier there is only had by asking.
    const KvOffloadChoice off =
        !on_gpu && flags.offload_bytes < 0
            ? KvOffloadChoice{0, "off: the CPU backend's KV pool is host RAM already"}
            : choose_kv_offload_bytes(flags.offload_bytes, 0, static_cast<uint64_t>(config.prefix_snapshot_bytes),
                                      host_mem_available_bytes());
    config.kv_offload_bytes = off.bytes;
    if (!flags.disk_dir.empty()) {
        ONECARD_CHECK(off.bytes > 0, "serve: --kv-disk-dir needs the host KV tier (--kv-offload-bytes > 0)");
        config.kv_disk_dir = flags.disk_dir;
        config.kv_disk_bytes = flags.disk_bytes;
        if (config.kv_disk_bytes == 0) {
            fs::create_directories(flags.disk_dir);
            config.kv_disk_bytes = static_cast<int64_t>(
                std::min<uintmax_t>(fs::space(flags.disk_dir).available / 2, uintmax_t{256} << 30));
        }
        config.kv_disk_model_id = disk_model_id;
    }
    return fmt::format("serve: prefix cache host RAM: {:.2f} GiB of state snapshots, {:.2f} GiB host KV tier ({})\n",
                       config.prefix_snapshot_bytes / double(kGiB), off.bytes / double(kGiB), off.why);
}

std::string prefix_cache_report(const Engine& engine, const EngineConfig& config) {
    const EngineStats st = engine.stats();
    if (!st.prefix_caching) return "";
    std::string line = fmt::format(
        "serve: prefix caching on: 128-token blocks; {} state snapshots in host RAM; host KV tier {}",
        st.n_total_prefix_snapshots,
        st.n_total_host_kv_blocks > 0
            ? fmt::format("{} blocks ({:.2f} GiB)", st.n_total_host_kv_blocks, config.kv_offload_bytes / double(kGiB))
            : std::string("off"));
    if (!config.kv_disk_dir.empty())
        line += fmt::format(
            "; disk tier {} ({:.1f} GiB bound): reused {} entries ({:.2f} GiB) from an earlier run, removed {} torn "
            "writes of a crashed process, {} entries of another model or layout, {} corrupt, {} over the bound",
            config.kv_disk_dir, config.kv_disk_bytes / double(kGiB), st.disk_reused_entries,
            st.disk_reused_bytes / double(kGiB), st.disk_removed_torn, st.disk_removed_foreign, st.disk_removed_corrupt,
            st.disk_removed_excess);
    return line + "\n";
}

}  // namespace onecard::cli
