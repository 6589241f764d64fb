// The GPU step metadata (model_cuda/gpu_step.h): block tables kept on the device, one row per KV slot,
// with only the entries that changed since a row was last sent uploaded and validated; and the per-layer
// byte offsets the step kernels derive from those rows, against core/kv_address.h's formula evaluated
// on the host over each sequence's own table (not over the device row, which may hold a previous
// occupant's ids past the table's end).
#include "gpu_test_util.h"

#ifdef ONECARD_HAVE_CUDA

#include "backend/cuda/stream.h"
#include "core/error.h"
#include "kvcache/kv_layer_table.h"
#include "model_cuda/gpu_kv_pool.h"
#include "model_cuda/gpu_step.h"

#include <memory>
#include <numeric>

namespace onecard {
namespace {

constexpr int64_t kBlock = 128, kSlots = 4, kBlocks = 16, kRowBlocks = 8, kTokens = 512;

// A Flash-shape pool (layers SWA, SWA, CSA 4, HCA 128, ...) of 4 slots and 16 blocks, and step metadata
// over it with rows of 8 blocks.
struct StepFixture {
    KvCacheSpec spec = make_kv_cache_spec(flash_kv_model_shape(), kBlock);
    KvPoolSize size{kSlots, kBlocks};
    std::unique_ptr<cuda::DeviceArena> arena;
    std::unique_ptr<GpuKvPool> pool;
    std::unique_ptr<GpuStepMeta> meta;
    cuda::Stream stream;

