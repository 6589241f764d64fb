// Device memory arena: the process takes its GPU memory once, with one plain cudaMalloc (never
// managed memory, which can hang a shared GPU when oversubscribed), and hands out aligned
// sub-buffers from it. Weights, the KV pool and workspaces are carved out at startup after the
// memory plan has checked that they fit, so nothing allocates (or fails to) in the decode loop.
// mark()/release() give stack-like scratch space for per-step workspaces.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace onecard::cuda {

class DeviceArena {
public:
    struct Allocation {
        std::string tag;    // what it is for, for reports and error messages
        size_t offset = 0;  // from the arena base
        size_t bytes = 0;
    };
    struct Mark {
        size_t n_allocations = 0;
        size_t used = 0;
    };

    // One cudaMalloc of `capacity` bytes on the current device; throws onecard::Error naming `name`
    // and the free memory when the device cannot give it.
    explicit DeviceArena(size_t capacity, std::string name = "arena");
    // A non-owning arena over memory someone else holds (a region carved from a parent arena, e.g.
    // per-step scratch): the same bookkeeping, no allocation and no free. The bookkeeping never
    // touches the bytes, so host memory works too (the unit tests use that).
    DeviceArena(void* base, size_t capacity, std::string name);
    ~DeviceArena();
    DeviceArena(const DeviceArena&) = delete;
    DeviceArena& operator=(const DeviceArena&) = delete;
    DeviceArena(DeviceArena&& other) noexcept;
    DeviceArena& operator=(DeviceArena&& other) noexcept;

    // A sub-buffer of `bytes` whose address is a multiple of `align` (a power of two; 256 by default,
    // cudaMalloc's own guarantee, enough for 16-byte vector loads and TMA). Throws onecard::Error
    // naming `tag` and the shortfall when the arena is full. bytes == 0 yields a valid aligned pointer.
    void* alloc(size_t bytes, std::string_view tag, size_t align = 256);
    template <typename T>
    T* alloc_n(size_t n, std::string_view tag, size_t align = 256) {
        return static_cast<T*>(alloc(n * sizeof(T), tag, align));
    }

    // Releases every allocation made after `m` (they must no longer be in use by queued work).
    Mark mark() const { return {allocations_.size(), used_}; }
    void release(const Mark& m);

    std::byte* base() const { return base_; }
    size_t capacity() const { return capacity_; }
    size_t used() const { return used_; }
    size_t remaining() const { return capacity_ - used_; }
    const std::vector<Allocation>& allocations() const { return allocations_; }
    const std::string& name() const { return name_; }

    // Throws onecard::Error if the bookkeeping is inconsistent: allocations out of order, overlapping,
    // past the capacity, or `used` not at the end of the last one.
    void check_integrity() const;

private:
    std::string name_;
    std::byte* base_ = nullptr;
    bool owns_ = true;  // false: borrowed memory, never freed here
    size_t capacity_ = 0;
    size_t used_ = 0;
    std::vector<Allocation> allocations_;
};

}  // namespace onecard::cuda
