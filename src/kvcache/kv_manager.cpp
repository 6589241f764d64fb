#include "kvcache/kv_manager.h"

#include "core/error.h"

#include <algorithm>
#include <limits>
#include <utility>

namespace onecard {

namespace {
uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}
}  // namespace

BlockHash hash_kv_block(BlockHash parent, const SequenceTokens& tokens, int64_t block, int64_t block_size,
                        uint64_t extra) {
    ONECARD_CHECK(block_size > 0 && block >= 0 && static_cast<size_t>((block + 1) * block_size) <= tokens.size(),
                  "block hash: block {} of {} tokens does not fit {} tokens", block, block_size, tokens.size());
    uint64_t h = splitmix64(parent ^ splitmix64(extra + static_cast<uint64_t>(block_size)));
    for (int64_t i = block * block_size; i < (block + 1) * block_size; ++i)
        h = splitmix64(h ^ static_cast<uint32_t>(tokens[static_cast<size_t>(i)]));
    return h;
}

void extend_block_hashes(std::vector<BlockHash>& hashes, const SequenceTokens& tokens, int64_t block_size,
                         uint64_t extra) {
    ONECARD_CHECK(block_size > 0, "block hashes: block size {}", block_size);
    const auto n_full = static_cast<size_t>(static_cast<int64_t>(tokens.size()) / block_size);
    for (size_t b = hashes.size(); b < n_full; ++b)
        hashes.push_back(hash_kv_block(b == 0 ? kNoParentHash : hashes[b - 1], tokens, static_cast<int64_t>(b),
                                       block_size, extra));
}

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

KvCacheManager::KvCacheManager(KvCacheSpec spec, KvPoolSize size, PrefixCacheConfig prefix)
    : spec_(std::move(spec)), prefix_(prefix), pool_(static_cast<int32_t>(size.n_blocks)) {
    ONECARD_CHECK(size.n_slots > 0 && size.n_slots <= std::numeric_limits<int32_t>::max(),
                  "kv manager: bad slot count {}", size.n_slots);
    ONECARD_CHECK(prefix_.max_snapshots >= 0, "kv manager: max_snapshots {} is negative", prefix_.max_snapshots);
    if (prefix_.enabled) cached_.resize(static_cast<size_t>(size.n_blocks));
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
    return can_allocate(PrefixMatch{}, n_tokens);
}

KvHandle KvCacheManager::allocate(int64_t n_tokens) {
    return allocate(PrefixMatch{}, n_tokens);
}

int64_t KvCacheManager::n_evictable_in(const PrefixMatch& match) const {
    int64_t n = 0;
    for (int32_t b : match.blocks) n += pool_.refcount(b) == 0;
    return n;
}

bool KvCacheManager::can_allocate(const PrefixMatch& match, int64_t n_tokens) const {
    if (n_tokens < match.n_tokens || free_slots_.empty()) return false;
    const int64_t fresh = spec_.blocks_for_tokens(n_tokens) - static_cast<int64_t>(match.blocks.size());
    return fresh <= n_free_blocks() - n_evictable_in(match);
}

KvHandle KvCacheManager::allocate(const PrefixMatch& match, int64_t n_tokens) {
    ONECARD_CHECK(can_allocate(match, n_tokens),
                  "kv manager: allocate({}, {} cached) without room ({} free slots, {} free blocks)", n_tokens,
                  match.n_tokens, free_slots_.size(), n_free_blocks());
    ONECARD_CHECK(match.blocks.empty() || prefix_.enabled, "kv manager: a prefix match with prefix caching off");
    ONECARD_CHECK(static_cast<int64_t>(match.blocks.size()) * spec_.block_size == match.n_tokens,
                  "kv manager: a prefix match of {} blocks for {} tokens", match.blocks.size(), match.n_tokens);
    const int32_t id = free_slots_.back();
    free_slots_.pop_back();
    Slot& s = slots_[static_cast<size_t>(id)];
    s.live = true;
    ++s.generation;
    s.n_tokens = n_tokens;
    s.blocks.clear();
    s.n_registered = static_cast<int64_t>(match.blocks.size());
    for (int32_t b : match.blocks) {
        ONECARD_CHECK(pool_.is_cached(b), "kv manager: prefix match names block {}, which is not cached", b);
        pool_.incref(b);
        s.blocks.push_back(b);
    }
    if (match.snapshot >= 0) {  // a hit: its snapshot is the most recently used
        auto it = snapshots_.find(match.blocks.empty() ? 0 : cached_[static_cast<size_t>(match.blocks.back())].hash);
        ONECARD_CHECK(it != snapshots_.end() && it->second.id == match.snapshot,
                      "kv manager: prefix match names snapshot {}, which is not indexed", match.snapshot);
        snapshot_lru_.splice(snapshot_lru_.end(), snapshot_lru_, it->second.lru);
    }
    std::vector<int32_t> evicted;
    pool_.allocate(static_cast<int32_t>(spec_.blocks_for_tokens(n_tokens) - static_cast<int64_t>(s.blocks.size())),
                   s.blocks, &evicted);
    forget_evicted(evicted);
    return KvHandle{id, s.generation};
}

