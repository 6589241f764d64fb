// KV disk tier (kvcache/kv_disk_store.h): round trips, LRU under the byte bound, every kind of damage
// to an entry file being a miss that removes the file, what opening a directory cleans up and reuses,
// and the one-store-per-directory lock. check_integrity() runs after every store operation.
#include "kvcache/kv_disk_store.h"
#include "core/error.h"
#include "kvcache/kv_disk_entry.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <memory>
#include <random>

namespace onecard {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

constexpr uint64_t kFingerprint = 0x0123456789abcdefULL;

KvTierKey blk(uint64_t h) {
    return KvTierKey{KvTierKind::Block, h};
}
KvTierKey snap(uint64_t h) {
    return KvTierKey{KvTierKind::Snapshot, h};
}

std::vector<uint8_t> payload(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> b(n);
    for (auto& x : b) x = static_cast<uint8_t>(rng());
    return b;
}

KvDiskStoreOptions options(const fs::path& dir, int64_t max_bytes, uint64_t fingerprint = kFingerprint) {
    KvDiskStoreOptions o;
    o.dir = dir;
    o.max_bytes = max_bytes;
    o.layout_fingerprint = fingerprint;
    return o;
}

// Store operations followed by check_integrity(), so that every test checks the invariants throughout.
bool put(KvDiskStore& s, const KvTierKey& k, const std::vector<uint8_t>& b) {
    const bool r = s.put(k, b);
    s.check_integrity();
    return r;
}
bool get(KvDiskStore& s, const KvTierKey& k, std::vector<uint8_t>& out) {
    const bool r = s.get(k, out);
    s.check_integrity();
    return r;
}
void erase(KvDiskStore& s, const KvTierKey& k) {
    s.erase(k);
    s.check_integrity();
}

std::vector<uint8_t> read_file(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}
void write_file(const fs::path& p, const std::vector<uint8_t>& b) {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}
// Files in dir other than the lock file.
std::vector<std::string> entry_files(const fs::path& dir) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir))
        if (e.path().filename() != "kv-disk.lock") names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
}

TEST(KvDiskEntry, NamesRoundTripAndRejectAnythingElse) {
    for (const KvTierKey k : {blk(0), blk(0xfedcba9876543210ULL), snap(42)}) {
        const std::string name = kv_disk_entry_name(kFingerprint, k);
        const auto parsed = parse_kv_disk_entry_name(name);
        ASSERT_TRUE(parsed.has_value()) << name;
        EXPECT_EQ(parsed->fingerprint, kFingerprint);
        EXPECT_EQ(parsed->key, k);
    }
    EXPECT_EQ(kv_disk_entry_name(1, snap(2)), "0000000000000001-s-0000000000000002.kv");
    for (const char* bad : {"", "x.kv", "0000000000000001-s-0000000000000002", "0000000000000001-x-0000000000000002.kv",
                            "0000000000000001-s-000000000000000G.kv", "0000000000000001-s-000000000000000A.kv",
                            "0000000000000001_s-0000000000000002.kv", "000000000000001-s-00000000000000002.kv",
                            "0000000000000001-s-0000000000000002.kv.tmp"})
        EXPECT_FALSE(parse_kv_disk_entry_name(bad).has_value()) << bad;
}

TEST(KvDiskEntry, ChecksNameTheFirstFieldThatDisagrees) {
    const auto p = payload(100, 1);
    const auto h = encode_kv_disk_header(kFingerprint, blk(7), p);
    const int64_t size = kKvDiskHeaderBytes + 100;
    EXPECT_EQ(check_kv_disk_entry(h, p, kFingerprint, blk(7)), KvDiskEntryCheck::Ok);
    EXPECT_EQ(check_kv_disk_header(h, kFingerprint + 1, blk(7), size), KvDiskEntryCheck::BadFingerprint);
    EXPECT_EQ(check_kv_disk_header(h, kFingerprint, blk(8), size), KvDiskEntryCheck::BadKey);
    EXPECT_EQ(check_kv_disk_header(h, kFingerprint, snap(7), size), KvDiskEntryCheck::BadKey);
    EXPECT_EQ(check_kv_disk_header(h, kFingerprint, blk(7), size + 1), KvDiskEntryCheck::BadLength);
    EXPECT_EQ(check_kv_disk_header(h, kFingerprint, blk(7), size - 1), KvDiskEntryCheck::BadLength);
    auto bad_magic = h;
    bad_magic[0] ^= 1;
    EXPECT_EQ(check_kv_disk_header(bad_magic, kFingerprint, blk(7), size), KvDiskEntryCheck::BadMagic);
    auto bad_version = h;
    bad_version[8] ^= 1;
    EXPECT_EQ(check_kv_disk_header(bad_version, kFingerprint, blk(7), size), KvDiskEntryCheck::BadVersion);
    auto p2 = p;
    p2[99] ^= 0x80;
    EXPECT_EQ(check_kv_disk_entry(h, p2, kFingerprint, blk(7)), KvDiskEntryCheck::BadDigest);
}

