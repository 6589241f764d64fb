// The CPU forward pass on the engine's paged KV (issue 5: "the CPU backend reads the same format"):
// in reference numerics, logits through PagedSequenceKv (kvcache's 584/132-byte entries in a
// KvHostArena addressed by block tables) equal those through the fp32 store bit for bit, the stored
// vectors are the same, the model really reads the arena, and the engine keeps block tables and
// integrity across preemption while giving each request the tokens it gets alone.
#include "core/error.h"
#include "core/fp_formats.h"
#include "engine/cpu_model_runner.h"
#include "engine/engine_core.h"
#include "engine/paged_sequence_kv.h"
#include "kvcache/kv_arena.h"
#include "kvcache/kv_format.h"
#include "kvcache/kv_manager.h"
#include "loader/checkpoint.h"
#include "model/deepseek_v4.h"
#include "model/synth.h"
#include "model/weights.h"

#include "support/test_support.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>

namespace onecard {
namespace {

constexpr uint64_t kSeed = 4242;
constexpr int64_t kBlock = 128;  // tokens per block: a multiple of the tiny model's HCA ratio

test::TinyModel* g_tiny = nullptr;  // synthesised once per test binary

class TinyEnv : public ::testing::Environment {
public:
    void SetUp() override { g_tiny = new test::TinyModel(kSeed, "onecard_kv_paged"); }
    void TearDown() override {
        delete g_tiny;
        g_tiny = nullptr;
    }
};
const auto* const g_env = ::testing::AddGlobalTestEnvironment(new TinyEnv);

std::vector<int32_t> random_tokens(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(g_tiny->cfg.vocab_size));
    return t;
}

using test::bitwise_equal;

KvCacheSpec tiny_spec() {
    return make_kv_cache_spec(CpuModelRunner(*g_tiny->reference).kv_model_shape(), kBlock);
}

// A hand-driven pool: manager + arena + layout, as the engine and CpuModelRunner wire them.
struct Pool {
    KvCacheSpec spec = tiny_spec();
    KvPoolSize size;
    KvCacheManager kv;
    KvHostArena arena;
    KvLayerTable layout;
    explicit Pool(KvPoolSize s) : size(s), kv(spec, s), arena(spec, s), layout(spec) {}
    PagedSequenceKv view(KvHandle h) { return PagedSequenceKv(arena, layout, h.slot, kv.block_table(h)); }
};

// One sequence run both ways with the same chunks: through the paged pool and through an owned fp32
// store (which, in reference numerics, holds vectors rounded exactly as the byte format would).
struct Pair {
    SequenceState paged = g_tiny->reference->new_sequence_external_kv();
    SequenceState fp32 = g_tiny->reference->new_sequence();
    KvHandle h;
    std::vector<float> paged_logits, fp32_logits;
};

void step(Pool& pool, Pair& p, std::span<const int32_t> toks) {
    const DeepSeekV4& m = *g_tiny->reference;
    const auto n = static_cast<int64_t>(toks.size());
    ASSERT_TRUE(pool.kv.can_extend(p.h, n));
    pool.kv.extend(p.h, n);
    pool.kv.check_integrity();
    PagedSequenceKv view = pool.view(p.h);
    view.check_covers(p.paged.n_tokens() + n);
    auto a = m.forward(p.paged, view, toks);
    auto b = m.forward(p.fp32, toks);
    p.paged_logits.insert(p.paged_logits.end(), a.begin(), a.end());
    p.fp32_logits.insert(p.fp32_logits.end(), b.begin(), b.end());
    p.paged.check_integrity();
    p.fp32.check_integrity();
}

TEST(KvPagedModel, ReferenceLogitsThroughPagedStoreEqualFp32StoreBitwise) {
    // Two sequences advanced in interleaved, uneven chunks so their blocks interleave in the pool;
    // 300 tokens: 10 windows of 32, 2 HCA entries, 75 CSA entries (>> index_topk 8).
    Pool pool(KvPoolSize{3, 8});
    const std::vector<int32_t> ta = random_tokens(300, 1), tb = random_tokens(260, 2);
    Pair a, b;
    a.h = pool.kv.allocate(0);
    b.h = pool.kv.allocate(0);
    const std::vector<int64_t> chunks_a = {37, 1, 1, 64, 5, 120, 1, 71}, chunks_b = {130, 1, 2, 127};
    size_t ia = 0, ib = 0, pa = 0, pb = 0;
    while (ia < chunks_a.size() || ib < chunks_b.size()) {
        if (ia < chunks_a.size()) {
            step(pool, a, std::span<const int32_t>(ta.data() + pa, static_cast<size_t>(chunks_a[ia])));
            pa += static_cast<size_t>(chunks_a[ia++]);
        }
        if (ib < chunks_b.size()) {
            step(pool, b, std::span<const int32_t>(tb.data() + pb, static_cast<size_t>(chunks_b[ib])));
            pb += static_cast<size_t>(chunks_b[ib++]);
        }
        ASSERT_FALSE(HasFailure());
    }
    ASSERT_EQ(pa, ta.size());
    ASSERT_EQ(pb, tb.size());
    // The two tables interleave (the pool is shared, not one contiguous range per sequence).
    const auto& blocks_a = pool.kv.block_table(a.h);
    EXPECT_EQ(blocks_a.size(), 3u);
    EXPECT_NE(blocks_a[1], blocks_a[0] + 1);
    EXPECT_TRUE(bitwise_equal(a.paged_logits, a.fp32_logits));
    EXPECT_TRUE(bitwise_equal(b.paged_logits, b.fp32_logits));
    // Not trivially equal: the two sequences differ, and reference differs from exact.
    EXPECT_FALSE(bitwise_equal(std::vector<float>(a.paged_logits.begin(), a.paged_logits.begin() + 1024),
                               std::vector<float>(b.paged_logits.begin(), b.paged_logits.begin() + 1024)));

    // The MTP block's window lives in the slot too.
    const int64_t per = g_tiny->cfg.hc_mult * g_tiny->cfg.hidden_size;
    const std::vector<int32_t> next = random_tokens(40, 3);
    SequenceState mp = g_tiny->reference->new_sequence_external_kv(), mf = g_tiny->reference->new_sequence();
    const KvHandle hm = pool.kv.allocate(40);
    PagedSequenceKv vm = pool.view(hm);
    const auto streams_p = g_tiny->reference->forward_with_streams(mp, vm, std::span(next.data(), 39));
    const auto streams_f = g_tiny->reference->forward_with_streams(mf, std::span(next.data(), 39));
    ASSERT_TRUE(bitwise_equal(streams_p.streams, streams_f.streams));
    auto lp = g_tiny->reference->forward_mtp(mp, vm, std::span(streams_p.streams.data(), 39 * per),
                                             std::span(next.data() + 1, 39));
    auto lf = g_tiny->reference->forward_mtp(mf, std::span(streams_f.streams.data(), 39 * per),
                                             std::span(next.data() + 1, 39));
    EXPECT_TRUE(bitwise_equal(lp, lf));
    mp.check_integrity();
    mf.check_integrity();

    pool.kv.free(a.h);
    pool.kv.free(b.h);
    pool.kv.free(hm);
    pool.kv.check_integrity();
    EXPECT_EQ(pool.kv.n_free_blocks(), pool.kv.n_total_blocks());
}

// Storage level: every window row, compressed entry and indexer key decoded from the arena is the
// fp32 store's vector bit for bit, and those vectors sit on the format's grids (nope dims FP8 with a
// power-of-two scale, rope dims bf16, keys on one FP8 scale).
TEST(KvPagedModel, StoredVectorsAreTheFormatsValues) {
    const ModelConfig& c = g_tiny->cfg;
    Pool pool(KvPoolSize{1, 3});
    Pair p;
    p.h = pool.kv.allocate(0);
    const std::vector<int32_t> toks = random_tokens(270, 5);
    step(pool, p, std::span<const int32_t>(toks.data(), 200));
    step(pool, p, std::span<const int32_t>(toks.data() + 200, 70));
    PagedSequenceKv view = pool.view(p.h);
    const Fp32SequenceKv& f = p.fp32.own_kv();
    const int64_t hd = c.head_dim, dI = c.index_head_dim, n_rope = c.qk_rope_head_dim, T = 270;
    std::vector<float> x(static_cast<size_t>(hd)), y(static_cast<size_t>(hd));
    std::vector<uint8_t> bytes(static_cast<size_t>(pool.spec.entry.entry_bytes()));
    int64_t n_checked = 0, n_keys = 0;
    auto on_grid = [&](const std::vector<float>& v) {
        for (int64_t d = hd - n_rope; d < hd; ++d) ASSERT_EQ(round_bf16(v[d]), v[d]) << "rope dim " << d;
        encode_kv_entry(pool.spec.entry, v.data(), bytes.data());
        std::vector<float> back(static_cast<size_t>(hd));
        decode_kv_entry(pool.spec.entry, bytes.data(), back.data());
        ASSERT_TRUE(bitwise_equal(back, v));
    };
    for (const LayerState& l : p.fp32.layers()) {
        for (int64_t pos = T - c.sliding_window; pos < T; ++pos) {
            f.read_window(l.layer_id, pos, x.data());
            view.read_window(l.layer_id, pos, y.data());
            ASSERT_TRUE(bitwise_equal(x, y)) << "layer " << l.layer_id << " window pos " << pos;
            on_grid(x);
            ++n_checked;
        }
        for (int64_t e = 0; e < l.n_compressed(); ++e) {
            f.read_entry(l.layer_id, e, x.data());
            view.read_entry(l.layer_id, e, y.data());
            ASSERT_TRUE(bitwise_equal(x, y)) << "layer " << l.layer_id << " entry " << e;
            on_grid(x);
            ++n_checked;
        }
        if (l.ratio != 4) continue;
        std::vector<float> k(static_cast<size_t>(dI)), k2(static_cast<size_t>(dI)), back(static_cast<size_t>(dI));
        std::vector<uint8_t> kb(static_cast<size_t>(pool.spec.index_key.entry_bytes()));
        for (int64_t e = 0; e < l.n_compressed(); ++e) {
            f.read_index_key(l.layer_id, e, k.data());
            view.read_index_key(l.layer_id, e, k2.data());
            ASSERT_TRUE(bitwise_equal(k, k2)) << "layer " << l.layer_id << " key " << e;
            encode_indexer_key(pool.spec.index_key, k.data(), kb.data());
            decode_indexer_key(pool.spec.index_key, kb.data(), back.data());
            ASSERT_TRUE(bitwise_equal(back, k));
            ++n_keys;
        }
    }
    EXPECT_GT(n_checked, 6 * 32);
    EXPECT_EQ(n_keys, 2 * (T / 4));
    // Reference numerics really round the rope dims to bf16 (a plain fp32 RoPE output almost never is).
    SequenceState ex = g_tiny->exact->new_sequence();
    g_tiny->exact->forward(ex, std::span<const int32_t>(toks.data(), 40));
    int64_t not_bf16 = 0;
    ex.own_kv().read_window(0, 39, x.data());
    for (int64_t d = hd - n_rope; d < hd; ++d) not_bf16 += round_bf16(x[d]) != x[d];
    EXPECT_GT(not_bf16, n_rope / 2);
}

// The model reads the arena, not a shadow copy: damaging one stored HCA entry (always attended)
// and one window row changes the next logits; restoring the bytes restores them exactly.
TEST(KvPagedModel, ModelReadsTheArena) {
    Pool pool(KvPoolSize{1, 2});
    const KvHandle h = pool.kv.allocate(0);
    const std::vector<int32_t> toks = random_tokens(140, 9);
    SequenceState st = g_tiny->reference->new_sequence_external_kv();
    pool.kv.extend(h, 139);
    PagedSequenceKv view = pool.view(h);
    g_tiny->reference->forward(st, view, std::span<const int32_t>(toks.data(), 139));
    pool.kv.extend(h, 1);
    const SequenceState saved = st;  // compressor state only: the KV stays in the arena
    auto next = [&] {
        SequenceState s = saved;
        PagedSequenceKv v = pool.view(h);
        return g_tiny->reference->forward(s, v, std::span<const int32_t>(toks.data() + 139, 1));
    };
    const auto clean = next();
    EXPECT_TRUE(bitwise_equal(next(), clean));  // re-running the step from the saved state is exact

    int64_t hca = -1;
    for (const LayerState& l : st.layers())
        if (l.ratio == 128) hca = l.layer_id;
    ASSERT_GE(hca, 0);
    const size_t stream = kv_stream_index(pool.spec, hca, KvStreamKind::CompressedEntry);
    uint8_t* entry = pool.arena.paged_entry(pool.kv.block_table(h), stream, 0);
    const std::vector<uint8_t> keep(entry, entry + pool.spec.entry.entry_bytes());
    std::memset(entry, 0, keep.size());
    EXPECT_FALSE(bitwise_equal(next(), clean)) << "zeroing HCA entry 0 changed nothing";
    std::memcpy(entry, keep.data(), keep.size());
    EXPECT_TRUE(bitwise_equal(next(), clean));

    uint8_t* row = pool.arena.window_entry(h.slot, kv_fixed_index(pool.spec, 0, KvFixedKind::Window), 130);
    row[0] ^= 0x11;  // one FP8 code of an SWA window row
    EXPECT_FALSE(bitwise_equal(next(), clean)) << "changing a window row changed nothing";
}

TEST(KvPagedModel, StoresRejectMisuse) {
    const DeepSeekV4& m = *g_tiny->reference;
    const std::vector<int32_t> toks = random_tokens(8, 11);
    SequenceState external = m.new_sequence_external_kv();
    EXPECT_THROW(m.forward(external, toks), Error);  // its KV is outside: a store must be passed
    SequenceState owned = m.new_sequence();
    Fp32SequenceKv other(g_tiny->cfg);
    EXPECT_THROW(m.forward(owned, other, toks), Error);  // an owning state takes only its own store
    EXPECT_NO_THROW(m.forward(owned, owned.own_kv(), toks));

    Fp32SequenceKv kv(g_tiny->cfg);
    std::vector<float> row(static_cast<size_t>(g_tiny->cfg.head_dim), 1.0f);
    const int64_t W = g_tiny->cfg.sliding_window;
    for (int64_t p = 0; p < W + 5; ++p) kv.write_window(0, p, row.data());
    EXPECT_NO_THROW(kv.read_window(0, 5, row.data()));
    EXPECT_THROW(kv.read_window(0, 4, row.data()), Error);      // overwritten by position W + 4
    EXPECT_THROW(kv.read_window(0, W + 5, row.data()), Error);  // not written yet
    EXPECT_THROW(kv.write_entry(2, 1, row.data()), Error);      // entries are appended in order
    EXPECT_THROW(kv.read_entry(2, 0, row.data()), Error);
    EXPECT_THROW(kv.write_index_key(0, 0, row.data()), Error);  // an SWA layer has no indexer keys

    // The paged view refuses entries its block table does not cover and streams a layer lacks.
    Pool pool(KvPoolSize{1, 2});
    const KvHandle h = pool.kv.allocate(kBlock);
    PagedSequenceKv view = pool.view(h);
    EXPECT_NO_THROW(view.check_covers(kBlock));
    EXPECT_THROW(view.check_covers(kBlock + 1), Error);
    EXPECT_THROW(view.write_entry(2, kBlock / 4, row.data()), Error);
    EXPECT_THROW(view.write_entry(0, 0, row.data()), Error);                                   // layer 0 is SWA
    EXPECT_THROW(PagedSequenceKv(pool.arena, pool.layout, 1, pool.kv.block_table(h)), Error);  // no slot 1
}

// ---- through the engine ----------------------------------------------------------------------

std::vector<int32_t> greedy_alone(const DeepSeekV4& m, const std::vector<int32_t>& prompt, int64_t n) {
    SequenceState st = m.new_sequence();
    const int64_t V = m.config().vocab_size;
    std::vector<float> logits = m.forward(st, prompt);
    std::vector<int32_t> out;
    for (int64_t i = 0; i < n; ++i) {
        out.push_back(static_cast<int32_t>(std::max_element(logits.end() - V, logits.end()) - (logits.end() - V)));
        if (i + 1 < n) logits = m.forward(st, std::span<const int32_t>(&out.back(), 1));
    }
    return out;
}

TEST(KvPagedModel, EnginePreemptionKeepsBlockTablesAndIntegrity) {
    const DeepSeekV4& m = *g_tiny->reference;
    std::mt19937 rng(17);
    std::vector<std::vector<int32_t>> prompts;
    std::vector<int64_t> max_tokens;
    for (int i = 0; i < 8; ++i) {
        prompts.push_back(random_tokens(60 + static_cast<int64_t>(rng() % 90), 100 + i));
        max_tokens.push_back(4 + static_cast<int64_t>(rng() % 6));
    }
    const KvCacheSpec spec = tiny_spec();
    EngineConfig cfg;
    cfg.max_num_batched_tokens = 96;
    cfg.long_prefill_token_threshold = 40;
    cfg.max_num_seqs = 8;
    cfg.kv_block_size = kBlock;
    cfg.kv_cache_bytes = 8 * spec.slot_bytes + 3 * spec.block_bytes;  // 3 blocks for 8 sequences
    auto runner_owned = std::make_unique<CpuModelRunner>(m, 4096);
    CpuModelRunner* runner = runner_owned.get();  // owned by the core below
    EngineCore core(cfg, std::move(runner_owned));
    ASSERT_TRUE(runner->paged_kv());
    for (size_t i = 0; i < prompts.size(); ++i) {
        SamplingParams sp;
        sp.temperature = 0.0f;
        sp.max_tokens = max_tokens[i];
        core.add_request(i + 1, {prompts[i], sp});
    }
    std::map<RequestId, std::vector<int32_t>> got;
    int64_t steps = 0;
    while (core.has_unfinished()) {
        for (auto& ev : core.step()) {
            ASSERT_TRUE(ev.error.empty()) << ev.error;
            got[ev.request_id].insert(got[ev.request_id].end(), ev.token_ids.begin(), ev.token_ids.end());
        }
        core.check_integrity();
        core.kv().check_integrity();
        // Live requests hold distinct slots and disjoint block tables covering their tokens.
        runner->check_integrity();
        ASSERT_LT(++steps, 2000);
    }
    core.step();  // hands the last finished ids to the runner
    EXPECT_GT(core.scheduler().n_preemptions(), 0) << "3 blocks for 8 sequences never preempted";
    EXPECT_EQ(runner->n_live_states(), 0u);
    EXPECT_EQ(core.kv().n_free_blocks(), core.kv().n_total_blocks());
    EXPECT_EQ(core.kv().n_free_slots(), core.kv().n_total_slots());
    for (size_t i = 0; i < prompts.size(); ++i)
        EXPECT_EQ(got[i + 1], greedy_alone(m, prompts[i], max_tokens[i])) << "request " << i + 1;
}

TEST(KvPagedModel, ExactNumericsKeepFp32Kv) {
    auto runner_owned = std::make_unique<CpuModelRunner>(*g_tiny->exact, 4096);
    CpuModelRunner* runner = runner_owned.get();
    EngineConfig cfg;
    cfg.kv_block_size = kBlock;
    cfg.kv_cache_bytes = 64LL << 20;
    EngineCore core(cfg, std::move(runner_owned));
    EXPECT_FALSE(runner->paged_kv());
    // A reference runner outside an engine has no pool to write to and says so.
    CpuModelRunner lone(*g_tiny->reference, 4096);
    SchedulerOutput out;
    ScheduledRequest r;
    r.id = 1;
    r.token_ids = {1, 2, 3};
    out.requests.push_back(r);
    EXPECT_THROW(lone.execute(out), Error);
}

}  // namespace
}  // namespace onecard
