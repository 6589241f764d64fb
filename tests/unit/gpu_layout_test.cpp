// Host-side logic of the GPU model that needs no GPU (runs in CI): which shapes the CUDA kernels
// accept, the weight byte estimate the runner refuses with, and where the KV pool puts each layer's
// regions (checked against the kvcache spec the CPU's paged store uses).
#include <gtest/gtest.h>

#ifdef ONECARD_HAVE_CUDA

#include "backend/cuda/ops/mxfp4_gemv.cuh"
#include "backend/cuda/ops/mxfp4_layout.cuh"
#include "core/error.h"
#include "engine/memory_plan.h"
#include "engine_cuda/cuda_model_runner.h"
#include "engine_cuda/gpu_plan.h"
#include "kvcache/kv_spec.h"
#include "model/synth.h"
#include "model/weights.h"
#include "model_cuda/gpu_kv_pool.h"
#include "model_cuda/gpu_model.h"
#include "model_cuda/gpu_synth.h"
#include "model_cuda/gpu_weights.h"

#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace onecard {
namespace {

ModelConfig flash(int64_t layers, int64_t experts) {
    SynthOptions o;
    o.preset = SynthPreset::Flash;
    o.layers = layers;
    o.experts = experts;
    o.mtp = 0;
    return synth_config(o);
}

// The tiled MXFP4 layout is a permutation (every code word and scale byte has one place), the
// lane that the tensor-core GEMV reads holds the words its mma fragments need, and untiling inverts it.
TEST(GpuLayout, Mxfp4TilingIsAPermutationInLaneOrder) {
    for (const auto& [n, k] : {std::pair<int64_t, int64_t>{16, 256}, {48, 1024}, {32, 4096}}) {
        std::vector<int> word_hits(static_cast<size_t>(n * k / 8), 0), scale_hits(static_cast<size_t>(n * k / 32), 0);
        for (int64_t r = 0; r < n; ++r) {
            for (int64_t G = 0; G < k / 32; ++G) {
                for (int64_t t = 0; t < 4; ++t) {
                    const int64_t off = cuda::mxfp4_tiled_word_offset(r, G, t, k);
                    ASSERT_EQ(off % 4, 0);
                    ASSERT_GE(off, 0);
                    ASSERT_LT(off, n * k / 2);
                    ++word_hits[static_cast<size_t>(off / 4)];
                    // Lane 4g + t of row tile r/16, group pair G/2: its 16 bytes hold rows g and g + 8.
                    const int64_t lane = (off % 512) / 16;
                    EXPECT_EQ(lane, 4 * (r % 8) + t);
                    EXPECT_EQ((off % 16) / 4, 2 * (G % 2) + (r % 16) / 8);
                    EXPECT_EQ(off / 512, (r / 16) * (k / 64) + G / 2);
                }
                const int64_t so = cuda::mxfp4_tiled_scale_offset(r, G, k);
                ASSERT_GE(so, 0);
                ASSERT_LT(so, n * k / 32);
                ++scale_hits[static_cast<size_t>(so)];
            }
        }
        for (const int h : word_hits) ASSERT_EQ(h, 1) << n << "x" << k;
        for (const int h : scale_hits) ASSERT_EQ(h, 1) << n << "x" << k;

        std::mt19937 rng(static_cast<uint32_t>(n + k));
        std::vector<uint8_t> w(static_cast<size_t>(n * k / 2)), s(static_cast<size_t>(n * k / 32));
        for (auto& b : w) b = static_cast<uint8_t>(rng());
        for (auto& b : s) b = static_cast<uint8_t>(rng());
        std::vector<uint8_t> tw(w.size()), ts(s.size()), bw(w.size()), bs(s.size());
        cuda::mxfp4_tile_host(w.data(), s.data(), n, k, tw.data(), ts.data());
        // Spot check against the definition: row 9, group 5, word 2.
        uint32_t a = 0, b = 0;
        std::memcpy(&a, w.data() + 9 * (k / 2) + 16 * 5 + 4 * 2, 4);
        std::memcpy(&b, tw.data() + cuda::mxfp4_tiled_word_offset(9, 5, 2, k), 4);
        EXPECT_EQ(a, b);
        cuda::mxfp4_untile_host(tw.data(), ts.data(), n, k, bw.data(), bs.data());
        EXPECT_EQ(bw, w);
        EXPECT_EQ(bs, s);
    }
    EXPECT_FALSE(cuda::mxfp4_tileable(1036, 2048));
    EXPECT_FALSE(cuda::mxfp4_tileable(1024, 1000));
    EXPECT_TRUE(cuda::mxfp4_tileable(2048, 4096));
    EXPECT_THROW(cuda::mxfp4_tile_host(nullptr, nullptr, 8, 256, nullptr, nullptr), Error);
}

TEST(GpuLayout, FlashShapeIsAcceptedAndTinyIsRefusedWithEveryReason) {
    EXPECT_NO_THROW(check_gpu_model_shape(flash(4, 16)));
    SynthOptions o;
    o.preset = SynthPreset::Tiny;
    try {
        check_gpu_model_shape(synth_config(o));
        FAIL() << "the tiny preset (head_dim 128, hidden 256) cannot run on the CUDA kernels";
    } catch (const Error& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("head_dim 128"), std::string::npos) << m;
        EXPECT_NE(m.find("hidden_size 256"), std::string::npos) << m;
    }
}