void KvCacheManager::forget_evicted(const std::vector<int32_t>& evicted) {
    for (int32_t b : evicted) {
        CachedBlock& c = cached_[static_cast<size_t>(b)];
        block_of_hash_.erase(c.hash);
        // The snapshot that ends at this block cannot be resumed without it.
        drop_snapshot(c.hash);
        c = CachedBlock{};
        ++n_evicted_blocks_;
    }
}

void KvCacheManager::drop_snapshot(BlockHash hash) {
    auto it = snapshots_.find(hash);
    if (it == snapshots_.end()) return;
    dropped_snapshots_.push_back(it->second.id);
    snapshot_lru_.erase(it->second.lru);
    snapshots_.erase(it);
    ++n_evicted_snapshots_;
}

PrefixMatch KvCacheManager::match_prefix(std::span<const BlockHash> hashes, const SequenceTokens& tokens) const {
    PrefixMatch m;
    if (!prefix_.enabled) return m;
    const auto bs = static_cast<size_t>(spec_.block_size);
    std::vector<int32_t> chain;
    for (size_t b = 0; b < hashes.size() && (b + 1) * bs <= tokens.size(); ++b) {
        auto it = block_of_hash_.find(hashes[b]);
        if (it == block_of_hash_.end()) break;
        const CachedBlock& c = cached_[static_cast<size_t>(it->second)];
        // The chain hash covers the parents; the tokens rule out a collision.
        bool same = true;
        for (size_t i = 0; i < bs && same; ++i) same = c.tokens[i] == tokens[b * bs + i];
        if (!same) break;
        chain.push_back(it->second);
    }
    // Resume at the last boundary with a snapshot that leaves at least one token to compute.
    for (size_t j = chain.size(); j > 0; --j) {
        if (j * bs >= tokens.size()) continue;
        auto it = snapshots_.find(hashes[j - 1]);
        if (it == snapshots_.end()) continue;
        m.blocks.assign(chain.begin(), chain.begin() + static_cast<long>(j));
        m.n_tokens = static_cast<int64_t>(j * bs);
        m.snapshot = it->second.id;
        break;
    }
    return m;
}

void KvCacheManager::cache_blocks(KvHandle h, std::span<const BlockHash> hashes, const SequenceTokens& tokens,
                                  int64_t n_computed) {
    if (!prefix_.enabled) return;
    Slot& s = slot_of(h, "cache_blocks");
    const auto bs = static_cast<size_t>(spec_.block_size);
    const size_t n_full = std::min({static_cast<size_t>(n_computed) / bs, hashes.size(), s.blocks.size(),
                                    tokens.size() / bs});
    // Blocks below s.n_registered were looked at by an earlier call (or came from the cache).
    const size_t first = static_cast<size_t>(s.n_registered);
    for (size_t b = first; b < n_full; ++b) {
        const int32_t id = s.blocks[b];
        if (pool_.is_cached(id) || block_of_hash_.contains(hashes[b])) continue;  // registered, or a duplicate
        CachedBlock& c = cached_[static_cast<size_t>(id)];
        c.hash = hashes[b];
        c.tokens.resize(bs);
        for (size_t i = 0; i < bs; ++i) c.tokens[i] = tokens[b * bs + i];
        block_of_hash_.emplace(c.hash, id);
        pool_.set_cached(id, true);
    }
    s.n_registered = std::max<int64_t>(s.n_registered, static_cast<int64_t>(n_full));
}

int64_t KvCacheManager::plan_snapshot(BlockHash block_hash) {
    if (!prefix_.enabled || prefix_.max_snapshots == 0 || snapshots_.contains(block_hash)) return -1;
    for (const auto& [id, hash] : pending_snapshots_)
        if (hash == block_hash) return -1;
    const int64_t id = next_snapshot_id_++;
    pending_snapshots_.emplace(id, block_hash);
    return id;
}

