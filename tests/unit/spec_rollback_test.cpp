// Rollback without replay (issue 17, step 1): a sequence that runs speculative verify steps over
// [accepted..., rejected...] tokens and keeps only the accepted ones (SpeculativeStep) is bit for
// bit the sequence that was only ever fed the accepted tokens: the same logits for every kept
// position, the same stored KV (window rows, compressed entries, indexer keys), the same next
// logits after it. The patterns are random (fixed seeds) and the rejected spans are steered across
// every boundary kind: a ratio-4 window close, a ratio-128 window close, the sliding window's ring
// wrap (window 128) and a KV block boundary (256 tokens, paged store).
#include "backend/cpu/compressor.h"
#include "core/error.h"
#include "engine/cpu_model_runner.h"
#include "engine/paged_sequence_kv.h"
#include "kvcache/kv_arena.h"
#include "kvcache/kv_manager.h"
#include "model/spec_step.h"

#include "support/test_support.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

namespace onecard {
namespace {

constexpr int64_t kWindow = 128;
constexpr int64_t kBlock = 256;
constexpr int64_t kTokens = 300;  // crosses the window, two HCA windows and one block

test::TinyModel* g_model = nullptr;

class Env : public ::testing::Environment {
public:
    void SetUp() override {
        SynthOptions opt = test::tiny_options(1717);
        opt.window = kWindow;
        g_model = new test::TinyModel(opt, "onecard_spec_rollback");
    }
    void TearDown() override {
        delete g_model;
        g_model = nullptr;
    }
};
const auto* const g_env = ::testing::AddGlobalTestEnvironment(new Env);

using test::bitwise_equal;

std::vector<int32_t> random_tokens(int64_t n, uint32_t seed) {
    return test::random_tokens(n, seed, g_model->cfg.vocab_size);
}

// Which boundary kinds the rejected positions [keep, end) of a verify step crossed.
struct Coverage {
    int ratio4 = 0, ratio128 = 0, window_wrap = 0, block = 0, all_rejected = 0, all_accepted = 0;
    void add(int64_t keep, int64_t end) {
        for (int64_t p = keep; p < end; ++p) {
            ratio4 += (p + 1) % 4 == 0;         // this position closes a CSA window
            ratio128 += (p + 1) % 128 == 0;     // ... an HCA window
            window_wrap += p >= kWindow;        // its ring row still holds a kept position's row
            block += p % kBlock == 0 && p > 0;  // first position of a new KV block
        }
    }
};

// A verify step of m = k + 1 tokens starting at n0 keeps n0 + 1 + a of them (a accepted drafts).
// a is random, except that a step spanning the end of an HCA window rejects it (so the rejected
// positions write an HCA entry, the ring rows of its window and, at 256, a new block).
int64_t pick_accepted(std::mt19937& rng, int64_t n0, int64_t k) {
    int64_t a = static_cast<int64_t>(rng() % static_cast<uint32_t>(k + 1));
    for (int64_t b = 128; b <= kTokens; b += 128) {
        if (n0 + 1 < b && n0 + k >= b - 1) a = std::min<int64_t>(a, std::max<int64_t>(0, b - 2 - n0));
    }
    return a;
}

// Drives one speculative sequence and its never-drafted twin over `truth`; `store_of` gives the
// speculative sequence's store for a step that ends at `end` tokens (the owned one, or a paged view).
struct PatternRun {
    std::vector<float> spec_rows, plain_rows;  // logits of every kept position, both sequences
    Coverage cov;
    int64_t max_step_bytes = 0;
};

template <typename StoreOf>
PatternRun run_pattern(const DeepSeekV4& model, SequenceState& spec, SequenceState& plain, StoreOf&& store_of,
                       uint32_t seed) {
    const ModelConfig& cfg = model.config();
    const std::vector<int32_t> truth = random_tokens(kTokens + 60, seed);
    std::mt19937 rng(seed * 7 + 1);
    PatternRun run;
    const auto V = static_cast<size_t>(cfg.vocab_size);
    while (spec.n_tokens() < kTokens) {
        const int64_t n0 = spec.n_tokens();
        const int64_t k = 1 + static_cast<int64_t>(rng() % 7);
        const int64_t a = pick_accepted(rng, n0, k);
        // [truth[n0], the a accepted drafts, then k - a rejected drafts that differ from the truth]
        std::vector<int32_t> step(truth.begin() + n0, truth.begin() + n0 + 1 + a);
        for (int64_t j = a; j < k; ++j)
            step.push_back(static_cast<int32_t>((truth[n0 + 1 + j] + 1 + rng() % 97) % cfg.vocab_size));
        const int64_t keep = n0 + 1 + a;
        SequenceKv& store = store_of(n0 + 1 + k);
        SpeculativeStep s(spec, store, cfg);
        const std::vector<float> logits = model.forward(spec, s.kv(), step);
        run.max_step_bytes = std::max(run.max_step_bytes, s.bytes());
        s.check_integrity();
        s.finish(keep, spec.n_mtp_tokens());
        s.check_integrity();
        run.cov.add(keep, n0 + 1 + k);
        run.cov.all_rejected += a == 0;
        run.cov.all_accepted += a == k;
        run.spec_rows.insert(run.spec_rows.end(), logits.begin(), logits.begin() + (keep - n0) * V);

        const std::vector<float> plain_logits =
            model.forward(plain, std::span<const int32_t>(truth.data() + n0, static_cast<size_t>(keep - n0)));
        run.plain_rows.insert(run.plain_rows.end(), plain_logits.begin(), plain_logits.end());
        EXPECT_EQ(spec.n_tokens(), plain.n_tokens());
    }
    // The next logits after the last rollback, over a chunk that closes windows of every kind again.
    const int64_t n = spec.n_tokens();
    const std::span<const int32_t> next(truth.data() + n, 40);
    const std::vector<float> a = model.forward(spec, store_of(n + 40), next);
    const std::vector<float> b = model.forward(plain, next);
    run.spec_rows.insert(run.spec_rows.end(), a.begin(), a.end());
    run.plain_rows.insert(run.plain_rows.end(), b.begin(), b.end());
    return run;
}

void expect_coverage(const Coverage& c) {
    EXPECT_GT(c.ratio4, 0);
    EXPECT_GT(c.ratio128, 0);
    EXPECT_GT(c.window_wrap, 0);
    EXPECT_GT(c.block, 0);
    EXPECT_GT(c.all_rejected, 0);
    EXPECT_GT(c.all_accepted, 0);
}

// Every stored vector of the two owned stores, compared bit for bit.
void expect_same_store(const SequenceState& x, const SequenceState& y) {
    const ModelConfig& cfg = g_model->cfg;
    const Fp32SequenceKv &a = x.own_kv(), &b = y.own_kv();
    std::vector<float> u(static_cast<size_t>(cfg.head_dim)), v(u.size());
    for (const LayerState& l : x.layers()) {
        const int64_t id = l.layer_id;
        ASSERT_EQ(a.window_end(id), b.window_end(id));
        ASSERT_EQ(a.n_entries(id), b.n_entries(id));
        ASSERT_EQ(a.n_index_keys(id), b.n_index_keys(id));
        for (int64_t p = std::max<int64_t>(0, a.window_end(id) - kWindow); p < a.window_end(id); ++p) {
            a.read_window(id, p, u.data());
            b.read_window(id, p, v.data());
            ASSERT_TRUE(bitwise_equal(u, v)) << "layer " << id << " window row " << p;
        }
        for (int64_t e = 0; e < a.n_entries(id); ++e) {
            a.read_entry(id, e, u.data());
            b.read_entry(id, e, v.data());
            ASSERT_TRUE(bitwise_equal(u, v)) << "layer " << id << " entry " << e;
        }
        std::vector<float> ku(static_cast<size_t>(cfg.index_head_dim)), kv(ku.size());
        for (int64_t e = 0; e < a.n_index_keys(id); ++e) {
            a.read_index_key(id, e, ku.data());
            b.read_index_key(id, e, kv.data());
            ASSERT_TRUE(bitwise_equal(ku, kv)) << "layer " << id << " indexer key " << e;
        }
    }
}

TEST(SpecRollback, OwnedStoreEqualsNeverDraftedBitwise) {
    for (const DeepSeekV4* model : {g_model->exact.get(), g_model->reference.get()}) {
        SequenceState spec = model->new_sequence(), plain = model->new_sequence();
        const PatternRun run = run_pattern(
            *model, spec, plain, [&](int64_t) -> SequenceKv& { return spec.own_kv(); }, 3);
        expect_coverage(run.cov);
        spec.check_integrity();
        plain.check_integrity();
        EXPECT_TRUE(bitwise_equal(run.spec_rows, run.plain_rows)) << numerics_name(model->numerics());
        expect_same_store(spec, plain);
        EXPECT_GT(run.max_step_bytes, 0);
    }
}

TEST(SpecRollback, PagedStoreEqualsNeverDraftedBitwise) {
    // The engine's store: kvcache's byte format in blocks of 256 tokens, reference numerics.
    const DeepSeekV4& model = *g_model->reference;
    const KvCacheSpec spec_kv = make_kv_cache_spec(CpuModelRunner(model).kv_model_shape(), kBlock);
    const KvPoolSize size{2, 4};  // {slots, blocks}
    KvCacheManager mgr(spec_kv, size);
    KvHostArena arena(spec_kv, size);
    KvLayerTable layout(spec_kv);
    KvHandle h;
    std::optional<PagedSequenceKv> view;
    auto store_of = [&](int64_t end) -> SequenceKv& {
        if (mgr.n_tokens(h) < end) mgr.extend(h, end - mgr.n_tokens(h));
        view.emplace(arena, layout, h.slot, mgr.block_table(h));
        return *view;
    };
    for (uint32_t seed : {5u, 6u}) {
        h = mgr.allocate(0);
        SequenceState spec = model.new_sequence_external_kv(), plain = model.new_sequence();
        const PatternRun run = run_pattern(model, spec, plain, store_of, seed);
        expect_coverage(run.cov);
        spec.check_integrity();
        EXPECT_TRUE(bitwise_equal(run.spec_rows, run.plain_rows)) << "seed " << seed;
        mgr.free(h);
        mgr.check_integrity();
    }
}

// The building blocks on their own: a compressor rolled back mid-journal equals one that was never
// pushed past that point, for both compressor kinds and every rollback distance.
TEST(SpecRollback, CompressorRollbackEqualsFewerPushes) {
    for (int64_t ratio : {4, 8}) {
        const int64_t d = 6;
        cpu::CompressorState c(ratio, d);
        const int64_t W = c.row_width();
        std::mt19937 rng(ratio);
        std::normal_distribution<float> g;
        std::vector<float> rows(static_cast<size_t>(64 * 2 * W));
        for (float& x : rows) x = g(rng);
        std::vector<float> e(static_cast<size_t>(d)), e2(e.size());
        for (int64_t start : {0, 3, 7, 8, 13}) {
            for (int64_t keep = start; keep <= start + 11; ++keep) {
                cpu::CompressorState x(ratio, d), y(ratio, d);
                for (int64_t p = 0; p < start; ++p) x.push(&rows[p * 2 * W], &rows[p * 2 * W + W], e.data());
                x.begin_journal();
                for (int64_t p = start; p < start + 11; ++p) x.push(&rows[p * 2 * W], &rows[p * 2 * W + W], e.data());
                x.check_integrity();
                EXPECT_GT(x.journal_bytes(), 0);
                x.rollback(keep);
                x.end_journal();
                x.check_integrity();
                for (int64_t p = 0; p < keep; ++p) y.push(&rows[p * 2 * W], &rows[p * 2 * W + W], e.data());
                // Same state: the next 2·ratio pushes emit the same entries bit for bit.
                for (int64_t p = keep; p < keep + 2 * ratio; ++p) {
                    const bool cx = x.push(&rows[p * 2 * W], &rows[p * 2 * W + W], e.data());
                    const bool cy = y.push(&rows[p * 2 * W], &rows[p * 2 * W + W], e2.data());
                    ASSERT_EQ(cx, cy);
                    if (cx) {
                        ASSERT_TRUE(bitwise_equal(e, e2))
                            << "ratio " << ratio << " start " << start << " keep " << keep;
                    }
                }
            }
        }
        // Below the journal's start, or forward, is refused.
        c.push(&rows[0], &rows[W], e.data());
        c.begin_journal();
        c.push(&rows[2 * W], &rows[3 * W], e.data());
        EXPECT_THROW(c.rollback(0), Error);
        EXPECT_THROW(c.rollback(3), Error);
        c.rollback(1);
        EXPECT_EQ(c.n_tokens(), 1);
    }
}

}  // namespace
}  // namespace onecard