TEST(KvDiskStore, RoundTripsBlocksAndSnapshotsOfSeveralSizes) {
    TempDir dir("kv_disk");
    KvDiskStore s(options(dir.path() / "tier", 64 << 20));
    EXPECT_TRUE(fs::is_directory(dir.path() / "tier"));  // created
    s.check_integrity();
    const std::vector<size_t> sizes = {0, 1, 71, 72, 4096, (1u << 20) + 3};
    int64_t bytes = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
        // The same hash as a block and as a snapshot: two entries.
        ASSERT_TRUE(put(s, blk(1000 + i), payload(sizes[i], static_cast<uint32_t>(i))));
        ASSERT_TRUE(put(s, snap(1000 + i), payload(sizes[i], static_cast<uint32_t>(100 + i))));
        bytes += 2 * KvDiskStore::entry_bytes(static_cast<int64_t>(sizes[i]));
        EXPECT_EQ(static_cast<int64_t>(fs::file_size(s.entry_path(blk(1000 + i)))),
                  KvDiskStore::entry_bytes(static_cast<int64_t>(sizes[i])));
    }
    std::vector<uint8_t> out = {1, 2, 3};
    for (size_t i = 0; i < sizes.size(); ++i) {
        ASSERT_TRUE(get(s, blk(1000 + i), out));
        EXPECT_EQ(out, payload(sizes[i], static_cast<uint32_t>(i)));
        ASSERT_TRUE(get(s, snap(1000 + i), out));
        EXPECT_EQ(out, payload(sizes[i], static_cast<uint32_t>(100 + i)));
    }
    out = {1, 2, 3};
    EXPECT_FALSE(get(s, blk(999), out));
    EXPECT_TRUE(out.empty());
    EXPECT_FALSE(s.contains(blk(999)));
    const auto st = s.stats();
    EXPECT_EQ(st.n_entries, static_cast<int64_t>(2 * sizes.size()));
    EXPECT_EQ(st.bytes, bytes);
    EXPECT_EQ(st.n_puts, static_cast<int64_t>(2 * sizes.size()));
    EXPECT_EQ(st.n_hits, static_cast<int64_t>(2 * sizes.size()));
    EXPECT_EQ(st.n_misses, 1);
    EXPECT_EQ(st.n_corrupt, 0);
    EXPECT_EQ(entry_files(s.options().dir).size(), 2 * sizes.size());  // no temp files left
    // KV reveals the prompts: only the owner reads it.
    EXPECT_EQ(fs::status(s.options().dir).permissions(), fs::perms::owner_all);
    EXPECT_EQ(fs::status(s.entry_path(snap(1000))).permissions(), fs::perms::owner_read | fs::perms::owner_write);
}

TEST(KvDiskStore, PutReplacesAndEraseRemoves) {
    TempDir dir("kv_disk");
    KvDiskStore s(options(dir.path(), 1 << 20));
    ASSERT_TRUE(put(s, blk(1), payload(100, 1)));
    ASSERT_TRUE(put(s, blk(1), payload(300, 2)));
    std::vector<uint8_t> out;
    ASSERT_TRUE(get(s, blk(1), out));
    EXPECT_EQ(out, payload(300, 2));
    EXPECT_EQ(s.stats().n_entries, 1);
    EXPECT_EQ(s.stats().bytes, KvDiskStore::entry_bytes(300));
    erase(s, blk(1));
    EXPECT_FALSE(s.contains(blk(1)));
    EXPECT_FALSE(fs::exists(s.entry_path(blk(1))));
    erase(s, blk(1));  // absent: no-op
    EXPECT_EQ(s.stats().bytes, 0);
    EXPECT_FALSE(get(s, blk(1), out));
}

