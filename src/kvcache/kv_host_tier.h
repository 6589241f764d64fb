// The prefix cache's host-RAM side (kvcache/kv_manager.h uses it; only the engine thread touches it):
//  * the snapshot store: per-sequence state snapshots (window rings, compressor carries; the runner's
//    byte format, ModelRunner::prefix_snapshot_bytes) in `max_snapshots` fixed-size entries, keyed by
//    the hash of the block that ends at the snapshot's boundary, LRU;
//  * the host KV tier: paged blocks evicted from the device pool, `max_host_blocks` entries of
//    spec.block_bytes keyed by chain hash (with their token ids: a collision is a miss), LRU. A hit
//    loads them back into fresh device blocks.
// The memory is ours (KvHostMemory: anonymous mappings); the runner reads and writes it (a CUDA
// runner registers it as pinned memory and copies on its compute stream, so every copy is ordered
// against the kernels that read or write the same blocks: ModelRunner::bind_host_tier).
//
// Disk tier (optional, KvHostTierConfig::disk): an entry the host LRU evicts is written to a
// KvDiskStore first (blocks with their token ids), and promote_block / promote_snapshot read one back
// into a host entry before a match (a torn or corrupt file is a miss: kv_disk_store.h).
//
// Entry ids are indices into the two arenas. An entry that a step copies into or out of is pinned for
// the rest of that scheduling pass (end_step() unpins): the LRU never hands it to another copy of the
// same step, so a load can never read an entry that a later spill of the same step overwrites.
#pragma once

