// The 0731 DSpark drafter on the GPU (issue 17; GpuModel::dspark_push / dspark_block / dspark_markov,
// CudaModelRunner's "dspark" method) on the tame Flash-dimension checkpoint with the drafter (three
// stages tapping layers 1-3, block 5, Markov rank 256; gpu_test_util.h).
//
// Parity: the CPU reference (DeepSeekV4 in reference numerics with the GPU's bf16 storage points,
// draft_with_dspark greedy) and the GPU read the same prompt in the same chunks, each pushing every
// chunk's context rows into the stage rings; at every chunk boundary both draft a whole block, the GPU
// teacher-forced with the CPU's drafts as the Markov head's previous tokens, and each slot's logits
// (base + Markov bias) and confidence logit are compared. The boundaries put the block's context at 1 row, below, at
// and past the window (the ring wraps), so the block's key lists cover every case. A second sequence drafts in the same
// block pass (two sequences' key lists in one step). Bars (issue 23's, on the tame model): median per-row relative L2
// <= 2e-2, argmax agreement >= 99% less two binomial standard deviations.
//
// Through the engine: greedy output with DSpark drafts equals the plain GPU engine's token for token
// up to a near-tie of the target (test::expect_greedy_equal_up_to_ties; three concurrent requests:
// prefill chunks, decode and verify rows share steps), sampled rows with top_k 1 likewise (the host
// decides them), the confidence head's early stop shortens drafts without changing the output, and the
// runner refuses more drafts than the block holds.
#include "gpu_spec_engine.h"

#ifdef ONECARD_HAVE_CUDA

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/stream.h"
#include "core/error.h"
#include "engine/memory_plan.h"
#include "engine/spec_decoder.h"
#include "engine_cuda/cuda_model_runner.h"
#include "kvcache/kv_spec.h"
#include "loader/checkpoint.h"
#include "model/deepseek_v4.h"
#include "model/weights.h"
#include "model_cuda/gpu_model.h"
#include "onecard/engine.h"
#include "support/test_support.h"

#include <algorithm>