TEST(KvDiskStore, EvictsLeastRecentlyUsedAndGetRefreshes) {
    TempDir dir("kv_disk");
    const int64_t e = KvDiskStore::entry_bytes(1000);
    KvDiskStore s(options(dir.path(), 3 * e));
    for (uint64_t k = 1; k <= 3; ++k) ASSERT_TRUE(put(s, blk(k), payload(1000, static_cast<uint32_t>(k))));
    std::vector<uint8_t> out;
    ASSERT_TRUE(get(s, blk(1), out));  // order now 2, 3, 1
    ASSERT_TRUE(put(s, blk(4), payload(1000, 4)));
    EXPECT_FALSE(s.contains(blk(2)));
    EXPECT_FALSE(fs::exists(s.entry_path(blk(2))));
    for (uint64_t k : {1, 3, 4}) EXPECT_TRUE(s.contains(blk(k))) << k;
    EXPECT_EQ(s.stats().n_evicted, 1);
    // A bigger entry needs two to go: 3 then 1 (order 3, 1, 4), and 4 stays.
    ASSERT_TRUE(put(s, snap(5), payload(2000, 5)));
    EXPECT_FALSE(s.contains(blk(3)));
    EXPECT_FALSE(s.contains(blk(1)));
    EXPECT_TRUE(s.contains(blk(4)));
    EXPECT_TRUE(s.contains(snap(5)));
    EXPECT_EQ(s.stats().n_evicted, 3);
    EXPECT_LE(s.stats().bytes, 3 * e);
    EXPECT_EQ(entry_files(dir.path()).size(), 2u);
}

TEST(KvDiskStore, ReplacingAnEntryAtTheBoundEvictsNothingElse) {
    TempDir dir("kv_disk");
    const int64_t e = KvDiskStore::entry_bytes(1000);
    KvDiskStore s(options(dir.path(), 2 * e));
    ASSERT_TRUE(put(s, blk(1), payload(1000, 1)));
    ASSERT_TRUE(put(s, blk(2), payload(1000, 2)));
    ASSERT_TRUE(put(s, blk(1), payload(1000, 3)));  // the old entry of the key is not counted
    EXPECT_TRUE(s.contains(blk(2)));
    EXPECT_EQ(s.stats().n_evicted, 0);
    EXPECT_EQ(s.stats().bytes, 2 * e);
}

TEST(KvDiskStore, RefusesAnEntryLargerThanTheBound) {
    TempDir dir("kv_disk");
    KvDiskStore s(options(dir.path(), KvDiskStore::entry_bytes(100)));
    ASSERT_TRUE(put(s, blk(1), payload(50, 1)));
    EXPECT_FALSE(put(s, blk(1), payload(101, 2)));  // refused: the old entry stays, nothing evicted
    std::vector<uint8_t> out;
    ASSERT_TRUE(get(s, blk(1), out));
    EXPECT_EQ(out, payload(50, 1));
    EXPECT_FALSE(put(s, blk(2), payload(101, 2)));
    EXPECT_FALSE(s.contains(blk(2)));
    EXPECT_EQ(s.stats().n_put_failed, 2);
    EXPECT_EQ(s.stats().n_evicted, 0);
    EXPECT_TRUE(put(s, blk(2), payload(100, 3)));  // exactly the bound fits (evicting blk 1)
    EXPECT_FALSE(s.contains(blk(1)));
    EXPECT_EQ(entry_files(dir.path()), std::vector<std::string>{kv_disk_entry_name(kFingerprint, blk(2))});
}

TEST(KvDiskStore, RejectsBadOptions) {
    TempDir dir("kv_disk");
    EXPECT_THROW(KvDiskStore(options(dir.path(), 0)), Error);
    EXPECT_THROW(KvDiskStore(options("", 1 << 20)), Error);
    write_file(dir.path() / "plain", {1});
    EXPECT_THROW(KvDiskStore(options(dir.path() / "plain", 1 << 20)), Error);
}

