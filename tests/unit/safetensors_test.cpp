// Safetensors writer -> reader round trips, one test per kind of header corruption (each checks its
// own message), checkpoint-directory rules (index, shards) and a fuzz over mutated headers.
#include "loader/safetensors.h"
#include "core/error.h"
#include "loader/checkpoint.h"
#include "loader/safetensors_writer.h"

#include "support/test_support.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace onecard {
namespace {

namespace fs = std::filesystem;

using test::TempDir;

uint32_t fresh_seed() {
    const uint32_t seed = std::random_device{}();
    std::printf("seed %u\n", seed);
    return seed;
}

std::vector<std::byte> random_bytes(std::mt19937& rng, size_t n) {
    std::vector<std::byte> out(n);
    for (auto& b : out) b = static_cast<std::byte>(rng() & 0xFF);
    return out;
}

std::vector<std::byte> read_file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::byte> out(chars.size());
    std::memcpy(out.data(), chars.data(), chars.size());
    return out;
}

void write_file(const fs::path& p, const std::vector<std::byte>& bytes) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// A safetensors file with a hand-written header (for corruptions the writer refuses to produce).
void write_raw(const fs::path& p, const std::string& header, size_t n_data, uint64_t declared_len = UINT64_MAX) {
    const uint64_t n = declared_len == UINT64_MAX ? header.size() : declared_len;
    std::vector<std::byte> bytes(8 + header.size() + n_data, std::byte{0x5A});
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<std::byte>((n >> (8 * i)) & 0xFF);
    std::memcpy(bytes.data() + 8, header.data(), header.size());
    write_file(p, bytes);
}

// Writes `specs` with random contents, in chunks of random size; returns each tensor's bytes.
std::vector<std::vector<std::byte>> write_random(const fs::path& p, const std::vector<TensorSpec>& specs,
                                                 std::mt19937& rng,
                                                 const std::map<std::string, std::string>& metadata = {}) {
    std::vector<std::vector<std::byte>> contents;
    SafetensorsWriter w(p, specs, metadata);
    for (const auto& s : specs) {
        contents.push_back(random_bytes(rng, s.nbytes()));
        std::span<const std::byte> rest(contents.back());
        while (!rest.empty()) {
            const size_t n = std::min<size_t>(rest.size(), 1 + rng() % 13);
            w.write(s.name, rest.first(n));
            rest = rest.subspan(n);
        }
    }
    w.close();
    return contents;
}

// Runs `fn`, requires an onecard::Error whose message contains every one of `parts`.
void expect_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
    try {
        fn();
    } catch (const Error& e) {
        const std::string msg = e.what();
        for (const auto& part : parts)
            EXPECT_NE(msg.find(part), std::string::npos) << "message: " << msg << "\nwanted: " << part;
        return;
    } catch (const std::exception& e) {
        FAIL() << "expected onecard::Error, got std::exception: " << e.what();
    }
    FAIL() << "expected onecard::Error, nothing was thrown";
}

void expect_open_error(const fs::path& p, std::vector<std::string> parts) {
    parts.push_back(p.string());  // every message names the file
    expect_error([&] { SafetensorsFile f(p); }, parts);
}

const std::vector<TensorSpec> kMixedSpecs = {
    {"layers.0.attn.wq_a.weight", DType::F8_E4M3, {8, 16}},
    {"layers.0.attn.wq_a.scale", DType::F8_E8M0, {1, 1}},
    {"embed.weight", DType::BF16, {5, 7}},
    {"norm.weight", DType::F32, {7}},
    {"experts.w1.weight", DType::I8, {4, 3}},  // packed MXFP4: byte shape
    {"empty.bias", DType::F16, {0, 4}},
    {"step", DType::I64, {}},  // scalar: empty shape, one element
    {"tid2eid", DType::I32, {3, 2}},
    {"mask", DType::U8, {9}},
    {"e5", DType::F8_E5M2, {2, 2}},
};