// The runner refuses from gpu_weight_bytes before it allocates; the synthetic weights allocate exactly
// synth_weights_device_bytes. The estimate leaves out only the 256-byte alignment of each tensor.
TEST(GpuLayout, WeightByteEstimateMatchesTheExactAllocation) {
    for (int64_t experts : {8, 64, 216}) {
        const ModelConfig cfg = flash(43, experts);
        const GpuWeightBytes est = gpu_weight_bytes(cfg);
        const int64_t exact = synth_weights_device_bytes(cfg);
        EXPECT_LE(est.total, exact) << experts << " experts";
        EXPECT_GT(static_cast<double>(est.total), 0.999 * static_cast<double>(exact)) << experts << " experts";
        EXPECT_EQ(est.total, est.embed_head + est.attention + est.routed_experts + est.shared_experts + est.other);
    }
    // The full Flash shape does not fit one H200 (131 GiB free): the reason the bench sizes experts.
    EXPECT_GT(gpu_weight_bytes(flash(43, 256)).total, int64_t{141} * 1000 * 1000 * 1000);
}

// `onecard plan` on a CUDA build sizes the weights as the GPU holds them: the planner's tensor list
// (main model) adds up to gpu_weight_bytes, the runner's refusal estimate, and the planner then
// refuses the full Flash shape on the H200's free memory by the GPU layout's larger need.
TEST(GpuLayout, PlannerTensorsUseTheGpuLayout) {
    for (const auto& [layers, experts] : {std::pair<int64_t, int64_t>{4, 16}, {43, 256}}) {
        const ModelConfig cfg = flash(layers, experts);
        const auto specs = checkpoint_layout(cfg);
        const auto planned = gpu_planned_tensors(specs);
        uint64_t stored = 0, gpu = 0;
        for (const auto& t : specs)
            if (t.name.rfind("mtp.", 0) != 0) stored += t.nbytes();
        for (const auto& t : planned) {
            if (t.name.rfind("mtp.", 0) != 0) gpu += t.nbytes;
            if (t.name.find(".wo_a.weight") != std::string::npos) {
                EXPECT_EQ(t.dtype, DType::F8_E4M3) << "wo_a stays FP8 on the GPU";
            }
            if (t.name.find("tid2eid") != std::string::npos) {
                EXPECT_EQ(t.dtype, DType::I32);
            }
        }
        EXPECT_EQ(static_cast<int64_t>(gpu), gpu_weight_bytes(cfg).total) << layers << " layers";
        EXPECT_NE(gpu, stored);  // the FP8 scales grow four-fold, tid2eid halves
    }
    MemoryPlanOptions opt;
    opt.include_mtp = false;
    opt.device_bytes = static_cast<uint64_t>(131.29 * 1073741824.0);
    const ModelConfig full = flash(43, 256);
    const MemoryPlan plan = make_memory_plan(full, gpu_planned_tensors(checkpoint_layout(full)), opt);
    EXPECT_FALSE(plan.fits);
    EXPECT_EQ(plan.weight_bytes, static_cast<uint64_t>(gpu_weight_bytes(full).total));
}

// A GpuKvPool over a host buffer: its bookkeeping never touches the bytes, so host memory stands in for HBM.
struct HostPool {
    std::vector<std::byte> host;
    cuda::DeviceArena arena;
    GpuKvPool pool;
    HostPool(const KvCacheSpec& spec, const KvPoolSize& size, int64_t step_tokens)
        : host(static_cast<size_t>(size.total_bytes(spec) + step_tokens * spec.entry.entry_bytes() + 256)),
          arena(host.data(), host.size(), "host stand-in"),
          pool(spec, size, step_tokens, arena) {}
};

