// KV cache manager: the only KV interface the scheduler sees. It hands out opaque KvHandles; behind a
// handle are one fixed-state slot (windows + compressor buffers) and a table of paged blocks sized
// for the sequence's token count. The scheduler asks can_allocate / can_extend first and preempts
// when the answer is no; allocate / extend on a "no" is a programming error and throws.
//
// Lifetime contract: a handle is valid from allocate() until free(); any use after free() throws
// (handles carry a generation number). Only the engine thread touches the manager.
#pragma once

#include "kvcache/block_pool.h"
#include "kvcache/kv_spec.h"

#include <cstdint>
#include <vector>

namespace onecard {

struct KvHandle {
    int32_t slot = -1;        // index into the slot arena (also the handle's identity)
    uint32_t generation = 0;  // bumped every time the slot is reused
    bool valid() const { return slot >= 0; }
    bool operator==(const KvHandle&) const = default;
};

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

class KvCacheManager {
public:
    KvCacheManager(KvCacheSpec spec, KvPoolSize size);

    const KvCacheSpec& spec() const { return spec_; }

    // True if a new sequence with room for n_tokens can be admitted now (a free slot and blocks).
    bool can_allocate(int64_t n_tokens) const;
    KvHandle allocate(int64_t n_tokens);
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
    // blocks; free slots are distinct and not live.
    void check_integrity() const;

private:
    struct Slot {
        bool live = false;
        uint32_t generation = 0;
        int64_t n_tokens = 0;
        std::vector<int32_t> blocks;
    };
    const Slot& slot_of(KvHandle h, const char* verb) const;
    Slot& slot_of(KvHandle h, const char* verb);
    int64_t extra_blocks(const Slot& s, int64_t n_new_tokens) const;

    KvCacheSpec spec_;
    BlockPool pool_;
    std::vector<Slot> slots_;
    std::vector<int32_t> free_slots_;  // stack
};

}  // namespace onecard