// Puts one entry, damages its file with `damage`, and expects the get to miss and remove the file.
void expect_damage_is_a_miss(const std::function<void(KvDiskStore&, const fs::path&)>& damage,
                             const std::string& what) {
    SCOPED_TRACE(what);
    TempDir dir("kv_disk");
    KvDiskStore s(options(dir.path(), 1 << 20));
    const KvTierKey key = snap(77);
    ASSERT_TRUE(put(s, key, payload(5000, 7)));
    ASSERT_TRUE(put(s, blk(78), payload(10, 8)));  // a bystander that must survive
    damage(s, s.entry_path(key));
    std::vector<uint8_t> out;
    EXPECT_FALSE(get(s, key, out));
    EXPECT_TRUE(out.empty());
    EXPECT_FALSE(s.contains(key));
    EXPECT_FALSE(fs::exists(s.entry_path(key)));
    EXPECT_EQ(s.stats().n_corrupt, 1);
    EXPECT_EQ(s.stats().n_entries, 1);
    EXPECT_EQ(s.stats().bytes, KvDiskStore::entry_bytes(10));
    ASSERT_TRUE(get(s, blk(78), out));
    EXPECT_EQ(out, payload(10, 8));
}

void flip_byte(const fs::path& p, size_t offset) {
    auto b = read_file(p);
    ASSERT_LT(offset, b.size());
    b[offset] ^= 0x01;
    write_file(p, b);
}

TEST(KvDiskStore, FlippedPayloadBytesAreMisses) {
    for (size_t off : {size_t{0}, size_t{2500}, size_t{4999}})
        expect_damage_is_a_miss([&](KvDiskStore&, const fs::path& p) { flip_byte(p, kKvDiskHeaderBytes + off); },
                                "payload byte " + std::to_string(off));
}

TEST(KvDiskStore, EveryFlippedHeaderByteIsAMiss) {
    for (size_t off = 0; off < static_cast<size_t>(kKvDiskHeaderBytes); ++off)
        expect_damage_is_a_miss([&](KvDiskStore&, const fs::path& p) { flip_byte(p, off); },
                                "header byte " + std::to_string(off));
}

TEST(KvDiskStore, TruncatedAndExtendedFilesAreMisses) {
    for (int64_t keep : {int64_t{0}, int64_t{10}, kKvDiskHeaderBytes, kKvDiskHeaderBytes + 4999})
        expect_damage_is_a_miss(
            [&](KvDiskStore&, const fs::path& p) { fs::resize_file(p, static_cast<uintmax_t>(keep)); },
            "truncated to " + std::to_string(keep));
    expect_damage_is_a_miss(
        [](KvDiskStore&, const fs::path& p) {
            auto b = read_file(p);
            b.push_back(0);
            write_file(p, b);
        },
        "one byte appended");
    expect_damage_is_a_miss([](KvDiskStore&, const fs::path& p) { fs::remove(p); }, "file deleted");
}

TEST(KvDiskStore, AFileRenamedToAnotherKeyIsAMiss) {
    TempDir dir("kv_disk");
    KvDiskStore s(options(dir.path(), 1 << 20));
    // Same payload size under another key of another kind, and another hash: only the header tells.
    ASSERT_TRUE(put(s, snap(77), payload(5000, 7)));
    ASSERT_TRUE(put(s, blk(77), payload(5000, 8)));
    ASSERT_TRUE(put(s, blk(78), payload(5000, 9)));
    fs::rename(s.entry_path(blk(77)), s.entry_path(snap(77)));
    fs::rename(s.entry_path(blk(78)), s.entry_path(blk(79)));  // 79 is not indexed: never looked at
    std::vector<uint8_t> out;
    EXPECT_FALSE(get(s, snap(77), out));  // holds block 77's entry
    EXPECT_FALSE(fs::exists(s.entry_path(snap(77))));
    EXPECT_FALSE(get(s, blk(77), out));  // its file is gone
    EXPECT_FALSE(get(s, blk(78), out));
    EXPECT_FALSE(get(s, blk(79), out));
    EXPECT_EQ(s.stats().n_corrupt, 3);
    EXPECT_EQ(s.stats().n_misses, 4);
    EXPECT_EQ(s.stats().n_entries, 0);
    EXPECT_EQ(s.stats().bytes, 0);
}