namespace onecard {
namespace {

struct Model {
    test::TempDir dir{"gpu_dspark"};
    ModelConfig cfg;
    std::unique_ptr<Checkpoint> ckpt;
    ModelWeights w;
};

Model& model() {
    static Model* m = [] {
        auto* x = new Model;
        x->cfg = test::write_flash_dims_checkpoint(x->dir.path(), 7373, 8, 16, /*tame=*/true, /*mtp=*/0,
                                                   /*dspark=*/true);
        x->ckpt = std::make_unique<Checkpoint>(Checkpoint::open(x->dir.path()));
        x->w = bind_weights(x->cfg, *x->ckpt);
        return x;
    }();
    return *m;
}

// ---- parity ----------------------------------------------------------------------------------------

// Chunks of the first prompt; a block is drafted after each (context 1, 40, 128, 129, 130, 131, 172,
// 192, 212, 223 tokens). The second prompt is read in one step of 150 tokens.
const std::vector<int64_t> kChunks = {1, 39, 88, 1, 1, 1, 41, 20, 20, 11};
constexpr int64_t kSecond = 150;

struct Draw {
    std::vector<int32_t> tokens;    // [B] the CPU's greedy drafts
    std::vector<float> logits;      // [B, vocab] their slots' logits (base + Markov bias)
    std::vector<float> confidence;  // [B] the confidence head's logits
};

struct Reference {
    std::vector<int32_t> prompt, second;  // [224], [151]: each one token past what is read
    std::vector<Draw> draws;              // one per chunk boundary of the first prompt
    Draw second_draw;                     // the second prompt's, after its 150 tokens
};

Draw cpu_draw(const DeepSeekV4& cpu, const SequenceState& st, int32_t next) {
    SamplingParams greedy;
    greedy.temperature = 0.0f;
    const int64_t B = cpu.config().dspark->block_size;
    const Draft d = draft_with_dspark(cpu, st, next, greedy, 1, 0, B);
    return {d.tokens, d.mtp_logits, d.confidence};
}

const Reference& reference() {
    static Reference* r = [] {
        auto* x = new Reference;
        const Model& m = model();
        int64_t total = 0;
        for (int64_t c : kChunks) total += c;
        x->prompt = test::random_tokens(total + 1, 31, m.cfg.vocab_size);
        x->second = test::random_tokens(kSecond + 1, 32, m.cfg.vocab_size);
        DeepSeekV4 cpu(m.cfg, m.w, Numerics::Reference);
        cpu.set_bf16_storage(true);
        SequenceState st = cpu.new_sequence();
        int64_t pos = 0;
        for (int64_t c : kChunks) {
            const ForwardOutput out = cpu.forward_with_streams(
                st, std::span<const int32_t>(x->prompt).subspan(static_cast<size_t>(pos), static_cast<size_t>(c)));
            cpu.dspark_push_context(st, out.taps);
            pos += c;
            x->draws.push_back(cpu_draw(cpu, st, x->prompt[static_cast<size_t>(pos)]));
        }
        SequenceState st2 = cpu.new_sequence();
        const ForwardOutput out =
            cpu.forward_with_streams(st2, std::span<const int32_t>(x->second).first(static_cast<size_t>(kSecond)));
        cpu.dspark_push_context(st2, out.taps);
        x->second_draw = cpu_draw(cpu, st2, x->second[static_cast<size_t>(kSecond)]);
        return x;
    }();
    return *r;
}

struct Gpu {
    std::unique_ptr<cuda::DeviceArena> arena;
    GpuModelWeights w;
    KvCacheSpec spec;
    std::unique_ptr<GpuKvPool> pool;
    std::unique_ptr<GpuModel> model;
};

Gpu make_gpu() {
    const Model& m = model();
    Gpu g;
    g.arena = std::make_unique<cuda::DeviceArena>(size_t{16} << 30, "gpu dspark test");
    g.w = upload_weights(m.cfg, m.w, *g.arena);
    g.w.dspark = upload_dspark_weights(m.cfg, m.w, *g.arena);
    KvModelShape shape = kv_model_shape_from_config(m.cfg);
    shape.ring_spare = m.cfg.dspark->block_size;  // what serving sets for k <= B drafts
    g.spec = make_kv_cache_spec(shape, 256);
    GpuModelOptions mo;
    mo.max_num_batched_tokens = 256;
    mo.max_num_seqs = 2;
    mo.max_model_len = 512;
    mo.dspark = true;
    mo.logits_rows_per_seq = m.cfg.dspark->block_size;
    g.pool = std::make_unique<GpuKvPool>(g.spec, KvPoolSize{2, 4}, mo.max_num_batched_tokens, *g.arena);
    g.model = std::make_unique<GpuModel>(m.cfg, g.w, *g.pool, mo, *g.arena);
    return g;
}

// A step of `tokens` at `pos` in `slot` (block table {2·slot, 2·slot + 1}), then its push.
void feed(Gpu& g, int32_t slot, int64_t pos, std::span<const int32_t> tokens, cudaStream_t s) {
    const std::vector<int32_t> bt = {slot * 2, slot * 2 + 1};
    GpuStepSeq q;
    q.slot = slot;
    q.block_table = bt;
    q.start_pos = pos;
    q.tokens = tokens;
    q.want_logits = true;
    g.model->step(std::span<const GpuStepSeq>(&q, 1), LogitRows::Last, s);
    g.model->dspark_push(s);
}

struct Block {
    int32_t slot = 0;
    int64_t n = 0;  // the block's first position
    int32_t next = 0;
    const Draw* cpu = nullptr;  // teacher forcing: its drafts are the Markov head's previous tokens
};

// What a block pass gives: each slot's logits [blocks, B, vocab], argmax [blocks, B] and confidence
// logit [blocks, B].
struct GpuDraw {
    std::vector<float> logits;
    std::vector<int32_t> ids;
    std::vector<float> confidence;
};

// One block pass over `blocks`, the Markov head teacher-forced with the CPU's drafts.
GpuDraw gpu_blocks(Gpu& g, const std::vector<Block>& blocks, cudaStream_t s) {
    const ModelConfig& c = model().cfg;
    const int64_t B = c.dspark->block_size, V = c.vocab_size;
    const auto nb = static_cast<int64_t>(blocks.size());
    std::vector<int32_t> ids(static_cast<size_t>(nb * B), static_cast<int32_t>(c.dspark->noise_token_id));
    std::vector<std::vector<int32_t>> tables;
    std::vector<GpuStepSeq> seqs;
    for (int64_t b = 0; b < nb; ++b) {
        const Block& k = blocks[static_cast<size_t>(b)];
        ids[static_cast<size_t>(b * B)] = k.next;
        tables.push_back({k.slot * 2, k.slot * 2 + 1});
    }
    for (int64_t b = 0; b < nb; ++b) {
        const Block& k = blocks[static_cast<size_t>(b)];
        GpuStepSeq q;
        q.slot = k.slot;
        q.block_table = tables[static_cast<size_t>(b)];
        q.start_pos = k.n;
        q.tokens = std::span<const int32_t>(ids).subspan(static_cast<size_t>(b * B), static_cast<size_t>(B));
        q.want_logits = true;
        q.logits_rows = B;
        seqs.push_back(q);
    }
    const float* d_logits = g.model->dspark_block(seqs, s);
    std::vector<float> logits(static_cast<size_t>(nb * B * V));
    std::vector<int32_t> picks(static_cast<size_t>(nb * B)), all(static_cast<size_t>(nb * B));
    std::vector<float> conf(static_cast<size_t>(nb * B)), slot_conf(static_cast<size_t>(nb));
    std::vector<int32_t> prev(static_cast<size_t>(nb));
    for (int64_t j = 0; j < B; ++j) {
        for (int64_t b = 0; b < nb; ++b) {
            const Block& k = blocks[static_cast<size_t>(b)];
            prev[static_cast<size_t>(b)] = j == 0 ? k.next : k.cpu->tokens[static_cast<size_t>(j - 1)];
        }
        const GpuModel::DSparkSlot slot = g.model->dspark_markov(j, prev, s);
        CUDA_CHECK(cudaStreamSynchronize(s));
        cuda::copy_to_host(all.data(), slot.ids, all.size() * 4);
        cuda::copy_to_host(slot_conf.data(), slot.confidence, slot_conf.size() * 4);
        for (int64_t b = 0; b < nb; ++b) {
            const int64_t row = b * B + j;
            picks[static_cast<size_t>(row)] = all[static_cast<size_t>(row)];
            conf[static_cast<size_t>(row)] = slot_conf[static_cast<size_t>(b)];
            cuda::copy_to_host(logits.data() + row * V, d_logits + row * V, static_cast<size_t>(V) * 4);
        }
    }
    return {logits, picks, conf};
}

struct Tally {
    std::vector<double> errs;
    std::vector<float> gpu_conf, cpu_conf;
    int64_t same = 0, rows = 0;
    void add(const GpuDraw& gpu, int64_t block, const Draw& cpu) {
        const int64_t B = model().cfg.dspark->block_size, V = model().cfg.vocab_size;
        for (int64_t j = 0; j < B; ++j) {
            const int64_t row = block * B + j;
            const std::vector<float> gv(gpu.logits.begin() + row * V, gpu.logits.begin() + (row + 1) * V);
            const std::vector<float> cv(cpu.logits.begin() + j * V, cpu.logits.begin() + (j + 1) * V);
            errs.push_back(test::rel_l2(gv, cv));
            same += gpu.ids[static_cast<size_t>(row)] == cpu.tokens[static_cast<size_t>(j)];
            gpu_conf.push_back(gpu.confidence[static_cast<size_t>(row)]);
            cpu_conf.push_back(cpu.confidence[static_cast<size_t>(j)]);
            ++rows;
        }
    }
    // The logits' bars, and the confidence logits over all slots at the same relative L2 bar.
    void check(const char* path) {
        std::sort(errs.begin(), errs.end());
        const double median = errs[errs.size() / 2], n = static_cast<double>(rows);
        const double conf = test::rel_l2(gpu_conf, cpu_conf);
        std::printf(
            "[gpu dspark] %-34s rows %lld: rel L2 median %.2e worst %.2e  argmax %lld/%lld; confidence "
            "logits rel L2 %.2e\n",
            path, static_cast<long long>(rows), median, errs.back(), static_cast<long long>(same),
            static_cast<long long>(rows), conf);
        EXPECT_LE(median, 2e-2) << path;
        EXPECT_GE(static_cast<double>(same), 0.99 * n - 2.0 * std::sqrt(n * 0.99 * 0.01)) << path;
        EXPECT_LE(conf, 2e-2) << path;
    }
};

TEST(GpuDSpark, BlocksAfterEveryChunkMatchCpuReference) {
    ONECARD_REQUIRE_GPU();
    const Reference& ref = reference();
    Gpu g = make_gpu();
    cuda::Stream s;
    Tally t;
    int64_t pos = 0;
    for (size_t i = 0; i < kChunks.size(); ++i) {
        feed(g, 0, pos, std::span<const int32_t>(ref.prompt).subspan(static_cast<size_t>(pos), kChunks[i]), s.get());
        pos += kChunks[i];
        const GpuDraw d = gpu_blocks(g, {Block{0, pos, ref.prompt[static_cast<size_t>(pos)], &ref.draws[i]}}, s.get());
        t.add(d, 0, ref.draws[i]);
    }
    t.check("after every chunk (1..223 tokens)");
    g.model->check_integrity();
}

TEST(GpuDSpark, TwoSequencesInOneBlockPassMatchCpuReference) {
    ONECARD_REQUIRE_GPU();
    const Reference& ref = reference();
    Gpu g = make_gpu();
    cuda::Stream s;
    const auto n0 = static_cast<int64_t>(ref.prompt.size()) - 1;
    feed(g, 0, 0, std::span<const int32_t>(ref.prompt).first(static_cast<size_t>(n0)), s.get());
    feed(g, 1, 0, std::span<const int32_t>(ref.second).first(static_cast<size_t>(kSecond)), s.get());
    const GpuDraw d = gpu_blocks(g,
                                 {Block{0, n0, ref.prompt[static_cast<size_t>(n0)], &ref.draws.back()},
                                  Block{1, kSecond, ref.second[static_cast<size_t>(kSecond)], &ref.second_draw}},
                                 s.get());
    Tally t;
    t.add(d, 0, ref.draws.back());
    t.add(d, 1, ref.second_draw);
    t.check("two sequences, one block pass");
}

TEST(GpuDSpark, CallsOutOfOrderAreRefused) {
    ONECARD_REQUIRE_GPU();
    Gpu g = make_gpu();
    cuda::Stream s;
    EXPECT_THROW(g.model->dspark_push(s.get()), Error);  // no step yet
    const std::vector<int32_t> prev = {1};
    EXPECT_THROW(g.model->dspark_markov(0, prev, s.get()), Error);  // no block pass yet
}

// ---- through the engine ----------------------------------------------------------------------------

constexpr int64_t kDrafts = 3, kNew = test::SpecEngineHarness::kNew;

// Prompt tokens stop below the noise token (the vocabulary's last id here).
const test::SpecEngineHarness& harness() {
    static const test::SpecEngineHarness h(model().cfg, model().w, "dspark",
                                           static_cast<int32_t>(model().cfg.vocab_size) - 2, 29);
    return h;
}

TEST(GpuDSpark, GreedyOutputThroughTheEngineIsThePlainOutput) {
    ONECARD_REQUIRE_GPU();
    const test::SpecEngineHarness& h = harness();
    const test::SpecEngineOutcome plain = h.run(0, 0.0f), spec = h.run(kDrafts, 0.0f);
    h.expect_plain_output(plain, spec);
    std::printf("[gpu dspark] engine greedy: drafts %lld, draft tokens %lld, accepted %lld\n",
                static_cast<long long>(spec.stats.spec_num_drafts),
                static_cast<long long>(spec.stats.spec_num_draft_tokens),
                static_cast<long long>(spec.stats.spec_num_accepted_tokens));
    EXPECT_GT(spec.stats.spec_num_drafts, 0);
    EXPECT_LE(spec.stats.spec_num_accepted_tokens, spec.stats.spec_num_draft_tokens);
}

// The confidence head's early stop (confidence_threshold, DeepSpec's rule as the CPU drafter applies
// it): drafts end before the first slot the head doubts, so rows draft fewer than k tokens; the output
// is still the plain output.
TEST(GpuDSpark, ConfidenceThresholdShortensDraftsAndKeepsTheOutput) {
    ONECARD_REQUIRE_GPU();
    const test::SpecEngineHarness& h = harness();
    const test::SpecEngineOutcome plain = h.run(0, 0.0f), spec = h.run(kDrafts, 0.0f, 0, 0.5);
    h.expect_plain_output(plain, spec);
    std::printf("[gpu dspark] threshold 0.5: drafts %lld, draft tokens %lld, accepted %lld\n",
                static_cast<long long>(spec.stats.spec_num_drafts),
                static_cast<long long>(spec.stats.spec_num_draft_tokens),
                static_cast<long long>(spec.stats.spec_num_accepted_tokens));
    EXPECT_GT(spec.stats.spec_num_drafts, 0);
    EXPECT_LT(spec.stats.spec_num_draft_tokens, kDrafts * spec.stats.spec_num_drafts);
}

TEST(GpuDSpark, SampledRowsThroughTheEngineDraftAndAreDecidedOnTheHost) {
    ONECARD_REQUIRE_GPU();
    const test::SpecEngineHarness& h = harness();
    const test::SpecEngineOutcome plain = h.run(0, 0.8f, 1), spec = h.run(kDrafts, 0.8f, 1);
    h.expect_plain_output(plain, spec);
    EXPECT_GT(spec.stats.spec_num_drafts, 0);
    const test::SpecEngineOutcome wide = h.run(kDrafts, 0.8f);
    for (const auto& o : wide.outputs) EXPECT_EQ(o.size(), static_cast<size_t>(kNew));
    EXPECT_GT(wide.stats.spec_num_drafts, 0);
    EXPECT_LE(wide.stats.spec_num_accepted_tokens, wide.stats.spec_num_draft_tokens);
}

TEST(GpuDSpark, MoreDraftsThanTheBlockAndTheWrongMethodAreRefused) {
    ONECARD_REQUIRE_GPU();
    Model& m = model();
    const int64_t B = m.cfg.dspark->block_size;
    const test::SpecEngineHarness& h = harness();
    auto runner = std::make_unique<CudaModelRunner>(m.cfg, m.w, h.runner_options(B + 1));
    EXPECT_TRUE(runner->supports_speculation("dspark"));
    EXPECT_FALSE(runner->supports_speculation("mtp"));
    EXPECT_THROW(Engine(h.engine_config(B + 1), std::move(runner)), Error);
    CudaRunnerOptions both = h.runner_options(kDrafts);
    both.mtp_drafter = true;
    EXPECT_THROW(CudaModelRunner(m.cfg, m.w, both), Error);  // a 0731 model has no mtp.0 block
}

}  // namespace
}  // namespace onecard

#else
TEST(GpuDSpark, NeedsCuda) {
    GTEST_SKIP() << "built without CUDA (ONECARD_CUDA=OFF)";
}
#endif
