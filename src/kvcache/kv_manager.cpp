#include "kvcache/kv_manager.h"

#include "core/error.h"

#include <limits>

namespace onecard {

KvPoolSize plan_kv_pool(const KvCacheSpec& spec, int64_t memory_budget_bytes, int64_t max_num_seqs) {
    ONECARD_CHECK(max_num_seqs > 0, "kv pool: max_num_seqs must be positive, got {}", max_num_seqs);
    const int64_t slots_bytes = max_num_seqs * spec.slot_bytes;
    ONECARD_CHECK(memory_budget_bytes >= slots_bytes + spec.block_bytes,
                  "kv pool: budget of {} bytes cannot hold {} sequence slots ({} B each) plus one {}-byte block",
                  memory_budget_bytes, max_num_seqs, spec.slot_bytes, spec.block_bytes);
    KvPoolSize size;
    size.n_slots = max_num_seqs;
    size.n_blocks =
        std::min<int64_t>((memory_budget_bytes - slots_bytes) / spec.block_bytes, std::numeric_limits<int32_t>::max());
    return size;
}

KvCacheManager::KvCacheManager(KvCacheSpec spec, KvPoolSize size)
    : spec_(std::move(spec)), pool_(static_cast<int32_t>(size.n_blocks)) {
    ONECARD_CHECK(size.n_slots > 0 && size.n_slots <= std::numeric_limits<int32_t>::max(),
                  "kv manager: bad slot count {}", size.n_slots);
    slots_.resize(static_cast<size_t>(size.n_slots));
    for (auto s = static_cast<int32_t>(size.n_slots) - 1; s >= 0; --s) free_slots_.push_back(s);
}

const KvCacheManager::Slot& KvCacheManager::slot_of(KvHandle h, const char* verb) const {
    ONECARD_CHECK(h.slot >= 0 && h.slot < static_cast<int32_t>(slots_.size()),
                  "kv manager: {} with invalid handle "
                  "(slot {})",
                  verb, h.slot);
    const Slot& s = slots_[static_cast<size_t>(h.slot)];
    ONECARD_CHECK(s.live && s.generation == h.generation,
                  "kv manager: {} with a stale handle (slot {}, generation {} vs {})", verb, h.slot, h.generation,
                  s.generation);
    return s;
}

KvCacheManager::Slot& KvCacheManager::slot_of(KvHandle h, const char* verb) {
    return const_cast<Slot&>(static_cast<const KvCacheManager*>(this)->slot_of(h, verb));
}

int64_t KvCacheManager::extra_blocks(const Slot& s, int64_t n_new_tokens) const {
    return spec_.blocks_for_tokens(s.n_tokens + n_new_tokens) - static_cast<int64_t>(s.blocks.size());
}

bool KvCacheManager::can_allocate(int64_t n_tokens) const {
    return n_tokens >= 0 && !free_slots_.empty() && spec_.blocks_for_tokens(n_tokens) <= n_free_blocks();
}

KvHandle KvCacheManager::allocate(int64_t n_tokens) {
    ONECARD_CHECK(can_allocate(n_tokens), "kv manager: allocate({}) without room ({} free slots, {} free blocks)",
                  n_tokens, free_slots_.size(), n_free_blocks());
    const int32_t id = free_slots_.back();
    free_slots_.pop_back();
    Slot& s = slots_[static_cast<size_t>(id)];
    s.live = true;
    ++s.generation;
    s.n_tokens = n_tokens;
    s.blocks.clear();
    pool_.allocate(static_cast<int32_t>(spec_.blocks_for_tokens(n_tokens)), s.blocks);
    return KvHandle{id, s.generation};
}

bool KvCacheManager::can_extend(KvHandle h, int64_t n_new_tokens) const {
    const Slot& s = slot_of(h, "can_extend");
    return n_new_tokens >= 0 && extra_blocks(s, n_new_tokens) <= n_free_blocks();
}

void KvCacheManager::extend(KvHandle h, int64_t n_new_tokens) {
    ONECARD_CHECK(can_extend(h, n_new_tokens), "kv manager: extend(slot {}, +{}) without room ({} free blocks)", h.slot,
                  n_new_tokens, n_free_blocks());
    Slot& s = slot_of(h, "extend");
    pool_.allocate(static_cast<int32_t>(extra_blocks(s, n_new_tokens)), s.blocks);
    s.n_tokens += n_new_tokens;
}

void KvCacheManager::free(KvHandle h) {
    Slot& s = slot_of(h, "free");
    for (int32_t b : s.blocks) pool_.decref(b);
    s.blocks.clear();
    s.n_tokens = 0;
    s.live = false;
    free_slots_.push_back(h.slot);
}

int64_t KvCacheManager::n_tokens(KvHandle h) const {
    return slot_of(h, "n_tokens").n_tokens;
}

const std::vector<int32_t>& KvCacheManager::block_table(KvHandle h) const {
    return slot_of(h, "block_table").blocks;
}

void KvCacheManager::check_integrity() const {
    pool_.check_integrity();
    std::vector<int32_t> refs(static_cast<size_t>(pool_.n_blocks()), 0);
    std::vector<int8_t> is_free(slots_.size(), 0);
    for (int32_t id : free_slots_) {
        ONECARD_CHECK(id >= 0 && id < static_cast<int32_t>(slots_.size()), "kv manager integrity: bad free slot {}",
                      id);
        ONECARD_CHECK(!is_free[static_cast<size_t>(id)], "kv manager integrity: slot {} twice in the free list", id);
        is_free[static_cast<size_t>(id)] = 1;
    }
    for (size_t id = 0; id < slots_.size(); ++id) {
        const Slot& s = slots_[id];
        ONECARD_CHECK(s.live != static_cast<bool>(is_free[id]), "kv manager integrity: slot {} live={} but free={}", id,
                      s.live, is_free[id]);
        if (!s.live) {
            ONECARD_CHECK(s.blocks.empty(), "kv manager integrity: free slot {} still holds {} blocks", id,
                          s.blocks.size());
            continue;
        }
        ONECARD_CHECK(static_cast<int64_t>(s.blocks.size()) == spec_.blocks_for_tokens(s.n_tokens),
                      "kv manager integrity: slot {} holds {} blocks for {} tokens (block size {})", id,
                      s.blocks.size(), s.n_tokens, spec_.block_size);
        for (int32_t b : s.blocks) {
            ONECARD_CHECK(b >= 0 && b < pool_.n_blocks(), "kv manager integrity: slot {} holds bad block {}", id, b);
            ++refs[static_cast<size_t>(b)];
        }
    }
    for (int32_t b = 0; b < pool_.n_blocks(); ++b) {
        ONECARD_CHECK(refs[static_cast<size_t>(b)] == pool_.refcount(b),
                      "kv manager integrity: block {} has refcount {} but {} owners", b, pool_.refcount(b),
                      refs[static_cast<size_t>(b)]);
    }
}

}  // namespace onecard
