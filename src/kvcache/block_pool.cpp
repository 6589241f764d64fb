#include "kvcache/block_pool.h"

#include "core/error.h"

namespace onecard {

BlockPool::BlockPool(int32_t n_blocks) {
    ONECARD_CHECK(n_blocks >= 0, "block pool: negative size {}", n_blocks);
    refcount_.assign(static_cast<size_t>(n_blocks), 0);
    free_list_.reserve(static_cast<size_t>(n_blocks));
    // Push in reverse so the first allocations get ids 0, 1, 2, ... (easier to read in dumps).
    for (int32_t id = n_blocks - 1; id >= 0; --id) free_list_.push_back(id);
}

bool BlockPool::allocate(int32_t n, std::vector<int32_t>& out) {
    ONECARD_CHECK(n >= 0, "block pool: cannot allocate {} blocks", n);
    if (n > n_free()) return false;
    for (int32_t i = 0; i < n; ++i) {
        const int32_t id = free_list_.back();
        free_list_.pop_back();
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
    check_id(id, "incref");
    ++refcount_[static_cast<size_t>(id)];
}

void BlockPool::decref(int32_t id) {
    check_id(id, "decref");
    if (--refcount_[static_cast<size_t>(id)] == 0) free_list_.push_back(id);
}

int32_t BlockPool::refcount(int32_t id) const {
    ONECARD_CHECK(id >= 0 && id < n_blocks(), "block pool: refcount of block {} outside [0, {})", id, n_blocks());
    return refcount_[static_cast<size_t>(id)];
}

void BlockPool::check_integrity() const {
    std::vector<int8_t> seen(refcount_.size(), 0);
    for (int32_t id : free_list_) {
        ONECARD_CHECK(id >= 0 && id < n_blocks(), "block pool integrity: free list holds bad id {}", id);
        ONECARD_CHECK(!seen[static_cast<size_t>(id)], "block pool integrity: block {} twice in the free list", id);
        seen[static_cast<size_t>(id)] = 1;
        ONECARD_CHECK(refcount_[static_cast<size_t>(id)] == 0,
                      "block pool integrity: block {} is in the free list with refcount {}", id,
                      refcount_[static_cast<size_t>(id)]);
    }
    for (size_t id = 0; id < refcount_.size(); ++id) {
        ONECARD_CHECK(refcount_[id] >= 0, "block pool integrity: block {} has refcount {}", id, refcount_[id]);
        ONECARD_CHECK(refcount_[id] > 0 || seen[id], "block pool integrity: block {} is neither free nor owned", id);
    }
}

}  // namespace onecard
