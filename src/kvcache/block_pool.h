// Fixed-size blocks identified by int32 ids, with a refcount each and a LIFO free list. Storage-free:
// the pool only decides which block ids are in use; the arenas (host or device) are indexed by id.
// Refcounts let later prefix sharing hand one block to several sequences; a block returns to the
// free list when its last reference is dropped.
#pragma once

#include <cstdint>
#include <vector>

namespace onecard {

class BlockPool {
public:
    explicit BlockPool(int32_t n_blocks);

    int32_t n_blocks() const { return static_cast<int32_t>(refcount_.size()); }
    int32_t n_free() const { return static_cast<int32_t>(free_list_.size()); }

    // Appends n fresh block ids (refcount 1) to out. Returns false and changes nothing if fewer than
    // n blocks are free.
    bool allocate(int32_t n, std::vector<int32_t>& out);
    void incref(int32_t id);  // id must be in use
    void decref(int32_t id);  // id must be in use; the block is freed at refcount 0
    int32_t refcount(int32_t id) const;

    // Throws onecard::Error unless: every block is either free (refcount 0, in the free list exactly
    // once) or in use (refcount > 0, not in the free list).
    void check_integrity() const;

private:
    void check_id(int32_t id, const char* verb) const;

    std::vector<int32_t> refcount_;   // [n_blocks]
    std::vector<int32_t> free_list_;  // stack of free ids; back() is handed out next
};

}  // namespace onecard
