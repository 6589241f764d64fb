// Prefix caching (issue 15, CPU side). The KV manager's block-hash chain, LRU and snapshot index on
// their own; then the engine on a synthesised tiny DeepSeek-V4 (reference numerics, paged KV,
// sliding window 128 so every boundary kind of the real model is crossed: window 128, CSA ratio 4,
// HCA ratio 128 = the block size): a request served from the cache gives bit for bit the logits of
// a cold run of the same tokens, for identical prompts, shared system prompts, a 10-turn
// conversation, chunked prefill, and many concurrent sequences under KV pressure with preemption.
#include "engine/cpu_model_runner.h"
#include "engine/engine_core.h"
#include "kvcache/kv_manager.h"
#include "model/deepseek_v4.h"
#include "model/synth.h"
#include "server/metrics.h"

#include "support/prefix_cache_harness.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>

namespace onecard {
namespace {

// ---------------------------------------------------------------- KV manager

KvModelShape small_shape() {
    KvModelShape s;
    s.head_dim = 128;
    s.rope_dim = 64;
    s.index_head_dim = 32;
    s.sliding_window = 16;
    s.n_main_layers = 3;
    s.kinds = {KvLayerKind::SWA, KvLayerKind::CSA, KvLayerKind::HCA};
    s.compress_ratios = {0, 4, 16};
    return s;
}

std::vector<int32_t> random_tokens(std::mt19937& rng, size_t n, int32_t vocab) {
    std::vector<int32_t> t(n);
    for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
    return t;
}

TEST(PrefixCacheManager, HashChainDependsOnEveryParent) {
    std::mt19937 rng(1);
    std::vector<int32_t> a = random_tokens(rng, 64, 100), b = a;
    b[3] ^= 1;  // block 0 differs, blocks 1..3 identical
    std::vector<BlockHash> ha, hb;
    extend_block_hashes(ha, a, 16);
    extend_block_hashes(hb, b, 16);
    ASSERT_EQ(ha.size(), 4u);
    for (size_t i = 0; i < 4; ++i) EXPECT_NE(ha[i], hb[i]) << "block " << i;
    std::vector<BlockHash> again;
    extend_block_hashes(again, SequenceTokens(std::span(a).first(20), std::span(a).subspan(20)), 16);
    EXPECT_EQ(again, ha);  // the same tokens split as prompt + output hash the same
    std::vector<BlockHash> part;
    extend_block_hashes(part, std::span<const int32_t>(a).first(40), 16);
    EXPECT_EQ(part.size(), 2u);  // only full blocks
    extend_block_hashes(part, a, 16);
    EXPECT_EQ(part, ha);
}

// Drives one sequence through the manager as the scheduler does: allocate with its match, register
// blocks and snapshots as if computed, then free it.
struct ManagerDriver {
    KvCacheManager kv;
    explicit ManagerDriver(int64_t n_blocks, int64_t max_snapshots, int64_t n_slots = 8, int64_t n_host_blocks = 0)
        : kv(make_kv_cache_spec(small_shape(), 16), KvPoolSize{n_slots, n_blocks},
             PrefixCacheConfig{true, max_snapshots, 64, n_host_blocks, std::nullopt}) {}

