// KV cache manager: the only KV interface the scheduler sees. It hands out opaque KvHandles; behind a
// handle are one fixed-state slot (windows + compressor buffers) and a table of paged blocks sized
// for the sequence's token count. The scheduler asks can_allocate / can_extend first and preempts
// when the answer is no; allocate / extend on a "no" is a programming error and throws.
//
// Lifetime contract: a handle is valid from allocate() until free(); any use after free() throws
// (handles carry a generation number). Only the engine thread touches the manager.
//
// Prefix caching (PrefixCacheConfig::enabled). Two things make a cached prefix resumable exactly:
//  * paged blocks: a full block whose tokens are computed is registered under its chain hash
//    (hash_kv_block: parent hash, the block's token ids, extra keys, as vLLM's block hashes) with
//    its token ids (a hit compares them, so a hash collision is a miss, never wrong KV). A freed
//    sequence's registered blocks stay cached at refcount 0 in LRU order (tail blocks first) until
//    an allocation needs them; a hit shares them by refcount, so a running sequence's blocks are
//    never evicted.
//  * snapshots of the per-sequence state that is not in blocks (window rings, compressor carries:
//    the runner's byte format, ModelRunner::prefix_snapshot_bytes). A snapshot is taken at a block
//    boundary and keyed by the hash of the block that ends there; it lives in host RAM (KvHostTier,
//    an LRU of at most max_snapshots entries): plan_snapshot hands out the entry the runner writes.
//  * the host KV tier (max_host_blocks > 0): a cached block evicted from the device pool is copied
//    to a host entry first (a spill), and a later hit copies it back into a fresh device block (a
//    load). take_block_copies() gives the runner a step's copies; it performs every spill, then every
//    load, before the step's compute, on the stream that computes (kvcache/kv_host_tier.h).
// A hit resumes at the last block boundary b * block_size such that blocks [0, b) are cached (on the
// device or in the host tier) and a snapshot exists at b, and b < the sequence's tokens (the last
// token is always recomputed, so there are logits to sample).
#pragma once

#include "kvcache/block_pool.h"
#include "kvcache/kv_host_tier.h"
#include "kvcache/kv_spec.h"

#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace onecard {

struct KvHandle {
    int32_t slot = -1;        // index into the slot arena (also the handle's identity)
    uint32_t generation = 0;  // bumped every time the slot is reused
    bool valid() const { return slot >= 0; }
    bool operator==(const KvHandle&) const = default;
};

// The pool's dimensions. n_slots keeps its own name beside n_blocks: it counts slots the pool holds,
// which plan_kv_pool makes max_num_seqs (the scheduler's cap), but a pool sized otherwise (a bench,
// a test) holds what it was given; the scheduler checks its cap against it.
struct KvPoolSize {
    int64_t n_slots = 0;   // live sequences at most (= max_num_seqs)
    int64_t n_blocks = 0;  // paged blocks
    int64_t total_bytes(const KvCacheSpec& spec) const {
        return n_slots * spec.slot_bytes + n_blocks * spec.block_bytes;
    }
};

// Splits a memory budget: max_num_seqs slots first (every admitted sequence needs one), the rest
// in whole blocks. Throws if the budget cannot hold the slots plus one block.
KvPoolSize plan_kv_pool(const KvCacheSpec& spec, int64_t memory_budget_bytes, int64_t max_num_seqs);

// Chain hash of one block: its parent's hash (kNoParentHash for block 0), its token ids and extra
// keys (anything else the block's KV depends on; 0 when none). Collisions are caught by the token
// comparison of match_prefix, so 64 bits only bound how often a lookup does that comparison.
inline constexpr BlockHash kNoParentHash = 0x6f6e65636172645fULL;  // "onecard_"

// A sequence's token ids in two pieces (a request's prompt and its output), read without copying.
struct SequenceTokens {
    std::span<const int32_t> head, tail;
    SequenceTokens(std::span<const int32_t> h, std::span<const int32_t> t = {}) : head(h), tail(t) {}
    SequenceTokens(const std::vector<int32_t>& h) : head(h) {}
    size_t size() const { return head.size() + tail.size(); }
    int32_t operator[](size_t i) const { return i < head.size() ? head[i] : tail[i - head.size()]; }
};