TEST(SafetensorsTest, RoundTripPreservesNamesShapesDtypesBytesAndMetadata) {
    TempDir dir;
    std::mt19937 rng(fresh_seed());
    const auto path = dir / "a.safetensors";
    const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "x\"y"}};
    const auto contents = write_random(path, kMixedSpecs, rng, meta);

    SafetensorsFile f(path);
    f.check_integrity();
    EXPECT_EQ(f.metadata(), meta);
    EXPECT_EQ(f.data_start() % 8, 0u) << "header must be padded to a multiple of 8";
    ASSERT_EQ(f.tensors().size(), kMixedSpecs.size());
    for (size_t i = 0; i < kMixedSpecs.size(); ++i) {
        const auto& spec = kMixedSpecs[i];
        // The writer keeps declaration order, so file order equals it.
        const TensorView& t = f.tensors()[i];
        EXPECT_EQ(t.name, spec.name);
        EXPECT_EQ(t.dtype, spec.dtype) << spec.name;
        EXPECT_EQ(t.shape, spec.shape) << spec.name;
        ASSERT_EQ(t.nbytes, contents[i].size()) << spec.name;
        if (t.nbytes > 0) {
            EXPECT_EQ(std::memcmp(t.data, contents[i].data(), t.nbytes), 0) << spec.name;
        }
        EXPECT_EQ(f.find(spec.name), &t);
    }
    EXPECT_EQ(f.find("step")->numel(), 1);
    EXPECT_EQ(f.find("empty.bias")->nbytes, 0u);
    EXPECT_EQ(f.find("absent"), nullptr);
    EXPECT_EQ(f.file_size(), fs::file_size(path));
}

TEST(SafetensorsTest, EmptyFileWithNoTensorsIsValid) {
    TempDir dir;
    const auto path = dir / "e.safetensors";
    SafetensorsWriter w(path, {});
    w.close();
    SafetensorsFile f(path);
    EXPECT_TRUE(f.tensors().empty());
    EXPECT_TRUE(f.metadata().empty());
    f.check_integrity();
}

TEST(SafetensorsTest, WriterRejectsMisuse) {
    TempDir dir;
    const std::vector<std::byte> four(4), eight(8);
    expect_error(
        [&] {
            SafetensorsWriter w(dir / "d.safetensors", {{"a", DType::F32, {1}}, {"a", DType::F32, {1}}});
        },
        {"duplicate tensor name a"});
    expect_error([&] { SafetensorsWriter w(dir / "n.safetensors", {{"a", DType::F32, {-1}}}); }, {"negative"});
    {
        SafetensorsWriter w(dir / "o.safetensors", {{"a", DType::F32, {1}}, {"b", DType::F32, {1}}});
        expect_error([&] { w.write("b", four); }, {"out of order", "expected tensor a"});
    }
    {
        SafetensorsWriter w(dir / "t.safetensors", {{"a", DType::F32, {1}}});
        expect_error([&] { w.write("a", eight); }, {"tensor a", "holds 4 bytes"});
    }
    {
        SafetensorsWriter w(dir / "c.safetensors", {{"a", DType::F32, {2}}});
        w.write("a", four);
        expect_error([&] { w.close(); }, {"tensor a incomplete", "4 of 8"});
    }
}

TEST(SafetensorsCorruptionTest, TruncatedFile) {
    TempDir dir;
    std::mt19937 rng(fresh_seed());
    const auto good = dir / "good.safetensors";
    write_random(good, kMixedSpecs, rng);
    const auto bytes = read_file(good);
    const auto path = dir / "cut.safetensors";

    write_file(path, std::vector<std::byte>(bytes.begin(), bytes.begin() + 5));
    expect_open_error(path, {"file truncated", "5 bytes"});

    write_file(path, std::vector<std::byte>(bytes.begin(), bytes.begin() + 40));  // inside the header
    expect_open_error(path, {"file truncated", "runs past the end of the file"});

    write_file(path, std::vector<std::byte>(bytes.begin(), bytes.end() - 3));  // inside the last tensor
    expect_open_error(path, {"tensor e5", "outside the data buffer", "file truncated"});

    write_file(path, {});
    expect_open_error(path, {"file truncated", "0 bytes"});
}

