// Checkpoint integrity beyond a well-formed header: the data buffer must be exactly the tensors'
// bytes (no slack, no gaps), and `verify --weights` finds NaN/Inf codes in floating tensors and the
// NaN code of UE8M0 scales (loader/weight_scan.h), naming each bad tensor.
#include "core/error.h"
#include "loader/checkpoint.h"
#include "loader/safetensors.h"
#include "loader/safetensors_writer.h"
#include "loader/weight_scan.h"

#include "support/test_support.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

namespace onecard {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

// A safetensors file with a hand-written header followed by `n_data` bytes.
void write_raw(const fs::path& p, const std::string& header, size_t n_data) {
    std::vector<char> bytes(8 + header.size() + n_data, 0);
    const uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
    std::memcpy(bytes.data() + 8, header.data(), header.size());
    std::ofstream(p, std::ios::binary | std::ios::trunc)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void expect_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
    try {
        fn();
    } catch (const Error& e) {
        const std::string msg = e.what();
        for (const auto& part : parts) EXPECT_NE(msg.find(part), std::string::npos) << "message: " << msg;
        return;
    }
    ADD_FAILURE() << "nothing was thrown";
}

std::vector<std::byte> bytes_of(std::initializer_list<unsigned> v) {
    std::vector<std::byte> out;
    for (unsigned b : v) out.push_back(static_cast<std::byte>(b));
    return out;
}

TEST(SafetensorsLayout, DataBufferMustBeExactlyTheTensors) {
    TempDir dir;
    const auto p = dir / "x.safetensors";
    const std::string two = R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},)"
                            R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [16, 24]}})";
    write_raw(p, two, 24);
    EXPECT_NO_THROW(SafetensorsFile{p});
    // Slack after the last tensor: the shape of a header length that absorbed padding.
    write_raw(p, two, 32);
    expect_error([&] { SafetensorsFile f(p); }, {p.string(), "8 bytes of slack after the last tensor"});
    // A gap before the first tensor, and between two.
    write_raw(p, R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})", 24);
    expect_error([&] { SafetensorsFile f(p); }, {p.string(), "tensor a starts at data offset 8", "ends at 0"});
    write_raw(p,
              R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},)"
              R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [20, 28]}})",
              28);
    expect_error([&] { SafetensorsFile f(p); }, {p.string(), "tensor b starts at data offset 20", "ends at 16"});
    // No tensors: no data either.
    write_raw(p, "{}", 4);
    expect_error([&] { SafetensorsFile f(p); }, {p.string(), "4 bytes of slack"});
    // Zero-byte tensors occupy nothing, wherever their offsets point inside the buffer.
    write_raw(p,
              R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},)"
              R"( "z": {"dtype": "F32", "shape": [0], "data_offsets": [8, 8]}})",
              16);
    EXPECT_NO_THROW(SafetensorsFile{p});
}

TEST(SafetensorsLayout, ShiftedShardIsRefusedByTheCheckpointNamingIt) {
    TempDir dir;
    {
        SafetensorsWriter w(dir / "model.safetensors", {{"w", DType::BF16, {4}}});
        w.write("w", std::vector<std::byte>(8, std::byte{0x3F}));
        w.close();
    }
    EXPECT_NO_THROW(Checkpoint::open(dir.path()));
    std::ofstream(dir / "model.safetensors", std::ios::binary | std::ios::app).write("padding!", 8);
    expect_error([&] { Checkpoint::open(dir.path()); }, {"model.safetensors", "slack"});
}

TEST(WeightScan, EveryFormatsNanAndInfCodes) {
    struct Case {
        DType t;
        std::vector<std::byte> bytes;
        uint64_t n_nan, n_inf;
        int64_t first;
    };
    const std::vector<Case> cases = {
        // F32: max finite, +inf, -inf, quiet NaN, a signalling NaN with the lowest mantissa bit.
        {DType::F32,
         bytes_of({0xFF, 0xFF, 0x7F, 0x7F, 0, 0, 0x80, 0x7F, 0, 0, 0x80, 0xFF, 0, 0, 0xC0, 0x7F, 1, 0, 0x80, 0x7F}), 2,
         2, 1},
        // BF16: max finite 0x7F7F, -inf 0xFF80, NaN 0x7FC0, NaN 0xFF81.
        {DType::BF16, bytes_of({0x7F, 0x7F, 0x80, 0xFF, 0xC0, 0x7F, 0x81, 0xFF}), 2, 1, 1},
        // F16: max finite 0x7BFF, +inf 0x7C00, NaN 0xFE00.
        {DType::F16, bytes_of({0xFF, 0x7B, 0x00, 0x7C, 0x00, 0xFE}), 1, 1, 1},
        // E4M3 (fn): 448 = 0x7E and -448 = 0xFE are finite; 0x7F and 0xFF are NaN.
        {DType::F8_E4M3, bytes_of({0x7E, 0xFE, 0x00, 0x80, 0x7F, 0xFF}), 2, 0, 4},
        // E5M2: 0x7B finite, 0x7C +inf, 0xFC -inf, 0x7D NaN.
        {DType::F8_E5M2, bytes_of({0x7B, 0x7C, 0xFC, 0x7D}), 1, 2, 1},
        // UE8M0: 0xFE is 2^127; 0xFF is NaN.
        {DType::F8_E8M0, bytes_of({0x00, 0x7F, 0xFE, 0xFF}), 1, 0, 3},
        // Integer and packed MXFP4 bytes have no NaN.
        {DType::I8, bytes_of({0xFF, 0x7F}), 0, 0, -1},
        {DType::U8, bytes_of({0xFF}), 0, 0, -1},
    };
    for (const auto& c : cases) {
        const NonFiniteCount n = count_non_finite(c.t, c.bytes);
        EXPECT_EQ(n.n_nan, c.n_nan) << dtype_name(c.t);
        EXPECT_EQ(n.n_inf, c.n_inf) << dtype_name(c.t);
        EXPECT_EQ(n.first, c.first) << dtype_name(c.t);
    }
}

