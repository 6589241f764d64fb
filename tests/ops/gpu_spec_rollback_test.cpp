// Rollback without replay on the GPU (issue 17): a verify step writes the window rows and compressor
// rows of every position it feeds, and the positions it then drops must leave no trace. GpuModel
// writes them into per-sequence rings (window ring, compressor rings: position p at row p % rows);
// KvModelShape::ring_spare gives every ring spare rows so that a dropped position's write never
// lands on a row a kept position still reads, and the next step simply rewrites the dropped
// positions. Compressed entries and indexer keys of windows a dropped position closed are invisible
// by position until the real token closes the window again and rewrites them.
//
// The check is bitwise and needs no oracle: two sequences run the same steps of 4 tokens (the next
// token and 3 drafts) at the same positions, each keeping a of them (a pattern that accepts 0 to 3
// drafts), and differ only in the rejected drafts they fed (different random tokens). Every kept row
// of one must equal the other's bit for bit (the step shapes are the same, so the kernels and their
// summation orders are too). The steps run from position 120 to past 390, so dropped positions cross
// window-ring wraps, CSA windows of 4 and the HCA window boundaries at 256 and 384. Without the spare
// rows the same run must differ (the test's power: a dropped draft at p + 2 overwrites the ring row
// of p + 2 - 128, which the kept token at p + 1 still attends to).
#include "gpu_test_util.h"

#ifdef ONECARD_HAVE_CUDA

#include "backend/cuda/stream.h"
#include "engine/memory_plan.h"
#include "kvcache/kv_spec.h"
#include "loader/checkpoint.h"
#include "model/synth.h"
#include "model/weights.h"
#include "model_cuda/gpu_model.h"
#include "support/test_support.h"

#include <cstring>

namespace onecard {
namespace {

constexpr int64_t kPrefill = 120, kEnd = 400, kStep = 4;

struct Fixture {
    ModelConfig cfg;
    std::vector<int32_t> tokens;  // [kEnd + kStep] the real sequence
    std::unique_ptr<cuda::DeviceArena> arena;
    GpuModelWeights w;
};

Fixture& fixture() {
    static Fixture* f = [] {
        auto* fx = new Fixture;
        test::TempDir dir("gpu_spec_rollback");
        fx->cfg = test::write_flash_dims_checkpoint(dir.path(), 515151, 16, 32);
        const Checkpoint ckpt = Checkpoint::open(dir.path());
        const ModelWeights w = bind_weights(fx->cfg, ckpt);
        fx->tokens = test::random_tokens(kEnd + kStep, 9, fx->cfg.vocab_size);
        fx->arena = std::make_unique<cuda::DeviceArena>(size_t{16} << 30, "gpu spec rollback test");
        fx->w = upload_weights(fx->cfg, w, *fx->arena);
        return fx;
    }();
    return *f;
}

// A model over a pool of 2 slots whose rings have `spare` spare rows.
struct Model {
    KvCacheSpec spec;
    std::unique_ptr<GpuKvPool> pool;
    std::unique_ptr<GpuModel> model;
};

Model make_model(int64_t spare) {
    Fixture& f = fixture();
    Model m;
    KvModelShape shape = kv_model_shape_from_config(f.cfg);
    shape.ring_spare = spare;
    m.spec = make_kv_cache_spec(shape, 256);
    GpuModelOptions mo;
    mo.max_num_batched_tokens = 256;
    mo.max_num_seqs = 2;
    mo.max_model_len = 1024;
    mo.logits_rows_per_seq = kStep;
    m.pool = std::make_unique<GpuKvPool>(m.spec, KvPoolSize{2, 4}, mo.max_num_batched_tokens, *f.arena);
    m.model = std::make_unique<GpuModel>(f.cfg, f.w, *m.pool, mo, *f.arena);
    return m;
}

// Runs the real prefill, then steps of [real tokens..., rejected drafts...] in `slot`, keeping
// accepted[i % size] + 1 tokens of step i; returns the kept rows' logits.
std::vector<float> run(Model& m, int32_t slot, uint32_t draft_seed) {
    Fixture& f = fixture();
    const int64_t V = f.cfg.vocab_size;
    const std::vector<int32_t> bt = {slot * 2, slot * 2 + 1};
    const std::vector<int32_t> drafts = test::random_tokens(kEnd + kStep, draft_seed, V);
    cuda::Stream s;
    GpuStepSeq q;
    q.slot = slot;
    q.block_table = bt;
    q.start_pos = 0;
    q.tokens = std::span<const int32_t>(f.tokens).first(kPrefill);
    q.want_logits = true;
    m.model->step(std::span<const GpuStepSeq>(&q, 1), LogitRows::Last, s.get());
    s.sync();
    static const int64_t accepted[] = {0, 2, 0, 1, 3, 0, 0, 1};
    std::vector<float> kept;
    std::vector<int32_t> feed(kStep);
    for (int64_t pos = kPrefill, i = 0; pos < kEnd; ++i) {
        const int64_t keep = accepted[i % 8] + 1;
        for (int64_t j = 0; j < kStep; ++j) feed[j] = j < keep ? f.tokens[pos + j] : drafts[pos + j];
        q.start_pos = pos;
        q.tokens = feed;
        const float* d = m.model->step(std::span<const GpuStepSeq>(&q, 1), LogitRows::All, s.get());
        std::vector<float> rows(static_cast<size_t>(kStep * V));
        s.sync();
        cuda::copy_to_host(rows.data(), d, rows.size() * 4);
        kept.insert(kept.end(), rows.begin(), rows.begin() + keep * V);
        pos += keep;
    }
    return kept;
}

// Rows of `a` and `b` ([n, vocab]) that differ in any bit.
int64_t differing_rows(const std::vector<float>& a, const std::vector<float>& b, int64_t V) {
    int64_t n = 0;
    for (size_t r = 0; r * V < a.size(); ++r)
        n += std::memcmp(a.data() + r * V, b.data() + r * V, static_cast<size_t>(V) * 4) != 0;
    return n;
}

TEST(GpuSpecRollback, RejectedDraftsLeaveNoTraceWithSpareRingRows) {
    ONECARD_REQUIRE_GPU();
    Model m = make_model(kStep - 1);
    const std::vector<float> a = run(m, 0, 101), b = run(m, 1, 202);
    ASSERT_EQ(a.size(), b.size());
    const int64_t V = fixture().cfg.vocab_size;
    EXPECT_EQ(differing_rows(a, b, V), 0) << "of " << a.size() / V << " kept rows";
    // Slot 0 again after slot 1 ran: the same bits (nothing of a slot's earlier run leaks either).
    EXPECT_EQ(differing_rows(run(m, 0, 303), a, V), 0);
}

TEST(GpuSpecRollback, WithoutSpareRowsRejectedDraftsCorruptTheSequence) {
    ONECARD_REQUIRE_GPU();
    Model m = make_model(0);
    const std::vector<float> a = run(m, 0, 101), b = run(m, 1, 202);
    const int64_t V = fixture().cfg.vocab_size;
    const int64_t diff = differing_rows(a, b, V);
    std::printf("[gpu spec rollback] without spare rows: %lld of %lld kept rows differ\n", static_cast<long long>(diff),
                static_cast<long long>(a.size() / V));
    EXPECT_GT(diff, 0);
}

}  // namespace
}  // namespace onecard

#else
TEST(GpuSpecRollback, NeedsCuda) {
    GTEST_SKIP() << "built without CUDA (ONECARD_CUDA=OFF)";
}
#endif
