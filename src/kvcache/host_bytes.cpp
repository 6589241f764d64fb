#include "kvcache/host_bytes.h"

#include "core/error.h"

#include <sys/mman.h>

#include <utility>

namespace onecard {

HostBytes::HostBytes(size_t bytes, const char* what) : size_(bytes) {
    if (bytes == 0) return;
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    ONECARD_CHECK(p != MAP_FAILED, "cannot map {} bytes of host RAM for {}", bytes, what);
    data_ = static_cast<uint8_t*>(p);
}

HostBytes::~HostBytes() {
    if (data_) munmap(data_, size_);
}

HostBytes& HostBytes::operator=(HostBytes&& o) noexcept {
    HostBytes gone(std::move(*this));
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    return *this;
}

}  // namespace onecard
