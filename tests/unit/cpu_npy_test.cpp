// NPY v1 round trips (the logits dump format) and refusal of unsupported files.
#include "core/error.h"
#include "core/npy.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

using namespace onecard;

TEST(CpuNpy, RoundTripF32AndI32) {
    auto dir = std::filesystem::temp_directory_path() / ("onecard_npy_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    std::mt19937 rng(3);
    std::vector<float> f(3 * 7);
    for (auto& v : f) v = std::uniform_real_distribution<float>(-5, 5)(rng);
    npy_write_f32(dir / "a.npy", f, {3, 7});
    auto a = npy_read_f32(dir / "a.npy");
    EXPECT_EQ(a.shape, (std::vector<int64_t>{3, 7}));
    EXPECT_EQ(a.data, f);
    // Header is 64-byte aligned, as numpy writes it.
    EXPECT_EQ((std::filesystem::file_size(dir / "a.npy") - f.size() * 4) % 64, 0u);
    std::vector<int32_t> ids = {5, -1, 1 << 30};
    npy_write_i32(dir / "b.npy", ids, {3});
    auto b = npy_read_i32(dir / "b.npy");
    EXPECT_EQ(b.shape, (std::vector<int64_t>{3}));
    EXPECT_EQ(b.data, ids);
    EXPECT_THROW(npy_read_f32(dir / "b.npy"), Error);  // wrong dtype
    EXPECT_THROW(npy_write_f32(dir / "c.npy", f, {4, 7}), Error);
    std::ofstream(dir / "junk.npy") << "not numpy";
    EXPECT_THROW(npy_read_f32(dir / "junk.npy"), Error);
    std::filesystem::remove_all(dir);
}
