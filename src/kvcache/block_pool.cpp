#include "kvcache/block_pool.h"

#include "core/error.h"

namespace onecard {

BlockPool::BlockPool(int32_t n_blocks) {
    ONECARD_CHECK(n_blocks >= 0, "block pool: negative size {}", n_blocks);
    refcount_.assign(static_cast<size_t>(n_blocks), 0);
    cached_.assign(static_cast<size_t>(n_blocks), 0);
    lru_pos_.resize(static_cast<size_t>(n_blocks));
    free_list_.reserve(static_cast<size_t>(n_blocks));
    // Push in reverse so the first allocations get ids 0, 1, 2, ... (easier to read in dumps).
    for (int32_t id = n_blocks - 1; id >= 0; --id) free_list_.push_back(id);
}

bool BlockPool::allocate(int32_t n, std::vector<int32_t>& out, std::vector<int32_t>* evicted) {
    ONECARD_CHECK(n >= 0, "block pool: cannot allocate {} blocks", n);
    if (n > n_free()) return false;
    for (int32_t i = 0; i < n; ++i) {
        int32_t id = -1;
        if (!free_list_.empty()) {
            id = free_list_.back();
            free_list_.pop_back();
        } else {
            id = lru_.front();
            lru_.pop_front();
            cached_[static_cast<size_t>(id)] = 0;
            if (evicted) evicted->push_back(id);
        }
        refcount_[static_cast<size_t>(id)] = 1;
        out.push_back(id);
    }
    return true;
}

void BlockPool::check_id(int32_t id, const char* verb) const {
    ONECARD_CHECK(id >= 0 && id < n_blocks(), "block pool: {} of block {} outside [0, {})", verb, id, n_blocks());
    ONECARD_CHECK(refcount_[static_cast<size_t>(id)] > 0, "block pool: {} of free block {}", verb, id);
}

void BlockPool::incref(int32_t id) {
    ONECARD_CHECK(id >= 0 && id < n_blocks(), "block pool: incref of block {} outside [0, {})", id, n_blocks());
    const auto i = static_cast<size_t>(id);
    if (refcount_[i] == 0) {
        ONECARD_CHECK(cached_[i], "block pool: incref of free block {}", id);
        lru_.erase(lru_pos_[i]);
    }
    ++refcount_[i];
}

void BlockPool::decref(int32_t id) {
    check_id(id, "decref");
    const auto i = static_cast<size_t>(id);
    if (--refcount_[i] > 0) return;
    if (cached_[i]) {
        lru_pos_[i] = lru_.insert(lru_.end(), id);
    } else {
        free_list_.push_back(id);
    }
}

int32_t BlockPool::refcount(int32_t id) const {
    ONECARD_CHECK(id >= 0 && id < n_blocks(), "block pool: refcount of block {} outside [0, {})", id, n_blocks());
    return refcount_[static_cast<size_t>(id)];
}

void BlockPool::set_cached(int32_t id, bool cached) {
    check_id(id, "set_cached");
    cached_[static_cast<size_t>(id)] = cached ? 1 : 0;
}

bool BlockPool::is_cached(int32_t id) const {
    ONECARD_CHECK(id >= 0 && id < n_blocks(), "block pool: is_cached of block {} outside [0, {})", id, n_blocks());
    return cached_[static_cast<size_t>(id)] != 0;
}

void BlockPool::check_integrity() const {
    std::vector<int8_t> seen(refcount_.size(), 0);
    for (int32_t id : free_list_) {
        ONECARD_CHECK(id >= 0 && id < n_blocks(), "block pool integrity: free list holds bad id {}", id);
        ONECARD_CHECK(!seen[static_cast<size_t>(id)], "block pool integrity: block {} twice in the free list", id);
        seen[static_cast<size_t>(id)] = 1;
        ONECARD_CHECK(refcount_[static_cast<size_t>(id)] == 0 && !cached_[static_cast<size_t>(id)],
                      "block pool integrity: block {} is in the free list with refcount {} (cached {})", id,
                      refcount_[static_cast<size_t>(id)], cached_[static_cast<size_t>(id)]);
    }
    for (auto it = lru_.begin(); it != lru_.end(); ++it) {
        const int32_t id = *it;
        ONECARD_CHECK(id >= 0 && id < n_blocks(), "block pool integrity: LRU holds bad id {}", id);
        ONECARD_CHECK(!seen[static_cast<size_t>(id)], "block pool integrity: block {} twice in the free list / LRU",
                      id);
        seen[static_cast<size_t>(id)] = 1;
        ONECARD_CHECK(refcount_[static_cast<size_t>(id)] == 0 && cached_[static_cast<size_t>(id)] &&
                          lru_pos_[static_cast<size_t>(id)] == it,
                      "block pool integrity: block {} is in the LRU with refcount {} (cached {})", id,
                      refcount_[static_cast<size_t>(id)], cached_[static_cast<size_t>(id)]);
    }
    for (size_t id = 0; id < refcount_.size(); ++id) {
        ONECARD_CHECK(refcount_[id] >= 0, "block pool integrity: block {} has refcount {}", id, refcount_[id]);
        ONECARD_CHECK(refcount_[id] > 0 || seen[id], "block pool integrity: block {} is neither free nor owned", id);
    }
}

}  // namespace onecard
