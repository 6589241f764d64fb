#include "backend/cuda/arena.h"

#include "backend/cuda/cuda_check.h"

#include <utility>

namespace onecard::cuda {

DeviceArena::DeviceArena(size_t capacity, std::string name) : name_(std::move(name)), capacity_(capacity) {
    ONECARD_CHECK(capacity > 0, "device arena '{}': capacity must be positive", name_);
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, capacity);
    if (err != cudaSuccess) {
        cudaGetLastError();
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        fail("device arena '{}': cudaMalloc of {} bytes ({:.2f} GiB) failed: {} (device has {:.2f} GiB free of {:.2f})",
             name_, capacity, capacity / 1073741824.0, cudaGetErrorString(err), free_b / 1073741824.0,
             total_b / 1073741824.0);
    }
    base_ = static_cast<std::byte*>(p);
}

DeviceArena::DeviceArena(void* base, size_t capacity, std::string name)
    : name_(std::move(name)), base_(static_cast<std::byte*>(base)), owns_(false), capacity_(capacity) {
    ONECARD_CHECK(base != nullptr && capacity > 0, "device arena '{}': borrowed region must be non-empty", name_);
}

DeviceArena::~DeviceArena() {
    // No throw from a destructor: a failing free at teardown means the context is already broken.
    if (base_ && owns_) cudaFree(base_);
}

DeviceArena::DeviceArena(DeviceArena&& other) noexcept
    : name_(std::move(other.name_)),
      base_(std::exchange(other.base_, nullptr)),
      owns_(other.owns_),
      capacity_(std::exchange(other.capacity_, 0)),
      used_(std::exchange(other.used_, 0)),
      allocations_(std::move(other.allocations_)) {}

DeviceArena& DeviceArena::operator=(DeviceArena&& other) noexcept {
    if (this != &other) {
        if (base_ && owns_) cudaFree(base_);
        name_ = std::move(other.name_);
        base_ = std::exchange(other.base_, nullptr);
        owns_ = other.owns_;
        capacity_ = std::exchange(other.capacity_, 0);
        used_ = std::exchange(other.used_, 0);
        allocations_ = std::move(other.allocations_);
    }
    return *this;
}

void* DeviceArena::alloc(size_t bytes, std::string_view tag, size_t align) {
    ONECARD_CHECK(base_ != nullptr, "device arena '{}': alloc '{}' on a moved-from arena", name_, tag);
    ONECARD_CHECK(align > 0 && (align & (align - 1)) == 0,
                  "device arena '{}': alignment {} of '{}' is not a power of two", name_, align, tag);
    // The base is 256-aligned (cudaMalloc); larger alignments are taken relative to the address.
    const auto addr = reinterpret_cast<uintptr_t>(base_) + used_;
    const size_t pad = (align - addr % align) % align;
    const size_t offset = used_ + pad;
    if (offset > capacity_ || bytes > capacity_ - offset) {
        fail("device arena '{}': '{}' needs {} bytes ({:.3f} GiB) but only {} bytes are left of {} ({} allocations)",
             name_, tag, bytes, bytes / 1073741824.0, capacity_ - std::min(offset, capacity_), capacity_,
             allocations_.size());
    }
    allocations_.push_back({std::string(tag), offset, bytes});
    used_ = offset + bytes;
    return base_ + offset;
}

void DeviceArena::release(const Mark& m) {
    ONECARD_CHECK(m.n_allocations <= allocations_.size() && m.used <= used_,
                  "device arena '{}': release to a mark ({} allocations, {} bytes) past the current state ({}, {})",
                  name_, m.n_allocations, m.used, allocations_.size(), used_);
    allocations_.resize(m.n_allocations);
    used_ = m.used;
}

void DeviceArena::check_integrity() const {
    ONECARD_CHECK(used_ <= capacity_, "device arena '{}': used {} > capacity {}", name_, used_, capacity_);
    size_t end = 0;
    for (size_t i = 0; i < allocations_.size(); ++i) {
        const Allocation& a = allocations_[i];
        ONECARD_CHECK(a.offset >= end, "device arena '{}': allocation {} '{}' at {} overlaps the previous end {}",
                      name_, i, a.tag, a.offset, end);
        ONECARD_CHECK(a.bytes <= capacity_ && a.offset <= capacity_ - a.bytes,
                      "device arena '{}': allocation {} '{}' [{}, +{}) runs past capacity {}", name_, i, a.tag,
                      a.offset, a.bytes, capacity_);
        end = a.offset + a.bytes;
    }
    ONECARD_CHECK(used_ == end, "device arena '{}': used {} does not match the end of the last allocation {}", name_,
                  used_, end);
}

}  // namespace onecard::cuda