// Hash of block `b` (tokens [b * block_size, (b + 1) * block_size)) given its parent's hash.
BlockHash hash_kv_block(BlockHash parent, const SequenceTokens& tokens, int64_t block, int64_t block_size,
                        uint64_t extra = 0);
// Chain hashes of every full block of `tokens` from block hashes.size() on, appended to hashes.
void extend_block_hashes(std::vector<BlockHash>& hashes, const SequenceTokens& tokens, int64_t block_size,
                         uint64_t extra = 0);

struct PrefixCacheConfig {
    bool enabled = false;
    int64_t max_snapshots = 0;               // snapshots kept at most (0: none kept, so nothing can hit)
    int64_t snapshot_bytes = 1;              // bytes of one snapshot (the runner's prefix_snapshot_bytes)
    int64_t max_host_blocks = 0;             // host KV tier entries (0: off; evicted blocks are forgotten)
    std::optional<KvDiskStoreOptions> disk;  // the disk tier below the host tier (needs max_host_blocks)
};

// What a new sequence can reuse: its first blocks and the snapshot to resume from.
struct PrefixMatch {
    std::vector<int32_t> blocks;       // device blocks (shared) covering the first blocks.size() blocks
    std::vector<int64_t> host_blocks;  // host-tier entries of the next ones (loaded into fresh blocks)
    int64_t n_tokens = 0;              // tokens served from the cache (a multiple of block_size)
    int64_t snapshot = -1;             // the snapshot entry at n_tokens (-1: no hit)
};

// A copy between a device block and a host-tier entry (SchedulerOutput::block_spills / block_loads).
struct KvBlockCopy {
    int32_t block = -1;
    int64_t host_entry = -1;
};

struct PrefixCacheStats {
    int64_t n_cached_blocks = 0;     // registered device blocks, in use or evictable
    int64_t n_evictable_blocks = 0;  // registered with refcount 0
    int64_t n_snapshots = 0;
    int64_t n_evicted_blocks = 0;     // cumulative: device blocks whose cached content was dropped
    int64_t n_evicted_snapshots = 0;  // cumulative
    int64_t n_host_blocks = 0;        // blocks held by the host tier
    int64_t n_evicted_host_blocks = 0, n_spilled_blocks = 0, n_loaded_blocks = 0;  // cumulative
    int64_t n_disk_writes = 0, n_disk_reads = 0;                                   // cumulative
    int64_t n_disk_entries = 0, disk_bytes = 0;                                    // on disk now
};

class KvCacheManager {
public:
    KvCacheManager(KvCacheSpec spec, KvPoolSize size, PrefixCacheConfig prefix = {});

    const KvCacheSpec& spec() const { return spec_; }
    bool prefix_caching() const { return prefix_.enabled; }

    // True if a new sequence with room for n_tokens can be admitted now (a free slot and blocks).
    bool can_allocate(int64_t n_tokens) const;
    KvHandle allocate(int64_t n_tokens);

