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
        hashes.push_back(
            hash_kv_block(b == 0 ? kNoParentHash : hashes[b - 1], tokens, static_cast<int64_t>(b), block_size, extra));
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
    if (prefix_.enabled) {
        cached_.resize(static_cast<size_t>(size.n_blocks));
        ONECARD_CHECK(!prefix_.disk || prefix_.max_host_blocks > 0,
                      "kv manager: a disk tier needs the host tier (blocks come back through host RAM)");
        host_ = std::make_unique<KvHostTier>(spec_, KvHostTierConfig{prefix_.max_snapshots, prefix_.snapshot_bytes,
                                                                     prefix_.max_host_blocks, prefix_.disk});
    }
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
    ONECARD_CHECK((match.blocks.empty() && match.host_blocks.empty()) || prefix_.enabled,
                  "kv manager: a prefix match with prefix caching off");
    const auto n_match = static_cast<int64_t>(match.blocks.size() + match.host_blocks.size());
    ONECARD_CHECK(n_match * spec_.block_size == match.n_tokens, "kv manager: a prefix match of {} blocks for {} tokens",
                  n_match, match.n_tokens);
    const int32_t id = free_slots_.back();
    free_slots_.pop_back();
    Slot& s = slots_[static_cast<size_t>(id)];
    s.live = true;
    ++s.generation;
    s.n_tokens = n_tokens;
    s.blocks.clear();
    s.n_registered = n_match;
    for (int32_t b : match.blocks) {
        ONECARD_CHECK(pool_.is_cached(b), "kv manager: prefix match names block {}, which is not cached", b);
        pool_.incref(b);
        s.blocks.push_back(b);
    }
    // Pinned before any eviction below can spill into the host tier: their entries are read this step.
    for (int64_t e : match.host_blocks) host_->use_block(e);
    if (match.snapshot >= 0) host_->use_snapshot(match.snapshot);  // a hit: the most recently used
    std::vector<int32_t> evicted;
    pool_.allocate(static_cast<int32_t>(spec_.blocks_for_tokens(n_tokens) - static_cast<int64_t>(s.blocks.size())),
                   s.blocks, &evicted);
    forget_evicted(evicted);
    // The host-tier blocks come back into the first fresh blocks and are cached again at once.
    for (size_t j = 0; j < match.host_blocks.size(); ++j) {
        const int64_t e = match.host_blocks[j];
        const int32_t b = s.blocks[match.blocks.size() + j];
        CachedBlock& c = cached_[static_cast<size_t>(b)];
        c.hash = host_->block_hash(e);
        c.tokens = host_->block_tokens(e);
        ONECARD_CHECK(!block_of_hash_.contains(c.hash), "kv manager: host block {} is also on the device", e);
        block_of_hash_.emplace(c.hash, b);
        pool_.set_cached(b, true);
        copies_.loads.push_back({b, e});
    }
    return KvHandle{id, s.generation};
}

void KvCacheManager::forget_evicted(const std::vector<int32_t>& evicted) {
    for (int32_t b : evicted) {
        CachedBlock& c = cached_[static_cast<size_t>(b)];
        block_of_hash_.erase(c.hash);
        // Into the host tier (copied before the step that reuses b computes), if it has one.
        const int64_t e = host_->spill_block(c.hash, c.tokens);
        if (e >= 0) copies_.spills.push_back({b, e});
        // The snapshot that ends at this block cannot be resumed without it.
        if (!host_->has_block(c.hash)) host_->drop_snapshot(c.hash);
        c = CachedBlock{};
        ++n_evicted_blocks_;
    }
}

PrefixMatch KvCacheManager::match_prefix(std::span<const BlockHash> hashes, const SequenceTokens& tokens) const {
    PrefixMatch m;
    if (!prefix_.enabled) return m;
    const auto bs = static_cast<size_t>(spec_.block_size);
    std::vector<int32_t> chain;  // device blocks
    std::vector<int64_t> host;   // then host-tier entries
    std::vector<int32_t> block_tokens(bs);
    for (size_t b = 0; b < hashes.size() && (b + 1) * bs <= tokens.size(); ++b) {
        for (size_t i = 0; i < bs; ++i) block_tokens[i] = tokens[b * bs + i];
        auto it = block_of_hash_.find(hashes[b]);
        if (host.empty() && it != block_of_hash_.end()) {
            // The chain hash covers the parents; the tokens rule out a collision.
            if (cached_[static_cast<size_t>(it->second)].tokens != block_tokens) break;
            chain.push_back(it->second);
            continue;
        }
        // A device block after a host one would need a third kind of match entry: stop there.
        if (it != block_of_hash_.end()) break;
        const int64_t e = host_->find_block(hashes[b], block_tokens);
        if (e < 0) break;
        host.push_back(e);
    }
    // Resume at the last boundary with a snapshot that leaves at least one token to compute.
    for (size_t j = chain.size() + host.size(); j > 0; --j) {
        if (j * bs >= tokens.size()) continue;
        const int64_t snap = host_->find_snapshot(hashes[j - 1]);
        if (snap < 0) continue;
        const size_t n_dev = std::min(j, chain.size());
        m.blocks.assign(chain.begin(), chain.begin() + static_cast<long>(n_dev));
        m.host_blocks.assign(host.begin(), host.begin() + static_cast<long>(j - n_dev));
        m.n_tokens = static_cast<int64_t>(j * bs);
        m.snapshot = snap;
        break;
    }
    return m;
}

