// Fixed-size blocks identified by int32 ids, with a refcount each. Storage-free: the pool only
// decides which block ids are in use; the arenas (host or device) are indexed by id.
//
// A block with refcount 0 is in one of two states:
//  * free: nothing in it is worth keeping (LIFO free list);
//  * cached: its content is a full, content-hashed prefix block (kv_manager.h, prefix caching) that
//    a later sequence may reuse; cached blocks wait in LRU order and are only taken back by an
//    allocation that finds the free list empty (least recently released first).
// Refcounts let sequences share cached blocks; a block in use (refcount > 0) is never evicted.
#pragma once

#include <cstdint>
#include <list>
#include <vector>

namespace onecard {

class BlockPool {
public:
    explicit BlockPool(int32_t n_blocks);

    int32_t n_blocks() const { return static_cast<int32_t>(refcount_.size()); }
    // Blocks an allocation can get: free ones plus cached ones with refcount 0 (evictable).
    int32_t n_free() const { return static_cast<int32_t>(free_list_.size() + lru_.size()); }
    int32_t n_evictable() const { return static_cast<int32_t>(lru_.size()); }

    // Appends n fresh block ids (refcount 1, not cached) to out: free blocks first, then evicted
    // cached ones, least recently released first; the evicted ids are appended to *evicted (the
    // caller forgets their content). Returns false and changes nothing if n_free() < n.
    bool allocate(int32_t n, std::vector<int32_t>& out, std::vector<int32_t>* evicted = nullptr);
    // id must be in use, or cached with refcount 0 (it then leaves the LRU: a prefix hit).
    void incref(int32_t id);
    // id must be in use; at refcount 0 a cached block joins the back of the LRU, any other the free list.
    void decref(int32_t id);
    int32_t refcount(int32_t id) const;
    // Marks an in-use block's content reusable (cached) or not.
    void set_cached(int32_t id, bool cached);
    bool is_cached(int32_t id) const;

    // Throws onecard::Error unless: every block is exactly one of free (refcount 0, uncached, in the
    // free list once), evictable (refcount 0, cached, in the LRU once) or in use (refcount > 0, in
    // neither list).
    void check_integrity() const;

private:
    void check_id(int32_t id, const char* verb) const;

    std::vector<int32_t> refcount_;                      // [n_blocks]
    std::vector<int8_t> cached_;                         // [n_blocks]
    std::vector<int32_t> free_list_;                     // stack of free ids; back() is handed out next
    std::list<int32_t> lru_;                             // evictable cached blocks; front() is evicted next
    std::vector<std::list<int32_t>::iterator> lru_pos_;  // [n_blocks] valid while in lru_
};

}  // namespace onecard