// A one-file checkpoint with clean and poisoned tensors of every scanned kind.
void write_poisoned_checkpoint(const fs::path& dir, bool poison) {
    const std::vector<TensorSpec> specs = {
        {"embed.weight", DType::BF16, {2, 2}},      {"layers.0.wq.weight", DType::F8_E4M3, {2, 2}},
        {"layers.0.wq.scale", DType::F8_E8M0, {2}}, {"norm.weight", DType::F32, {2}},
        {"experts.0.w1.weight", DType::I8, {4}},
    };
    SafetensorsWriter w(dir / "model.safetensors", specs);
    w.write("embed.weight", bytes_of({0x80, 0x3F, 0x00, 0x40, 0x40, 0x40, poison ? 0xC0u : 0x00u, 0x7F}));
    w.write("layers.0.wq.weight", bytes_of({0x7E, 0xFE, poison ? 0xFFu : 0x01u, 0x00}));
    w.write("layers.0.wq.scale", bytes_of({0x7F, poison ? 0xFFu : 0x80u}));
    w.write("norm.weight", bytes_of({0, 0, 0x80, 0x3F, 0, 0, 0x80, 0x3F}));
    w.write("experts.0.w1.weight", bytes_of({0xFF, 0xFF, 0xFF, 0xFF}));
    w.close();
}

TEST(WeightScan, CheckpointReportNamesEachBadTensor) {
    TempDir dir;
    write_poisoned_checkpoint(dir.path(), true);
    const WeightScanReport r = scan_weights(Checkpoint::open(dir.path()), 3);
    EXPECT_EQ(r.n_tensors, 4u);
    EXPECT_EQ(r.n_skipped, 1u);
    ASSERT_EQ(r.bad.size(), 3u);
    std::vector<std::string> names;
    for (const auto& b : r.bad) names.push_back(b.name);
    EXPECT_EQ(names, (std::vector<std::string>{"embed.weight", "layers.0.wq.weight", "layers.0.wq.scale"}));
    EXPECT_EQ(r.bad[0].count.first, 3);
    EXPECT_EQ(r.bad[2].count.n_nan, 1u);

    TempDir clean;
    write_poisoned_checkpoint(clean.path(), false);
    EXPECT_TRUE(scan_weights(Checkpoint::open(clean.path())).ok());
}

TEST(WeightScan, VerifyWeightsCliExitsNonZeroNamingTheTensors) {
    if (!fs::exists(test::onecard_binary())) GTEST_SKIP() << "onecard binary not built";
    const std::string bin = test::onecard_binary().string();
    TempDir dir;
    write_poisoned_checkpoint(dir.path(), true);
    const std::string d = dir.path().string();
    ASSERT_EQ(test::run_command(bin + " manifest " + d + " > " + d + "/SHA256SUMS").rc, 0);
    // The hashes match: plain verify passes, --weights does not.
    EXPECT_EQ(test::run_command(bin + " verify " + d + " 2>&1").rc, 0);
    const test::CommandResult r = test::run_command(bin + " verify " + d + " --weights 2>&1");
    EXPECT_NE(r.rc, 0) << r.out;
    for (const char* name : {"embed.weight: FAILED weights", "layers.0.wq.weight: FAILED weights",
                             "layers.0.wq.scale: FAILED weights", "3 tensor(s) with NaN/Inf"})
        EXPECT_NE(r.out.find(name), std::string::npos) << name << "\n" << r.out;
    EXPECT_EQ(r.out.find("norm.weight: FAILED"), std::string::npos) << r.out;

    TempDir clean;
    write_poisoned_checkpoint(clean.path(), false);
    const std::string c = clean.path().string();
    ASSERT_EQ(test::run_command(bin + " manifest " + c + " > " + c + "/SHA256SUMS").rc, 0);
    const test::CommandResult ok = test::run_command(bin + " verify " + c + " --weights 2>&1");
    EXPECT_EQ(ok.rc, 0) << ok.out;
    EXPECT_NE(ok.out.find("0 with NaN/Inf"), std::string::npos) << ok.out;
}

}  // namespace
}  // namespace onecard
