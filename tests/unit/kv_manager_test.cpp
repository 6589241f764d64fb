// KV cache spec arithmetic and manager property tests: random allocate / extend / free sequences keep
// check_integrity() true after every operation and return every block and slot at the end.
#include "kvcache/kv_manager.h"
#include "core/error.h"
#include "kvcache/block_pool.h"
#include "kvcache/kv_spec.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

namespace onecard {
namespace {

KvModelShape tiny_shape() {
    KvModelShape s;
    s.head_dim = 128;
    s.rope_dim = 64;
    s.index_head_dim = 32;
    s.sliding_window = 16;
    s.n_main_layers = 4;
    s.kinds = {KvLayerKind::SWA, KvLayerKind::CSA, KvLayerKind::HCA, KvLayerKind::CSA, KvLayerKind::SWA};
    s.compress_ratios = {0, 4, 16, 4, 0};
    return s;
}

TEST(KvSpec, FlashBudgetMatchesModelDoc) {
    const auto spec = make_kv_cache_spec(flash_kv_model_shape(), 256);
    // 21 CSA layers * (584 + 132) / 4 + 20 HCA layers * 584 / 128 (dsv4-model.md §8.1).
    EXPECT_DOUBLE_EQ(kv_bytes_per_token(spec), 21.0 * (584 + 132) / 4 + 20.0 * 584 / 128);
    EXPECT_LT(kv_bytes_per_token(spec), 4096.0);
    const int64_t windows = 44LL * 128 * 584;
    const int64_t compressors = 21LL * (8 * 2048 + 8 * 512) * 4 + 20LL * 128 * 1024 * 4;
    EXPECT_EQ(kv_fixed_bytes_per_sequence(spec), windows + compressors);
    EXPECT_EQ(spec.streams.size(), 21u * 2 + 20u);
    // Streams tile the block without gaps; fixed regions tile the slot.
    int64_t off = 0;
    for (const auto& s : spec.streams) {
        EXPECT_EQ(s.offset, off);
        off += s.entries_per_block * s.entry_bytes;
    }
    EXPECT_EQ(off, spec.block_bytes);
    EXPECT_EQ(spec.sequence_bytes(1), spec.slot_bytes + spec.block_bytes);
    EXPECT_NE(describe_kv_cache_spec(spec).find("3850.25"), std::string::npos) << describe_kv_cache_spec(spec);
}

TEST(KvSpec, BlockSizeMustHoldWholeEntries) {
    EXPECT_THROW(make_kv_cache_spec(flash_kv_model_shape(), 64), Error);  // 64 % 128 != 0
    auto bad = tiny_shape();
    bad.compress_ratios[0] = 4;  // SWA layer with a ratio
    EXPECT_THROW(make_kv_cache_spec(bad, 16), Error);
}

TEST(KvSpec, SlidingOnlyModelHasNoPagedState) {
    KvModelShape s = tiny_shape();
    s.kinds = {KvLayerKind::SWA, KvLayerKind::SWA};
    s.compress_ratios = {0, 0};
    s.index_head_dim = 0;  // no CSA layer: no indexer keys to format
    const auto spec = make_kv_cache_spec(s, 16);
    EXPECT_TRUE(spec.streams.empty());
    EXPECT_EQ(spec.slot_bytes, 2 * 16 * spec.entry.entry_bytes());
    KvModelShape with_csa = tiny_shape();
    with_csa.index_head_dim = 0;  // CSA layers need an indexer key width
    EXPECT_THROW(make_kv_cache_spec(with_csa, 16), Error);
}

TEST(KvPool, PlanFromBudget) {
    const auto spec = make_kv_cache_spec(tiny_shape(), 16);
    const int64_t budget = 3 * spec.slot_bytes + 10 * spec.block_bytes + spec.block_bytes / 2;
    const auto size = plan_kv_pool(spec, budget, 3);
    EXPECT_EQ(size.n_slots, 3);
    EXPECT_EQ(size.n_blocks, 10);
    EXPECT_LE(size.total_bytes(spec), budget);
    EXPECT_THROW(plan_kv_pool(spec, 3 * spec.slot_bytes, 3), Error);
}

TEST(BlockPool, RefcountsAndFreeList) {
    BlockPool pool(4);
    std::vector<int32_t> got;
    ASSERT_TRUE(pool.allocate(3, got));
    EXPECT_FALSE(pool.allocate(2, got));  // all-or-nothing
    EXPECT_EQ(got.size(), 3u);
    pool.incref(got[0]);
    pool.decref(got[0]);
    EXPECT_EQ(pool.refcount(got[0]), 1);
    pool.decref(got[0]);
    EXPECT_EQ(pool.n_free(), 2);
    EXPECT_THROW(pool.decref(got[0]), Error);  // already free
    pool.check_integrity();
}

TEST(BlockPool, RandomIncrefDecrefKeepsIntegrity) {
    BlockPool pool(32);
    std::mt19937 rng(5);
    std::map<int32_t, int32_t> held;  // id -> references we hold
    for (int op = 0; op < 5000; ++op) {
        const int kind = static_cast<int>(rng() % 3);
        if (kind == 0) {
            std::vector<int32_t> got;
            const auto n = static_cast<int32_t>(rng() % 4);
            if (pool.allocate(n, got))
                for (int32_t id : got) held[id] = 1;
        } else if (!held.empty()) {
            auto it = std::next(held.begin(), static_cast<long>(rng() % held.size()));
            if (kind == 1) {
                pool.incref(it->first);
                ++it->second;
            } else {
                pool.decref(it->first);
                if (--it->second == 0) held.erase(it);
            }
        }
        pool.check_integrity();
        for (auto [id, n] : held) ASSERT_EQ(pool.refcount(id), n);
    }
    for (auto [id, n] : held)
        for (int32_t i = 0; i < n; ++i) pool.decref(id);
    EXPECT_EQ(pool.n_free(), 32);
    pool.check_integrity();
}

TEST(KvManager, RandomAllocateExtendFreeReturnsEveryBlock) {
    const auto spec = make_kv_cache_spec(tiny_shape(), 16);
    for (uint32_t seed : {1u, 2u, 3u}) {
        KvCacheManager kv(spec, KvPoolSize{6, 40});
        std::mt19937 rng(seed);
        std::map<int32_t, std::pair<KvHandle, int64_t>> live;  // slot -> (handle, tokens we asked for)
        for (int op = 0; op < 4000; ++op) {
            const int kind = static_cast<int>(rng() % 5);
            if (kind <= 1) {
                const int64_t n = static_cast<int64_t>(rng() % 120);
                const bool can = kv.can_allocate(n);
                const int64_t want_blocks = spec.blocks_for_tokens(n);
                ASSERT_EQ(can, kv.n_free_slots() > 0 && want_blocks <= kv.n_free_blocks());
                if (can) {
                    const KvHandle h = kv.allocate(n);
                    live[h.slot] = {h, n};
                } else {
                    EXPECT_THROW(kv.allocate(n), Error);
                }
            } else if (kind <= 3 && !live.empty()) {
                auto& [h, n] = std::next(live.begin(), static_cast<long>(rng() % live.size()))->second;
                const int64_t add = static_cast<int64_t>(rng() % 40);
                if (kv.can_extend(h, add)) {
                    const int64_t before = kv.n_free_blocks();
                    kv.extend(h, add);
                    EXPECT_EQ(before - kv.n_free_blocks(), spec.blocks_for_tokens(n + add) - spec.blocks_for_tokens(n));
                    n += add;
                } else {
                    EXPECT_GT(spec.blocks_for_tokens(n + add) - spec.blocks_for_tokens(n), kv.n_free_blocks());
                    EXPECT_THROW(kv.extend(h, add), Error);
                }
            } else if (!live.empty()) {
                auto it = std::next(live.begin(), static_cast<long>(rng() % live.size()));
                const KvHandle h = it->second.first;
                kv.free(h);
                live.erase(it);
                EXPECT_THROW(kv.n_tokens(h), Error);  // stale handle
            }
            kv.check_integrity();
            for (const auto& [slot, hn] : live) ASSERT_EQ(kv.n_tokens(hn.first), hn.second);
        }
        for (const auto& [slot, hn] : live) kv.free(hn.first);
        kv.check_integrity();
        EXPECT_EQ(kv.n_free_blocks(), 40);
        EXPECT_EQ(kv.n_free_slots(), 6);
    }
}

TEST(KvManager, StaleHandleAfterSlotReuse) {
    KvCacheManager kv(make_kv_cache_spec(tiny_shape(), 16), KvPoolSize{1, 4});
    const KvHandle a = kv.allocate(10);
    kv.free(a);
    const KvHandle b = kv.allocate(20);
    EXPECT_EQ(a.slot, b.slot);
    EXPECT_THROW(kv.extend(a, 1), Error);
    EXPECT_THROW(kv.free(a), Error);
    EXPECT_EQ(kv.block_table(b).size(), 2u);
    kv.check_integrity();
}

}  // namespace
}  // namespace onecard
