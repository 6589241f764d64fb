// DeviceArena bookkeeping without a GPU: a borrowed (non-owning) arena over host memory hands out
// aligned, non-overlapping sub-buffers, refuses overflow with a message naming the arena, the tag
// and what is left, and releases to marks. tests/ops/cuda_runtime_test.cpp covers the owning,
// cudaMalloc-backed arena on the device.
#include <gtest/gtest.h>

#ifdef ONECARD_HAVE_CUDA

#include "backend/cuda/arena.h"
#include "core/error.h"

#include <cstdlib>
#include <memory>
#include <random>
#include <string>

namespace onecard {
namespace {

struct HostRegion {
    explicit HostRegion(size_t n) : bytes(n), p(static_cast<std::byte*>(std::aligned_alloc(256, n))) {}
    ~HostRegion() { std::free(p); }
    size_t bytes;
    std::byte* p;
};

TEST(DeviceArenaBook, AlignsAndNeverOverlaps) {
    HostRegion r(1 << 20);
    cuda::DeviceArena arena(r.p, r.bytes, "host book");
    std::mt19937 rng(5);
    std::uniform_int_distribution<size_t> size(0, 5000);
    std::uniform_int_distribution<int> align_pow(0, 12);
    uintptr_t prev_end = reinterpret_cast<uintptr_t>(r.p);
    for (int i = 0; i < 100; ++i) {
        const size_t bytes = size(rng), align = size_t{1} << align_pow(rng);
        auto* p = static_cast<std::byte*>(arena.alloc(bytes, "buf " + std::to_string(i), align));
        const auto addr = reinterpret_cast<uintptr_t>(p);
        ASSERT_EQ(addr % align, 0u) << "allocation " << i;
        ASSERT_GE(addr, prev_end) << "allocation " << i << " overlaps the previous one";
        ASSERT_LE(addr + bytes, reinterpret_cast<uintptr_t>(r.p) + r.bytes);
        prev_end = addr + bytes;
        arena.check_integrity();
    }
    EXPECT_EQ(arena.allocations().size(), 100u);
    EXPECT_EQ(arena.used(), prev_end - reinterpret_cast<uintptr_t>(r.p));
}

TEST(DeviceArenaBook, OverflowIsRefusedWithNamesAndLeavesNoTrace) {
    HostRegion r(4096);
    cuda::DeviceArena arena(r.p, r.bytes, "weights arena");
    arena.alloc(3000, "layer 0");
    try {
        arena.alloc(2000, "layer 1");
        FAIL() << "expected an overflow";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("weights arena"), std::string::npos) << msg;
        EXPECT_NE(msg.find("layer 1"), std::string::npos) << msg;
        EXPECT_NE(msg.find("2000 bytes"), std::string::npos) << msg;
    }
    EXPECT_EQ(arena.allocations().size(), 1u);
    arena.check_integrity();
    EXPECT_THROW(arena.alloc(16, "odd alignment", 48), Error);
    EXPECT_NO_THROW(arena.alloc(840, "fits after padding to 3072", 256));
}

TEST(DeviceArenaBook, MarksReleaseScratchAndReuseIt) {
    HostRegion r(1 << 16);
    cuda::DeviceArena arena(r.p, r.bytes, "step");
    arena.alloc(1000, "persistent");
    const auto m = arena.mark();
    void* s1 = arena.alloc(5000, "scratch a");
    arena.alloc(7000, "scratch b");
    arena.release(m);
    EXPECT_EQ(arena.used(), m.used);
    EXPECT_EQ(arena.allocations().size(), 1u);
    arena.check_integrity();
    EXPECT_EQ(arena.alloc(5000, "scratch again"), s1);  // same layout -> same address
    // A mark from the future is refused.
    const auto later = arena.mark();
    arena.release(m);
    EXPECT_THROW(arena.release(later), Error);
}

TEST(DeviceArenaBook, MovedFromArenaRefusesWork) {
    HostRegion r(4096);
    cuda::DeviceArena a(r.p, r.bytes, "a");
    a.alloc(10, "x");
    cuda::DeviceArena b(std::move(a));
    EXPECT_EQ(b.allocations().size(), 1u);
    EXPECT_THROW(a.alloc(10, "y"), Error);  // NOLINT(bugprone-use-after-move): the refusal is the point
    b.check_integrity();
}

}  // namespace
}  // namespace onecard

#else
TEST(DeviceArenaBook, Unavailable) {
    GTEST_SKIP() << "built without CUDA (ONECARD_CUDA=OFF)";
}
#endif
