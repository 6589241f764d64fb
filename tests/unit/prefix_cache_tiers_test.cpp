// Prefix caching's tiers and the chunk-end snapshot mode (issue 15), on the CPU reference engine:
//  * snapshots only at chunk ends (what the CUDA runner can do: a step computes its chunk in one
//    pass): the scheduler cuts chunks at block boundaries, and hits stay bit-exact;
//  * the host KV tier: blocks evicted from the device pool come back from host RAM, bit-exact;
//  * the disk tier: blocks and snapshots evicted from host RAM come back from disk, also after a
//    restart; a corrupt entry is a miss (the request is still right), and a crashed writer's
//    leftovers are removed at start.
#include "kvcache/kv_disk_store.h"

#include "support/prefix_cache_harness.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace onecard {
namespace {

namespace fs = std::filesystem;
using Result = test::PrefixResult;
using test::expect_same_rows;

test::WindowedTinyModel* g_model = nullptr;

class ModelEnv : public ::testing::Environment {
public:
    void SetUp() override { g_model = new test::WindowedTinyModel(); }
    void TearDown() override {
        delete g_model;
        g_model = nullptr;
    }
};
const auto* const g_env = ::testing::AddGlobalTestEnvironment(new ModelEnv);

std::vector<int32_t> prompt_of(uint32_t seed, size_t n) {
    return test::random_prompt(seed, n, g_model->cfg.vocab_size);
}
Result cold(const std::vector<int32_t>& p, int64_t max_tokens) {
    return test::cold_run(*g_model->reference, p, max_tokens);
}

const KvCacheSpec& spec() {
    static const KvCacheSpec s = make_kv_cache_spec(CpuModelRunner(*g_model->reference).kv_model_shape(), 128);
    return s;
}

// A device pool of `n_blocks` blocks for 4 sequences, a host tier of `n_host` blocks, room for
// `n_snapshots` snapshots in host RAM.
EngineConfig tiered(int64_t n_blocks, int64_t n_host, const std::string& disk_dir = "", int64_t n_snapshots = 64) {
    EngineConfig c = test::prefix_engine_config(true, 2048, 1024, 4);
    c.kv_cache_bytes = 4 * spec().slot_bytes + n_blocks * spec().block_bytes;
    c.kv_offload_bytes = n_host * spec().block_bytes;
    c.prefix_snapshot_bytes = n_snapshots * CpuModelRunner(*g_model->reference).prefix_snapshot_bytes(spec());
    if (!disk_dir.empty()) {
        c.kv_disk_dir = disk_dir;
        c.kv_disk_bytes = 256LL << 20;
        c.kv_disk_model_id = 42;
    }
    return c;
}

TEST(PrefixCacheChunkEnds, SnapshotsAtChunkEndsOnlyStayBitExact) {
    // A 200-token budget, 150-token chunks: without cutting, chunks would end mid-block.
    test::PrefixHarness h(*g_model->reference, test::prefix_engine_config(true, 200, 150, 4), false);
    for (const size_t n : {5, 127, 128, 129, 300, 513}) {
        const auto p = prompt_of(static_cast<uint32_t>(3000 + n), n);
        const Result want = cold(p, 3);
        const Result first = h.run_one(p, 3);
        const Result again = h.run_one(p, 3);
        expect_same_rows(first, want, "first " + std::to_string(n));
        expect_same_rows(again, want, "cached " + std::to_string(n));
        // The last boundary below the last token always gets a snapshot (a chunk ends there).
        EXPECT_EQ(again.cached_tokens, static_cast<int64_t>((n - 1) / 128 * 128)) << n;
    }
    // A conversation: each turn resumes at the last boundary the previous one computed.
    std::vector<int32_t> convo = prompt_of(77, 140);
    int64_t prev_computed = 0;
    for (int turn = 0; turn < 5; ++turn) {
        const Result got = h.run_one(convo, 5);
        expect_same_rows(got, cold(convo, 5), "turn " + std::to_string(turn));
        if (turn > 0) {
            EXPECT_EQ(got.cached_tokens, prev_computed / 128 * 128) << turn;
        }
        prev_computed = static_cast<int64_t>(convo.size() + got.tokens.size()) - 1;
        convo.insert(convo.end(), got.tokens.begin(), got.tokens.end());
        const auto user = prompt_of(800 + static_cast<uint32_t>(turn), 30 + 17 * static_cast<size_t>(turn));
        convo.insert(convo.end(), user.begin(), user.end());
    }
    EXPECT_LE(h.runner().max_chunk, 150);
}

TEST(PrefixCacheHostTier, EvictedBlocksComeBackFromHostRamBitExact) {
    // 8 device blocks: serving B and C pushes A's blocks out of the pool and into the host tier.
    test::PrefixHarness h(*g_model->reference, tiered(8, 64));
    const auto a = prompt_of(1, 300), b = prompt_of(2, 500), c = prompt_of(3, 500);
    const Result want = cold(a, 4);
    expect_same_rows(h.run_one(a, 4), want, "A cold");
    h.run_one(b, 4);
    h.run_one(c, 4);
    EXPECT_GT(h.runner().n_spills, 0);
    const Result again = h.run_one(a, 4);
    expect_same_rows(again, want, "A from the host tier");
    EXPECT_EQ(again.cached_tokens, 256);
    EXPECT_GT(h.runner().n_loads, 0);
    EXPECT_GT(h.core().scheduler().n_prefix_hits_offloaded(), 0);
    const PrefixCacheStats st = h.core().kv().prefix_cache_stats();
    EXPECT_GT(st.n_loaded_blocks, 0);
    EXPECT_GT(st.n_host_blocks, 0);
}

TEST(PrefixCacheHostTier, WithoutTheTierEvictedPrefixesMiss) {
    test::PrefixHarness h(*g_model->reference, tiered(8, 0));
    const auto a = prompt_of(1, 300), b = prompt_of(2, 500), c = prompt_of(3, 500);
    h.run_one(a, 4);
    h.run_one(b, 4);
    h.run_one(c, 4);
    const Result again = h.run_one(a, 4);
    expect_same_rows(again, cold(a, 4), "A recomputed");
    EXPECT_LT(again.cached_tokens, 256);  // at most a head block survived: the tier is what the last test hit
    EXPECT_EQ(h.runner().n_spills + h.runner().n_loads, 0);
}

TEST(PrefixCacheHostTier, ManyConcurrentSequencesWithSpillsAndLoadsMatchColdRuns) {
    // 4 sequences at once over 6 stems in a tight pool: spills, loads, preemption and LRU all happen.
    test::PrefixHarness h(*g_model->reference, tiered(10, 12));
    std::vector<std::vector<int32_t>> prompts;
    for (uint32_t i = 0; i < 12; ++i) {
        auto p = prompt_of(50 + i % 6, 140 + 60 * (i % 3));
        const auto tail = prompt_of(900 + i, 5 + 9 * i);
        p.insert(p.end(), tail.begin(), tail.end());
        prompts.push_back(std::move(p));
    }
    for (int wave = 0; wave < 2; ++wave) {
        const auto got = h.run(prompts, 6);
        for (size_t i = 0; i < prompts.size(); ++i)
            EXPECT_EQ(got[i].tokens, cold(prompts[i], 6).tokens) << "wave " << wave << " request " << i;
    }
    EXPECT_GT(h.runner().n_spills, 0);
    EXPECT_GT(h.runner().n_loads, 0);
}

struct DiskDir {
    test::TempDir dir{"onecard_kv_disk"};
    std::string path() const { return (dir.path() / "tier").string(); }
};

// Serves four fresh 500-token prompts: with 8 device blocks, 2 host entries and 3 snapshots, whatever
// was cached before leaves the device and host RAM for the disk tier.
void push_to_disk(test::PrefixHarness& h, uint32_t seed) {
    for (uint32_t i = 0; i < 4; ++i) h.run_one(prompt_of(seed + i, 500), 2);
}

TEST(PrefixCacheDiskTier, BlocksAndSnapshotsComeBackFromDiskAndAfterARestart) {
    DiskDir d;
    const auto a = prompt_of(11, 300);
    const Result want = cold(a, 4);
    {
        // 8 device blocks, 2 host entries: A's blocks go device -> host -> disk.
        test::PrefixHarness h(*g_model->reference, tiered(8, 2, d.path(), 3));
        h.run_one(a, 4);
        push_to_disk(h, 100);
        const Result again = h.run_one(a, 4);
        expect_same_rows(again, want, "A from disk");
        EXPECT_EQ(again.cached_tokens, 256);
        EXPECT_GT(h.core().kv().prefix_cache_stats().n_disk_reads, 0);
        // Out to disk again: a restart reuses what the host tier evicted to disk (the host tier's own
        // contents are not written at shutdown: tens of GiB would hold the exit up).
        push_to_disk(h, 200);
    }
    test::PrefixHarness h2(*g_model->reference, tiered(8, 2, d.path(), 3));
    const KvDiskStore* disk = h2.core().kv().host_tier()->disk();
    ASSERT_NE(disk, nullptr);
    EXPECT_GT(disk->startup_report().n_entries, 0);
    const Result after = h2.run_one(a, 4);
    expect_same_rows(after, want, "A after a restart");
    EXPECT_EQ(after.cached_tokens, 256);
}

TEST(PrefixCacheDiskTier, CorruptEntriesAreMissesNeverWrongKv) {
    DiskDir d;
    const auto a = prompt_of(21, 300);
    {
        test::PrefixHarness h(*g_model->reference, tiered(8, 2, d.path(), 3));
        h.run_one(a, 4);
        push_to_disk(h, 300);
        h.core().kv().check_integrity();
    }
    // Flip one payload byte of every entry file: whichever of A's entries it hits is a miss.
    int64_t n_files = 0;
    for (const auto& f : fs::directory_iterator(d.path())) {
        if (f.path().extension() != ".kv") continue;
        std::fstream io(f.path(), std::ios::in | std::ios::out | std::ios::binary);
        const auto pos = static_cast<std::streamoff>(fs::file_size(f.path()) - 16);
        io.seekg(pos);
        char ch = 0;
        io.get(ch);
        io.seekp(pos);
        io.put(static_cast<char>(ch ^ 0x5a));
        ++n_files;
    }
    ASSERT_GT(n_files, 0);
    test::PrefixHarness h(*g_model->reference, tiered(8, 2, d.path(), 3));
    const Result got = h.run_one(a, 4);
    expect_same_rows(got, cold(a, 4), "A with corrupt disk entries");
    EXPECT_EQ(got.cached_tokens, 0);
    const KvDiskStore* disk = h.core().kv().host_tier()->disk();
    EXPECT_GT(disk->stats().n_corrupt + disk->startup_report().n_removed_corrupt, 0);
}

TEST(PrefixCacheDiskTier, ACrashedWritersLeftoversAreRemovedAtStart) {
    DiskDir d;
    fs::create_directories(d.path());
    const fs::path torn = fs::path(d.path()) / "0-00000000deadbeef.kv.tmp";
    std::ofstream(torn) << "half an entry";
    test::PrefixHarness h(*g_model->reference, tiered(8, 2, d.path(), 3));
    const KvDiskStartupReport& r = h.core().kv().host_tier()->disk()->startup_report();
    EXPECT_EQ(r.n_removed_temp, 1);
    EXPECT_FALSE(fs::exists(torn));
}

}  // namespace
}  // namespace onecard