void KvCacheManager::commit_snapshot(int64_t id) {
    auto it = pending_snapshots_.find(id);
    ONECARD_CHECK(it != pending_snapshots_.end(), "kv manager: commit of snapshot {}, which is not pending", id);
    const BlockHash hash = it->second;
    pending_snapshots_.erase(it);
    if (snapshots_.contains(hash)) {
        dropped_snapshots_.push_back(id);
        return;
    }
    while (static_cast<int64_t>(snapshots_.size()) >= prefix_.max_snapshots) drop_snapshot(snapshot_lru_.front());
    snapshots_.emplace(hash, Snapshot{id, snapshot_lru_.insert(snapshot_lru_.end(), hash)});
}

void KvCacheManager::abandon_pending_snapshots() {
    for (const auto& [id, hash] : pending_snapshots_) dropped_snapshots_.push_back(id);
    pending_snapshots_.clear();
}

std::vector<int64_t> KvCacheManager::take_dropped_snapshots() {
    return std::exchange(dropped_snapshots_, {});
}

PrefixCacheStats KvCacheManager::prefix_cache_stats() const {
    PrefixCacheStats st;
    st.n_cached_blocks = static_cast<int64_t>(block_of_hash_.size());
    st.n_evictable_blocks = pool_.n_evictable();
    st.n_snapshots = static_cast<int64_t>(snapshots_.size());
    st.n_evicted_blocks = n_evicted_blocks_;
    st.n_evicted_snapshots = n_evicted_snapshots_;
    return st;
}

bool KvCacheManager::can_extend(KvHandle h, int64_t n_new_tokens) const {
    const Slot& s = slot_of(h, "can_extend");
    return n_new_tokens >= 0 && extra_blocks(s, n_new_tokens) <= n_free_blocks();
}

void KvCacheManager::extend(KvHandle h, int64_t n_new_tokens) {
    ONECARD_CHECK(can_extend(h, n_new_tokens), "kv manager: extend(slot {}, +{}) without room ({} free blocks)", h.slot,
                  n_new_tokens, n_free_blocks());
    Slot& s = slot_of(h, "extend");
    std::vector<int32_t> evicted;
    pool_.allocate(static_cast<int32_t>(extra_blocks(s, n_new_tokens)), s.blocks, &evicted);
    forget_evicted(evicted);
    s.n_tokens += n_new_tokens;
}

void KvCacheManager::free(KvHandle h) {
    Slot& s = slot_of(h, "free");
    // Cached blocks join the LRU tail first, so a prefix's tail is evicted before its head (a head
    // block is worth more: every longer prefix needs it).
    if (prefix_.enabled) {
        for (auto it = s.blocks.rbegin(); it != s.blocks.rend(); ++it) pool_.decref(*it);
    } else {
        for (int32_t b : s.blocks) pool_.decref(b);
    }
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
        if (!pool_.is_cached(b)) continue;
        ONECARD_CHECK(prefix_.enabled, "kv manager integrity: block {} is cached with prefix caching off", b);
        const CachedBlock& c = cached_[static_cast<size_t>(b)];
        auto it = block_of_hash_.find(c.hash);
        ONECARD_CHECK(it != block_of_hash_.end() && it->second == b &&
                          static_cast<int64_t>(c.tokens.size()) == spec_.block_size,
                      "kv manager integrity: cached block {} is not indexed under its hash", b);
    }
    for (const auto& [hash, b] : block_of_hash_)
        ONECARD_CHECK(b >= 0 && b < pool_.n_blocks() && pool_.is_cached(b) &&
                          cached_[static_cast<size_t>(b)].hash == hash,
                      "kv manager integrity: hash index names block {}, which is not cached under it", b);
    ONECARD_CHECK(snapshots_.size() == snapshot_lru_.size() &&
                      static_cast<int64_t>(snapshots_.size()) <= prefix_.max_snapshots,
                  "kv manager integrity: {} snapshots, {} in the LRU, at most {}", snapshots_.size(),
                  snapshot_lru_.size(), prefix_.max_snapshots);
    for (auto it = snapshot_lru_.begin(); it != snapshot_lru_.end(); ++it) {
        auto s = snapshots_.find(*it);
        ONECARD_CHECK(s != snapshots_.end() && s->second.lru == it,
                      "kv manager integrity: the snapshot LRU and its index disagree");
    }
}

}  // namespace onecard
