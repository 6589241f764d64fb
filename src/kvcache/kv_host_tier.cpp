#include "kvcache/kv_host_tier.h"

#include "core/error.h"

#include <algorithm>
#include <cstring>

namespace onecard {

namespace {
uint64_t mix(uint64_t h, uint64_t x) {
    h ^= x + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h ^= h >> 31;
    return h * 0xbf58476d1ce4e5b9ULL;
}
}  // namespace

uint64_t kv_layout_fingerprint(const KvCacheSpec& spec, int64_t snapshot_bytes, uint64_t model_id) {
    uint64_t h = mix(0x6b762d6c61796f75ULL, 1);  // "kv-layou", format version 1
    for (int64_t v : {spec.block_size, spec.block_bytes, spec.slot_bytes, spec.entry.entry_bytes(),
                      spec.index_key.entry_bytes(), snapshot_bytes})
        h = mix(h, static_cast<uint64_t>(v));
    for (const KvPagedStream& st : spec.streams)
        for (int64_t v : {st.layer, static_cast<int64_t>(st.kind), st.ratio, st.entry_bytes, st.offset})
            h = mix(h, static_cast<uint64_t>(v));
    for (const KvFixedRegion& f : spec.fixed)
        for (int64_t v : {f.layer, static_cast<int64_t>(f.kind), f.n_rows, f.row_bytes, f.offset})
            h = mix(h, static_cast<uint64_t>(v));
    return mix(h, model_id);
}

void KvHostTier::Entries::init(int64_t n) {
    hash.assign(static_cast<size_t>(n), 0);
    state.assign(static_cast<size_t>(n), 0);
    pinned.assign(static_cast<size_t>(n), 0);
    lru_it.assign(static_cast<size_t>(n), lru.end());
    for (int64_t e = n - 1; e >= 0; --e) free.push_back(e);
}

int64_t KvHostTier::Entries::take(const std::function<void(int64_t)>& on_evict) {
    if (!free.empty()) {
        const int64_t e = free.back();
        free.pop_back();
        return e;
    }
    for (auto it = lru.begin(); it != lru.end(); ++it) {
        const int64_t e = *it;
        if (pinned[static_cast<size_t>(e)]) continue;
        if (on_evict) on_evict(e);
        lru.erase(it);
        of_hash.erase(hash[static_cast<size_t>(e)]);
        state[static_cast<size_t>(e)] = 0;
        ++n_evicted;
        return e;
    }
    return -1;
}

void KvHostTier::Entries::index(int64_t e) {
    state[static_cast<size_t>(e)] = 2;
    lru_it[static_cast<size_t>(e)] = lru.insert(lru.end(), e);
}

void KvHostTier::Entries::release(int64_t e) {
    const auto i = static_cast<size_t>(e);
    if (state[i] == 2) lru.erase(lru_it[i]);
    if (state[i] != 0) {
        of_hash.erase(hash[i]);
        free.push_back(e);
    }
    state[i] = 0;
    pinned[i] = 0;
}

void KvHostTier::Entries::touch(int64_t e) {
    lru.splice(lru.end(), lru, lru_it[static_cast<size_t>(e)]);
}

void KvHostTier::Entries::check(const char* what) const {
    const auto n = static_cast<int64_t>(state.size());
    int64_t n_free = 0, n_pending = 0, n_indexed = 0;
    for (int64_t e = 0; e < n; ++e) {
        const int8_t s = state[static_cast<size_t>(e)];
        n_free += s == 0;
        n_pending += s == 1;
        n_indexed += s == 2;
        if (s == 0) continue;
        auto it = of_hash.find(hash[static_cast<size_t>(e)]);
        ONECARD_CHECK(it != of_hash.end() && it->second == e, "kv host tier integrity: {} entry {} is not indexed",
                      what, e);
    }
    ONECARD_CHECK(static_cast<int64_t>(free.size()) == n_free && static_cast<int64_t>(lru.size()) == n_indexed &&
                      static_cast<int64_t>(of_hash.size()) == n_pending + n_indexed,
                  "kv host tier integrity: {} entries: {} free ({} listed), {} indexed ({} in the LRU), {} hashes",
                  what, n_free, free.size(), n_indexed, lru.size(), of_hash.size());
    for (int64_t e : free)
        ONECARD_CHECK(e >= 0 && e < n && state[static_cast<size_t>(e)] == 0,
                      "kv host tier integrity: {} free list names entry {}", what, e);
    for (int64_t e : lru)
        ONECARD_CHECK(e >= 0 && e < n && state[static_cast<size_t>(e)] == 2,
                      "kv host tier integrity: {} LRU names entry {}", what, e);
}

KvHostTier::KvHostTier(const KvCacheSpec& spec, KvHostTierConfig config) : spec_(spec), config_(config) {
    ONECARD_CHECK(config_.max_snapshots >= 0 && config_.max_host_blocks >= 0,
                  "kv host tier: negative sizes ({} snapshots, {} blocks)", config_.max_snapshots,
                  config_.max_host_blocks);
    ONECARD_CHECK(config_.max_snapshots == 0 || config_.snapshot_bytes > 0, "kv host tier: {} snapshots of {} bytes",
                  config_.max_snapshots, config_.snapshot_bytes);
    // Lazily backed (host_bytes.h): an untouched entry costs no RAM until first written.
    snapshot_map_ =
        HostBytes(static_cast<size_t>(config_.max_snapshots * config_.snapshot_bytes), "prefix-cache snapshots");
    block_map_ = HostBytes(static_cast<size_t>(config_.max_host_blocks * spec_.block_bytes), "the host KV tier");
    mem_.snapshots = snapshot_map_.data();
    mem_.n_snapshots = config_.max_snapshots;
    mem_.snapshot_bytes = config_.snapshot_bytes;
    mem_.blocks = block_map_.data();
    mem_.n_blocks = config_.max_host_blocks;
    mem_.block_bytes = spec_.block_bytes;
    snaps_.init(config_.max_snapshots);
    blocks_.init(config_.max_host_blocks);
    block_tokens_.resize(static_cast<size_t>(config_.max_host_blocks));
    if (config_.disk) disk_ = std::make_unique<KvDiskStore>(*config_.disk);
}

void KvHostTier::write_block_to_disk(int64_t entry) {
    if (!disk_) return;
    // Payload: the block's token ids ([block_size] int32, checked on the way back), then its bytes.
    const std::vector<int32_t>& t = block_tokens_[static_cast<size_t>(entry)];
    std::vector<uint8_t> payload(t.size() * 4 + static_cast<size_t>(mem_.block_bytes));
    std::memcpy(payload.data(), t.data(), t.size() * 4);
    std::memcpy(payload.data() + t.size() * 4, mem_.block(entry), static_cast<size_t>(mem_.block_bytes));
    n_disk_writes_ += disk_->put({KvTierKind::Block, blocks_.hash[static_cast<size_t>(entry)]}, payload);
}

void KvHostTier::write_snapshot_to_disk(int64_t entry) {
    if (!disk_) return;
    n_disk_writes_ +=
        disk_->put({KvTierKind::Snapshot, snaps_.hash[static_cast<size_t>(entry)]},
                   std::span<const uint8_t>(mem_.snapshot(entry), static_cast<size_t>(mem_.snapshot_bytes)));
}

int64_t KvHostTier::take_block_entry() {
    return blocks_.take([this](int64_t e) { write_block_to_disk(e); });
}

int64_t KvHostTier::take_snapshot_entry() {
    return snaps_.take([this](int64_t e) { write_snapshot_to_disk(e); });
}

int64_t KvHostTier::index_new_block(BlockHash hash, std::span<const int32_t> tokens) {
    const int64_t e = take_block_entry();
    if (e < 0) return -1;
    const auto i = static_cast<size_t>(e);
    blocks_.hash[i] = hash;
    blocks_.of_hash.emplace(hash, e);
    blocks_.index(e);
    blocks_.pinned[i] = 1;
    block_tokens_[i].assign(tokens.begin(), tokens.end());
    return e;
}

int64_t KvHostTier::promote_block(BlockHash hash, std::span<const int32_t> tokens) {
    if (!disk_ || !host_tier_on() || blocks_.of_hash.contains(hash) || !disk_->contains({KvTierKind::Block, hash}))
        return -1;
    std::vector<uint8_t> payload;
    const size_t tok_bytes = tokens.size() * 4;
    if (!disk_->get({KvTierKind::Block, hash}, payload) ||
        payload.size() != tok_bytes + static_cast<size_t>(mem_.block_bytes) ||
        std::memcmp(payload.data(), tokens.data(), tok_bytes) != 0)
        return -1;
    const int64_t e = index_new_block(hash, tokens);
    if (e < 0) return -1;
    std::memcpy(mem_.block(e), payload.data() + tok_bytes, static_cast<size_t>(mem_.block_bytes));
    ++n_disk_reads_;
    return e;
}

int64_t KvHostTier::promote_snapshot(BlockHash hash) {
    if (!disk_ || config_.max_snapshots == 0 || snaps_.of_hash.contains(hash) ||
        !disk_->contains({KvTierKind::Snapshot, hash}))
        return -1;
    std::vector<uint8_t> payload;
    if (!disk_->get({KvTierKind::Snapshot, hash}, payload) ||
        payload.size() != static_cast<size_t>(mem_.snapshot_bytes))
        return -1;
    const int64_t e = take_snapshot_entry();
    if (e < 0) return -1;
    std::memcpy(mem_.snapshot(e), payload.data(), payload.size());
    snaps_.hash[static_cast<size_t>(e)] = hash;
    snaps_.of_hash.emplace(hash, e);
    snaps_.index(e);
    snaps_.pinned[static_cast<size_t>(e)] = 1;
    ++n_disk_reads_;
    return e;
}

int64_t KvHostTier::host_bytes() const {
    return static_cast<int64_t>(snapshot_map_.size() + block_map_.size());
}

int64_t KvHostTier::find_snapshot(BlockHash hash) const {
    auto it = snaps_.of_hash.find(hash);
    return it == snaps_.of_hash.end() || snaps_.state[static_cast<size_t>(it->second)] != 2 ? -1 : it->second;
}

int64_t KvHostTier::plan_snapshot(BlockHash hash) {
    if (config_.max_snapshots == 0 || snaps_.of_hash.contains(hash)) return -1;
    const int64_t e = take_snapshot_entry();
    if (e < 0) return -1;
    snaps_.hash[static_cast<size_t>(e)] = hash;
    snaps_.state[static_cast<size_t>(e)] = 1;
    snaps_.pinned[static_cast<size_t>(e)] = 1;
    snaps_.of_hash.emplace(hash, e);
    return e;
}

void KvHostTier::commit_snapshot(int64_t id) {
    ONECARD_CHECK(id >= 0 && id < config_.max_snapshots && snaps_.state[static_cast<size_t>(id)] == 1,
                  "kv host tier: commit of snapshot {}, which is not pending", id);
    snaps_.index(id);
    snaps_.pinned[static_cast<size_t>(id)] = 0;
}

void KvHostTier::abandon_pending_snapshots() {
    for (int64_t e = 0; e < config_.max_snapshots; ++e)
        if (snaps_.state[static_cast<size_t>(e)] == 1) snaps_.release(e);
}

void KvHostTier::use_snapshot(int64_t id) {
    ONECARD_CHECK(id >= 0 && id < config_.max_snapshots && snaps_.state[static_cast<size_t>(id)] == 2,
                  "kv host tier: snapshot {} is not stored", id);
    snaps_.touch(id);
    snaps_.pinned[static_cast<size_t>(id)] = 1;
}

void KvHostTier::drop_snapshot(BlockHash hash) {
    auto it = snaps_.of_hash.find(hash);
    if (it == snaps_.of_hash.end() || snaps_.state[static_cast<size_t>(it->second)] != 2) return;
    snaps_.release(it->second);
    ++snaps_.n_evicted;
}

int64_t KvHostTier::find_block(BlockHash hash, std::span<const int32_t> tokens) const {
    auto it = blocks_.of_hash.find(hash);
    if (it == blocks_.of_hash.end()) return -1;
    const std::vector<int32_t>& t = block_tokens_[static_cast<size_t>(it->second)];
    return std::equal(t.begin(), t.end(), tokens.begin(), tokens.end()) ? it->second : -1;
}

const std::vector<int32_t>& KvHostTier::block_tokens(int64_t entry) const {
    return block_tokens_.at(static_cast<size_t>(entry));
}

BlockHash KvHostTier::block_hash(int64_t entry) const {
    return blocks_.hash.at(static_cast<size_t>(entry));
}

int64_t KvHostTier::spill_block(BlockHash hash, std::span<const int32_t> tokens) {
    if (!host_tier_on() || blocks_.of_hash.contains(hash)) return -1;
    const int64_t e = index_new_block(hash, tokens);
    if (e >= 0) ++n_spilled_;
    return e;
}

void KvHostTier::use_block(int64_t entry) {
    ONECARD_CHECK(entry >= 0 && entry < config_.max_host_blocks && blocks_.state[static_cast<size_t>(entry)] == 2,
                  "kv host tier: block entry {} is not stored", entry);
    blocks_.touch(entry);
    blocks_.pinned[static_cast<size_t>(entry)] = 1;
    ++n_loaded_;
}

void KvHostTier::end_step() {
    // Pending snapshots stay pinned: their entries are written by the step being scheduled.
    for (size_t e = 0; e < snaps_.pinned.size(); ++e) snaps_.pinned[e] = snaps_.state[e] == 1;
    std::fill(blocks_.pinned.begin(), blocks_.pinned.end(), 0);
}

KvHostTierStats KvHostTier::stats() const {
    KvHostTierStats st;
    st.n_snapshots = static_cast<int64_t>(snaps_.lru.size());
    st.n_host_blocks = static_cast<int64_t>(blocks_.lru.size());
    st.n_evicted_snapshots = snaps_.n_evicted;
    st.n_evicted_host_blocks = blocks_.n_evicted;
    st.n_spilled_blocks = n_spilled_;
    st.n_loaded_blocks = n_loaded_;
    st.n_disk_writes = n_disk_writes_;
    st.n_disk_reads = n_disk_reads_;
    return st;
}

void KvHostTier::check_integrity() const {
    snaps_.check("snapshot");
    blocks_.check("host block");
    if (disk_) disk_->check_integrity();
    for (int64_t e : blocks_.lru)
        ONECARD_CHECK(static_cast<int64_t>(block_tokens_[static_cast<size_t>(e)].size()) == spec_.block_size,
                      "kv host tier integrity: host block entry {} holds {} token ids, not {}", e,
                      block_tokens_[static_cast<size_t>(e)].size(), spec_.block_size);
}

}  // namespace onecard
