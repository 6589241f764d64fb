// CUDA runtime pieces: the device arena's bookkeeping and failure messages, streams/events, checked
// copies and CUDA_CHECK. Needs a GPU (skips with the reason otherwise).
#include "gpu_test_util.h"

#ifdef ONECARD_HAVE_CUDA

#include "backend/cuda/cuda_check.h"
#include "core/error.h"

#include <cstring>

namespace onecard {
namespace {

TEST(CudaArena, AlignedAllocationsMarksAndIntegrity) {
    ONECARD_REQUIRE_GPU();
    cuda::DeviceArena arena(size_t{64} << 20, "test");
    arena.check_integrity();
    void* a = arena.alloc(1000, "a");
    void* b = arena.alloc(3, "b", 4096);
    void* c = arena.alloc(77, "c", 16);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 256, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 4096, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(c) % 16, 0u);
    EXPECT_GE(static_cast<std::byte*>(b), static_cast<std::byte*>(a) + 1000);
    EXPECT_GE(static_cast<std::byte*>(c), static_cast<std::byte*>(b) + 3);
    ASSERT_EQ(arena.allocations().size(), 3u);
    EXPECT_EQ(arena.allocations()[1].tag, "b");
    arena.check_integrity();

    const auto m = arena.mark();
    arena.alloc(size_t{1} << 20, "scratch");
    EXPECT_GT(arena.used(), m.used);
    arena.release(m);
    EXPECT_EQ(arena.used(), m.used);
    EXPECT_EQ(arena.allocations().size(), 3u);
    arena.check_integrity();
    // The released space is handed out again.
    void* d = arena.alloc(16, "d");
    EXPECT_LE(static_cast<std::byte*>(d), arena.base() + m.used + 256);
}

TEST(CudaArena, OverflowNamesTheTagAndShortfall) {
    ONECARD_REQUIRE_GPU();
    cuda::DeviceArena arena(size_t{1} << 20, "small");
    arena.alloc(size_t{3} << 18, "weights");
    try {
        arena.alloc(size_t{1} << 19, "kv pool");
        FAIL() << "expected an overflow error";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("small"), std::string::npos) << msg;
        EXPECT_NE(msg.find("kv pool"), std::string::npos) << msg;
        EXPECT_NE(msg.find("262144 bytes are left"), std::string::npos) << msg;
    }
    arena.check_integrity();  // a refused allocation leaves no trace
    EXPECT_EQ(arena.allocations().size(), 1u);
    EXPECT_THROW(arena.alloc(8, "bad alignment", 24), Error);
}

TEST(CudaArena, RefusesMoreThanTheDeviceHas) {
    ONECARD_REQUIRE_GPU();
    const auto devs = cuda::list_devices();
    ASSERT_FALSE(devs.empty());
    EXPECT_THROW(cuda::DeviceArena(devs[0].total_bytes * 2, "too big"), Error);
}

TEST(CudaStream, CopiesRoundTripAndEventsTime) {
    ONECARD_REQUIRE_GPU();
    cuda::DeviceArena arena(size_t{16} << 20, "copies");
    std::vector<uint32_t> host(1 << 20);
    for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint32_t>(i * 2654435761u);
    auto* d0 = arena.alloc_n<uint32_t>(host.size(), "src");
    auto* d1 = arena.alloc_n<uint32_t>(host.size(), "dst");
    cuda::copy_to_device(d0, host);
    cuda::fill_bytes(d1, 0xFF, host.size() * 4);
    cuda::Stream s;
    cuda::Event start, stop;
    start.record(s.get());
    CUDA_CHECK(cudaMemcpyAsync(d1, d0, host.size() * 4, cudaMemcpyDeviceToDevice, s.get()));
    stop.record(s.get());
    stop.sync();
    EXPECT_GE(stop.elapsed_ms_since(start), 0.0f);
    EXPECT_EQ(cuda::copy_to_host(d1, host.size()), host);
}

TEST(CudaCheck, ThrowsWithTheCallText) {
    ONECARD_REQUIRE_GPU();
    try {
        CUDA_CHECK(cudaMemcpy(nullptr, reinterpret_cast<void*>(16), 64, cudaMemcpyDeviceToDevice));
        FAIL() << "expected a CUDA error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("cudaMemcpy"), std::string::npos) << e.what();
    }
    // The error was not sticky: the context still works.
    cuda::device_sync();
}

}  // namespace
}  // namespace onecard

#else
TEST(CudaRuntime, Unavailable) {
    GTEST_SKIP() << "built without CUDA (ONECARD_CUDA=OFF)";
}
#endif