TEST(KvDiskStore, AnEntryOfAnotherFingerprintIsAMissEvenWithAValidChecksum) {
    TempDir other("kv_disk_other");
    expect_damage_is_a_miss(
        [&](KvDiskStore&, const fs::path& p) {
            // Written, whole and checksummed, by a store of another layout; copied under our name.
            KvDiskStore foreign(options(other.path(), 1 << 20, kFingerprint ^ 1));
            ASSERT_TRUE(put(foreign, snap(77), payload(5000, 7)));
            fs::copy_file(foreign.entry_path(snap(77)), p, fs::copy_options::overwrite_existing);
        },
        "entry of another fingerprint");
}

TEST(KvDiskStore, OpeningRemovesTornWritesForeignAndCorruptEntriesAndKeepsOtherFiles) {
    TempDir dir("kv_disk");
    const auto good = payload(3000, 3);
    std::vector<uint8_t> torn;
    {
        KvDiskStore s(options(dir.path(), 1 << 20));
        ASSERT_TRUE(put(s, blk(1), good));
        ASSERT_TRUE(put(s, blk(2), payload(100, 4)));
        ASSERT_TRUE(put(s, snap(3), payload(100, 5)));
        torn = read_file(s.entry_path(blk(1)));
    }
    // As a process killed mid-put leaves it: a temp file with the first part of an entry.
    torn.resize(1000);
    write_file(dir / (kv_disk_entry_name(kFingerprint, blk(9)) + ".tmp"), torn);
    // Entries of another layout, "*.kv" names that are not ours, a header that disagrees with its name.
    write_file(dir / kv_disk_entry_name(kFingerprint ^ 1, blk(1)), good);
    write_file(dir / "garbage.kv", {1, 2, 3});
    write_file(dir / "0123456789ABCDEF-b-0000000000000001.kv", {1});
    fs::rename(dir / kv_disk_entry_name(kFingerprint, blk(2)), dir / kv_disk_entry_name(kFingerprint, blk(20)));
    fs::resize_file(dir / kv_disk_entry_name(kFingerprint, snap(3)), 50);
    // Not ours: left alone.
    write_file(dir / "notes.txt", {42});
    fs::create_directory(dir / "subdir");

    KvDiskStore s(options(dir.path(), 1 << 20));
    const auto& r = s.startup_report();
    EXPECT_EQ(r.n_removed_temp, 1);
    EXPECT_EQ(r.n_removed_foreign, 3);
    EXPECT_EQ(r.n_removed_corrupt, 2);
    EXPECT_EQ(r.n_ignored, 2);
    EXPECT_EQ(r.n_evicted_over_bound, 0);
    EXPECT_EQ(r.n_entries, 1);
    EXPECT_EQ(r.bytes, KvDiskStore::entry_bytes(3000));
    EXPECT_EQ(entry_files(dir.path()),
              (std::vector<std::string>{kv_disk_entry_name(kFingerprint, blk(1)), "notes.txt", "subdir"}));
    std::vector<uint8_t> out;
    ASSERT_TRUE(get(s, blk(1), out));
    EXPECT_EQ(out, good);
}

TEST(KvDiskStore, AnotherFingerprintClearsTheDirectoryAtOpen) {
    TempDir dir("kv_disk");
    {
        KvDiskStore s(options(dir.path(), 1 << 20));
        ASSERT_TRUE(put(s, blk(1), payload(10, 1)));
        ASSERT_TRUE(put(s, snap(1), payload(10, 2)));
    }
    KvDiskStore s(options(dir.path(), 1 << 20, kFingerprint + 1));
    EXPECT_EQ(s.startup_report().n_removed_foreign, 2);
    EXPECT_EQ(s.startup_report().n_entries, 0);
    EXPECT_TRUE(entry_files(dir.path()).empty());
    std::vector<uint8_t> out;
    EXPECT_FALSE(get(s, blk(1), out));
}