TEST(SafetensorsCorruptionTest, HeaderLengthTooLarge) {
    TempDir dir;
    const auto path = dir / "big.safetensors";
    write_raw(path, "{}      ", 0, uint64_t{1} << 40);
    expect_open_error(path, {"header length 1099511627776 exceeds the 100000000-byte limit"});
    write_raw(path, "{}      ", 0, UINT64_MAX - 1);
    expect_open_error(path, {"exceeds the 100000000-byte limit"});
}

TEST(SafetensorsCorruptionTest, HeaderLengthTooSmall) {
    TempDir dir;
    const auto path = dir / "small.safetensors";
    write_raw(path, "{}      ", 0, 1);
    expect_open_error(path, {"header length 1 is too small"});
    write_raw(path, "{}      ", 0, 0);
    expect_open_error(path, {"header length 0 is too small"});
}

TEST(SafetensorsCorruptionTest, BadJson) {
    TempDir dir;
    const auto path = dir / "j.safetensors";
    write_raw(path, R"({"a": {"dtype": "F32", "shape": [1], )", 4);
    expect_open_error(path, {"invalid JSON"});
    write_raw(path, "{\"a\xff\": 1}", 0);  // invalid UTF-8 in a key
    expect_open_error(path, {"invalid JSON"});
}

TEST(SafetensorsCorruptionTest, HeaderNotAnObject) {
    TempDir dir;
    const auto path = dir / "arr.safetensors";
    write_raw(path, "[1, 2, 3]", 0);
    expect_open_error(path, {"header is a JSON array, not an object"});
    write_raw(path, R"({"w": [0, 4]})", 4);
    expect_open_error(path, {"tensor w", "entry is a JSON array, not an object"});
}

TEST(SafetensorsCorruptionTest, UnknownDtype) {
    TempDir dir;
    const auto path = dir / "dt.safetensors";
    write_raw(path, R"({"w": {"dtype": "F4", "shape": [2], "data_offsets": [0, 1]}})", 1);
    expect_open_error(path, {"tensor w", "unknown dtype \"F4\""});
}

TEST(SafetensorsCorruptionTest, OverlappingRanges) {
    TempDir dir;
    const auto path = dir / "ov.safetensors";
    write_raw(path,
              R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},)"
              R"( "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})",
              24);
    expect_open_error(path, {"tensors a [0, 16) and b [8, 24) have overlapping byte ranges"});
    // A zero-byte tensor inside another's range occupies nothing: accepted.
    write_raw(path,
              R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},)"
              R"( "z": {"dtype": "F32", "shape": [0], "data_offsets": [8, 8]}})",
              16);
    SafetensorsFile f(path);
    EXPECT_EQ(f.tensors().size(), 2u);
}

TEST(SafetensorsCorruptionTest, SizeMismatch) {
    TempDir dir;
    const auto path = dir / "sz.safetensors";
    write_raw(path, R"({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}})", 16);
    expect_open_error(path, {"tensor w", "size mismatch", "needs 16 bytes", "hold 12"});
    write_raw(path, R"({"w": {"dtype": "BF16", "shape": [4294967296, 4294967296], "data_offsets": [0, 12]}})", 16);
    expect_open_error(path, {"tensor w", "overflows"});
}

TEST(SafetensorsCorruptionTest, RangeOutsideFile) {
    TempDir dir;
    const auto path = dir / "out.safetensors";
    write_raw(path, R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [100, 116]}})", 20);
    expect_open_error(path, {"tensor w", "data_offsets [100, 116) lie outside the data buffer of 20 bytes"});
    write_raw(path, R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})", 20);
    expect_open_error(path, {"tensor w", "begin after end"});
}