void KvCacheManager::promote_from_disk(std::span<const BlockHash> hashes, const SequenceTokens& tokens) {
    if (!host_ || host_->disk() == nullptr) return;
    const auto bs = static_cast<size_t>(spec_.block_size);
    std::vector<int32_t> block_tokens(bs);
    size_t n_avail = 0;  // leading blocks available in some tier
    for (size_t b = 0; b < hashes.size() && (b + 1) * bs <= tokens.size(); ++b, ++n_avail) {
        if (block_of_hash_.contains(hashes[b])) continue;
        for (size_t i = 0; i < bs; ++i) block_tokens[i] = tokens[b * bs + i];
        if (host_->find_block(hashes[b], block_tokens) >= 0) continue;
        if (host_->promote_block(hashes[b], block_tokens) < 0) break;
    }
    // The resume point match_prefix will pick: the last boundary below the last token with a snapshot.
    for (size_t j = n_avail; j > 0; --j) {
        if (j * bs >= tokens.size()) continue;
        if (host_->find_snapshot(hashes[j - 1]) >= 0 || host_->promote_snapshot(hashes[j - 1]) >= 0) break;
    }
}

void KvCacheManager::cache_blocks(KvHandle h, std::span<const BlockHash> hashes, const SequenceTokens& tokens,
                                  int64_t n_computed) {
    if (!prefix_.enabled) return;
    Slot& s = slot_of(h, "cache_blocks");
    const auto bs = static_cast<size_t>(spec_.block_size);
    const size_t n_full =
        std::min({static_cast<size_t>(n_computed) / bs, hashes.size(), s.blocks.size(), tokens.size() / bs});
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
    return prefix_.enabled ? host_->plan_snapshot(block_hash) : -1;
}

void KvCacheManager::commit_snapshot(int64_t id) {
    ONECARD_CHECK(prefix_.enabled, "kv manager: commit of snapshot {} with prefix caching off", id);
    host_->commit_snapshot(id);
}

void KvCacheManager::abandon_pending_snapshots() {
    if (prefix_.enabled) host_->abandon_pending_snapshots();
}

KvCacheManager::BlockCopies KvCacheManager::take_block_copies() {
    if (host_) host_->end_step();
    return std::exchange(copies_, {});
}

PrefixCacheStats KvCacheManager::prefix_cache_stats() const {
    PrefixCacheStats st;
    st.n_cached_blocks = static_cast<int64_t>(block_of_hash_.size());
    st.n_evictable_blocks = pool_.n_evictable();
    st.n_evicted_blocks = n_evicted_blocks_;
    if (host_) {
        const KvHostTierStats h = host_->stats();
        st.n_snapshots = h.n_snapshots;
        st.n_evicted_snapshots = h.n_evicted_snapshots;
        st.n_host_blocks = h.n_host_blocks;
        st.n_evicted_host_blocks = h.n_evicted_host_blocks;
        st.n_spilled_blocks = h.n_spilled_blocks;
        st.n_loaded_blocks = h.n_loaded_blocks;
        st.n_disk_writes = h.n_disk_writes;
        st.n_disk_reads = h.n_disk_reads;
        if (const KvDiskStore* d = host_->disk()) {
            const KvDiskStats ds = d->stats();
            st.n_disk_entries = ds.n_entries;
            st.disk_bytes = ds.bytes;
        }
    }
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
        ONECARD_CHECK(
            it != block_of_hash_.end() && it->second == b && static_cast<int64_t>(c.tokens.size()) == spec_.block_size,
            "kv manager integrity: cached block {} is not indexed under its hash", b);
    }
    for (const auto& [hash, b] : block_of_hash_)
        ONECARD_CHECK(
            b >= 0 && b < pool_.n_blocks() && pool_.is_cached(b) && cached_[static_cast<size_t>(b)].hash == hash,
            "kv manager integrity: hash index names block {}, which is not cached under it", b);
    if (host_) host_->check_integrity();
}

}  // namespace onecard