TEST(GpuLayout, KvPoolPlacesEveryLayerWhereTheSpecSays) {
    const ModelConfig cfg = flash(6, 8);
    const KvCacheSpec spec = make_kv_cache_spec(kv_model_shape_from_config(cfg), 256);
    KvPoolSize size;
    size.n_slots = 3;
    size.n_blocks = 5;
    HostPool hp(spec, size, 64);
    const GpuKvPool& pool = hp.pool;
    pool.check_integrity();
    EXPECT_EQ(pool.slot_offset(0), size.n_blocks * spec.block_bytes);
    EXPECT_EQ(pool.slot_offset(2) - pool.slot_offset(1), spec.slot_bytes);
    EXPECT_EQ(pool.step_entries_offset(), size.n_blocks * spec.block_bytes + size.n_slots * spec.slot_bytes);
    for (const auto& f : spec.fixed) {
        const auto& l = pool.layer(f.layer);
        const int64_t got = f.kind == KvFixedKind::Window       ? l.window_offset
                            : f.kind == KvFixedKind::Compressor ? l.compressor_offset
                                                                : l.index_compressor_offset;
        EXPECT_EQ(got, f.offset) << "layer " << f.layer;
    }
    for (const auto& s : spec.streams) {
        const cuda::PagedStreamAddr a = pool.entry_addr(s.layer, s.kind, nullptr, 7);
        EXPECT_EQ(a.stream_offset, s.offset);
        EXPECT_EQ(a.entry_bytes, s.entry_bytes);
        EXPECT_EQ(a.ratio, s.ratio);
        EXPECT_EQ(a.block_bytes, spec.block_bytes);
        EXPECT_EQ(a.max_blocks, 7);
    }
    // Layers 0 and 1 are sliding-window only: they have no paged stream.
    EXPECT_THROW(pool.entry_addr(0, KvStreamKind::CompressedEntry, nullptr, 1), Error);
    EXPECT_THROW(pool.entry_addr(3, KvStreamKind::IndexerKey, nullptr, 1), Error);  // HCA: entries but no indexer keys
}

// A model whose layers are all sliding-window (`bench --layers 1`, layer 0 of the Flash shape) has no
// paged state; its placeholder block must still satisfy the pool's 8-byte alignment (a 1-byte block was
// refused on the H200).
TEST(GpuLayout, KvPoolAcceptsAModelWithoutCompressedLayers) {
    const ModelConfig cfg = flash(1, 8);
    const KvCacheSpec spec = make_kv_cache_spec(kv_model_shape_from_config(cfg), 256);
    ASSERT_TRUE(spec.streams.empty());
    EXPECT_EQ(spec.block_bytes % 8, 0);
    KvPoolSize size;
    size.n_slots = 2;
    size.n_blocks = 4;
    HostPool hp(spec, size, 16);
    const GpuKvPool& pool = hp.pool;
    pool.check_integrity();
    EXPECT_EQ(pool.slot_offset(1) - pool.slot_offset(0), spec.slot_bytes);
}

// The grouped-GEMV bound for the routed experts (GpuModelOptions::moe_gemv_max_tokens) sizes the
// workspace the memory plan counts, and its limits are refused by name: the pair grouping's 4096 pairs,
// and 64 tokens on a hybrid model.
TEST(GpuLayout, MoeGemvTokenBoundSizesTheWorkspaceAndIsChecked) {
    const ModelConfig cfg = flash(4, 64);
    const KvCacheSpec spec = make_kv_cache_spec(kv_model_shape_from_config(cfg), 256);
    GpuModelOptions o;
    o.max_num_batched_tokens = 1024;
    o.max_num_seqs = 64;
    o.max_model_len = 4096;
    const int64_t base = GpuModel::workspace_bytes_for(cfg, o, spec, false);
    o.moe_gemv_max_tokens = 512;
    const int64_t wide = GpuModel::workspace_bytes_for(cfg, o, spec, false);
    // Per extra GEMV row, at least its K pairs' gate and up (bf16 [I]), FP8 hidden ([I]) and out (bf16 [D]).
    const int64_t K = cfg.num_experts_per_tok, I = cfg.moe_intermediate_size, D = cfg.hidden_size;
    EXPECT_GE(wide - base, (512 - 64) * K * (2 * I * 2 + I + D * 2));
    o.moe_gemv_max_tokens = cuda::kMxfp4MaxGroupPairs / K + 1;
    EXPECT_THROW(GpuModel::workspace_bytes_for(cfg, o, spec, false), Error);
    o.moe_gemv_max_tokens = 128;
    EXPECT_THROW(GpuModel::workspace_bytes_for(cfg, o, spec, true), Error);
    o.moe_gemv_max_tokens = 64;
    EXPECT_NO_THROW(GpuModel::workspace_bytes_for(cfg, o, spec, true));
    // Serving takes the largest bound allowed unless told otherwise (CudaRunnerOptions: 0 = auto).
    EXPECT_EQ(GpuModel::max_moe_gemv_tokens(cfg, false), cuda::kMxfp4MaxGroupPairs / K);
    EXPECT_EQ(GpuModel::max_moe_gemv_tokens(cfg, true), 64);
    CudaRunnerOptions ro;
    EXPECT_EQ(CudaModelRunner::model_options(cfg, ro, false).moe_gemv_max_tokens, cuda::kMxfp4MaxGroupPairs / K);
    EXPECT_EQ(CudaModelRunner::model_options(cfg, ro, true).moe_gemv_max_tokens, 64);
    ro.moe_gemv_max_tokens = 200;
    EXPECT_EQ(CudaModelRunner::model_options(cfg, ro, false).moe_gemv_max_tokens, 200);
    o.moe_gemv_max_tokens = GpuModel::max_moe_gemv_tokens(cfg, false);
    EXPECT_NO_THROW(GpuModel::workspace_bytes_for(cfg, o, spec, false));
}