TEST(SafetensorsCorruptionTest, DuplicateNames) {
    TempDir dir;
    const auto path = dir / "dup.safetensors";
    write_raw(path,
              R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
              R"( "w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
              8);
    expect_open_error(path, {"duplicate tensor name \"w\""});
    write_raw(path, R"({"w": {"dtype": "F32", "dtype": "I32", "shape": [1], "data_offsets": [0, 4]}})", 4);
    expect_open_error(path, {"duplicate key \"dtype\"", "\"w\""});
}

TEST(SafetensorsCorruptionTest, NegativeOrNonIntegerShape) {
    TempDir dir;
    const auto path = dir / "neg.safetensors";
    write_raw(path, R"({"w": {"dtype": "F32", "shape": [-2, -2], "data_offsets": [0, 16]}})", 16);
    expect_open_error(path, {"tensor w", "negative dimension -2"});
    write_raw(path, R"({"w": {"dtype": "F32", "shape": [2.0], "data_offsets": [0, 8]}})", 8);
    expect_open_error(path, {"tensor w", "not a non-negative integer"});
}

TEST(SafetensorsCorruptionTest, BadFieldsAndMetadata) {
    TempDir dir;
    const auto path = dir / "m.safetensors";
    write_raw(path, R"({"__metadata__": {"format": 3}})", 0);
    expect_open_error(path, {"__metadata__ value of \"format\"", "not a string"});
    write_raw(path, R"({"w": {"dtype": "F32", "shape": [1]}})", 4);
    expect_open_error(path, {"tensor w", "missing field \"data_offsets\""});
    write_raw(path, R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "extra": 1}})", 4);
    expect_open_error(path, {"tensor w", "unexpected field \"extra\""});
    write_raw(path, R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", 4);
    expect_open_error(path, {"tensor w", "not a pair of non-negative integers"});
    write_raw(path, std::string(100, '[') + std::string(100, ']'), 0);
    expect_open_error(path, {"nested deeper"});
}

// ---- checkpoint directories -----------------------------------------------------------------

void write_index(const fs::path& dir, const std::map<std::string, std::string>& weight_map) {
    std::string text = R"({"metadata": {"total_size": 0}, "weight_map": {)";
    bool first = true;
    for (const auto& [tensor, shard] : weight_map) {
        text += (first ? "" : ", ") + ("\"" + tensor + "\": \"" + shard + "\"");
        first = false;
    }
    text += "}}";
    std::ofstream(dir / "model.safetensors.index.json") << text;
}

struct ShardedFixture {
    TempDir dir;
    std::mt19937 rng{fresh_seed()};
    std::map<std::string, std::string> weight_map;
    std::map<std::string, std::vector<std::byte>> contents;
    const std::string shard1 = "model-00001-of-00002.safetensors";
    const std::string shard2 = "model-00002-of-00002.safetensors";

    ShardedFixture() {
        const std::vector<TensorSpec> s1 = {{"embed.weight", DType::BF16, {6, 4}}, {"layers.0.w", DType::F32, {3}}};
        const std::vector<TensorSpec> s2 = {{"layers.1.w", DType::F8_E4M3, {2, 8}},
                                            {"head.weight", DType::BF16, {4, 6}}};
        const auto c1 = write_random(dir / shard1, s1, rng);
        const auto c2 = write_random(dir / shard2, s2, rng);
        for (size_t i = 0; i < s1.size(); ++i) {
            weight_map[s1[i].name] = shard1;
            contents[s1[i].name] = c1[i];
        }
        for (size_t i = 0; i < s2.size(); ++i) {
            weight_map[s2[i].name] = shard2;
            contents[s2[i].name] = c2[i];
        }
        write_index(dir.path(), weight_map);
    }
};