    // ---- prefix caching (all no-ops / misses when it is off)
    // The longest usable cached prefix of a sequence with these tokens and their full blocks' chain
    // hashes (extend_block_hashes). Does not change the cache.
    PrefixMatch match_prefix(std::span<const BlockHash> hashes, const SequenceTokens& tokens) const;
    // With a disk tier: reads the chain's blocks that are neither on the device nor in host RAM, and
    // a snapshot where the available chain ends, from disk into the host tier (pinned for this
    // scheduling pass), so that the match_prefix that follows sees them. No-op without one.
    void promote_from_disk(std::span<const BlockHash> hashes, const SequenceTokens& tokens);
    // As can_allocate / allocate, reusing `match` (from match_prefix, with no cache change since):
    // its blocks are shared, fresh ones cover the rest of n_tokens (>= match.n_tokens).
    bool can_allocate(const PrefixMatch& match, int64_t n_tokens) const;
    KvHandle allocate(const PrefixMatch& match, int64_t n_tokens);
    // Registers h's full blocks whose tokens are computed (the first n_computed tokens) under their
    // chain hashes, so later sequences can reuse them. A block whose hash is already registered (the
    // same content computed twice) stays private to h.
    void cache_blocks(KvHandle h, std::span<const BlockHash> hashes, const SequenceTokens& tokens, int64_t n_computed);
    // A snapshot entry for the boundary that ends the block with this hash (the least recently used
    // one is evicted if none is free), or -1 if one exists or is already planned (or snapshots are
    // off). The entry is pending until commit_snapshot.
    int64_t plan_snapshot(BlockHash block_hash);
    // The runner stored pending snapshot `id`: it joins the index as the most recently used.
    void commit_snapshot(int64_t id);
    // Pending snapshots never committed (their step failed) are dropped.
    void abandon_pending_snapshots();
    // The copies between the device pool and the host tier the step being scheduled needs (spills of
    // evicted blocks, loads of hit blocks), since the last call; ends the scheduling pass's pins.
    struct BlockCopies {
        std::vector<KvBlockCopy> spills, loads;
    };
    BlockCopies take_block_copies();
    // The host memory the runner binds (ModelRunner::bind_host_tier); null when prefix caching is off.
    const KvHostMemory* host_memory() const { return host_ ? &host_->memory() : nullptr; }
    const KvHostTier* host_tier() const { return host_.get(); }
    PrefixCacheStats prefix_cache_stats() const;
    // True if h can grow by n_new_tokens without running out of blocks.
    bool can_extend(KvHandle h, int64_t n_new_tokens) const;
    void extend(KvHandle h, int64_t n_new_tokens);
    // Returns the slot and drops one reference of every block; h becomes invalid.
    void free(KvHandle h);

    int64_t n_tokens(KvHandle h) const;  // tokens h has room for
    const std::vector<int32_t>& block_table(KvHandle h) const;
    int64_t n_free_blocks() const { return pool_.n_free(); }
    int64_t n_total_blocks() const { return pool_.n_blocks(); }
    int64_t n_free_slots() const { return static_cast<int64_t>(free_slots_.size()); }
    int64_t n_total_slots() const { return static_cast<int64_t>(slots_.size()); }
    int64_t n_live_sequences() const { return n_total_slots() - n_free_slots(); }
    // Largest sequence the whole pool could hold (the admission limit for a single request).
    int64_t max_tokens_per_sequence() const { return n_total_blocks() * spec_.block_size; }

    // Throws onecard::Error unless: the pool is consistent; every block refcount equals the number of
    // live block tables that hold it; every live sequence has exactly blocks_for_tokens(n_tokens)
    // blocks; free slots are distinct and not live; the hash index and the pool's cached blocks are
    // the same set; the host tier is consistent (KvHostTier::check_integrity).
    void check_integrity() const;

private:
    struct Slot {
        bool live = false;
        uint32_t generation = 0;
        int64_t n_tokens = 0;
        std::vector<int32_t> blocks;
        int64_t n_registered = 0;  // leading blocks cache_blocks has looked at (prefix caching)
    };
    struct CachedBlock {  // a registered block's identity
        BlockHash hash = 0;
        std::vector<int32_t> tokens;  // [block_size]
    };
    const Slot& slot_of(KvHandle h, const char* verb) const;
    Slot& slot_of(KvHandle h, const char* verb);
    int64_t extra_blocks(const Slot& s, int64_t n_new_tokens) const;
    // Blocks of `match` that sit evictable now (allocating the match takes them out of n_free_blocks).
    int64_t n_evictable_in(const PrefixMatch& match) const;
    void forget_evicted(const std::vector<int32_t>& evicted);

    KvCacheSpec spec_;
    PrefixCacheConfig prefix_;
    BlockPool pool_;
    std::vector<Slot> slots_;
    std::vector<int32_t> free_slots_;  // stack
    // Prefix caching.
    std::vector<CachedBlock> cached_;                       // [n_blocks], valid where pool_.is_cached
    std::unordered_map<BlockHash, int32_t> block_of_hash_;  // registered blocks
    std::unique_ptr<KvHostTier> host_;                      // snapshots and the host KV tier
    BlockCopies copies_;                                    // of the step being scheduled
    int64_t n_evicted_blocks_ = 0;
};

}  // namespace onecard
