// `onecard bench`: the whole model on the GPU, timed with a fixed method. Full-dimension synthetic
// weights are made directly in device memory (--synth flash; no disk) or a checkpoint is uploaded
// (--model DIR). Measures, each after warm-up as the median of repeats:
//  * decode: for each batch size B, B sequences of --context tokens (prefilled first), then steps of
//    one token per sequence (model step + greedy pick on the GPU + ids back to the host): tok/s = B /
//    step time; bytes of weights and KV read per step and their fraction of the copy bandwidth
//    measured in the same run;
//  * verify (--verify-k): for each listed k, steps of k + 1 tokens per sequence returning every row's
//    logits, the cost side of speculative decoding, as a ratio to the decode step; with the synthetic
//    shape also the MTP block's chain of k draft steps (bench_spec.h), the drafter's cost;
//  * mixed (--mixed-chunk N): for each batch size B, steps of the B decode rows plus an N-token chunk of
//    another sequence's prompt that already holds --mixed-context tokens: the step a server runs while
//    a long prompt prefills beside decoding streams (issue 16's mixed-load gate), with its profile;
//  * prefill: one --prefill-token prompt in --chunk-token steps: tok/s and the fraction of the
//    active-parameter FLOPs of the block-scaled FP8 GEMM rate;
//  * HBM: bytes the arena hands out (weights, KV pool, workspace) and the device's used memory.
// Prints a table and writes the figures as JSON (--out).
#include "commands.h"
#include "core/error.h"
#include "model/config.h"
#include "model/synth.h"

#ifdef ONECARD_HAVE_CUDA
#include "backend/cuda/arena.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "backend/cuda/stream.h"
#include "backend/host/host_experts.h"
#include "bench_measure.h"
#include "bench_routing.h"
#include "bench_spec.h"
#include "engine/memory_plan.h"
#include "engine_cuda/gpu_plan.h"
#include "kvcache/kv_spec.h"
#include "loader/checkpoint.h"
#include "model/expert_placement.h"
#include "model/expert_profile.h"
#include "model/weights.h"
#include "model_cuda/gpu_model.h"
#include "model_cuda/gpu_synth.h"
#include "model_cuda/gpu_weights.h"
#include "model_cuda/host_embedding.h"
#include "model_cuda/host_expert_store.h"
#endif

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