TEST(KvDiskStore, ReopenReusesEntriesInLruOrderByMtime) {
    TempDir dir("kv_disk");
    const int64_t e = KvDiskStore::entry_bytes(1000);
    {
        KvDiskStore s(options(dir.path(), 4 * e));
        for (uint64_t k = 1; k <= 4; ++k) ASSERT_TRUE(put(s, blk(k), payload(1000, static_cast<uint32_t>(k))));
        std::vector<uint8_t> out;
        ASSERT_TRUE(get(s, blk(1), out));  // order 2, 3, 4, 1, and the mtimes say so
    }
    {
        KvDiskStore s(options(dir.path(), 4 * e));
        EXPECT_EQ(s.startup_report().n_entries, 4);
        EXPECT_EQ(s.startup_report().bytes, 4 * e);
        std::vector<uint8_t> out;
        for (uint64_t k = 1; k <= 4; ++k) EXPECT_TRUE(s.contains(blk(k))) << k;
        ASSERT_TRUE(put(s, blk(5), payload(1000, 5)));  // evicts 2, the oldest
        EXPECT_FALSE(s.contains(blk(2)));
        ASSERT_TRUE(get(s, blk(3), out));  // order 4, 1, 5, 3
        EXPECT_EQ(out, payload(1000, 3));
    }
    {
        // A smaller bound at the next start keeps the two most recent.
        KvDiskStore s(options(dir.path(), 2 * e));
        EXPECT_EQ(s.startup_report().n_evicted_over_bound, 2);
        EXPECT_EQ(s.startup_report().n_entries, 2);
        EXPECT_TRUE(s.contains(blk(5)));
        EXPECT_TRUE(s.contains(blk(3)));
        EXPECT_EQ(entry_files(dir.path()).size(), 2u);
    }
    // The order comes from the mtimes, not the names: make 5 the older of the two.
    const auto t3 = fs::last_write_time(dir / kv_disk_entry_name(kFingerprint, blk(3)));
    fs::last_write_time(dir / kv_disk_entry_name(kFingerprint, blk(5)), t3 + std::chrono::seconds(10));
    KvDiskStore s(options(dir.path(), e));
    EXPECT_EQ(s.startup_report().n_evicted_over_bound, 1);
    EXPECT_TRUE(s.contains(blk(5)));
    EXPECT_FALSE(s.contains(blk(3)));
}

TEST(KvDiskStore, ASecondStoreOnTheDirectoryThrowsUntilTheFirstIsGone) {
    TempDir dir("kv_disk");
    auto first = std::make_unique<KvDiskStore>(options(dir.path(), 1 << 20));
    ASSERT_TRUE(put(*first, blk(1), payload(10, 1)));
    try {
        KvDiskStore second(options(dir.path(), 1 << 20));
        ADD_FAILURE() << "a second store opened a locked directory";
    } catch (const Error& err) {
        const std::string msg = err.what();
        EXPECT_NE(msg.find(dir.path().string()), std::string::npos) << msg;
        EXPECT_NE(msg.find("pid " + std::to_string(::getpid())), std::string::npos) << msg;
    }
    EXPECT_TRUE(first->contains(blk(1)));  // the refused store removed nothing
    first->check_integrity();
    first.reset();
    KvDiskStore second(options(dir.path(), 1 << 20));
    EXPECT_EQ(second.startup_report().n_entries, 1);
}

TEST(KvDiskStore, AStaleLockFileDoesNotBlock) {
    TempDir dir("kv_disk");
    write_file(dir / "kv-disk.lock", {'9', '9', '9', '9', '9', '9', '\n'});  // a dead holder's, not locked
    KvDiskStore s(options(dir.path(), 1 << 20));
    s.check_integrity();
    const auto lock = read_file(dir / "kv-disk.lock");
    EXPECT_EQ(std::string(lock.begin(), lock.end()), std::to_string(::getpid()) + "\n");
}