TEST(CheckpointTest, ShardedRoundTrip) {
    ShardedFixture fx;
    Checkpoint ck = Checkpoint::open(fx.dir.path());
    ck.check_integrity();
    ASSERT_EQ(ck.tensors().size(), 4u);
    ASSERT_EQ(ck.shard_paths().size(), 2u);
    EXPECT_EQ(ck.shard_paths()[0].filename(), fx.shard1);
    // By shard, then by offset.
    EXPECT_EQ(ck.tensors()[0].name, "embed.weight");
    EXPECT_EQ(ck.tensors()[2].name, "layers.1.w");
    for (const auto& [name, bytes] : fx.contents) {
        const TensorView& t = ck.get(name);
        ASSERT_EQ(t.nbytes, bytes.size());
        EXPECT_EQ(std::memcmp(t.data, bytes.data(), bytes.size()), 0) << name;
    }
    EXPECT_EQ(ck.find("nope"), nullptr);
    expect_error([&] { ck.get("nope"); }, {"tensor nope not found"});
    Checkpoint moved = std::move(ck);
    EXPECT_EQ(moved.get("head.weight").shape, (std::vector<int64_t>{4, 6}));
}

TEST(CheckpointTest, SingleFileCheckpoint) {
    TempDir dir;
    std::mt19937 rng(fresh_seed());
    write_random(dir / "model.safetensors", kMixedSpecs, rng);
    const Checkpoint ck = Checkpoint::open(dir.path());
    EXPECT_EQ(ck.tensors().size(), kMixedSpecs.size());
    EXPECT_EQ(ck.get("norm.weight").dtype, DType::F32);
}

TEST(CheckpointTest, NotACheckpointDirectory) {
    TempDir dir;
    expect_error([&] { Checkpoint::open(dir.path()); }, {"not a safetensors checkpoint directory"});
    expect_error([&] { Checkpoint::open(dir / "absent"); }, {"not a directory"});
}

TEST(CheckpointTest, MissingShard) {
    ShardedFixture fx;
    fs::remove(fx.dir / fx.shard2);
    expect_error([&] { Checkpoint::open(fx.dir.path()); }, {"missing shard " + fx.shard2});
}

TEST(CheckpointTest, TensorInWrongShard) {
    ShardedFixture fx;
    fx.weight_map["head.weight"] = fx.shard1;
    write_index(fx.dir.path(), fx.weight_map);
    expect_error([&] { Checkpoint::open(fx.dir.path()); },
                 {"tensor head.weight is listed in model.safetensors.index.json for shard " + fx.shard1,
                  "is in shard " + fx.shard2});
}

TEST(CheckpointTest, TensorMissingFromIndexOrShards) {
    ShardedFixture fx;
    auto wm = fx.weight_map;
    wm.erase("layers.0.w");
    write_index(fx.dir.path(), wm);
    expect_error([&] { Checkpoint::open(fx.dir.path()); },
                 {"tensor layers.0.w is in shard " + fx.shard1, "not in model.safetensors.index.json"});
    wm = fx.weight_map;
    wm["ghost.weight"] = fx.shard2;
    write_index(fx.dir.path(), wm);
    expect_error([&] { Checkpoint::open(fx.dir.path()); }, {"tensor ghost.weight", "no shard has it"});
}

TEST(CheckpointTest, DuplicateNameAcrossShards) {
    ShardedFixture fx;
    const std::vector<TensorSpec> s2 = {{"embed.weight", DType::BF16, {6, 4}},
                                        {"layers.1.w", DType::F8_E4M3, {2, 8}},
                                        {"head.weight", DType::BF16, {4, 6}}};
    write_random(fx.dir / fx.shard2, s2, fx.rng);
    expect_error([&] { Checkpoint::open(fx.dir.path()); }, {"tensor embed.weight appears in two shards"});
}