// The DSpark drafter's GPU sizing (issue 17), on the host: its buffers (the taps of every step's
// tokens, the Markov slots' tokens) grow the workspace the memory plan counts by at least the taps, a
// serving runner with the drafter returns a whole block of logits rows per sequence, the model refuses
// fewer, and the synthetic drafter takes what the planner's "mtp.*" tensors say it takes (their
// GPU layout: the FP8 scales padded as the GEMM reads them).
TEST(GpuLayout, DSparkDrafterSizesTheWorkspaceAndLogitsRows) {
    SynthOptions so;
    so.preset = SynthPreset::Flash;
    so.layers = 4;
    so.experts = 16;
    so.dspark = true;
    const ModelConfig cfg = synth_config(so);
    const int64_t B = cfg.dspark->block_size, S = static_cast<int64_t>(cfg.dspark->target_layer_ids.size());
    const KvCacheSpec spec = make_kv_cache_spec(kv_model_shape_from_config(cfg), 256);
    CudaRunnerOptions ro;
    ro.max_num_batched_tokens = 512;
    ro.max_num_seqs = 8;
    ro.max_model_len = 4096;
    ro.dspark_drafter = true;
    ro.num_speculative_tokens = 2;
    const GpuModelOptions with = CudaModelRunner::model_options(cfg, ro, false);
    EXPECT_TRUE(with.dspark);
    EXPECT_EQ(with.logits_rows_per_seq, B);  // a block's B rows > a verify step's 1 + 2
    ro.num_speculative_tokens = B;
    EXPECT_EQ(CudaModelRunner::model_options(cfg, ro, false).logits_rows_per_seq, B + 1);
    ro.dspark_drafter = false;
    ro.num_speculative_tokens = 0;
    const GpuModelOptions without = CudaModelRunner::model_options(cfg, ro, false);
    const int64_t grown = GpuModel::workspace_bytes_for(cfg, with, spec, false) -
                          GpuModel::workspace_bytes_for(cfg, without, spec, false);
    EXPECT_GE(grown, ro.max_num_batched_tokens * S * cfg.hidden_size * 2);
    GpuModelOptions short_rows = with;
    short_rows.logits_rows_per_seq = B - 1;
    EXPECT_THROW(GpuModel::workspace_bytes_for(cfg, short_rows, spec, false), Error);
    uint64_t planned = 0;
    for (const auto& t : gpu_planned_tensors(checkpoint_layout(cfg)))
        if (t.name.rfind("mtp.", 0) == 0) planned += t.nbytes;
    const auto synth = static_cast<uint64_t>(synth_dspark_device_bytes(cfg));
    EXPECT_GT(planned, 0u);
    // The synthetic drafter aligns each tensor to 256 bytes; the planner counts the bytes alone.
    EXPECT_LE(planned, synth);
    EXPECT_GT(static_cast<double>(planned), 0.999 * static_cast<double>(synth));
}

}  // namespace
}  // namespace onecard

#else
TEST(GpuLayout, NeedsCuda) {
    GTEST_SKIP() << "built without the CUDA backend (ONECARD_CUDA=OFF)";
}
#endif