TEST(KvDiskStore, TheLockOfAKilledProcessIsReleased) {
    TempDir dir("kv_disk");
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {  // holds the directory until killed, as a crashed server would have
        ::close(ready[0]);
        char c = 'n';
        std::unique_ptr<KvDiskStore> s;
        try {
            s = std::make_unique<KvDiskStore>(options(dir.path(), 1 << 20));
            if (s->put(blk(1), payload(10, 1))) c = 'y';
        } catch (...) {
        }
        (void)!::write(ready[1], &c, 1);
        for (;;) ::pause();
    }
    ::close(ready[1]);
    char c = 0;
    ASSERT_EQ(::read(ready[0], &c, 1), 1);
    ::close(ready[0]);
    EXPECT_EQ(c, 'y');
    try {
        KvDiskStore s(options(dir.path(), 1 << 20));
        ADD_FAILURE() << "opened a directory another process holds";
    } catch (const Error& err) {
        EXPECT_NE(std::string(err.what()).find("pid " + std::to_string(child)), std::string::npos) << err.what();
    }
    ASSERT_EQ(::kill(child, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    KvDiskStore s(options(dir.path(), 1 << 20));  // the kernel dropped the dead holder's flock
    EXPECT_EQ(s.startup_report().n_entries, 1);
    std::vector<uint8_t> out;
    ASSERT_TRUE(get(s, blk(1), out));
    EXPECT_EQ(out, payload(10, 1));
}

TEST(KvDiskStore, AFailedWriteStoresNothingAndDoesNotThrow) {
    // A file size limit makes write() fail with EFBIG part way through, as a full disk fails with
    // ENOSPC; in a child, since the limit is per process.
    TempDir dir("kv_disk");
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        int rc = 0;
        auto expect = [&](bool ok, int code) {
            if (!ok && rc == 0) rc = code;
        };
        try {
            KvDiskStore s(options(dir.path(), 1 << 20));
            expect(s.put(blk(1), payload(100, 1)), 2);
            ::signal(SIGXFSZ, SIG_IGN);
            const rlimit lim{4096, 4096};
            expect(::setrlimit(RLIMIT_FSIZE, &lim) == 0, 3);
            expect(!s.put(blk(1), payload(10000, 2)), 4);  // replacing fails: the old entry stays
            expect(!s.put(blk(2), payload(10000, 3)), 5);
            s.check_integrity();
            std::vector<uint8_t> out;
            expect(s.get(blk(1), out) && out == payload(100, 1), 6);
            expect(!s.contains(blk(2)) && !fs::exists(s.entry_path(blk(2))), 7);
            expect(entry_files(dir.path()).size() == 1, 8);  // no temp file left
            expect(s.stats().n_put_failed == 2, 9);
            expect(s.put(blk(3), payload(1000, 4)), 10);  // under the limit: fine
            s.check_integrity();
        } catch (...) {
            rc = 11;
        }
        ::_exit(rc);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's failed check, numbered in the test";
}

TEST(KvDiskStore, WorksOnDevShm) {
    const fs::path shm = "/dev/shm";
    if (!fs::is_directory(shm) || ::access(shm.c_str(), W_OK) != 0)
        GTEST_SKIP() << "/dev/shm is missing or not writable here";
    std::random_device rd;
    const fs::path dir = shm / ("onecard_kv_disk_" + std::to_string(::getpid()) + "_" + std::to_string(rd()));
    struct Cleanup {
        fs::path p;
        ~Cleanup() {
            std::error_code ec;
            fs::remove_all(p, ec);
        }
    } cleanup{dir};
    {
        KvDiskStore s(options(dir, 1 << 20));
        ASSERT_TRUE(put(s, blk(1), payload(70000, 1)));
        ASSERT_TRUE(put(s, snap(1), payload(3000, 2)));
    }
    // A stale file of a crashed process on /dev/shm: removed at start and reported.
    write_file(dir / (kv_disk_entry_name(kFingerprint, blk(2)) + ".tmp"), payload(500, 3));
    KvDiskStore s(options(dir, 1 << 20));
    EXPECT_EQ(s.startup_report().n_removed_temp, 1);
    EXPECT_EQ(s.startup_report().n_entries, 2);
    std::vector<uint8_t> out;
    ASSERT_TRUE(get(s, blk(1), out));
    EXPECT_EQ(out, payload(70000, 1));
    ASSERT_TRUE(get(s, snap(1), out));
    EXPECT_EQ(out, payload(3000, 2));
}

}  // namespace
}  // namespace onecard
