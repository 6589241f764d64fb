// Hybrid experts on the GPU: a model whose placement keeps half of every layer's routed experts in
// host RAM (HostExpertStore, computed by the host expert pool through the mapped-memory mailbox on
// decode-sized steps, staged over PCIe and dequantised on the GPU on many-token steps) against the
// same checkpoint with every expert in HBM.
//  * many-token steps: a staged host expert dequantises to exactly the bf16 values the tiled GPU
//    copy gives and runs the same GEMMs, so the logits must be bit-identical;
//  * decode steps (CUDA graphs): the host computes its pairs with the GPU path's rounding points but
//    its own fp32 summation order, so the logits agree to the parity tolerance of a few layers, and
//    the greedy tokens agree;
//  * the device counts every pick, and the host serves exactly the host picks;
//  * decode steps of >= 2 tokens with host experts staged over PCIe (HostExpertStreamer): with every
//    host expert staged the GPU computes all pairs with its own kernels, so the logits are
//    bit-identical to the all-GPU model; with half staged they agree to parity and the host serves
//    exactly the picks of the experts not staged;
//  * the embedding table in pinned host RAM (HostEmbedding, read over PCIe by the embedding kernel;
//    the hybrid sides have it there, as serve's plan puts it) gives bit-identical logits.
#include "gpu_test_util.h"

#ifdef ONECARD_HAVE_CUDA

#include "backend/cuda/stream.h"
#include "engine/memory_plan.h"
#include "kvcache/kv_spec.h"
#include "loader/checkpoint.h"
#include "model/expert_placement.h"
#include "model/synth.h"
#include "model/weights.h"
#include "model_cuda/gpu_model.h"
#include "model_cuda/host_embedding.h"
#include "model_cuda/host_expert_store.h"
#include "support/test_support.h"

#include <algorithm>
#include <cstring>