    StepFixture() {
        const int64_t bytes =
            kBlocks * spec.block_bytes + kSlots * spec.slot_bytes + kTokens * spec.entry.entry_bytes();
        arena = std::make_unique<cuda::DeviceArena>(static_cast<size_t>(bytes) + (size_t{64} << 20), "gpu step test");
        pool = std::make_unique<GpuKvPool>(spec, size, kTokens, *arena);
        int32_t* d32 = nullptr;
        int64_t* d64 = nullptr;
        GpuStepMeta::carve(kTokens, kSlots, kRowBlocks, *arena, &d32, &d64);
        meta = std::make_unique<GpuStepMeta>(kTokens, kSlots, kRowBlocks, *pool, d32, d64);
    }
    // The device rows [kSlots][kRowBlocks] after the queued work.
    std::vector<int32_t> rows() {
        stream.sync();
        return cuda::copy_to_host(meta->block_tables, static_cast<size_t>(kSlots * kRowBlocks));
    }
    void step(std::span<const GpuStepSeq> seqs) {
        meta->build(seqs, LogitRows::Last, stream.get());
        stream.sync();
    }
};

GpuStepSeq seq(int32_t slot, const std::vector<int32_t>& table, int64_t start, const std::vector<int32_t>& tokens) {
    GpuStepSeq q;
    q.slot = slot;
    q.block_table = table;
    q.start_pos = start;
    q.tokens = tokens;
    q.want_logits = true;
    return q;
}

std::vector<int32_t> row(const std::vector<int32_t>& rows, int64_t slot) {
    return {rows.begin() + slot * kRowBlocks, rows.begin() + (slot + 1) * kRowBlocks};
}

TEST(GpuStep, BlockTablesStayOnTheDeviceAndOnlyChangesAreSent) {
    ONECARD_REQUIRE_GPU();
    StepFixture f;
    const std::vector<int32_t> prompt(130, 7), one(1, 9);
    std::vector<int32_t> t2 = {5, 6};
    {  // a prompt of 130 tokens in slot 2: both entries sent
        const GpuStepSeq q = seq(2, t2, 0, prompt);
        f.step({&q, 1});
    }
    EXPECT_EQ(f.meta->table_entries_sent(), 2);
    EXPECT_EQ(row(f.rows(), 2), (std::vector<int32_t>{5, 6, 0, 0, 0, 0, 0, 0}));
    EXPECT_EQ(row(f.rows(), 0), std::vector<int32_t>(kRowBlocks, 0));
    for (int64_t p = 130; p < 140; ++p) {  // decode inside the same blocks: nothing sent
        const GpuStepSeq q = seq(2, t2, p, one);
        f.step({&q, 1});
    }
    EXPECT_EQ(f.meta->table_entries_sent(), 2);
    t2.push_back(11);  // the sequence grows into a third block: one entry
    {
        const GpuStepSeq q = seq(2, t2, 256, one);
        f.step({&q, 1});
    }
    EXPECT_EQ(f.meta->table_entries_sent(), 3);
    EXPECT_EQ(row(f.rows(), 2), (std::vector<int32_t>{5, 6, 11, 0, 0, 0, 0, 0}));
    // A new occupant of slot 2 with a one-block table: only the entry that differs is sent; the rest of
    // the row keeps the old ids, which nothing reads (the table covers every token of the step).
    const std::vector<int32_t> t2b = {3}, t0 = {1, 2, 4}, prompt0(300, 5);
    {
        const GpuStepSeq q[2] = {seq(0, t0, 0, prompt0), seq(2, t2b, 0, one)};
        f.step(q);
    }
    EXPECT_EQ(f.meta->table_entries_sent(), 3 + 3 + 1);
    const std::vector<int32_t> r = f.rows();
    EXPECT_EQ(row(r, 2), (std::vector<int32_t>{3, 6, 11, 0, 0, 0, 0, 0}));
    EXPECT_EQ(row(r, 0), (std::vector<int32_t>{1, 2, 4, 0, 0, 0, 0, 0}));
    // Every token names its slot's row; first/last are step indices of its sequence.
    EXPECT_EQ(f.meta->n, 301);
    const auto rows_of = cuda::copy_to_host(f.meta->row_of_token, 301);
    const auto first = cuda::copy_to_host(f.meta->seq_first, 301);
    const auto last = cuda::copy_to_host(f.meta->seq_last, 301);
    EXPECT_EQ(rows_of[0], 0);
    EXPECT_EQ(rows_of[299], 0);
    EXPECT_EQ(rows_of[300], 2);
    EXPECT_EQ(first[299], 0);
    EXPECT_EQ(last[0], 299);
    EXPECT_EQ(first[300], 300);
    EXPECT_EQ(last[300], 300);
    f.meta->check_integrity();
}

TEST(GpuStep, BadStepsAreRefusedWithAReason) {
    ONECARD_REQUIRE_GPU();
    StepFixture f;
    const std::vector<int32_t> one(1, 9), ok = {1}, outside = {kBlocks}, too_long(kRowBlocks + 1, 1);
    auto refused = [&](std::vector<GpuStepSeq> seqs, const std::string& what) {
        try {
            f.meta->build(seqs, LogitRows::Last, f.stream.get());
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
            return;
        }
        ADD_FAILURE() << "accepted a step that should fail with: " << what;
    };
    refused({seq(1, ok, 0, one), seq(1, ok, 0, one)}, "holds two sequences");
    refused({seq(kSlots, ok, 0, one)}, "outside the pool");
    refused({seq(0, outside, 0, one)}, "outside the pool (16 blocks)");
    refused({seq(0, too_long, 0, one)}, "capacity 8");
    refused({seq(0, ok, 128, one)}, "has 1 blocks for 129 tokens");
    f.stream.sync();
    f.meta->check_integrity();  // a refused id never reaches the mirror
    // Fewer rows than the pool has slots cannot address every sequence.
    int32_t* d32 = nullptr;
    int64_t* d64 = nullptr;
    GpuStepMeta::carve(kTokens, kSlots - 1, kRowBlocks, *f.arena, &d32, &d64);
    EXPECT_THROW(GpuStepMeta(kTokens, kSlots - 1, kRowBlocks, *f.pool, d32, d64), Error);
}

// The write offsets of a CSA and an HCA layer, and the attention key list of the HCA layer, for two
// sequences whose slots were used before by other tables (stale rows past the tables' ends).
TEST(GpuStep, OffsetsFollowEachSlotsRow) {
    ONECARD_REQUIRE_GPU();
    StepFixture f;
    {  // earlier occupants fill both rows with other ids
        const std::vector<int32_t> a = {15, 14, 13, 12}, b = {8, 9, 10, 7};
        const std::vector<int32_t> ta0(4 * kBlock - 4, 1), tb0(4, 1);
        const GpuStepSeq q[2] = {seq(1, a, 0, ta0), seq(3, b, 0, tb0)};
        f.step(q);
    }
    const std::vector<int32_t> ta = {2, 0}, tb = {6};
    const std::vector<int32_t> toks_a(200, 3), toks_b(1, 4);
    const GpuStepSeq q[2] = {seq(3, ta, 0, toks_a), seq(1, tb, 40, toks_b)};
    f.step(q);
    const int64_t n = 201;
    const KvLayerTable& layers = f.pool->layers();
    auto* d = f.arena->alloc_n<int64_t>(4 * n, "offsets");
    for (int64_t il : {2, 3}) {
        ASSERT_GT(layers.layer(il).ratio, 0);
        build_write_offsets(*f.meta, *f.pool, il, f.spec.shape.sliding_window, d, d + n, d + 2 * n, d + 3 * n,
                            f.stream.get());
        f.stream.sync();
        const auto got = cuda::copy_to_host(d, static_cast<size_t>(4 * n));
        const KvStreamGeometry g = layers.entry_geometry(il, KvStreamKind::CompressedEntry);
        for (int64_t i = 0; i < n; ++i) {
            const bool is_a = i < 200;
            const int64_t p = is_a ? i : 40;
            const auto& table = is_a ? ta : tb;
            const int64_t e = (p + 1) / g.ratio - 1;
            const int64_t want =
                (p + 1) % g.ratio == 0 ? kv_entry_offset(g, table[static_cast<size_t>(kv_entry_block(g, e))], e) : -1;
            ASSERT_EQ(got[static_cast<size_t>(2 * n + i)], want) << "layer " << il << " token " << i;
            if (layers.layer(il).index_keys >= 0) {
                const KvStreamGeometry k = layers.entry_geometry(il, KvStreamKind::IndexerKey);
                const int64_t want_key =
                    want < 0 ? -1 : kv_entry_offset(k, table[static_cast<size_t>(kv_entry_block(k, e))], e);
                ASSERT_EQ(got[static_cast<size_t>(3 * n + i)], want_key) << "layer " << il << " token " << i;
            }
        }
    }
    // HCA (layer 3, ratio 128): token 199 of sequence a sees entry 0 of its own block 2 after the window.
    const int64_t W = f.spec.shape.sliding_window, max_keys = W + 2;
    auto* kv = f.arena->alloc_n<int64_t>(n * max_keys, "key lists");
    build_attention_offsets(*f.meta, *f.pool, 3, W, nullptr, 0, max_keys, kv, f.stream.get());
    f.stream.sync();
    const auto keys = cuda::copy_to_host(kv, static_cast<size_t>(n * max_keys));
    const KvStreamGeometry g = layers.entry_geometry(3, KvStreamKind::CompressedEntry);
    EXPECT_EQ(keys[static_cast<size_t>(199 * max_keys + W)], kv_entry_offset(g, 2, 0));
    EXPECT_EQ(keys[static_cast<size_t>(199 * max_keys + W + 1)], -1);
    EXPECT_EQ(keys[static_cast<size_t>(200 * max_keys + W)], -1);  // b at position 40: no entry yet
    EXPECT_EQ(keys[static_cast<size_t>(126 * max_keys + W)], -1);  // a at 126: none closed yet
}

}  // namespace
}  // namespace onecard

#else

TEST(GpuStep, NeedsCuda) {
    GTEST_SKIP() << "built without CUDA (no nvcc at configure time): the GPU step metadata is not compiled";
}

#endif