namespace onecard::cli {
namespace {

struct BenchArgs {
    std::string preset;
    std::string model;
    int64_t layers = 0;   // 0: the preset's
    int64_t experts = 0;  // 0: as many as fit (the model itself then has fewer experts)
    int64_t gpu_experts =
        -1;  // with --experts: GPU-resident experts per layer (-1: as many as fit; the rest in host RAM)
    std::string routing = "uniform";  // uniform | skewed (router biases and hash tables favour the GPU experts)
    double skew_coverage = 0;  // skewed: share of picks aimed at GPU experts (0: the published curve at the GPU share)
    int host_threads = 0;      // host expert threads (0: hardware threads - 1)
    std::string stream_experts =
        "auto";                 // host experts per layer staged over PCIe on large decode steps (serve's default)
    bool embed_on_gpu = false;  // keep the embedding table in HBM even when experts go to host RAM
    int64_t stream_min_tokens = 32;
    std::string decode_batches = "1,8,64";
    int64_t moe_gemv_max_tokens = 0;  // GpuModelOptions::moe_gemv_max_tokens; 0: GpuModel::max_moe_gemv_tokens
    std::string verify_k;       // speculative verify steps of k + 1 tokens per sequence, comma-separated k (none: off)
    bool dspark = false;        // the synthetic 0731 shape with its DSpark drafter (--verify-k times its drafts)
    int64_t mixed_chunk = 0;    // > 0: also time steps of the decode rows + a prompt chunk of this many tokens
    int64_t mixed_context = 0;  // tokens the mixed steps' prompt holds before its first chunk (0: --context)
    int64_t context = 1024;
    int64_t prefill = 8192;
    int64_t chunk = 8192;
    int64_t repeats = 5;
    int64_t warmup = 2;
    int64_t steps = 16;
    uint64_t seed = 1;
    double headroom_gib = 1.5;
    std::string out;
    bool profile = false;
};

#ifdef ONECARD_HAVE_CUDA

void run_bench(const BenchArgs& a) {
    ONECARD_CHECK(a.preset.empty() != a.model.empty(), "bench: give exactly one of --synth flash or --model DIR");
    const auto devices = cuda::list_devices();
    ONECARD_CHECK(!devices.empty(), "bench: needs a CUDA GPU ({})", cuda::no_device_reason());
    const cuda::DeviceInfo dev = devices.front();
    const std::vector<int64_t> batches = parse_int_list(a.decode_batches);
    ONECARD_CHECK(!batches.empty(), "bench: --decode-batch lists no batch size");
    const int64_t max_b = *std::max_element(batches.begin(), batches.end());
    const std::vector<int64_t> verify_ks = parse_int_list(a.verify_k);
    int64_t verify_tokens = 0;  // positions every sequence gains over the verify measurements (all accepted)
    for (int64_t k : verify_ks) {
        ONECARD_CHECK(k >= 1 && max_b * (k + 1) <= a.chunk,
                      "bench: --verify-k {} must be >= 1 with --decode-batch's largest batch x (k + 1) <= --chunk {}",
                      k, a.chunk);
        verify_tokens += (a.warmup + a.repeats) * a.steps * (k + 1);
        verify_tokens += a.warmup + a.repeats * a.steps + 8;  // the DSpark draft timing's own steps and block
    }
    ONECARD_CHECK(a.mixed_chunk >= 0 && max_b + a.mixed_chunk <= a.chunk,
                  "bench: --mixed-chunk {} must be >= 0 with --decode-batch's largest batch + it <= --chunk {}",
                  a.mixed_chunk, a.chunk);
    const int64_t mixed_steps = a.mixed_chunk > 0 ? a.warmup + a.repeats + 1 : 0;  // + the profiled one
    const int64_t mixed_context = a.mixed_context > 0 ? a.mixed_context : a.context;
    const int64_t mixed_len = a.mixed_chunk > 0 ? mixed_context + mixed_steps * a.mixed_chunk : 0;

    ModelConfig cfg;
    std::unique_ptr<Checkpoint> ckpt;
    if (!a.model.empty()) {
        cfg = load_config(std::filesystem::path(a.model) / "config.json");
    } else {
        SynthOptions so;
        so.preset = SynthPreset::Flash;
        // The V4-Flash MTP block only where --verify-k times its draft chains.
        so.mtp = verify_ks.empty() || a.dspark ? 0 : 1;
        so.dspark = a.dspark;
        if (a.layers > 0) so.layers = a.layers;
        if (a.experts > 0) so.experts = a.experts;
        cfg = synth_config(so);
        if (a.experts <= 0) {  // the old meaning: a model with as many experts as fit, all on the GPU
            // As many routed experts as fit beside the KV pool and workspace (the full 256 do not fit one H200).
            const double budget =
                static_cast<double>(dev.free_bytes) - a.headroom_gib * (1ull << 30) - 12.0 * (1ull << 30);
            for (int64_t e = cfg.n_routed_experts; e >= cfg.num_experts_per_tok; e -= 8) {
                so.experts = e;
                cfg = synth_config(so);
                // With --verify-k the drafter (the MTP block, or DSpark's three stages) shares the budget.
                const int64_t drafter = verify_ks.empty() ? 0
                                        : cfg.dspark      ? synth_dspark_device_bytes(cfg)
                                                          : synth_mtp_device_bytes(cfg);
                if (static_cast<double>(synth_weights_device_bytes(cfg) + drafter) <= budget) break;
            }
        }
    }
    check_gpu_model_shape(cfg);
    const GpuWeightBytes wb = gpu_weight_bytes(cfg);
    const int64_t L = cfg.num_hidden_layers, E = cfg.n_routed_experts;
    // --experts E with the synthetic shape: all E experts exist; the memory planner (the one serve
    // and plan use) decides how many (layer, expert) pairs the GPU holds beside the bench's KV pool
    // and the model's exact workspace, and the rest live in host RAM. --gpu-experts overrides the count.
    const KvCacheSpec spec = make_kv_cache_spec(kv_model_shape_from_config(cfg), 256);
    const int64_t decode_len = a.context + (a.warmup + a.repeats) * a.steps + verify_tokens + mixed_steps + 8;
    const int64_t max_len = std::max({decode_len, a.prefill, mixed_len}) + 256;
    // KV blocks of a decode sequence, and of the prefill slot (the prefill prompts and the mixed steps'
    // long prompt): only that one slot needs room for max_len tokens.
    const int64_t decode_blocks = spec.blocks_for_tokens(std::min(decode_len + 256, max_len));
    const int64_t seq_blocks = spec.blocks_for_tokens(max_len);
    const int64_t total_blocks = max_b * decode_blocks + seq_blocks;
    GpuModelOptions mo;
    mo.max_num_batched_tokens = a.chunk;
    mo.max_num_seqs = max_b + 1;
    // As serve (CudaModelRunner::model_options); with --experts the plan may keep experts in host RAM.
    mo.moe_gemv_max_tokens =
        a.moe_gemv_max_tokens > 0 ? a.moe_gemv_max_tokens : GpuModel::max_moe_gemv_tokens(cfg, a.experts > 0);
    for (int64_t k : verify_ks) mo.logits_rows_per_seq = std::max(mo.logits_rows_per_seq, k + 1);
    // The MTP drafter (synthetic V4-Flash shape): its block and buffers, for the draft chains.
    const bool draft = !verify_ks.empty() && a.model.empty() && !cfg.dspark && cfg.n_mtp_blocks() >= 1;
    const bool draft_dspark = !verify_ks.empty() && a.model.empty() && cfg.dspark.has_value();
    mo.mtp = draft;
    mo.dspark = draft_dspark;
    if (draft_dspark) mo.logits_rows_per_seq = std::max(mo.logits_rows_per_seq, cfg.dspark->block_size);
    mo.max_model_len = max_len;
    mo.count_expert_picks = true;
    mo.host_experts.n_threads = a.host_threads;
    const bool stream_auto = a.stream_experts == "auto";
    mo.host_experts.stream_experts = stream_auto ? 0 : std::stoll(a.stream_experts);  // kept only with host experts
    mo.host_experts.stream_min_tokens = a.stream_min_tokens;
    std::optional<ExpertPlacement> placement;
    std::string plan_line;
    bool embed_on_host = false;
    if (a.model.empty() && a.experts > 0) {
        MemoryPlanOptions po;
        po.device_bytes = dev.free_bytes;
        po.headroom_bytes = static_cast<uint64_t>(a.headroom_gib * (1ull << 30));
        po.include_mtp = draft || draft_dspark;
        po.max_num_seqs = max_b + 1;
        po.kv_block_size = spec.block_size;
        po.kv_tokens =
            (total_blocks - decode_blocks) * spec.block_size;  // + one slot's spare block each: (max_b + 1) sequences
        po.max_num_batched_tokens = a.chunk;
        po.max_context = max_len;
        po.allow_host_experts = true;
        po.allow_host_embed = !a.embed_on_gpu;
        po.workspace_bytes = static_cast<uint64_t>(GpuModel::workspace_bytes_for(cfg, mo, spec, true));
        MemoryPlan plan = make_memory_plan(cfg, gpu_planned_tensors(checkpoint_layout(cfg)), po);
        if (stream_auto && plan.host_experts()) {  // as serve: the plan's default, its buffers in the workspace
            // Skewed routing stands for a workload whose profile the plan would have: judge staging
            // by the host's share of picks that routing aims at, as serve does with --expert-profile.
            MemoryPlan judged = plan;
            if (a.routing == "skewed") {
                judged.has_profile = true;
                judged.host_pick_share =
                    1.0 -
                    (a.skew_coverage > 0 ? a.skew_coverage : published_coverage(L, E, plan.placement.total_gpu()));
            }
            mo.host_experts.stream_experts = default_stream_experts(judged);
            po.workspace_bytes = static_cast<uint64_t>(GpuModel::workspace_bytes_for(cfg, mo, spec, true));
            plan = make_memory_plan(cfg, gpu_planned_tensors(checkpoint_layout(cfg)), po);
        }
        plan.stream_experts = plan.host_experts() ? mo.host_experts.stream_experts : 0;
        std::fputs(memory_plan_report(plan).c_str(), stdout);
        require_plan_fits(plan);
        plan_line = memory_plan_line(plan);
        if (a.gpu_experts >= 0 && a.gpu_experts < E)
            placement = place_experts(L, E, a.gpu_experts * L, nullptr);
        else if (a.gpu_experts < 0 && plan.host_experts())
            placement = plan.placement;
        embed_on_host = placement.has_value() && plan.embed_on_host;
    }
    if (!placement) mo.host_experts.stream_experts = 0;
    std::printf("bench: %s, %lld layers, %lld routed experts (top-%lld), device %s, %.1f GiB free\n",
                a.model.empty() ? "synthetic Flash shape" : a.model.c_str(),
                static_cast<long long>(cfg.num_hidden_layers), static_cast<long long>(cfg.n_routed_experts),
                static_cast<long long>(cfg.num_experts_per_tok), dev.name.c_str(), dev.free_bytes / double(1ull << 30));

    cuda::Stream stream;
    const cudaStream_t s = stream.get();
    const uint64_t cap = dev.free_bytes - static_cast<uint64_t>(a.headroom_gib * (1ull << 30));
    cuda::DeviceArena arena(cap, "bench");
    // The ceilings first, while the arena is empty (the plan fills it to the last GiB).
    const double bw = measure_copy_bandwidth(arena, s);
    const double pinned_h2d = placement ? measure_pinned_h2d(arena, s) : 0.0;
    const auto t_load = std::chrono::steady_clock::now();
    GpuModelWeights w;
    std::unique_ptr<HostExpertStore> host_store;
    std::unique_ptr<HostEmbedding> host_embed;  // the plan's embed_on_host
    if (embed_on_host) host_embed = std::make_unique<HostEmbedding>(cfg.vocab_size, cfg.hidden_size);
    if (a.model.empty()) {
        w = synth_weights_on_device(cfg, arena, a.seed, s, placement ? &*placement : nullptr,
                                    host_embed ? host_embed->device() : nullptr);
        if (placement) {
            host_store = std::make_unique<HostExpertStore>(cfg, *placement);
            host_store->fill_synthetic(a.seed, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
            attach_host_experts(w, *host_store, arena, mo.host_experts.stream_experts);
        }
        if (draft) w.mtp = synth_mtp_on_device(cfg, arena, a.seed, s);
        if (draft_dspark) w.dspark = synth_dspark_on_device(cfg, arena, a.seed, s);
    } else {
        ckpt = std::make_unique<Checkpoint>(Checkpoint::open(a.model));
        w = upload_weights(cfg, bind_weights(cfg, *ckpt), arena);
    }
    stream.sync();
    const double load_s = seconds_since(t_load);
    const uint64_t weight_bytes = arena.used();

    // KV: one slot per decode sequence plus one for the prefill prompt.
    KvPoolSize size;
    size.n_slots = max_b + 1;
    size.n_blocks = total_blocks;
    GpuKvPool pool(spec, size, a.chunk, arena);
    GpuModel model(cfg, w, pool, mo, arena);
    const uint64_t arena_used = arena.used();
    // Host side of hybrid experts: read bandwidth with the pool's thread count (the pinned copy rate
    // was measured with the copy bandwidth, while the arena still had room).
    double host_bw = 0;
    nlohmann::json contention = nlohmann::json::array();
    if (model.host_experts()) {
        host_bw = host::measure_host_read_bandwidth(model.host_experts()->n_threads(), size_t{4} << 30, 5);
        for (int t : {model.host_experts()->n_threads(), std::max(1, model.host_experts()->n_threads() / 2)}) {
            const auto [cpu, dma] = measure_host_read_during_copies(t);
            std::printf(
                "host read bandwidth with %d threads while pinned copies run: %.1f GB/s; copies meanwhile %.1f GB/s\n",
                t, cpu / 1e9, dma / 1e9);
            contention.push_back({{"threads", t}, {"host_read_gb_s", cpu / 1e9}, {"pinned_h2d_gb_s", dma / 1e9}});
        }
        std::printf(
            "host experts: %s, %d threads (%s), %.2f GiB pinned; host read bandwidth %.1f GB/s, pinned "
            "host-to-device copies %.1f GB/s\n",
            placement->summary().c_str(), model.host_experts()->n_threads(), model.host_experts()->isa(),
            host_store->bytes() / double(1ull << 30), host_bw / 1e9, pinned_h2d / 1e9);
        if (host_embed)
            std::printf("embedding table in pinned host RAM (%.2f GiB, rows read over PCIe by the embedding kernel)\n",
                        host_embed->bytes() / double(1ull << 30));
    }

    std::mt19937 rng(static_cast<uint32_t>(a.seed));
    std::uniform_int_distribution<int32_t> tok(3, static_cast<int32_t>(cfg.vocab_size) - 1);
    auto random_tokens = [&](int64_t n) {
        std::vector<int32_t> v(static_cast<size_t>(n));
        for (auto& t : v) t = tok(rng);
        return v;
    };
    std::vector<std::vector<int32_t>> tables(static_cast<size_t>(max_b + 1));
    for (int64_t q = 0; q <= max_b; ++q)
        for (int64_t b = 0; b < (q < max_b ? decode_blocks : seq_blocks); ++b)
            tables[static_cast<size_t>(q)].push_back(static_cast<int32_t>(q * decode_blocks + b));

    // One decode step's rows: sequence q of the first B feeds next[q] at position pos and wants its
    // logits; `extra` more default rows follow for the caller to fill (the mixed steps' prompt chunk).
    auto decode_rows = [&](int64_t B, int64_t pos, const std::vector<int32_t>& next, int64_t extra) {
        std::vector<GpuStepSeq> step(static_cast<size_t>(B + extra));
        for (int64_t q = 0; q < B; ++q) {
            GpuStepSeq& sq = step[static_cast<size_t>(q)];
            sq.slot = static_cast<int32_t>(q);
            sq.block_table = tables[static_cast<size_t>(q)];
            sq.start_pos = pos;
            sq.tokens = std::span<const int32_t>(next).subspan(static_cast<size_t>(q), 1);
            sq.want_logits = true;
        }
        return step;
    };

    // Prefill of one prompt in chunks; returns seconds. profile_last: the last chunk is launched op by op
    // for the profile (the time returned is then not a measurement).
    auto prefill_once = [&](int32_t slot, const std::vector<int32_t>& prompt, bool profile_last = false) {
        stream.sync();
        const auto t0 = std::chrono::steady_clock::now();
        for (int64_t p = 0; p < static_cast<int64_t>(prompt.size()); p += a.chunk) {
            GpuStepSeq q;
            q.slot = slot;
            q.block_table = tables[static_cast<size_t>(slot)];
            q.start_pos = p;
            q.tokens = std::span<const int32_t>(prompt).subspan(
                static_cast<size_t>(p), static_cast<size_t>(std::min<int64_t>(a.chunk, prompt.size() - p)));
            q.want_logits = p + a.chunk >= static_cast<int64_t>(prompt.size());
            if (profile_last && q.want_logits) model.profile_next_step();
            model.step(std::span<const GpuStepSeq>(&q, 1), LogitRows::Last, s);
        }
        model.argmax_last(s);
        stream.sync();
        model.check_host_experts();
        return seconds_since(t0);
    };

    // Skewed routing (hybrid only): calibrated on 4 steps of 64 prompt tokens of a fresh sequence.
    double skew_delta = 0, skew_target = 0;
    if (placement && a.routing == "skewed") {
        auto measure = [&] {
            model.reset_expert_pick_counts(s);
            const std::vector<int32_t> prompt = random_tokens(256);
            for (int64_t p0 = 0; p0 < 256; p0 += 64) {
                GpuStepSeq q;
                q.slot = static_cast<int32_t>(max_b);
                q.block_table = tables[static_cast<size_t>(max_b)];
                q.start_pos = p0;
                q.tokens = std::span<const int32_t>(prompt).subspan(static_cast<size_t>(p0), 64);
                q.want_logits = true;
                model.step(std::span<const GpuStepSeq>(&q, 1), LogitRows::Last, s);
            }
            stream.sync();
            model.check_host_experts();
            return host_share(model.expert_pick_counts(s), *placement);
        };
        skew_target = a.skew_coverage > 0 ? a.skew_coverage : published_coverage(L, E, placement->total_gpu());
        skew_delta = apply_skewed_routing(cfg, w, *placement, skew_target, a.seed, measure);
        std::printf(
            "skewed routing: +%.4f router bias on GPU experts, hash tables rewritten; calibrated host share "
            "%.2f%%\n",
            skew_delta, 100.0 * measure());
    }

    nlohmann::json decode_json = nlohmann::json::object();
    std::printf("\n%-8s %12s %12s %14s %16s %10s\n", "batch", "step ms", "tok/s", "GB read/step", "frac of copy BW",
                "ctx");
    for (int64_t B : batches) {
        // B sequences of `context` tokens, prefilled in steps of up to `chunk` tokens.
        std::vector<std::vector<int32_t>> prompts;
        for (int64_t q = 0; q < B; ++q) prompts.push_back(random_tokens(a.context));
        // Contexts longer than a step: each sequence prefilled alone in chunks.
        for (int64_t q0 = 0; a.context > a.chunk && q0 < B; ++q0)
            for (int64_t p0 = 0; p0 < a.context; p0 += a.chunk) {
                GpuStepSeq q;
                q.slot = static_cast<int32_t>(q0);
                q.block_table = tables[static_cast<size_t>(q0)];
                q.start_pos = p0;
                q.tokens =
                    std::span<const int32_t>(prompts[static_cast<size_t>(q0)])
                        .subspan(static_cast<size_t>(p0), static_cast<size_t>(std::min(a.chunk, a.context - p0)));
                q.want_logits = false;
                model.step(std::span<const GpuStepSeq>(&q, 1), LogitRows::Last, s);
            }
        for (int64_t q0 = a.context > a.chunk ? B : 0; q0 < B;) {
            std::vector<GpuStepSeq> step;
            int64_t used = 0;
            for (; q0 < B && used + a.context <= a.chunk; ++q0, used += a.context) {
                GpuStepSeq q;
                q.slot = static_cast<int32_t>(q0);
                q.block_table = tables[static_cast<size_t>(q0)];
                q.tokens = prompts[static_cast<size_t>(q0)];
                step.push_back(q);
            }
            ONECARD_CHECK(!step.empty(), "bench: --context {} exceeds --chunk {}", a.context, a.chunk);
            model.step(step, LogitRows::Last, s);
        }
        stream.sync();
        std::vector<int32_t> next = random_tokens(B), ids(static_cast<size_t>(B));
        int64_t pos = a.context;
        std::vector<double> times;
        double host_s0 = 0;
        uint64_t host_pairs0 = 0, host_reads0 = 0;
        for (int64_t r = 0; r < a.warmup + a.repeats; ++r) {
            if (r == a.warmup) {  // host expert figures over the timed steps only
                model.reset_expert_pick_counts(s);
                if (model.host_experts()) {
                    host_s0 = model.host_experts()->host_seconds();
                    host_pairs0 = model.host_experts()->host_pairs();
                    host_reads0 = model.host_experts()->host_expert_reads();
                }
            }
            for (int64_t t = 0; t < a.steps; ++t, ++pos) {
                const std::vector<GpuStepSeq> step = decode_rows(B, pos, next, 0);
                const auto t0 = std::chrono::steady_clock::now();
                model.step(step, LogitRows::Last, s);
                const int32_t* d_ids = model.argmax_last(s);
                CUDA_CHECK(cudaMemcpyAsync(ids.data(), d_ids, static_cast<size_t>(B) * 4, cudaMemcpyDeviceToHost, s));
                stream.sync();
                if (r >= a.warmup) times.push_back(seconds_since(t0));
                model.check_host_experts();
                next = ids;  // greedy feedback, as serving does
            }
        }
        // Verify-shaped steps (speculative decoding's cost side): each sequence feeds its next token and k
        // drafts and gets all k + 1 logits rows, as a verify step does. Every position is kept (the cost of
        // a step does not depend on how many drafts are accepted), so the context grows by k + 1 a step.
        const double t = median(times);
        const double bytes = decode_weight_bytes(cfg, wb, B) + B * decode_kv_bytes(cfg, spec, a.context + a.steps);
        nlohmann::json verify_json = nlohmann::json::object();
        for (int64_t k : verify_ks) {
            std::vector<double> vt;
            for (int64_t r = 0; r < a.warmup + a.repeats; ++r)
                for (int64_t i = 0; i < a.steps; ++i, pos += k + 1) {
                    const std::vector<int32_t> fed = random_tokens(B * (k + 1));  // [B, k + 1]
                    std::vector<GpuStepSeq> step(static_cast<size_t>(B));
                    for (int64_t q = 0; q < B; ++q) {
                        GpuStepSeq& sq = step[static_cast<size_t>(q)];
                        sq.slot = static_cast<int32_t>(q);
                        sq.block_table = tables[static_cast<size_t>(q)];
                        sq.start_pos = pos;
                        sq.tokens = std::span<const int32_t>(fed).subspan(static_cast<size_t>(q * (k + 1)),
                                                                          static_cast<size_t>(k + 1));
                        sq.want_logits = true;
                    }
                    const auto t0 = std::chrono::steady_clock::now();
                    model.step(step, LogitRows::All, s);
                    stream.sync();
                    if (r >= a.warmup) vt.push_back(seconds_since(t0));
                    model.check_host_experts();
                }
            const double tv = median(vt);
            // Bytes the step must read: the distinct experts of B·(k + 1) tokens and every token's KV.
            const double vbytes = decode_weight_bytes(cfg, wb, B * (k + 1)) +
                                  B * (k + 1) * decode_kv_bytes(cfg, spec, a.context + a.steps);
            std::printf(
                "         verify k=%-2lld %10.3f ms  %5.2fx the decode step, %.2fx its bytes  (%lld tokens, graph: "
                "%s)\n",
                static_cast<long long>(k), tv * 1e3, tv / t, vbytes / bytes, static_cast<long long>(B * (k + 1)),
                B * (k + 1) <= GpuModel::kGraphMaxTokens ? "yes" : "no");
            verify_json[std::to_string(k)] = {
                {"step_ms_median", tv * 1e3},     {"ratio_to_decode_step", tv / t},
                {"bytes_read_per_step", vbytes},  {"bytes_ratio_to_decode_step", vbytes / bytes},
                {"tokens_per_step", B * (k + 1)}, {"timed_steps", vt.size()}};
            if (draft) {
                const double td =
                    time_mtp_draft_chain(model, B, k, pos, tables, cfg.vocab_size, a.warmup, a.repeats * a.steps, s);
                std::printf("         draft k=%-2lld  %10.3f ms  (%.3f ms a draft step; MTP block, eager)\n",
                            static_cast<long long>(k), td * 1e3, td * 1e3 / static_cast<double>(k));
                verify_json[std::to_string(k)]["draft_chain_ms_median"] = td * 1e3;
            }
            if (draft_dspark && k <= cfg.dspark->block_size) {
                const double td = time_dspark_draft(model, B, k, pos, tables, a.warmup, a.repeats * a.steps, s);
                std::printf(
                    "         draft k=%-2lld  %10.3f ms  (DSpark: context push, block of %lld, %lld Markov "
                    "slots; eager)\n",
                    static_cast<long long>(k), td * 1e3, static_cast<long long>(cfg.dspark->block_size),
                    static_cast<long long>(k));
                verify_json[std::to_string(k)]["draft_chain_ms_median"] = td * 1e3;
                verify_json[std::to_string(k)]["drafter"] = "dspark";
            }
        }
        nlohmann::json prof = nlohmann::json::object();
        if (a.profile) {
            // One more step, launch by launch with events between op groups (no graph: slower in total).
            const std::vector<GpuStepSeq> step = decode_rows(B, pos, next, 0);
            model.profile_next_step();
            model.step(step, LogitRows::Last, s);
            ++pos;
            prof = print_profile("decode batch " + std::to_string(B), model.profile_result());
        }
        // Mixed steps: the B decode rows and an N-token chunk of the prefill slot's prompt, which first
        // gets --mixed-context tokens alone in --chunk steps. Timed as the decode steps (step + argmax of
        // the decode rows + ids to host, median); one more step is profiled.
        nlohmann::json mixed_json = nullptr;
        if (a.mixed_chunk > 0) {
            const int32_t ps = static_cast<int32_t>(max_b);
            const std::vector<int32_t> prompt = random_tokens(mixed_len);
            for (int64_t p0 = 0; p0 < mixed_context; p0 += a.chunk) {
                GpuStepSeq q;
                q.slot = ps;
                q.block_table = tables[static_cast<size_t>(ps)];
                q.start_pos = p0;
                q.tokens = std::span<const int32_t>(prompt).subspan(
                    static_cast<size_t>(p0), static_cast<size_t>(std::min(a.chunk, mixed_context - p0)));
                q.want_logits = false;
                model.step(std::span<const GpuStepSeq>(&q, 1), LogitRows::Last, s);
            }
            stream.sync();
            std::vector<double> mt;
            nlohmann::json mixed_prof = nlohmann::json::object();
            for (int64_t r = 0, p = mixed_context; r < mixed_steps; ++r, ++pos, p += a.mixed_chunk) {
                std::vector<GpuStepSeq> step = decode_rows(B, pos, next, 1);  // [B decode rows, the prompt chunk]
                GpuStepSeq& pq = step[static_cast<size_t>(B)];
                pq.slot = ps;
                pq.block_table = tables[static_cast<size_t>(ps)];
                pq.start_pos = p;
                pq.tokens = std::span<const int32_t>(prompt).subspan(static_cast<size_t>(p),
                                                                     static_cast<size_t>(a.mixed_chunk));
                pq.want_logits = false;
                const bool profiled = r == mixed_steps - 1;
                if (profiled) model.profile_next_step();
                const auto t0 = std::chrono::steady_clock::now();
                model.step(step, LogitRows::Last, s);
                const int32_t* d_ids = model.argmax_last(s);
                CUDA_CHECK(cudaMemcpyAsync(ids.data(), d_ids, static_cast<size_t>(B) * 4, cudaMemcpyDeviceToHost, s));
                stream.sync();
                if (r >= a.warmup && !profiled) mt.push_back(seconds_since(t0));
                model.check_host_experts();
                next = ids;
                if (profiled)
                    mixed_prof = print_profile("mixed step: " + std::to_string(B) + " decode rows + " +
                                                   std::to_string(a.mixed_chunk) + " prompt tokens after " +
                                                   std::to_string(p) + " of context",
                                               model.profile_result());
            }
            const double tm = median(mt);
            std::printf(
                "         mixed: %lld decode rows + %lld prompt tokens (prompt context %lld..%lld): %.3f ms a step, "
                "%.0f prompt tok/s, %.2fx the decode step\n",
                static_cast<long long>(B), static_cast<long long>(a.mixed_chunk),
                static_cast<long long>(mixed_context + a.warmup * a.mixed_chunk),
                static_cast<long long>(mixed_context + (mixed_steps - 1) * a.mixed_chunk), tm * 1e3, a.mixed_chunk / tm,
                tm / t);
            mixed_json = {{"chunk", a.mixed_chunk},
                          {"prompt_context", mixed_context},
                          {"first_timed_prompt_context", mixed_context + a.warmup * a.mixed_chunk},
                          {"decode_rows", B},
                          {"tokens_per_step", B + a.mixed_chunk},
                          {"step_ms_median", tm * 1e3},
                          {"prompt_tok_s", a.mixed_chunk / tm},
                          {"ratio_to_decode_step", tm / t},
                          {"timed_steps", mt.size()},
                          {"profile_ms", mixed_prof}};
        }
        nlohmann::json hybrid_json = nullptr;
        if (model.host_experts()) {
            const double n_steps = static_cast<double>(times.size());
            const double host_ms = (model.host_experts()->host_seconds() - host_s0) * 1e3 / n_steps;
            const double pairs = static_cast<double>(model.host_experts()->host_pairs() - host_pairs0) / n_steps;
            const double share = host_share(model.expert_pick_counts(s), *placement);
            // Bytes the host really streams: each expert once per request (pairs sharing it are grouped).
            const double reads = static_cast<double>(model.host_experts()->host_expert_reads() - host_reads0) / n_steps;
            const double rate = reads * host_store->bytes_per_expert() / std::max(host_ms * 1e-3, 1e-12);
            std::printf(
                "         host experts: %.2f%% of picks, %.1f pairs/step, %.3f ms/step of host work, %.1f GB/s "
                "of expert weights (%.0f%% of host read bandwidth)\n",
                100.0 * share, pairs, host_ms, rate / 1e9, 100.0 * rate / std::max(host_bw, 1.0));
            hybrid_json = {{"host_share_of_picks", share},
                           {"host_pairs_per_step", pairs},
                           {"host_expert_reads_per_step", reads},
                           {"host_ms_per_step", host_ms},
                           {"host_weight_bytes_per_s", rate},
                           {"fraction_of_host_read_bandwidth", rate / std::max(host_bw, 1.0)}};
        }
        const int64_t graph_nodes = model.last_graph_nodes();  // the timed steps' graph (captured for this B)
        const double frac = bytes / t / bw;
        std::printf("%-8lld %12.3f %12.1f %14.2f %16.3f %10lld\n", static_cast<long long>(B), t * 1e3, B / t,
                    bytes / 1e9, frac, static_cast<long long>(a.context));
        std::printf("         (graph of %lld nodes: %.1f per layer)\n", static_cast<long long>(graph_nodes),
                    static_cast<double>(graph_nodes) / static_cast<double>(cfg.num_hidden_layers));
        decode_json[std::to_string(B)] = {{"graph_nodes", graph_nodes},
                                          {"step_ms_median", t * 1e3},
                                          {"tok_s", B / t},
                                          {"bytes_read_per_step", bytes},
                                          {"bytes_read_per_token", bytes / B},
                                          {"fraction_of_copy_bandwidth", frac},
                                          {"context", a.context},
                                          {"timed_steps", times.size()},
                                          {"profile_ms", prof},
                                          {"host_experts", hybrid_json},
                                          {"verify", verify_json},
                                          {"mixed", mixed_json}};
    }

    // Prefill: one warm-up prompt, then repeats on fresh prompts (a new sequence each time).
    std::vector<double> pt;
    for (int64_t r = 0; r < 1 + std::min<int64_t>(a.repeats, 3); ++r) {
        const double t = prefill_once(static_cast<int32_t>(max_b), random_tokens(a.prefill));
        if (r > 0) pt.push_back(t);
    }
    const double tp = median(pt);
    nlohmann::json prefill_prof = nlohmann::json::object();
    if (a.profile) {
        const std::vector<int32_t> prompt = random_tokens(a.chunk);
        GpuStepSeq q;
        q.slot = static_cast<int32_t>(max_b);
        q.block_table = tables[static_cast<size_t>(max_b)];
        q.tokens = prompt;
        q.want_logits = true;
        model.profile_next_step();
        model.step(std::span<const GpuStepSeq>(&q, 1), LogitRows::Last, s);
        prefill_prof = print_profile("prefill chunk of " + std::to_string(a.chunk), model.profile_result());
    }
    // A long prompt's last chunk attends over everything before it: its profile shows what the context
    // costs (the first chunk's above has none).
    nlohmann::json prefill_last_prof = nullptr;
    if (a.profile && a.prefill > a.chunk) {
        prefill_once(static_cast<int32_t>(max_b), random_tokens(a.prefill), true);
        const int64_t last_start = (a.prefill - 1) / a.chunk * a.chunk;
        prefill_last_prof =
            print_profile("the last prefill chunk, after " + std::to_string(last_start) + " tokens of context",
                          model.profile_result());
    }
    const double fp8_gemm_rate = 1.107e15;  // block-scaled FP8 GEMM 8192³ on the H200 (h200-ceilings.md)
    const double flops = active_flops_per_token(cfg) * a.prefill;
    std::printf("\nprefill %lld tokens in %lld-token chunks: %.3f s median, %.0f tok/s, %.1f%% of the FP8 GEMM rate\n",
                static_cast<long long>(a.prefill), static_cast<long long>(a.chunk), tp, a.prefill / tp,
                100.0 * flops / tp / fp8_gemm_rate);
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    std::printf(
        "HBM: weights %.2f GiB, KV pool %.2f GiB, workspace %.2f GiB (arena %.2f GiB used of %.2f); device "
        "used %.2f GiB of %.2f; copy bandwidth %.2f TB/s; weights made in %.1f s\n",
        weight_bytes / double(1ull << 30), pool.total_bytes() / double(1ull << 30),
        model.workspace_bytes() / double(1ull << 30), arena_used / double(1ull << 30), cap / double(1ull << 30),
        (total_b - free_b) / double(1ull << 30), total_b / double(1ull << 30), bw / 1e12, load_s);

    nlohmann::json j = {
        {"device", dev.name},
        {"model", a.model.empty() ? "synthetic flash shape" : a.model},
        {"layers", cfg.num_hidden_layers},
        {"routed_experts", cfg.n_routed_experts},
        {"experts_per_token", cfg.num_experts_per_tok},
        {"moe_gemv_max_tokens", mo.moe_gemv_max_tokens},
        {"weights_gib", weight_bytes / double(1ull << 30)},
        {"kv_pool_gib", pool.total_bytes() / double(1ull << 30)},
        {"workspace_gib", model.workspace_bytes() / double(1ull << 30)},
        {"arena_used_gib", arena_used / double(1ull << 30)},
        {"device_used_gib", (total_b - free_b) / double(1ull << 30)},
        {"copy_bandwidth_tb_s", bw / 1e12},
        {"hybrid",
         placement
             ? nlohmann::json{{"placement", placement->summary()},
                              {"memory_plan", plan_line},
                              {"gpu_experts_per_layer_min", placement->min_gpu()},
                              {"gpu_expert_pairs", placement->total_gpu()},
                              {"host_expert_pairs", placement->total_host()},
                              {"host_ram_gib", host_store->bytes() / double(1ull << 30)},
                              {"embed_on_host", embed_on_host},
                              {"host_embed_gib", host_embed ? host_embed->bytes() / double(1ull << 30) : 0.0},
                              {"host_threads", model.host_experts()->n_threads()},
                              {"host_isa", model.host_experts()->isa()},
                              {"host_read_bandwidth_gb_s", host_bw / 1e9},
                              {"pinned_h2d_gb_s", pinned_h2d / 1e9},
                              {"host_read_during_copies", contention},
                              {"stream_experts_per_layer", mo.host_experts.stream_experts},
                              {"stream_min_tokens", mo.host_experts.stream_min_tokens},
                              {"streamed_experts_per_step",
                               model.host_expert_streamer() ? model.host_expert_streamer()->experts_per_step() : 0},
                              {"routing", a.routing},
                              {"skew_target_coverage", skew_target},
                              {"skew_router_bias_delta", skew_delta}}
             : nlohmann::json(nullptr)},
        {"decode", decode_json},
        {"prefill",
         {{"tokens", a.prefill},
          {"chunk", a.chunk},
          {"seconds_median", tp},
          {"tok_s", a.prefill / tp},
          {"active_flops_per_token", active_flops_per_token(cfg)},
          {"fraction_of_fp8_block_gemm_rate", flops / tp / fp8_gemm_rate},
          {"profile_ms", prefill_prof},
          {"profile_last_chunk_ms", prefill_last_prof}}},
        {"method",
         "decode: per batch, sequences prefilled to --context, then warmup x steps untimed and repeats x steps "
         "timed; each step = model step + GPU argmax + ids to host, wall clock; median. verify k (--verify-k): after "
         "the decode steps, steps of k + 1 tokens per sequence with every row's logits (model step + sync), "
         "positions kept, median; ratio to the decode step's median. mixed (--mixed-chunk): steps of the decode "
         "rows + a prompt chunk, timed as decode, median of repeats after warmup. prefill: 1 warm-up "
         "prompt then up to 3 timed prompts, median. bytes: weights read per step (distinct experts expected "
         "under uniform routing) + KV entries read."}};
    if (!a.out.empty()) {
        std::ofstream f(a.out);
        ONECARD_CHECK(f.good(), "bench: cannot write {}", a.out);
        f << j.dump(1) << "\n";
    }
    std::printf("%s\n", j.dump().c_str());
}

#endif  // ONECARD_HAVE_CUDA

}  // namespace

void add_cmd_bench(CLI::App& app) {
    auto a = std::make_shared<BenchArgs>();
    CLI::App* cmd = app.add_subcommand("bench", "Benchmark the whole model on the GPU (decode and prefill throughput)");
    cmd->add_option("--synth", a->preset, "synthetic full-dimension weights made on the GPU: flash")
        ->check(CLI::IsMember({"flash"}));
    cmd->add_option("--model", a->model, "checkpoint directory instead of --synth");
    cmd->add_option("--layers", a->layers, "main layers of the synthetic shape (default 43)");
    cmd->add_option("--experts", a->experts,
                    "routed experts per layer of the synthetic model; those that do not fit the GPU live in host RAM "
                    "(default: a model with as many experts as fit, all on the GPU)");
    cmd->add_option("--gpu-experts", a->gpu_experts,
                    "with --experts: GPU-resident experts per layer (default: as many as fit)");
    cmd->add_option("--routing", a->routing, "hybrid routing: uniform (the synthetic router's own) or skewed")
        ->check(CLI::IsMember({"uniform", "skewed"}));
    cmd->add_option("--skew-coverage", a->skew_coverage,
                    "skewed: share of picks aimed at GPU experts (default: the published V4.1 coverage curve, as "
                    "synthetic_skewed_profile models it, at the placement's GPU pair count)");
    cmd->add_option("--host-threads", a->host_threads, "host expert threads (default: hardware threads - 1)");
    cmd->add_option(
        "--stream-experts", a->stream_experts,
        "with --experts: host experts per layer staged over PCIe into HBM on decode steps of at least "
        "--stream-min-tokens tokens: auto (serve's default, the memory plan's default_stream_experts) or N");
    cmd->add_flag(
        "--embed-on-gpu", a->embed_on_gpu,
        "keep the embedding table in HBM when experts go to host RAM (default: the plan moves it to host RAM)");
    cmd->add_option("--stream-min-tokens", a->stream_min_tokens,
                    "smallest decode step that stages host experts (default 32)");
    cmd->add_option("--decode-batch", a->decode_batches, "decode batch sizes, comma-separated (default 1,8,64)");
    cmd->add_option("--moe-gemv-max-tokens", a->moe_gemv_max_tokens,
                    "steps of at most this many tokens run the routed experts on the grouped MXFP4 GEMV, larger "
                    "ones dequantise the experts for cuBLAS (default: the largest allowed, 4096 / top_k, or 64 with "
                    "--experts, whose plan may keep experts in host RAM)");
    cmd->add_flag("--dspark", a->dspark,
                  "with the synthetic shape: the 0731 release (its DSpark drafter in place of the MTP block), whose "
                  "drafts --verify-k times (k <= dspark_block_size)");
    cmd->add_option("--verify-k", a->verify_k,
                    "also time speculative verify steps of k + 1 tokens per sequence for each k listed, e.g. "
                    "1,2,3,5,7 (default: none), and with --synth the MTP block's chain of k draft steps");
    cmd->add_option("--mixed-chunk", a->mixed_chunk,
                    "also time, per decode batch, steps of the decode rows plus a prompt chunk of this many tokens "
                    "of another sequence (a server's step while a long prompt prefills; default 0: off)");
    cmd->add_option("--mixed-context", a->mixed_context,
                    "tokens the mixed steps' prompt holds before its first chunk (default: --context)");
    cmd->add_option("--context", a->context, "tokens each decode sequence holds before timing (default 1024)");
    cmd->add_option("--prefill", a->prefill, "prompt tokens of the prefill measurement (default 8192)");
    cmd->add_option("--chunk", a->chunk, "tokens per step: prefill chunk and the model's step capacity (default 8192)");
    cmd->add_option("--repeats", a->repeats, "timed repeats (default 5)");
    cmd->add_option("--warmup", a->warmup, "untimed repeats first (default 2)");
    cmd->add_option("--steps", a->steps, "decode steps per repeat (default 16)");
    cmd->add_option("--seed", a->seed, "synthetic weight seed");
    cmd->add_option("--headroom-gib", a->headroom_gib, "device memory left outside the arena (default 1.5)");
    cmd->add_option("--out", a->out, "write the figures as JSON here");
    cmd->add_flag("--profile", a->profile,
                  "also time op groups in one extra step per measurement (events between launches)");
    cmd->callback([a] {
#ifdef ONECARD_HAVE_CUDA
        run_bench(*a);
#else
        throw Error("bench: this build has no CUDA backend (configure with -DONECARD_CUDA=ON)");
#endif
    });
}

}  // namespace onecard::cli