TEST(CheckpointTest, IndexRejectsEscapingShardNamesAndBadJson) {
    ShardedFixture fx;
    auto wm = fx.weight_map;
    wm["head.weight"] = "../elsewhere.safetensors";
    write_index(fx.dir.path(), wm);
    expect_error([&] { Checkpoint::open(fx.dir.path()); }, {"tensor head.weight", "not a file name inside"});
    // A name past the file-name limit was a std::filesystem_error out of Checkpoint::open (safetensors_fuzz).
    wm["head.weight"] = std::string(300, '5') + ".safetensors";
    write_index(fx.dir.path(), wm);
    expect_error([&] { Checkpoint::open(fx.dir.path()); }, {"tensor head.weight", "not a file name inside"});
    std::ofstream(fx.dir / "model.safetensors.index.json") << R"({"weight_map": {"a": "x", "a": "y"}})";
    expect_error([&] { Checkpoint::open(fx.dir.path()); }, {"duplicate key \"a\"", "weight_map"});
}

TEST(CheckpointTest, CorruptShardNamesTheShard) {
    ShardedFixture fx;
    auto bytes = read_file(fx.dir / fx.shard2);
    bytes.resize(bytes.size() - 1);
    write_file(fx.dir / fx.shard2, bytes);
    expect_error([&] { Checkpoint::open(fx.dir.path()); }, {fx.shard2, "outside the data buffer"});
}

// ---- fuzz -------------------------------------------------------------------------------------

// Mutates random bytes of a valid file (mostly in the header, where the parser looks) and requires
// every outcome to be either a valid parse or onecard::Error: no crash, no other exception.
TEST(SafetensorsFuzzTest, MutatedHeadersParseOrFailCleanly) {
    TempDir dir;
    std::mt19937 rng(fresh_seed());
    const auto good = dir / "good.safetensors";
    write_random(good, kMixedSpecs, rng, {{"format", "pt"}});
    const auto original = read_file(good);
    const size_t header_end = SafetensorsFile(good).data_start();

    constexpr int kIters = 4000;
    int n_ok = 0, n_err = 0;
    static constexpr char kInteresting[] = "{}[]\",:-0123456789eE.\\ \x00\xff";
    for (int it = 0; it < kIters; ++it) {
        std::vector<std::byte> bytes = original;
        const int n_mut = 1 + static_cast<int>(rng() % 6);
        for (int m = 0; m < n_mut; ++m) {
            const size_t pos = (rng() % 8 == 0) ? rng() % 8 : rng() % header_end;  // sometimes the length
            const auto b = (rng() % 2) ? static_cast<std::byte>(kInteresting[rng() % (sizeof(kInteresting) - 1)])
                                       : static_cast<std::byte>(rng() & 0xFF);
            bytes[pos] = b;
        }
        if (rng() % 10 == 0) bytes.resize(rng() % (bytes.size() + 1));
        try {
            const SafetensorsHeader h = parse_safetensors(bytes, "fuzz.safetensors");
            // A successful parse must describe ranges inside the buffer.
            for (const auto& t : h.tensors) ASSERT_LE(h.data_start + t.end, bytes.size()) << t.name;
            ++n_ok;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("fuzz.safetensors"), std::string::npos) << e.what();
            ++n_err;
        } catch (const std::exception& e) {
            FAIL() << "iteration " << it << ": non-onecard exception: " << e.what();
        }
    }
    std::printf("fuzz: %d parsed, %d rejected\n", n_ok, n_err);
    EXPECT_EQ(n_ok + n_err, kIters);
    EXPECT_GT(n_err, kIters / 4) << "mutations should mostly break the header";
    EXPECT_GT(n_ok, 0) << "mutations in padding or values should sometimes leave it valid";

    // A few through the mmap path too.
    const auto path = dir / "mut.safetensors";
    for (int it = 0; it < 50; ++it) {
        std::vector<std::byte> bytes = original;
        bytes[rng() % header_end] = static_cast<std::byte>(rng() & 0xFF);
        write_file(path, bytes);
        try {
            SafetensorsFile f(path);
            f.check_integrity();
        } catch (const Error&) {
        }
    }
}

}  // namespace
}  // namespace onecard
