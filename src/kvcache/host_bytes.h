// Host RAM for KV pools: an anonymous, private, MAP_NORESERVE mapping. It reads as zeros and costs no
// RAM until a page is first written, whatever the allocator does (glibc's calloc writes every byte under
// MALLOC_PERTURB_ or ThreadSanitizer). The KV host arena (kv_arena.h) and the prefix cache's host tier
// (kv_host_tier.h) hold their arenas in it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace onecard {

class HostBytes {
public:
    HostBytes() = default;
    HostBytes(size_t bytes, const char* what);  // throws if the mapping fails; 0 bytes maps nothing
    ~HostBytes();
    HostBytes(HostBytes&& o) noexcept : data_(o.data_), size_(o.size_) { o.data_ = nullptr, o.size_ = 0; }
    HostBytes& operator=(HostBytes&& o) noexcept;
    HostBytes(const HostBytes&) = delete;
    HostBytes& operator=(const HostBytes&) = delete;

    uint8_t* data() const { return data_; }
    size_t size() const { return size_; }

private:
    uint8_t* data_ = nullptr;
    size_t size_ = 0;
};

}  // namespace onecard