    PrefixMatch match(const std::vector<int32_t>& toks) const {
        std::vector<BlockHash> hashes;
        extend_block_hashes(hashes, toks, 16);
        return kv.match_prefix(hashes, toks);
    }
    // Returns the match it got; h receives the live handle.
    PrefixMatch admit(const std::vector<int32_t>& toks, KvHandle& h) {
        std::vector<BlockHash> hashes;
        extend_block_hashes(hashes, toks, 16);
        PrefixMatch m = kv.match_prefix(hashes, toks);
        EXPECT_TRUE(kv.can_allocate(m, static_cast<int64_t>(toks.size())));
        h = kv.allocate(m, static_cast<int64_t>(toks.size()));
        const auto n = static_cast<int64_t>(toks.size());
        for (int64_t pos = (m.n_tokens / 16 + 1) * 16; pos <= n; pos += 16) {
            const int64_t id = kv.plan_snapshot(hashes[static_cast<size_t>(pos / 16 - 1)]);
            if (id >= 0) kv.commit_snapshot(id);
        }
        kv.cache_blocks(h, hashes, toks, n);
        kv.check_integrity();
        return m;
    }
};

TEST(PrefixCacheManager, HitSharesBlocksAndResumesBelowTheLastToken) {
    ManagerDriver d(32, 100);
    std::mt19937 rng(2);
    const auto p = random_tokens(rng, 64, 100);  // exactly 4 blocks
    KvHandle h1, h2, h3;
    EXPECT_EQ(d.admit(p, h1).n_tokens, 0);
    // Same prompt while the first still runs: blocks 0..2 shared; block 3 recomputed (last token).
    const PrefixMatch m = d.admit(p, h2);
    EXPECT_EQ(m.n_tokens, 48);
    ASSERT_EQ(m.blocks.size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(d.kv.block_table(h2)[i], d.kv.block_table(h1)[i]);
    EXPECT_NE(d.kv.block_table(h2)[3], d.kv.block_table(h1)[3]);
    // A longer prompt with the same 64 tokens first resumes at 64.
    auto longer = p;
    longer.insert(longer.end(), {1, 2, 3});
    EXPECT_EQ(d.admit(longer, h3).n_tokens, 64);
    // Different first token: no hit.
    auto other = p;
    other[0] = (other[0] + 1) % 100;
    KvHandle h4;
    EXPECT_EQ(d.admit(other, h4).n_tokens, 0);
    for (KvHandle h : {h1, h2, h3, h4}) d.kv.free(h);
    d.kv.check_integrity();
    EXPECT_EQ(d.kv.n_free_blocks(), d.kv.n_total_blocks());  // cached blocks count as free (evictable)
    EXPECT_GT(d.kv.prefix_cache_stats().n_evictable_blocks, 0);
    KvHandle h5;
    EXPECT_EQ(d.admit(longer, h5).n_tokens, 64);  // still cached after everyone left
}

TEST(PrefixCacheManager, NoSnapshotNoHit) {
    ManagerDriver d(32, 0);  // no snapshot budget: blocks alone cannot resume a sequence
    std::mt19937 rng(3);
    const auto p = random_tokens(rng, 50, 100);
    KvHandle h1, h2;
    d.admit(p, h1);
    EXPECT_EQ(d.admit(p, h2).n_tokens, 0);
}

TEST(PrefixCacheManager, LruEvictsUnreferencedBlocksOnlyTailFirst) {
    ManagerDriver d(8, 100, 4);
    std::mt19937 rng(4);
    const auto a = random_tokens(rng, 64, 100), b = random_tokens(rng, 64, 100);
    KvHandle ha, hb;
    d.admit(a, ha);
    d.kv.free(ha);   // a's 4 blocks cached, evictable
    d.admit(b, hb);  // takes the 4 free blocks
    EXPECT_EQ(d.kv.prefix_cache_stats().n_evicted_blocks, 0);
    // b still runs: a new 32-token sequence must evict a's blocks, never b's, tail first.
    const auto c = random_tokens(rng, 32, 100);
    KvHandle hc;
    d.admit(c, hc);
    EXPECT_EQ(d.kv.prefix_cache_stats().n_evicted_blocks, 2);
    EXPECT_EQ(d.match(b).n_tokens, 48);  // b's blocks are intact
    EXPECT_EQ(d.match(a).n_tokens, 32);  // a's head blocks (0, 1) survived, its tail went first
    d.kv.free(hb);
    d.kv.free(hc);
    d.kv.check_integrity();
}

TEST(PrefixCacheManager, SnapshotLruIsBounded) {
    ManagerDriver d(64, 3);
    std::mt19937 rng(5);
    const auto p = random_tokens(rng, 96, 100);  // 6 boundaries, only 3 snapshots kept
    KvHandle h;
    d.admit(p, h);
    EXPECT_EQ(d.kv.prefix_cache_stats().n_snapshots, 3);
    EXPECT_EQ(d.kv.prefix_cache_stats().n_evicted_snapshots, 3);
    // The survivors are the most recent boundaries (64, 80, 96): a 96-token re-send resumes at 80.
    KvHandle h2;
    EXPECT_EQ(d.admit(p, h2).n_tokens, 80);
    // An abandoned plan (its step failed) is dropped, not indexed.
    std::vector<BlockHash> hashes;
    const auto q = random_tokens(rng, 16, 100);
    extend_block_hashes(hashes, q, 16);
    const int64_t id = d.kv.plan_snapshot(hashes[0]);
    ASSERT_GE(id, 0);
    EXPECT_EQ(d.kv.plan_snapshot(hashes[0]), -1);  // already planned
    d.kv.abandon_pending_snapshots();
    d.kv.check_integrity();
    EXPECT_EQ(d.kv.prefix_cache_stats().n_snapshots, 2);  // the planned entry was an evicted one, now free
    EXPECT_GE(d.kv.plan_snapshot(hashes[0]), 0);          // and the boundary can be planned again
}

TEST(PrefixCacheManager, HostTierSpillsEvictedBlocksAndLoadsThemBack) {
    ManagerDriver d(8, 100, 4, 16);  // 8 device blocks, 16 host-tier entries
    std::mt19937 rng(7);
    const auto a = random_tokens(rng, 64, 100), b = random_tokens(rng, 128, 100);
    KvHandle ha, hb;
    d.admit(a, ha);
    d.kv.free(ha);  // a's 4 blocks cached on the device
    const std::vector<int32_t> a_blocks = [&] {
        std::vector<BlockHash> h;
        extend_block_hashes(h, a, 16);
        return d.kv.match_prefix(h, a).blocks;
    }();
    ASSERT_EQ(a_blocks.size(), 3u);
    d.kv.take_block_copies();
    d.admit(b, hb);  // needs all 8 blocks: a's 4 are evicted, into the host tier
    auto copies = d.kv.take_block_copies();
    EXPECT_EQ(copies.spills.size(), 4u);
    EXPECT_TRUE(copies.loads.empty());
    EXPECT_EQ(d.kv.prefix_cache_stats().n_host_blocks, 4);
    d.kv.free(hb);
    // a again: its 3 resumable blocks come back from the host into fresh device blocks (b's are
    // evicted to make room, and spilled first: the runner copies spills before loads).
    KvHandle ha2;
    const PrefixMatch m = d.admit(a, ha2);
    EXPECT_EQ(m.n_tokens, 48);
    EXPECT_TRUE(m.blocks.empty());
    EXPECT_EQ(m.host_blocks.size(), 3u);
    copies = d.kv.take_block_copies();
    ASSERT_EQ(copies.loads.size(), 3u);
    for (size_t j = 0; j < 3; ++j) {
        EXPECT_EQ(copies.loads[j].block, d.kv.block_table(ha2)[j]);
        EXPECT_EQ(copies.loads[j].host_entry, m.host_blocks[j]);
        // A block that is loaded into must have been spilled first if it held cached content.
        for (const KvBlockCopy& s : copies.spills) EXPECT_NE(s.host_entry, copies.loads[j].host_entry);
    }
    const PrefixCacheStats st = d.kv.prefix_cache_stats();
    EXPECT_EQ(st.n_loaded_blocks, 3);
    EXPECT_GE(st.n_spilled_blocks, 4);
    // The loaded blocks are cached on the device again: a third copy shares them, no loads.
    KvHandle ha3;
    const PrefixMatch m3 = d.admit(a, ha3);
    EXPECT_EQ(m3.blocks.size(), 3u);
    EXPECT_TRUE(m3.host_blocks.empty());
    EXPECT_TRUE(d.kv.take_block_copies().loads.empty());
    d.kv.free(ha2);
    d.kv.free(ha3);
    d.kv.check_integrity();
}

TEST(PrefixCacheManager, HostTierEntriesOfAStepAreNeverReusedInIt) {
    // 4 host entries: a load of 3 and the spills the same allocation causes must not share one.
    ManagerDriver d(6, 100, 4, 4);
    std::mt19937 rng(8);
    const auto a = random_tokens(rng, 64, 100), b = random_tokens(rng, 96, 100);
    KvHandle h;
    d.admit(a, h);
    d.kv.free(h);
    d.kv.take_block_copies();
    d.admit(b, h);  // evicts a's blocks into the host tier (4 entries, all used)
    d.kv.free(h);
    d.kv.take_block_copies();
    KvHandle h2;
    const PrefixMatch m = d.admit(a, h2);  // loads a's 3 blocks; evicting b's spills need entries too
    auto copies = d.kv.take_block_copies();
    for (const KvBlockCopy& s : copies.spills)
        for (int64_t e : m.host_blocks) EXPECT_NE(s.host_entry, e) << "a spill overwrote an entry this step loads";
    d.kv.free(h2);
    d.kv.check_integrity();
}

TEST(PrefixCacheManager, RandomWorkloadKeepsIntegrity) {
    ManagerDriver d(40, 20, 6, 12);
    std::mt19937 rng(6);
    // A few shared stems so hits, duplicates and evictions all happen.
    std::vector<std::vector<int32_t>> stems;
    for (int i = 0; i < 4; ++i) stems.push_back(random_tokens(rng, 40, 20));
    std::vector<KvHandle> live;
    for (int op = 0; op < 2000; ++op) {
        if (!live.empty() && (rng() % 3 == 0 || d.kv.n_free_slots() == 0)) {
            const size_t i = rng() % live.size();
            d.kv.free(live[i]);
            live.erase(live.begin() + static_cast<long>(i));
        } else {
            auto t = stems[rng() % stems.size()];
            t.resize(1 + rng() % t.size());
            const auto tail = random_tokens(rng, rng() % 30, 20);
            t.insert(t.end(), tail.begin(), tail.end());
            std::vector<BlockHash> hashes;
            extend_block_hashes(hashes, t, 16);
            const PrefixMatch m = d.kv.match_prefix(hashes, t);
            ASSERT_LT(m.n_tokens, static_cast<int64_t>(t.size()));
            if (!d.kv.can_allocate(m, static_cast<int64_t>(t.size()))) continue;
            KvHandle h;
            d.admit(t, h);
            live.push_back(h);
        }
        d.kv.check_integrity();
        d.kv.take_block_copies();  // ends the pass (the scheduler's schedule() does)
    }
    for (KvHandle h : live) d.kv.free(h);
    d.kv.check_integrity();
    EXPECT_EQ(d.kv.n_free_blocks(), d.kv.n_total_blocks());
    EXPECT_GT(d.kv.prefix_cache_stats().n_evicted_blocks, 0);
}

TEST(PrefixCacheMetrics, VllmCounterNames) {
    server::ServerMetrics m("m");
    EngineStats es;
    es.prefix_caching = true;
    es.prefix_cache_queries = 1000;
    es.prefix_cache_hits = 768;
    const std::string text = m.render(es, 0);
    EXPECT_NE(
        text.find(
            "# TYPE vllm:prefix_cache_queries_total counter\nvllm:prefix_cache_queries_total{model_name=\"m\"} 1000\n"),
        std::string::npos)
        << text;
    EXPECT_NE(text.find("vllm:prefix_cache_hits_total{model_name=\"m\"} 768\n"), std::string::npos) << text;
}

// ---------------------------------------------------------------- engine on the tiny model

using test::WindowedTinyModel;
using Result = test::PrefixResult;
using test::expect_same_rows;
WindowedTinyModel* g_model = nullptr;

class ModelEnv : public ::testing::Environment {
public:
    void SetUp() override { g_model = new WindowedTinyModel(); }
    void TearDown() override {
        delete g_model;
        g_model = nullptr;
    }
};
const auto* const g_env = ::testing::AddGlobalTestEnvironment(new ModelEnv);

EngineConfig engine_config(bool caching, int64_t budget = 2048, int64_t cap = 1024, int64_t max_num_seqs = 8) {
    return test::prefix_engine_config(caching, budget, cap, max_num_seqs);
}
struct Harness : test::PrefixHarness {
    explicit Harness(const EngineConfig& c) : PrefixHarness(*g_model->reference, c) {}
};
Result cold(const std::vector<int32_t>& prompt, int64_t max_tokens) {
    return test::cold_run(*g_model->reference, prompt, max_tokens);
}
std::vector<int32_t> prompt_of(uint32_t seed, size_t n) {
    return test::random_prompt(seed, n, g_model->cfg.vocab_size);
}

// The boundary a hit resumes at: the last multiple of 128 below n.
int64_t resume_point(int64_t n) {
    return (n - 1) / 128 * 128;
}

TEST(PrefixCacheEngine, RunnerAdvertisesPrefixCachingOnlyInReferenceNumerics) {
    DeepSeekV4 exact(g_model->cfg, g_model->weights, Numerics::Exact);
    EXPECT_FALSE(CpuModelRunner(exact).supports_prefix_caching());
    EXPECT_TRUE(CpuModelRunner(*g_model->reference).supports_prefix_caching());
    EngineCore exact_core(engine_config(true), std::make_unique<CpuModelRunner>(exact, 4096));
    EXPECT_FALSE(exact_core.prefix_caching());
    // Snapshot bytes: every layer's window ring (6 layers + MTP) plus the two CSA layers' carries.
    const KvCacheSpec spec = make_kv_cache_spec(CpuModelRunner(*g_model->reference).kv_model_shape(), 128);
    const int64_t windows = 7 * 128 * spec.entry.entry_bytes();
    const int64_t carry = 2 * 4 * (2 * 4 * 2 * g_model->cfg.head_dim + 2 * 4 * 2 * g_model->cfg.index_head_dim);
    EXPECT_EQ(CpuModelRunner(*g_model->reference).prefix_snapshot_bytes(spec), 8 + windows + carry);
}

TEST(PrefixCacheEngine, IdenticalPromptIsBitExactAtEveryBoundaryKind) {
    Harness h(engine_config(true));
    ASSERT_TRUE(h.core().prefix_caching());
    for (const size_t n : {1, 3, 4, 5, 127, 128, 129, 255, 256, 257, 300, 513}) {
        const auto p = prompt_of(static_cast<uint32_t>(n), n);
        const Result want = cold(p, 4);
        const Result first = h.run_one(p, 4);
        const Result again = h.run_one(p, 4);
        const std::string what = "prompt of " + std::to_string(n);
        expect_same_rows(first, want, what + " (first)");
        expect_same_rows(again, want, what + " (cached)");
        EXPECT_EQ(first.cached_tokens, 0) << what;
        EXPECT_EQ(again.cached_tokens, resume_point(static_cast<int64_t>(n))) << what;
    }
    EXPECT_GT(h.core().scheduler().n_prefix_hits(), 0);
}

TEST(PrefixCacheEngine, ExtendedPromptResumesInsideTheOldOne) {
    Harness h(engine_config(true));
    const auto base = prompt_of(77, 300);
    h.run_one(base, 2);
    for (const size_t n : {301, 384, 385, 513}) {
        auto p = base;
        const auto more = prompt_of(static_cast<uint32_t>(1000 + n), n - base.size());
        p.insert(p.end(), more.begin(), more.end());
        const Result got = h.run_one(p, 3);
        expect_same_rows(got, cold(p, 3), "extended to " + std::to_string(n));
        // base (300) + 2 outputs, one of which was computed: boundaries up to 256 are cached.
        EXPECT_GE(got.cached_tokens, 256) << n;
    }
}

TEST(PrefixCacheEngine, SharedSystemPromptDifferentUserTurns) {
    Harness h(engine_config(true));
    const auto system = prompt_of(9, 270);
    std::vector<std::vector<int32_t>> prompts;
    for (uint32_t u = 0; u < 4; ++u) {
        auto p = system;
        const auto user = prompt_of(100 + u, 20 + 37 * u);
        p.insert(p.end(), user.begin(), user.end());
        prompts.push_back(std::move(p));
    }
    const Result first = h.run_one(prompts[0], 3);
    expect_same_rows(first, cold(prompts[0], 3), "first user");
    // The others together: each resumes at 256 (two system blocks and the snapshot after them).
    const auto rest = h.run({prompts[1], prompts[2], prompts[3]}, 3);
    for (size_t i = 0; i < rest.size(); ++i) {
        expect_same_rows(rest[i], cold(prompts[i + 1], 3), "user " + std::to_string(i + 1));
        EXPECT_EQ(rest[i].cached_tokens, 256) << i;
    }
}

TEST(PrefixCacheEngine, TenTurnConversationHitsEveryTurn) {
    Harness h(engine_config(true));
    std::vector<int32_t> convo = prompt_of(500, 140);  // system + first user turn
    int64_t prev_computed = 0;                         // tokens the previous turn computed
    for (int turn = 0; turn < 10; ++turn) {
        const Result got = h.run_one(convo, 6);
        expect_same_rows(got, cold(convo, 6), "turn " + std::to_string(turn));
        if (turn > 0) {
            EXPECT_GT(got.cached_tokens, 0) << "turn " << turn;
            // Everything the last turn computed up to its last block boundary comes from the cache.
            EXPECT_EQ(got.cached_tokens, prev_computed / 128 * 128) << "turn " << turn;
        }
        // The next turn: this turn's prompt, the answer, a new user message.
        prev_computed = static_cast<int64_t>(convo.size() + got.tokens.size()) - 1;
        convo.insert(convo.end(), got.tokens.begin(), got.tokens.end());
        const auto user = prompt_of(600 + static_cast<uint32_t>(turn), 15 + 11 * static_cast<size_t>(turn));
        convo.insert(convo.end(), user.begin(), user.end());
    }
    const auto& s = h.core().scheduler();
    EXPECT_GT(s.n_prefix_hits() * 10, s.n_prefix_queries() * 6) << s.n_prefix_hits() << " / " << s.n_prefix_queries();
}

TEST(PrefixCacheEngine, ChunkedPrefillWithHits) {
    // 64-token budget, 50-token chunks: a hit then resumes mid-prompt in chunks that straddle blocks.
    Harness h(engine_config(true, 64, 50, 4));
    const auto system = prompt_of(31, 200);
    std::vector<std::vector<int32_t>> prompts;
    for (uint32_t u = 0; u < 3; ++u) {
        auto p = system;
        const auto user = prompt_of(40 + u, 90 + 70 * u);
        p.insert(p.end(), user.begin(), user.end());
        prompts.push_back(std::move(p));
    }
    const auto first = h.run({prompts[0]}, 4);
    const auto rest = h.run({prompts[1], prompts[2], prompts[0]}, 4);
    EXPECT_LE(h.runner().max_chunk, 50);
    expect_same_rows(first[0], cold(prompts[0], 4), "first");
    for (size_t i = 0; i < rest.size(); ++i) {
        const auto& p = i < 2 ? prompts[i + 1] : prompts[0];
        expect_same_rows(rest[i], cold(p, 4), "chunked " + std::to_string(i));
        EXPECT_GE(rest[i].cached_tokens, 128) << i;
    }
}

TEST(PrefixCacheEngine, ManySequencesUnderKvPressureMatchUncached) {
    // 12 requests over 3 stems, a pool of 8 blocks for up to 6 sequences of up to ~420 tokens:
    // admission waits, preemption, LRU eviction of cached blocks and snapshots all happen.
    const auto probe = make_kv_cache_spec(CpuModelRunner(*g_model->reference).kv_model_shape(), 128);
    auto tight = [&](bool caching) {
        EngineConfig c = engine_config(caching, 256, 100, 6);
        c.kv_cache_bytes = 6 * probe.slot_bytes + 8 * probe.block_bytes;
        const int64_t snap = CpuModelRunner(*g_model->reference).prefix_snapshot_bytes(probe);
        c.prefix_snapshot_bytes = 6 * snap;  // a handful of snapshots: they are evicted too
        return c;
    };
    std::vector<std::vector<int32_t>> prompts;
    for (uint32_t i = 0; i < 12; ++i) {
        auto p = prompt_of(70 + i % 3, 150 + 60 * (i % 3));
        const auto tail = prompt_of(90 + i, 10 + 13 * i);
        p.insert(p.end(), tail.begin(), tail.end());
        prompts.push_back(std::move(p));
    }
    Harness uncached(tight(false)), cached(tight(true));
    const auto want = uncached.run(prompts, 8);
    const auto got = cached.run(prompts, 8);
    // A second wave of the same prompts, now mostly from the cache.
    const auto again = cached.run(prompts, 8);
    int64_t preemptions = 0, hits = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
        // Rows after a preemption are recomputed; compare each request's final rows with a cold run.
        const Result c = cold(prompts[i], 8);
        EXPECT_EQ(got[i].tokens, c.tokens) << i;
        expect_same_rows(again[i], c, "second wave " + std::to_string(i));
        preemptions += got[i].n_preemptions + again[i].n_preemptions;
        hits += got[i].cached_tokens + again[i].cached_tokens;
    }
    EXPECT_GT(preemptions, 0) << "the pool never ran short";
    EXPECT_GT(hits, 0);
    const PrefixCacheStats st = cached.core().kv().prefix_cache_stats();
    EXPECT_GT(st.n_evicted_blocks, 0);
    EXPECT_EQ(cached.core().kv().n_free_blocks(), cached.core().kv().n_total_blocks());
    EXPECT_EQ(cached.runner().n_live_states(), 0u);
    EXPECT_GT(st.n_evicted_snapshots, 0);
}

}  // namespace
}  // namespace onecard