#include "kvcache/host_bytes.h"
#include "kvcache/kv_disk_store.h"
#include "kvcache/kv_spec.h"

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace onecard {

using BlockHash = uint64_t;

// Identifies what a disk-tier entry's bytes mean: the KV layout (block and slot layouts, entry
// formats), the runner's snapshot size, and the model (model_id: the caller's, e.g. a hash of the
// checkpoint's identity). Entries written under another fingerprint are never read back.
uint64_t kv_layout_fingerprint(const KvCacheSpec& spec, int64_t snapshot_bytes, uint64_t model_id);

// Host memory the runner copies to and from (bound once, ModelRunner::bind_host_tier).
struct KvHostMemory {
    uint8_t* snapshots = nullptr;  // [n_snapshots, snapshot_bytes]
    int64_t n_snapshots = 0, snapshot_bytes = 0;
    uint8_t* blocks = nullptr;  // [n_blocks, block_bytes]
    int64_t n_blocks = 0, block_bytes = 0;
    uint8_t* snapshot(int64_t id) const { return snapshots + id * snapshot_bytes; }
    uint8_t* block(int64_t entry) const { return blocks + entry * block_bytes; }
};

struct KvHostTierConfig {
    int64_t max_snapshots = 0;               // snapshot entries (0: no snapshots, so nothing can hit)
    int64_t snapshot_bytes = 0;              // bytes of one snapshot (> 0 when max_snapshots > 0)
    int64_t max_host_blocks = 0;             // host KV tier entries (0: the tier is off)
    std::optional<KvDiskStoreOptions> disk;  // the disk tier below the host tier (unset: none)
};

struct KvHostTierStats {
    int64_t n_snapshots = 0, n_host_blocks = 0;
    int64_t n_evicted_snapshots = 0, n_evicted_host_blocks = 0;  // cumulative
    int64_t n_spilled_blocks = 0, n_loaded_blocks = 0;           // cumulative
    int64_t n_disk_writes = 0, n_disk_reads = 0;                 // cumulative: entries moved to / from disk
};

class KvHostTier {
public:
    KvHostTier(const KvCacheSpec& spec, KvHostTierConfig config);
    KvHostTier(const KvHostTier&) = delete;
    KvHostTier& operator=(const KvHostTier&) = delete;

    const KvHostTierConfig& config() const { return config_; }
    const KvHostMemory& memory() const { return mem_; }
    int64_t host_bytes() const;  // both arenas

    // ---- snapshots
    int64_t find_snapshot(BlockHash hash) const;  // committed snapshot id, or -1
    // A free (or least recently used, unpinned) entry for a new snapshot at `hash`, pending until
    // commit_snapshot; -1 if one is committed or pending there, or none can be had.
    int64_t plan_snapshot(BlockHash hash);
    void commit_snapshot(int64_t id);  // the runner stored it: joins the index, most recently used
    void abandon_pending_snapshots();  // the step failed: pending entries go back
    void use_snapshot(int64_t id);     // a hit restores it this step: most recently used, pinned
    void drop_snapshot(BlockHash hash);

    // ---- host KV tier
    bool host_tier_on() const { return config_.max_host_blocks > 0; }
    // The entry holding the block with this hash and these token ids ([block_size]), or -1.
    int64_t find_block(BlockHash hash, std::span<const int32_t> tokens) const;
    bool has_block(BlockHash hash) const { return blocks_.of_hash.contains(hash); }
    const std::vector<int32_t>& block_tokens(int64_t entry) const;
    BlockHash block_hash(int64_t entry) const;
    // An entry for a device block being evicted (its content is copied there before the step that
    // reuses the device block); pinned. -1 if the hash is already held or no entry can be had.
    int64_t spill_block(BlockHash hash, std::span<const int32_t> tokens);
    void use_block(int64_t entry);  // a hit loads it this step: most recently used, pinned

    // ---- disk tier (no-ops returning -1 without one)
    const KvDiskStore* disk() const { return disk_.get(); }
    // Reads the block (checked against its token ids) or the snapshot from disk into a host entry,
    // pinned for this pass; the entry, or -1 on a miss (absent, corrupt, or no entry free).
    int64_t promote_block(BlockHash hash, std::span<const int32_t> tokens);
    int64_t promote_snapshot(BlockHash hash);

    void end_step();  // unpins every entry
    KvHostTierStats stats() const;
    // Throws unless each index, its LRU and free list partition the entries and pins are in range.
    void check_integrity() const;

private:
    // One fixed-size arena's bookkeeping: entries are free, pending (snapshots), or indexed by hash.
    struct Entries {
        std::vector<BlockHash> hash;                       // [n]
        std::vector<int8_t> state;                         // [n] 0 free, 1 pending, 2 indexed
        std::vector<int8_t> pinned;                        // [n]
        std::vector<std::list<int64_t>::iterator> lru_it;  // [n] valid while indexed
        std::list<int64_t> lru;                            // indexed entries; front() is evicted next
        std::vector<int64_t> free;                         // stack
        std::unordered_map<BlockHash, int64_t> of_hash;    // indexed and pending
        int64_t n_evicted = 0;
        void init(int64_t n);
        // A free entry, else evicts the LRU's first unpinned one (calling on_evict with it first);
        // -1 if none.
        int64_t take(const std::function<void(int64_t)>& on_evict);
        void index(int64_t e);
        void release(int64_t e);
        void touch(int64_t e);
        void check(const char* what) const;
    };

    KvCacheSpec spec_;
    KvHostTierConfig config_;
    KvHostMemory mem_;
    HostBytes snapshot_map_, block_map_;  // mem_'s two arenas
    Entries snaps_;
    Entries blocks_;
    std::vector<std::vector<int32_t>> block_tokens_;  // [max_host_blocks][block_size] while indexed
    int64_t n_spilled_ = 0, n_loaded_ = 0, n_disk_writes_ = 0, n_disk_reads_ = 0;
    std::unique_ptr<KvDiskStore> disk_;
    void write_block_to_disk(int64_t entry);
    void write_snapshot_to_disk(int64_t entry);
    int64_t take_block_entry();
    // A block entry indexed under hash with these token ids, pinned for the pass (its bytes are the
    // caller's to fill); -1 if none can be had.
    int64_t index_new_block(BlockHash hash, std::span<const int32_t> tokens);
    int64_t take_snapshot_entry();
};

}  // namespace onecard
