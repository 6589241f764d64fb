// SHA-256 manifests: known digests, a temp checkpoint dir round trip, verify catching a one-byte
// change and a missing file, and `sha256sum -c` accepting our output (and us accepting its).
#include "loader/manifest.h"
#include "core/error.h"

#include "support/test_support.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

namespace onecard {
namespace {

namespace fs = std::filesystem;

using test::TempDir;

void write_bytes(const fs::path& p, const std::string& bytes) {
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

std::string read_bytes(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A small checkpoint-shaped directory with random contents: shards, JSON, a nested dir, an empty
// file and one larger than the 4 MB read chunk (so multi-chunk hashing is exercised).
struct Fixture {
    TempDir dir;
    std::mt19937 rng;
    std::vector<std::string> files = {"config.json",
                                      "model-00001-of-00002.safetensors",
                                      "model-00002-of-00002.safetensors",
                                      "model.safetensors.index.json",
                                      "tokenizer/tokenizer.json",
                                      "empty.txt"};

    Fixture() : rng(std::random_device{}()) {
        for (const auto& f : files) {
            size_t n = f == "empty.txt" ? 0 : 1 + rng() % 5000;
            if (f == "model-00002-of-00002.safetensors") n = (size_t{5} << 20) + rng() % 1000;
            std::string bytes(n, '\0');
            for (size_t i = 0; i < n; i += 4) {
                const uint32_t r = rng();
                std::memcpy(bytes.data() + i, &r, std::min<size_t>(4, n - i));
            }
            write_bytes(dir / f, bytes);
        }
        std::sort(files.begin(), files.end());
    }
    void write_manifest(const ManifestOptions& options = {}) const {
        write_bytes(dir / kManifestDefaultName, format_manifest(compute_manifest(dir.path(), options)));
    }
};

TEST(ManifestTest, Sha256OfKnownInputs) {
    TempDir dir;
    // FIPS 180-2 test vectors.
    write_bytes(dir / "abc", "abc");
    EXPECT_EQ(sha256_file(dir / "abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    write_bytes(dir / "empty", "");
    EXPECT_EQ(sha256_file(dir / "empty"), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    write_bytes(dir / "million_a", std::string(1'000'000, 'a'));
    EXPECT_EQ(sha256_file(dir / "million_a"), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    try {
        sha256_file(dir / "absent");
        FAIL() << "no error for a missing file";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("absent"), std::string::npos) << e.what();
    }
}

TEST(ManifestTest, ListsEveryFileSortedAndExcludesTheManifest) {
    Fixture fx;
    fx.write_manifest();
    const auto listed = list_manifest_files(fx.dir.path(), {});
    EXPECT_EQ(listed, fx.files);
    const auto entries = compute_manifest(fx.dir.path(), {});
    ASSERT_EQ(entries.size(), fx.files.size());
    for (size_t i = 0; i < entries.size(); ++i) {
        EXPECT_EQ(entries[i].path, fx.files[i]);
        EXPECT_EQ(entries[i].sha256, sha256_file(fx.dir / fx.files[i])) << fx.files[i];
    }
    // Single-threaded and many-threaded hashing agree (the parallel path puts results in place).
    ManifestOptions one;
    one.n_threads = 1;
    ManifestOptions many;
    many.n_threads = 7;
    const auto a = format_manifest(compute_manifest(fx.dir.path(), one));
    EXPECT_EQ(a, format_manifest(compute_manifest(fx.dir.path(), many)));
    EXPECT_EQ(a, read_bytes(fx.dir / kManifestDefaultName));
    // Exact sha256sum line format.
    const std::string first_line = a.substr(0, a.find('\n'));
    EXPECT_EQ(first_line, entries[0].sha256 + "  " + fx.files[0]);
}

TEST(ManifestTest, VerifyPassesOnAnUntouchedDirectory) {
    Fixture fx;
    fx.write_manifest();
    const auto report = verify_manifest(fx.dir.path(), fx.dir / kManifestDefaultName, {});
    EXPECT_TRUE(report.ok());
    EXPECT_EQ(report.n_checked, fx.files.size());
    EXPECT_EQ(report.n_ok, fx.files.size());
    EXPECT_TRUE(report.unlisted.empty()) << report.unlisted.front();
}

TEST(ManifestTest, VerifyCatchesAOneByteChange) {
    Fixture fx;
    fx.write_manifest();
    const std::string victim = "model-00002-of-00002.safetensors";
    std::string bytes = read_bytes(fx.dir / victim);
    const size_t pos = fx.rng() % bytes.size();
    bytes[pos] = static_cast<char>(bytes[pos] ^ (1 << (fx.rng() % 8)));  // one bit of one byte
    write_bytes(fx.dir / victim, bytes);

    const auto report = verify_manifest(fx.dir.path(), fx.dir / kManifestDefaultName, {});
    EXPECT_FALSE(report.ok());
    EXPECT_EQ(report.mismatched, std::vector<std::string>{victim});
    EXPECT_TRUE(report.missing.empty());
    EXPECT_EQ(report.n_ok, fx.files.size() - 1);
}

TEST(ManifestTest, VerifyCatchesMissingFilesAndNotesUnlistedOnes) {
    Fixture fx;
    fx.write_manifest();
    fs::remove(fx.dir / "tokenizer/tokenizer.json");
    fs::remove(fx.dir / "config.json");
    write_bytes(fx.dir / "extra.bin", "new");
    const auto report = verify_manifest(fx.dir.path(), fx.dir / kManifestDefaultName, {});
    EXPECT_FALSE(report.ok());
    EXPECT_EQ(report.missing, (std::vector<std::string>{"config.json", "tokenizer/tokenizer.json"}));
    EXPECT_TRUE(report.mismatched.empty());
    EXPECT_EQ(report.unlisted, std::vector<std::string>{"extra.bin"});
}

TEST(ManifestTest, ManifestElsewhereAndUnlistedManifestName) {
    Fixture fx;
    TempDir other;
    write_bytes(other / "sums", format_manifest(compute_manifest(fx.dir.path(), {})));
    EXPECT_TRUE(verify_manifest(fx.dir.path(), other / "sums", {}).ok());
    // A manifest with another name inside the dir is not reported as an unlisted file.
    write_bytes(fx.dir / "checksums.txt", read_bytes(other / "sums"));
    const auto report = verify_manifest(fx.dir.path(), fx.dir / "checksums.txt", {});
    EXPECT_TRUE(report.ok());
    EXPECT_TRUE(report.unlisted.empty()) << report.unlisted.front();
}

TEST(ManifestTest, ParseRejectsMalformedLinesAndHandlesEscapes) {
    const std::string h(64, 'a');
    EXPECT_THROW(parse_manifest("xyz  file\n", "m"), Error);
    EXPECT_THROW(parse_manifest(std::string(64, 'g') + "  file\n", "m"), Error);
    EXPECT_THROW(parse_manifest(h + "  a\n" + h + "  a\n", "m"), Error);
    try {
        parse_manifest(h + "  ok\n\nbad line\n", "sums.txt");
        FAIL() << "malformed line accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("sums.txt:3"), std::string::npos) << e.what();
    }
    const auto entries = parse_manifest(h + " *bin\n\\" + h + "  a\\nb\\\\c\n", "m");
    ASSERT_EQ(entries.size(), 2u);
    EXPECT_EQ(entries[0].path, "bin");
    EXPECT_EQ(entries[1].path, "a\nb\\c");
    // Our formatter writes what the parser reads back.
    const std::vector<ManifestEntry> odd = {{"we\\ird\nna\rme", h}, {"plain", h}};
    const auto back = parse_manifest(format_manifest(odd), "m");
    ASSERT_EQ(back.size(), 2u);
    EXPECT_EQ(back[0].path, odd[0].path);
    EXPECT_EQ(back[1].path, odd[1].path);
}

bool have_sha256sum() {
    return std::system("command -v sha256sum >/dev/null 2>&1") == 0;
}

TEST(ManifestTest, SystemSha256sumAcceptsOurManifest) {
    if (!have_sha256sum()) GTEST_SKIP() << "sha256sum (coreutils) not on PATH";
    Fixture fx;
    write_bytes(fx.dir / "odd\\name", "backslash in a file name");  // exercises the escaped form
    fx.write_manifest();
    const std::string cmd = "cd '" + fx.dir.path().string() + "' && sha256sum --quiet --strict -c " +
                            kManifestDefaultName + " >/dev/null 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;

    // And it rejects a tampered copy: the check above can fail.
    std::string bytes = read_bytes(fx.dir / "config.json");
    bytes[0] = static_cast<char>(bytes[0] ^ 0x01);
    write_bytes(fx.dir / "config.json", bytes);
    EXPECT_NE(std::system(cmd.c_str()), 0);
}

TEST(ManifestTest, WeAcceptSystemSha256sumOutput) {
    if (!have_sha256sum()) GTEST_SKIP() << "sha256sum (coreutils) not on PATH";
    Fixture fx;
    TempDir out;  // written outside the dir so find does not list it
    const std::string cmd = "cd '" + fx.dir.path().string() +
                            "' && find . -type f -printf '%P\\0' | LC_ALL=C sort -z | xargs -0 sha256sum > '" +
                            (out / "sums").string() + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    fs::copy_file(out / "sums", fx.dir / kManifestDefaultName);
    const auto theirs = parse_manifest(read_bytes(fx.dir / kManifestDefaultName), "SHA256SUMS");
    const auto ours = compute_manifest(fx.dir.path(), {});
    ASSERT_EQ(theirs.size(), ours.size());
    for (size_t i = 0; i < ours.size(); ++i) {
        EXPECT_EQ(theirs[i].path, ours[i].path);
        EXPECT_EQ(theirs[i].sha256, ours[i].sha256) << ours[i].path;
    }
    EXPECT_TRUE(verify_manifest(fx.dir.path(), fx.dir / kManifestDefaultName, {}).ok());
}

}  // namespace
}  // namespace onecard