namespace onecard {
namespace {

constexpr int64_t kPrompt = 160;

struct Side {
    std::unique_ptr<cuda::DeviceArena> arena;
    std::unique_ptr<HostExpertStore> store;
    std::unique_ptr<HostEmbedding> embed;  // the embedding table in host RAM, or null
    GpuModelWeights w;
    size_t weight_bytes = 0;  // arena bytes upload_weights took
    std::unique_ptr<GpuKvPool> pool;
    std::unique_ptr<GpuModel> model;
};

struct Fixture {
    ModelConfig cfg;
    std::unique_ptr<test::TempDir> dir;
    std::unique_ptr<Checkpoint> ckpt;
    std::unique_ptr<ModelWeights> weights;
    ExpertPlacement placement;
    std::vector<int32_t> tokens;
    Side all_gpu, hybrid;
    Side staged_half, staged_all;  // hybrid placement, half resp. all of each layer's host experts staged
    Side embed_only;               // every expert on the GPU, the embedding table in host RAM
    int64_t host_per_layer() const { return cfg.n_routed_experts / 2; }
};

void make_side(Fixture& f, Side& side, const ExpertPlacement* placement, int64_t stream = 0, bool host_embed = false) {
    side.arena = std::make_unique<cuda::DeviceArena>(size_t{10} << 30, "hybrid test");
    if (host_embed) {
        side.embed = std::make_unique<HostEmbedding>(f.cfg.vocab_size, f.cfg.hidden_size);
        side.embed->fill_from(f.weights->embed);
        side.embed->check_integrity();
    }
    const size_t before = side.arena->used();
    side.w = upload_weights(f.cfg, *f.weights, *side.arena, placement, side.embed ? side.embed->device() : nullptr);
    side.weight_bytes = side.arena->used() - before;
    if (side.embed) {
        EXPECT_EQ(side.w.embed, side.embed->device());
    }
    if (placement) {
        side.store = std::make_unique<HostExpertStore>(f.cfg, *placement);
        side.store->fill_from(*f.weights);
        side.store->check_integrity();
        attach_host_experts(side.w, *side.store, *side.arena, stream);
    }
    const KvCacheSpec spec = make_kv_cache_spec(kv_model_shape_from_config(f.cfg), 256);
    KvPoolSize size;
    size.n_slots = 4;
    size.n_blocks = 8;
    GpuModelOptions mo;
    mo.max_num_batched_tokens = 256;
    mo.max_num_seqs = 4;
    mo.max_model_len = 1024;
    mo.count_expert_picks = true;
    mo.host_experts.n_threads = 4;
    mo.host_experts.stream_experts = stream;
    mo.host_experts.stream_min_tokens = 2;
    side.pool = std::make_unique<GpuKvPool>(spec, size, mo.max_num_batched_tokens, *side.arena);
    side.model = std::make_unique<GpuModel>(f.cfg, side.w, *side.pool, mo, *side.arena);
}

Fixture& fixture() {
    static Fixture* f = [] {
        auto* fx = new Fixture;
        fx->dir = std::make_unique<test::TempDir>("hybrid_experts");
        fx->cfg = test::write_flash_dims_checkpoint(fx->dir->path(), 31337, 16, 32);
        fx->ckpt = std::make_unique<Checkpoint>(Checkpoint::open(fx->dir->path()));
        fx->weights = std::make_unique<ModelWeights>(bind_weights(fx->cfg, *fx->ckpt));
        // Half of every layer's experts in host RAM, a different half per layer (odd ids on even
        // layers, even ids on odd layers), so slots and ids differ.
        fx->placement = ExpertPlacement::all_on_gpu(fx->cfg.num_hidden_layers, fx->cfg.n_routed_experts);
        for (int64_t l = 0; l < fx->cfg.num_hidden_layers; ++l)
            for (int64_t e = 0; e < fx->cfg.n_routed_experts; ++e)
                fx->placement.on_gpu[static_cast<size_t>(l)][static_cast<size_t>(e)] = (e + l) % 2 == 0;
        std::mt19937 rng(11);
        std::uniform_int_distribution<int32_t> tok(2, static_cast<int32_t>(fx->cfg.vocab_size) - 1);
        for (int64_t i = 0; i < kPrompt + 32; ++i) fx->tokens.push_back(tok(rng));
        make_side(*fx, fx->all_gpu, nullptr);
        make_side(*fx, fx->hybrid, &fx->placement, 0, true);
        make_side(*fx, fx->staged_half, &fx->placement, fx->host_per_layer() / 2, true);
        make_side(*fx, fx->staged_all, &fx->placement, fx->host_per_layer(), true);
        make_side(*fx, fx->embed_only, nullptr, 0, true);
        return fx;
    }();
    return *f;
}

// Two KV blocks per slot; the tables live as long as the fixture (GpuStepSeq holds a view).
const std::vector<int32_t>& blocks_for(int32_t slot) {
    static const std::vector<std::vector<int32_t>> tables = {{0, 1}, {2, 3}, {4, 5}, {6, 7}};
    return tables.at(static_cast<size_t>(slot));
}

// One step for sequence `slot` over tokens [pos, pos + n); returns the step's logits rows (all rows).
std::vector<float> step(Side& side, int32_t slot, int64_t pos, int64_t n, cuda::Stream& s) {
    Fixture& f = fixture();
    GpuStepSeq q;
    q.slot = slot;
    q.block_table = blocks_for(slot);
    q.start_pos = pos;
    q.tokens = std::span<const int32_t>(f.tokens).subspan(static_cast<size_t>(pos), static_cast<size_t>(n));
    q.want_logits = true;
    const float* d = side.model->step(std::span<const GpuStepSeq>(&q, 1), LogitRows::All, s.get());
    std::vector<float> rows(static_cast<size_t>(n * f.cfg.vocab_size));
    s.sync();
    side.model->check_host_experts();
    cuda::copy_to_host(rows.data(), d, rows.size() * 4);
    return rows;
}

int64_t argmax(const float* v, int64_t n) {
    return std::max_element(v, v + n) - v;
}

TEST(HybridExperts, ManyTokenStepIsBitIdenticalToAllGpu) {
    ONECARD_REQUIRE_GPU();
    Fixture& f = fixture();
    cuda::Stream s;
    const std::vector<float> a = step(f.all_gpu, 0, 0, kPrompt, s);
    const std::vector<float> b = step(f.hybrid, 0, 0, kPrompt, s);
    ASSERT_EQ(a.size(), b.size());
    for (float x : b) ASSERT_TRUE(std::isfinite(x)) << "unwritten or broken logits";
    int64_t differ = 0;
    for (size_t i = 0; i < a.size(); ++i) differ += std::memcmp(&a[i], &b[i], 4) != 0;
    EXPECT_EQ(differ, 0) << "of " << a.size() << " logits (staged host experts must dequantise like the GPU copy)";
    ASSERT_NE(f.hybrid.model->host_experts(), nullptr);
}

TEST(HybridExperts, EmbeddingTableInHostRamIsBitIdentical) {
    ONECARD_REQUIRE_GPU();
    Fixture& f = fixture();
    cuda::Stream s;
    // Slot 0 of both: the prompt in one many-token step, then decode steps through the graphs (the
    // captured embedding kernel reads the host table over PCIe on every replay).
    std::vector<float> a = step(f.all_gpu, 0, 0, kPrompt, s);
    std::vector<float> b = step(f.embed_only, 0, 0, kPrompt, s);
    for (int64_t t = 0; t < 8; ++t) {
        const std::vector<float> at = step(f.all_gpu, 0, kPrompt + t, 1, s);
        const std::vector<float> bt = step(f.embed_only, 0, kPrompt + t, 1, s);
        a.insert(a.end(), at.begin(), at.end());
        b.insert(b.end(), bt.begin(), bt.end());
    }
    ASSERT_EQ(a.size(), b.size());
    int64_t differ = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_TRUE(std::isfinite(b[i])) << "unwritten or broken logits at " << i;
        differ += std::memcmp(&a[i], &b[i], 4) != 0;
    }
    EXPECT_EQ(differ, 0) << "of " << a.size() << " logits (the same bf16 rows, read from host RAM)";
    EXPECT_GT(f.embed_only.model->n_graphs(), 0) << "the decode steps did not run as graphs";
    // The table took no HBM: exactly its bytes (plus at most one alignment gap) fewer than all-GPU.
    const size_t saved = f.all_gpu.weight_bytes - f.embed_only.weight_bytes;
    EXPECT_GE(saved, f.embed_only.embed->bytes());
    EXPECT_LT(saved, f.embed_only.embed->bytes() + 256);
}

TEST(HybridExperts, DecodeStepsMatchAllGpuWithinParity) {
    ONECARD_REQUIRE_GPU();
    Fixture& f = fixture();
    cuda::Stream s;
    const int64_t V = f.cfg.vocab_size;
    // Fresh sequences in slot 1, prefilled identically (bit-identical, previous test), then 24
    // teacher-forced decode steps through the graph path.
    step(f.all_gpu, 1, 0, kPrompt, s);
    step(f.hybrid, 1, 0, kPrompt, s);
    f.hybrid.model->reset_expert_pick_counts(s.get());
    const uint64_t pairs0 = f.hybrid.model->host_experts()->host_pairs();
    std::vector<double> rel;
    int64_t same_argmax = 0;
    const int64_t n_steps = 24;
    for (int64_t t = 0; t < n_steps; ++t) {
        const std::vector<float> a = step(f.all_gpu, 1, kPrompt + t, 1, s);
        const std::vector<float> b = step(f.hybrid, 1, kPrompt + t, 1, s);
        rel.push_back(test::rel_l2(b, a));
        same_argmax += argmax(a.data(), V) == argmax(b.data(), V);
    }
    std::vector<double> sorted = rel;
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted[sorted.size() / 2], worst = sorted.back();
    std::printf("hybrid vs all-GPU decode: median rel L2 %.3e, worst %.3e, argmax %lld/%lld\n", median, worst,
                static_cast<long long>(same_argmax), static_cast<long long>(n_steps));
    // Four layers amplify the host's fp32 summation order far less than the 43-layer floor; a
    // misplaced row or expert gives O(1).
    EXPECT_LE(median, 2e-2);
    EXPECT_LE(worst, 0.2);
    EXPECT_GE(same_argmax, n_steps - 2);
    EXPECT_GT(f.hybrid.model->host_experts()->host_pairs(), pairs0) << "no decode pick reached a host expert";

    // Every decode pick was counted on the device, and the host served exactly the host ones.
    const std::vector<uint64_t> counts = f.hybrid.model->expert_pick_counts(s.get());
    uint64_t total = 0, host = 0;
    for (int64_t l = 0; l < f.cfg.num_hidden_layers; ++l)
        for (int64_t e = 0; e < f.cfg.n_routed_experts; ++e) {
            const uint64_t c = counts[static_cast<size_t>(l * f.cfg.n_routed_experts + e)];
            total += c;
            if (!f.placement.is_on_gpu(l, e)) host += c;
        }
    EXPECT_EQ(total, static_cast<uint64_t>(n_steps * f.cfg.num_hidden_layers * f.cfg.num_experts_per_tok));
    EXPECT_EQ(host, f.hybrid.model->host_experts()->host_pairs() - pairs0);
    f.hybrid.model->check_integrity();
    f.hybrid.model->host_experts()->check_integrity();
}

TEST(HybridExperts, BatchedDecodeMatchesAllGpu) {
    ONECARD_REQUIRE_GPU();
    Fixture& f = fixture();
    cuda::Stream s;
    const int64_t V = f.cfg.vocab_size;
    // Two sequences (slots 2 and 3) prefilled with 64 and 96 tokens, then 8 steps decoding both.
    for (Side* side : {&f.all_gpu, &f.hybrid}) {
        step(*side, 2, 0, 64, s);
        step(*side, 3, 0, 96, s);
    }
    int64_t same = 0, rows = 0;
    std::vector<double> rel;
    for (int64_t t = 0; t < 8; ++t) {
        std::vector<std::vector<float>> out;
        for (Side* side : {&f.all_gpu, &f.hybrid}) {
            GpuStepSeq q[2];
            const int64_t pos[2] = {64 + t, 96 + t};
            for (int i = 0; i < 2; ++i) {
                q[i].slot = 2 + i;
                q[i].block_table = blocks_for(2 + i);
                q[i].start_pos = pos[i];
                q[i].tokens = std::span<const int32_t>(f.tokens).subspan(static_cast<size_t>(pos[i]), 1);
                q[i].want_logits = true;
            }
            const float* d = side->model->step(std::span<const GpuStepSeq>(q, 2), LogitRows::Last, s.get());
            std::vector<float> r(static_cast<size_t>(2 * V));
            s.sync();
            side->model->check_host_experts();
            cuda::copy_to_host(r.data(), d, r.size() * 4);
            out.push_back(std::move(r));
        }
        for (int i = 0; i < 2; ++i, ++rows) {
            const std::vector<float> a(out[0].begin() + i * V, out[0].begin() + (i + 1) * V);
            const std::vector<float> b(out[1].begin() + i * V, out[1].begin() + (i + 1) * V);
            rel.push_back(test::rel_l2(b, a));
            same += argmax(a.data(), V) == argmax(b.data(), V);
        }
    }
    std::sort(rel.begin(), rel.end());
    std::printf("hybrid vs all-GPU batched decode: median rel L2 %.3e, worst %.3e, argmax %lld/%lld\n",
                rel[rel.size() / 2], rel.back(), static_cast<long long>(same), static_cast<long long>(rows));
    EXPECT_LE(rel[rel.size() / 2], 2e-2);
    EXPECT_GE(same, rows - 2);
}

// Two sequences in slots 2 and 3: prefilled with 64 and 96 tokens, then decoded together; rows [2 · V]
// per decode step.
void prefill_two(Side& side, cuda::Stream& s) {
    step(side, 2, 0, 64, s);
    step(side, 3, 0, 96, s);
}

std::vector<std::vector<float>> decode_two(Side& side, int64_t n_steps, cuda::Stream& s) {
    Fixture& f = fixture();
    const int64_t V = f.cfg.vocab_size;
    std::vector<std::vector<float>> out;
    for (int64_t t = 0; t < n_steps; ++t) {
        GpuStepSeq q[2];
        const int64_t pos[2] = {64 + t, 96 + t};
        for (int i = 0; i < 2; ++i) {
            q[i].slot = 2 + i;
            q[i].block_table = blocks_for(2 + i);
            q[i].start_pos = pos[i];
            q[i].tokens = std::span<const int32_t>(f.tokens).subspan(static_cast<size_t>(pos[i]), 1);
            q[i].want_logits = true;
        }
        const float* d = side.model->step(std::span<const GpuStepSeq>(q, 2), LogitRows::Last, s.get());
        std::vector<float> r(static_cast<size_t>(2 * V));
        s.sync();
        side.model->check_host_experts();
        cuda::copy_to_host(r.data(), d, r.size() * 4);
        out.push_back(std::move(r));
    }
    return out;
}

// Median rel. L2 and argmax agreements of b's rows against a's (2 rows per step).
std::pair<double, int64_t> compare_two(const std::vector<std::vector<float>>& a,
                                       const std::vector<std::vector<float>>& b, const char* what) {
    const int64_t V = fixture().cfg.vocab_size;
    std::vector<double> rel;
    int64_t same = 0;
    for (size_t t = 0; t < a.size(); ++t)
        for (int i = 0; i < 2; ++i) {
            const std::vector<float> x(a[t].begin() + i * V, a[t].begin() + (i + 1) * V);
            const std::vector<float> y(b[t].begin() + i * V, b[t].begin() + (i + 1) * V);
            rel.push_back(test::rel_l2(y, x));
            same += argmax(x.data(), V) == argmax(y.data(), V);
        }
    std::sort(rel.begin(), rel.end());
    std::printf("%s vs all-GPU batched decode: median rel L2 %.3e, worst %.3e, argmax %lld/%zu\n", what,
                rel[rel.size() / 2], rel.back(), static_cast<long long>(same), rel.size());
    return {rel[rel.size() / 2], same};
}

TEST(HybridExperts, AllHostExpertsStagedIsBitIdenticalToAllGpu) {
    ONECARD_REQUIRE_GPU();
    Fixture& f = fixture();
    cuda::Stream s;
    ASSERT_NE(f.staged_all.model->host_expert_streamer(), nullptr);
    EXPECT_EQ(f.staged_all.model->host_expert_streamer()->experts_per_step(),
              f.host_per_layer() * f.cfg.num_hidden_layers);
    prefill_two(f.all_gpu, s);
    prefill_two(f.staged_all, s);
    const uint64_t pairs0 = f.staged_all.model->host_experts()->host_pairs();
    const auto a = decode_two(f.all_gpu, 6, s);
    const auto b = decode_two(f.staged_all, 6, s);
    for (size_t t = 0; t < a.size(); ++t) {
        for (float x : b[t]) ASSERT_TRUE(std::isfinite(x)) << "step " << t << ": unwritten or broken logits";
        EXPECT_EQ(std::memcmp(a[t].data(), b[t].data(), a[t].size() * 4), 0)
            << "step " << t << ": a staged expert must compute like its HBM copy";
    }
    // Every host expert was staged on these two-token steps: the host computed nothing.
    EXPECT_EQ(f.staged_all.model->host_experts()->host_pairs(), pairs0) << "the host computed pairs of staged experts";
    f.staged_all.model->check_integrity();
}

TEST(HybridExperts, HalfStagedMatchesAllGpuAndTheHostServesTheRest) {
    ONECARD_REQUIRE_GPU();
    Fixture& f = fixture();
    cuda::Stream s;
    const int64_t E = f.cfg.n_routed_experts, L = f.cfg.num_hidden_layers;
    prefill_two(f.all_gpu, s);
    prefill_two(f.staged_half, s);
    f.staged_half.model->reset_expert_pick_counts(s.get());
    const uint64_t pairs0 = f.staged_half.model->host_experts()->host_pairs();
    const auto a = decode_two(f.all_gpu, 8, s);
    const auto b = decode_two(f.staged_half, 8, s);
    const auto [median, same] = compare_two(a, b, "half staged");
    EXPECT_LE(median, 2e-2);
    EXPECT_GE(same, 16 - 2);
    // The host served exactly the picks of the host experts not staged; both kinds had picks.
    const std::vector<uint64_t> counts = f.staged_half.model->expert_pick_counts(s.get());
    uint64_t host = 0, staged = 0;
    for (int64_t l = 0; l < L; ++l) {
        const GpuMoE& m = f.staged_half.w.layers[static_cast<size_t>(l)].ffn;
        EXPECT_EQ(m.n_stream, f.host_per_layer() / 2);
        for (int64_t e = 0; e < E; ++e) {
            if (f.placement.is_on_gpu(l, e)) continue;
            (m.expert_stream_slot_host[static_cast<size_t>(e)] >= 0 ? staged : host) +=
                counts[static_cast<size_t>(l * E + e)];
        }
    }
    EXPECT_GT(staged, 0u) << "no pick reached a staged expert";
    EXPECT_GT(host, 0u) << "no pick reached a host-computed expert";
    EXPECT_EQ(host, f.staged_half.model->host_experts()->host_pairs() - pairs0);
    f.staged_half.model->check_integrity();
}

// A swap moves experts between records; a staged record stays staged and its new expert takes its
// stream slot, so captured graphs stay valid and outputs still match.
TEST(HybridExperts, SwappingAStagedExpertKeepsItsRecordStaged) {
    ONECARD_REQUIRE_GPU();
    Fixture& f = fixture();
    cuda::Stream s;
    Side& h = f.staged_half;
    const int64_t layer = f.cfg.num_hidden_layers - 1;
    GpuMoE& m = h.w.layers[static_cast<size_t>(layer)].ffn;
    int32_t staged_e = -1;
    for (int32_t e : h.store->placement().host_experts(layer))
        if (m.expert_stream_slot_host[static_cast<size_t>(e)] == 0) staged_e = e;
    ASSERT_GE(staged_e, 0);
    const int32_t gpu_e = h.store->placement().gpu_experts(layer).front();
    prefill_two(f.all_gpu, s);
    prefill_two(h, s);
    decode_two(h, 1, s);  // the two-token graph is captured before the swap
    swap_host_expert(h.w, *h.store, layer, staged_e, gpu_e, h.model->host_staging(), s.get());
    EXPECT_EQ(m.expert_stream_slot_host[static_cast<size_t>(gpu_e)], 0);
    EXPECT_EQ(m.expert_stream_slot_host[static_cast<size_t>(staged_e)], -1);
    h.store->check_integrity();
    h.model->check_integrity();
    prefill_two(h, s);
    const auto a = decode_two(f.all_gpu, 4, s);
    const auto b = decode_two(h, 4, s);
    const auto [median, same] = compare_two(a, b, "half staged after a swap");
    EXPECT_LE(median, 2e-2);
    EXPECT_GE(same, 8 - 1);
    swap_host_expert(h.w, *h.store, layer, gpu_e, staged_e, h.model->host_staging(), s.get());
    EXPECT_EQ(m.expert_stream_slot_host[static_cast<size_t>(staged_e)], 0);
    h.model->check_integrity();
}

// Re-placement: swap a host expert with a GPU expert of a learned-routing layer between steps, check
// the host record then holds exactly the checkpoint's bytes of the expert that left the GPU, that
// outputs still match the all-GPU model, and swap back.
TEST(HybridExperts, SwappingExpertsKeepsOutputsAndBytes) {
    ONECARD_REQUIRE_GPU();
    Fixture& f = fixture();
    cuda::Stream s;
    const int64_t layer = f.cfg.num_hidden_layers - 1, V = f.cfg.vocab_size;
    ASSERT_FALSE(f.cfg.is_hash_layer(layer));
    const int32_t host_e = f.hybrid.store->placement().host_experts(layer).front();
    const int32_t gpu_e = f.hybrid.store->placement().gpu_experts(layer).front();
    auto same_bytes_as_checkpoint = [&](int32_t e) {
        const cuda::MxHostExpert h = f.hybrid.store->expert(layer, e);
        const ExpertWeights& x =
            f.weights->layers.at(static_cast<size_t>(layer)).ffn.experts.at(static_cast<size_t>(e));
        const QuantLinear* q[3] = {&x.w1, &x.w3, &x.w2};
        const uint8_t* got[6] = {h.w1, h.s1, h.w3, h.s3, h.w2, h.s2};
        for (int i = 0; i < 3; ++i)
            if (std::memcmp(got[2 * i], q[i]->weight.data, q[i]->weight.nbytes) != 0 ||
                std::memcmp(got[2 * i + 1], q[i]->scale.data, q[i]->scale.nbytes) != 0)
                return false;
        return true;
    };
    for (int round = 0; round < 2; ++round) {
        const int32_t in = round == 0 ? host_e : gpu_e, out = round == 0 ? gpu_e : host_e;
        swap_host_expert(f.hybrid.w, *f.hybrid.store, layer, in, out, f.hybrid.model->host_staging(), s.get());
        f.hybrid.store->check_integrity();
        f.hybrid.model->check_integrity();
        EXPECT_TRUE(f.hybrid.store->placement().is_on_gpu(layer, in));
        EXPECT_FALSE(f.hybrid.store->placement().is_on_gpu(layer, out));
        EXPECT_TRUE(same_bytes_as_checkpoint(out)) << "expert " << out << " did not come back to host RAM intact";
        // A many-token step stays bit-identical, decode steps (graphs captured before the swap) agree.
        const std::vector<float> a = step(f.all_gpu, 0, 0, kPrompt, s);
        const std::vector<float> b = step(f.hybrid, 0, 0, kPrompt, s);
        EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "round " << round;
        for (int64_t t = 0; t < 4; ++t) {
            const std::vector<float> da = step(f.all_gpu, 0, kPrompt + t, 1, s);
            const std::vector<float> db = step(f.hybrid, 0, kPrompt + t, 1, s);
            EXPECT_LE(test::rel_l2(db, da), 2e-2) << "round " << round << " step " << t;
            EXPECT_EQ(argmax(da.data(), V), argmax(db.data(), V));
        }
    }
}

}  // namespace
}  // namespace onecard

#else

TEST(HybridExperts, NeedsCuda) {
    GTEST_SKIP() << "built without the CUDA backend (ONECARD_CUDA=OFF)";
}

#endif
