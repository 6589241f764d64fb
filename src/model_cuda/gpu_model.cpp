#include "model_cuda/gpu_model.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops/compressor.cuh"
#include "backend/cuda/ops/elementwise.cuh"
#include "backend/cuda/ops/embed_head.cuh"
#include "backend/cuda/ops/fp8_quant.cuh"
#include "backend/cuda/ops/host_moe.cuh"
#include "backend/cuda/ops/hyper_connection.cuh"
#include "backend/cuda/ops/indexer.cuh"
#include "backend/cuda/ops/kv_write.cuh"
#include "backend/cuda/ops/moe.cuh"
#include "backend/cuda/ops/mxfp4_gemv.cuh"
#include "backend/cuda/ops/rmsnorm.cuh"
#include "backend/cuda/ops/rope.cuh"
#include "backend/cuda/ops/sparse_attention.cuh"
#include "backend/cuda/ops/token_pick.cuh"
#include "backend/cuda/stream.h"
#include "core/error.h"
#include "model/deepseek_v4.h"
#include "model_cuda/gpu_model_buffers.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>

namespace onecard {

namespace {

cuda::HcDims hc_dims(const ModelConfig& c) {
    cuda::HcDims d;
    d.dim = c.hidden_size;
    d.sinkhorn_iters = c.hc_sinkhorn_iters;
    d.hc_eps = static_cast<float>(c.hc_eps);
    d.norm_eps = static_cast<float>(c.rms_norm_eps);
    return d;
}

// Largest number of compressed entries an HCA-style (unselected) layer can show one query.
int64_t max_unselected_entries(const ModelConfig& c, int64_t max_len) {
    int64_t m = 0;
    for (int64_t il = 0; il < c.num_hidden_layers; ++il) {
        const int64_t r = c.compress_ratio(il);
        if (r > 0 && r != 4) m = std::max(m, max_len / r);
    }
    return m;
}

}  // namespace

// Every allocation a GpuModel takes from its arena, in order: the step metadata, the step buffers at
// full capacity, the linears' per-call scratch, the many-token MoE scratch and, for hybrid weights,
// the host-expert staging buffer and the mailbox counters. The constructor carves its arena with it
// and workspace_bytes_for() a sizing arena, so the memory plan's workspace is this code's, not an
// estimate. Nothing here touches the memory.
struct GpuModel::Carved {
    int32_t* meta_i32 = nullptr;
    int64_t* meta_i64 = nullptr;
    void* linear_scratch = nullptr;
    size_t linear_scratch_bytes = 0;
    void* moe_scratch = nullptr;
    size_t moe_scratch_bytes = 0;
    uint8_t* host_staging = nullptr;
    uint32_t* host_counters = nullptr;  // [HostMoeBridge::kDeviceCounters]
    uint8_t* stream_staging = nullptr;  // HostExpertStreamer::staging_bytes
};

int64_t GpuModel::max_moe_gemv_tokens(const ModelConfig& cfg, bool hybrid) {
    const int64_t bound = cuda::kMxfp4MaxGroupPairs / cfg.num_experts_per_tok;
    return hybrid ? std::min<int64_t>(64, bound) : bound;  // host pairs run on the host pool, sized for 64
}

void GpuModel::carve(const ModelConfig& cfg, const GpuModelOptions& opt, int64_t max_blocks_per_seq, bool hybrid,
                     cuda::DeviceArena& arena, Buffers& b, Carved& c) {
    GpuStepMeta::carve(opt.max_num_batched_tokens, opt.max_num_seqs, max_blocks_per_seq, arena, &c.meta_i32,
                       &c.meta_i64);
    const int64_t T = opt.max_num_batched_tokens, D = cfg.hidden_size, H = cfg.num_attention_heads, hd = cfg.head_dim;
    const int64_t nI = cfg.index_n_heads, dI = cfg.index_head_dim, E = cfg.n_routed_experts;
    const int64_t K = cfg.num_experts_per_tok, I = cfg.moe_intermediate_size, W = cfg.sliding_window;
    b.T = T;
    b.max_keys = W + std::max(cfg.index_topk, max_unselected_entries(cfg, opt.max_model_len));
    ONECARD_CHECK(opt.moe_gemv_max_tokens >= 1 && opt.moe_gemv_max_tokens <= max_moe_gemv_tokens(cfg, hybrid),
                  "gpu model: moe_gemv_max_tokens {} must be in [1, {}] ({} with host experts)",
                  opt.moe_gemv_max_tokens, max_moe_gemv_tokens(cfg, false), max_moe_gemv_tokens(cfg, true));
    b.gemv_rows = std::min(T, opt.moe_gemv_max_tokens);
    // All-rows logits (tests) only where they stay small; serving needs one row per sequence, or
    // 1 + k per sequence when its verify steps return the k drafts' rows too.
    ONECARD_CHECK(opt.logits_rows_per_seq >= 1, "gpu model: logits_rows_per_seq {} < 1", opt.logits_rows_per_seq);
    b.logits_rows =
        T * cfg.vocab_size * 4 <= (int64_t{256} << 20) ? T : std::min(T, opt.max_num_seqs * opt.logits_rows_per_seq);
    b.index_scratch_floats = std::min<int64_t>(T * std::max<int64_t>(1, opt.max_model_len / 4), int64_t{64} << 20);
    auto A = [&](auto*& p, int64_t count, const char* tag) {
        using Ptr = std::remove_reference_t<decltype(p)>;
        using Elem = std::remove_pointer_t<Ptr>;
        p = arena.alloc_n<Elem>(static_cast<size_t>(std::max<int64_t>(count, 1)), tag);
    };
    A(b.X, T * 4 * D, "X streams");
    A(b.x, T * D, "x");
    A(b.a, T * D, "sub-block out");
    A(b.pre, T * 4, "hc pre");
    A(b.post, T * 4, "hc post");
    A(b.comb, T * 16, "hc comb");
    b.hc_scratch_floats = cuda::hc_pre_scratch_floats(T, hc_dims(cfg));
    A(b.hc_scratch, static_cast<int64_t>(b.hc_scratch_floats), "hc scratch");
    A(b.qr, T * cfg.q_lora_rank, "qr");
    A(b.qkv, T * (cfg.q_lora_rank + hd), "qr|kv");
    A(b.qrq, GpuLinears::kGemvMaxRows * cfg.q_lora_rank, "qr fp8");
    A(b.qrs, GpuLinears::kGemvMaxRows * cfg.q_lora_rank / 128, "qr fp8 scales");
    A(b.s13, T * 2 * I, "shared gate|up");
    A(b.q, T * H * hd, "q");
    A(b.o, T * H * hd, "attention out");
    A(b.kv, T * hd, "kv");
    A(b.z, T * cfg.o_groups * cfg.o_lora_rank, "wo_a out");
    A(b.ckv, T * 4 * hd, "compressor kv | score");
    A(b.centries, T * hd, "compressed entries");
    A(b.iq, T * nI * dI, "indexer q");
    A(b.iw, T * nI, "indexer weights");
    A(b.ikv, T * 4 * dI, "indexer compressor kv | score");
    A(b.ientries, T * dI, "indexer keys");
    A(b.topk, T * cfg.index_topk, "indexer picks");
    A(b.index_scratch, b.index_scratch_floats, "indexer scores");
    A(b.step_dst, T, "step dst");
    A(b.ring_dst, T, "ring dst");
    A(b.entry_dst, T, "entry dst");
    A(b.key_dst, T, "key dst");
    A(b.kv_off, T * b.max_keys, "attention key offsets");
    A(b.attn_scratch, cuda::sparse_attention_scratch_floats(H, hd), "attention split partials");
    A(b.router, T * E, "router logits");
    A(b.experts, T * K, "routed ids");
    A(b.weights, T * K, "routed weights");
    A(b.sg, T * I, "shared gate");
    A(b.su, T * I, "shared up");
    A(b.sh, T * I, "shared hidden");
    A(b.shared, T * D, "shared out");
    A(b.xr, T * D, "fp8-rounded x");
    const int64_t P = b.gemv_rows * K;
    A(b.y1, P * I, "expert gate");
    A(b.y3, P * I, "expert up");
    A(b.y2, P * D, "expert out");
    A(b.xq, b.gemv_rows * D, "expert xq");
    A(b.xs, b.gemv_rows * D / 128, "expert xs");
    A(b.hq, P * I, "expert hq");
    A(b.hs, P * I / 128, "expert hs");
    A(b.pair_token, P, "pair token");
    A(b.pair_groups, cuda::mxfp4_group_scratch_ints(P), "pair groups");
    const bool streams = hybrid && opt.host_experts.stream_experts > 0;
    if (hybrid) A(b.local_ids, P, "expert slots of the pairs");
    if (streams) A(b.stream_ids, P, "staged expert slots of the pairs");
    if (streams) A(b.stream_groups, cuda::mxfp4_group_scratch_ints(P), "staged pair groups");
    if (opt.count_expert_picks) A(b.pick_counts, cfg.num_hidden_layers * E, "expert pick counts");
    A(b.head_rows, b.logits_rows * 4 * D, "head rows");
    A(b.head_y, b.logits_rows * D, "head y");
    A(b.logits, b.logits_rows * cfg.vocab_size, "logits");
    A(b.ids, b.logits_rows, "greedy ids");
    A(b.sample_params, b.logits_rows, "sampling parameters");
    A(b.sample_masks, b.logits_rows * ((cfg.vocab_size + 31) / 32), "token masks");
    b.sample_scratch = arena.alloc(cuda::sample_rows_scratch_bytes(b.logits_rows, cfg.vocab_size), "sampling scratch");
    if (opt.mtp) {
        A(b.mtp_in, T * 4 * D, "mtp input streams");
        A(b.mtp_pending, opt.max_num_seqs * 4 * D, "mtp pending streams");
    }
    if (opt.dspark) {
        ONECARD_CHECK(cfg.dspark.has_value(), "gpu model: DSpark buffers for a model without the drafter");
        ONECARD_CHECK(opt.logits_rows_per_seq >= cfg.dspark->block_size,
                      "gpu model: {} logits rows per sequence cannot hold a DSpark block of {}",
                      opt.logits_rows_per_seq, cfg.dspark->block_size);
        A(b.taps, T * static_cast<int64_t>(cfg.dspark->target_layer_ids.size()) * D, "dspark taps");
        A(b.dspark_prev, b.logits_rows, "dspark markov tokens");
        A(b.dspark_h, b.logits_rows * D, "dspark pre-norm hidden");
        A(b.dspark_conf, b.logits_rows, "dspark confidence logits");
    }
    A(b.rope_main, static_cast<int64_t>(rope_inv_freqs_for(cfg, false).size()), "rope main");
    A(b.rope_compress, static_cast<int64_t>(rope_inv_freqs_for(cfg, true).size()), "rope compress");
    // Per-call scratch of the linears (quantised activations, padded GEMM rows): a sub-arena.
    const int64_t per_call =
        std::max({T * std::max({D, cfg.q_lora_rank, H * hd, cfg.o_groups * cfg.o_lora_rank, I}) * 4,
                  GpuLinears::group_scratch_bytes(cfg.o_lora_rank, H * hd / cfg.o_groups),
                  GpuLinears::bf16_f32_scratch_bytes(b.logits_rows, D, cfg.vocab_size)});
    c.linear_scratch_bytes = static_cast<size_t>(per_call) + (size_t{80} << 20);
    c.linear_scratch = arena.alloc(c.linear_scratch_bytes, "linear scratch");
    const size_t moe_need = cuda::MoeExperts::scratch_bytes_for(D, I, T * K);
    c.moe_scratch_bytes = opt.moe_scratch_bytes ? opt.moe_scratch_bytes : moe_need;
    ONECARD_CHECK(c.moe_scratch_bytes >= moe_need,
                  "gpu model: the MoE scratch of {} MiB is too small for {} tokens per step (needs {} MiB)",
                  c.moe_scratch_bytes >> 20, T, moe_need >> 20);
    c.moe_scratch = arena.alloc(c.moe_scratch_bytes, "moe scratch");
    if (hybrid) {
        c.host_staging = static_cast<uint8_t*>(
            arena.alloc(cuda::MxHybridExperts::kStagingBuffers * cuda::MxHybridExperts::staging_bytes_for(D, I),
                        "host expert staging"));
        c.host_counters = arena.alloc_n<uint32_t>(HostMoeBridge::kDeviceCounters, "host experts: request counters");
    }
    if (streams)
        c.stream_staging = static_cast<uint8_t*>(arena.alloc(
            HostExpertStreamer::staging_bytes(D, I, opt.host_experts.stream_experts), "host experts staged over PCIe"));
}

int64_t GpuModel::workspace_bytes_for(const ModelConfig& cfg, const GpuModelOptions& opt, const KvCacheSpec& spec,
                                      bool hybrid) {
    // A borrowed arena over no memory: the bookkeeping only. Its base is 256-aligned like cudaMalloc's;
    // a real arena may start mid-way, which costs at most one alignment gap more (added).
    cuda::DeviceArena sizing(reinterpret_cast<void*>(uintptr_t{1} << 40), size_t{1} << 50, "workspace sizing");
    Buffers b;
    Carved c;
    carve(cfg, opt, spec.blocks_for_tokens(opt.max_model_len) + 1, hybrid, sizing, b, c);
    return static_cast<int64_t>(sizing.used()) + 256;
}

GpuModel::GpuModel(const ModelConfig& cfg, const GpuModelWeights& weights, GpuKvPool& pool, const GpuModelOptions& opt,
                   cuda::DeviceArena& arena)
    : cfg_(cfg), w_(weights), pool_(pool), opt_(opt), buf_(std::make_unique<Buffers>()) {
    check_gpu_model_shape(cfg);
    ONECARD_CHECK(opt.max_num_batched_tokens <= pool.max_num_batched_tokens(),
                  "gpu model: {} tokens per step but the KV pool's step region holds {}", opt.max_num_batched_tokens,
                  pool.max_num_batched_tokens());
    ONECARD_CHECK(!opt.mtp || pool.size().n_slots <= opt.max_num_seqs,
                  "gpu model: {} KV slots but MTP pending rows for {} (max_num_seqs)", pool.size().n_slots,
                  opt.max_num_seqs);
    const size_t used_before = arena.used();
    bool hybrid = false;
    for (const GpuBlock& blk : weights.layers) hybrid = hybrid || blk.ffn.hybrid();
    Buffers& b = *buf_;
    Carved c;
    const int64_t max_blocks = pool.spec().blocks_for_tokens(opt.max_model_len) + 1;
    carve(cfg, opt, max_blocks, hybrid, arena, b, c);
    meta_ = std::make_unique<GpuStepMeta>(opt.max_num_batched_tokens, opt.max_num_seqs, max_blocks, pool, c.meta_i32,
                                          c.meta_i64);
    const int64_t E = cfg.n_routed_experts, K = cfg.num_experts_per_tok, D = cfg.hidden_size,
                  I = cfg.moe_intermediate_size, P = b.gemv_rows * K;
    cuda::copy_to_device(b.rope_main, rope_inv_freqs_for(cfg, false));
    cuda::copy_to_device(b.rope_compress, rope_inv_freqs_for(cfg, true));
    std::vector<int32_t> pt(static_cast<size_t>(P));
    for (int64_t i = 0; i < P; ++i) pt[static_cast<size_t>(i)] = static_cast<int32_t>(i / K);
    cuda::copy_to_device(b.pair_token, pt);
    ws_ = std::make_unique<cuda::DeviceArena>(c.linear_scratch, c.linear_scratch_bytes, "linear scratch");
    lin_ = std::make_unique<GpuLinears>(*ws_);
    experts_ = std::make_unique<cuda::MoeExperts>(c.moe_scratch, c.moe_scratch_bytes, opt.max_num_batched_tokens * K);
    if (hybrid) {
        host_staging_ = c.host_staging;
        host_ = std::make_unique<HostMoeBridge>(cfg, weights, b.gemv_rows, opt.host_experts, c.host_counters);
    }
    int64_t staged_layers = 0;
    for (const GpuBlock& blk : weights.layers) staged_layers += blk.ffn.n_stream > 0;
    ONECARD_CHECK(
        staged_layers == 0 || c.stream_staging,
        "gpu model: the weights stage host experts over PCIe in {} layers but host_experts.stream_experts is 0",
        staged_layers);
    if (staged_layers > 0)
        streamer_ = std::make_unique<HostExpertStreamer>(cfg, weights, opt.host_experts.stream_experts,
                                                         opt.host_experts.stream_min_tokens, c.stream_staging);
    if (b.pick_counts)
        CUDA_CHECK(cudaMemset(b.pick_counts, 0, static_cast<size_t>(cfg.num_hidden_layers * E) * sizeof(uint32_t)));
    workspace_bytes_ = static_cast<int64_t>(arena.used() - used_before);
    moe_gemv_ = D % 1024 == 0 && I % 1024 == 0;
}

GpuModel::~GpuModel() {
    drop_graphs();
}

void GpuModel::set_decode_paths(ExpertPath experts, LinearPath linears) {
    const int64_t D = cfg_.hidden_size, I = cfg_.moe_intermediate_size;
    moe_gemv_ = experts == ExpertPath::Gemv && D % 1024 == 0 && I % 1024 == 0;
    lin_->set_gemv(linears == LinearPath::Gemv);
    drop_graphs();
}

void GpuModel::set_faults(const GpuFaultPlan& plan) {
    // The FNUZ fault edits one weight scale in place (and undoes it): the weights are device memory
    // the model only reads otherwise, so the const view is cast away here and nowhere else.
    if (plan.fp8_block_scale_x2 != opt_.faults.fp8_block_scale_x2 && !w_.layers.empty()) {
        float* ws = const_cast<float*>(w_.layers.front().attn.wkv.ws);
        float v = 0.0f;
        cuda::copy_to_host(&v, ws, sizeof(v));
        v = plan.fp8_block_scale_x2 ? v * 2.0f : v * 0.5f;  // powers of two: the undo is exact
        cuda::copy_to_device(ws, &v, sizeof(v));
    }
    if ((plan.rope_off_by_one || plan.swap_expert_weights) && !fault_arena_) {
        const int64_t T = opt_.max_num_batched_tokens;
        fault_arena_ = std::make_unique<cuda::DeviceArena>(static_cast<size_t>(T) * 8 + 1024, "gpu model faults");
        fault_ones_ = fault_arena_->alloc_n<int32_t>(static_cast<size_t>(T), "fault: ones");
        fault_swap_ = fault_arena_->alloc_n<float>(static_cast<size_t>(T), "fault: swap");
        cuda::copy_to_device(fault_ones_, std::vector<int32_t>(static_cast<size_t>(T), 1));
    }
    opt_.faults = plan;
    drop_graphs();
}

void GpuModel::set_stream_recording(bool on) {
    recording_ = on;
    if (!on) recorded_.clear();
}

void GpuModel::record_streams(int64_t point, cudaStream_t s) {
    if (!recording_) return;
    const auto count = static_cast<size_t>(meta_->n * 4 * cfg_.hidden_size);
    if (point == 0) recorded_.assign(static_cast<size_t>(2 * w_.layers.size() + 1) * count, 0.0f);
    CUDA_CHECK(cudaMemcpyAsync(recorded_.data() + static_cast<size_t>(point) * count, buf_->X, count * sizeof(float),
                               cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
}

void GpuModel::tick(const char* label, cudaStream_t s) {
    if (!profiling_) return;
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreate(&e));
    CUDA_CHECK(cudaEventRecord(e, s));
    ticks_.emplace_back(label, e);
}

std::vector<std::pair<std::string, double>> GpuModel::profile_result() {
    std::vector<std::pair<std::string, double>> out;
    if (ticks_.empty()) return out;
    CUDA_CHECK(cudaEventSynchronize(ticks_.back().second));
    std::map<std::string, double> sum;
    for (size_t i = 1; i < ticks_.size(); ++i) {
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, ticks_[i - 1].second, ticks_[i].second));
        sum[ticks_[i].first] += ms;
    }
    for (auto& [label, e] : ticks_) cudaEventDestroy(e);
    ticks_.clear();
    out.assign(sum.begin(), sum.end());
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    return out;
}

void GpuModel::check_integrity() const {
    ws_->check_integrity();
    // Every per-call scratch allocation is released when its linear returns.
    ONECARD_CHECK(ws_->allocations().size() == 2, "gpu model: {} scratch allocations outstanding between steps",
                  ws_->allocations().size() - 2);
    for (const auto& [key, exec] : graphs_)
        ONECARD_CHECK(exec != nullptr && key.n >= 1 && key.n <= kGraphMaxTokens && key.pos_bound <= opt_.max_model_len,
                      "gpu model: a captured graph for {} tokens / bound {} is out of range", key.n, key.pos_bound);
    meta_->check_integrity();
    if (streamer_) streamer_->check_integrity();
}

void GpuModel::drop_graphs() {
    for (auto& [k, g] : graphs_) cudaGraphExecDestroy(g);
    graphs_.clear();
}

const float* GpuModel::step(std::span<const GpuStepSeq> seqs, LogitRows rows, cudaStream_t s) {
    Buffers& b = *buf_;
    if (host_) host_->begin_step();
    build_meta(seqs, rows, s);
    last_run_ = LastRun::Step;
    const StepPlan plan = plan_step(meta_->n, meta_->max_pos);
    // Graphs for steps whose rows are alike (decode, verify): their keys recur. A step with a prompt
    // chunk (rows of different lengths, or one short prompt) has a token count that rarely comes back,
    // so capturing it (~0.1 s on the full model) would cost far more than its eager launches.
    bool uniform = true;
    for (const auto& q : seqs) uniform = uniform && q.tokens.size() == seqs.front().tokens.size();
    uniform = uniform && (seqs.size() > 1 || seqs.front().tokens.size() == 1);
    const bool graph =
        opt_.cuda_graphs && uniform && meta_->n <= kGraphMaxTokens && moe_gemv_ && !profile_ && !recording_;
    if (!graph) {
        profiling_ = profile_;
        profile_ = false;
        forward(plan, s);
        profiling_ = false;
        return b.logits;
    }
    const GraphKey key{meta_->n, meta_->n_out, plan.pos_bound};
    auto it = graphs_.find(key);
    if (it == graphs_.end()) {
        if (graphs_.size() >= 96) drop_graphs();  // positions moved on: older bounds are not reused
        cudaGraph_t g = nullptr;
        CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        try {
            forward(plan, s);
        } catch (...) {
            cudaStreamEndCapture(s, &g);
            if (g) cudaGraphDestroy(g);
            throw;
        }
        CUDA_CHECK(cudaStreamEndCapture(s, &g));
        size_t nodes = 0;
        if (cudaGraphGetNodes(g, nullptr, &nodes) == cudaSuccess) last_graph_nodes_ = static_cast<int64_t>(nodes);
        cudaGraphExec_t exec = nullptr;
        // Node priorities as captured: the host-expert copy stream's tiling kernels run ahead of the step's.
        const cudaError_t err = cudaGraphInstantiateWithFlags(&exec, g, cudaGraphInstantiateFlagUseNodePriority);
        cudaGraphDestroy(g);
        CUDA_CHECK(err);
        it = graphs_.emplace(key, exec).first;
    }
    CUDA_CHECK(cudaGraphLaunch(it->second, s));
    return b.logits;
}

void GpuModel::build_meta(std::span<const GpuStepSeq> seqs, LogitRows rows, cudaStream_t s) {
    meta_->build(seqs, rows, s);
    ONECARD_CHECK(meta_->n_out <= buf_->logits_rows, "gpu model: {} logits rows asked, room for {}", meta_->n_out,
                  buf_->logits_rows);
    for (const auto& q : seqs)
        ONECARD_CHECK(q.start_pos + static_cast<int64_t>(q.tokens.size()) <= opt_.max_model_len,
                      "gpu model: a sequence reaches position {} beyond max_model_len {}",
                      q.start_pos + static_cast<int64_t>(q.tokens.size()), opt_.max_model_len);
}

GpuModel::StepPlan GpuModel::plan_step(int64_t n, int64_t max_pos) const {
    StepPlan p;
    p.n = n;
    // Key lists and indexer scores are sized for positions below a bound, rounded up so that a captured
    // decode graph serves many positions: to a multiple of 512, or of a quarter of the largest power of
    // two <= max_pos + 1 beyond 2048 (at most 25% over what the step needs; a stream decoding to 64K
    // crosses ~24 bounds instead of 128, and each crossing captures a graph per batch size: ~0.1 s).
    const auto need = static_cast<uint64_t>(max_pos + 1);
    const int64_t grain = std::max<int64_t>(512, static_cast<int64_t>(std::bit_floor(std::max<uint64_t>(need, 1))) / 4);
    p.pos_bound = std::min<int64_t>((max_pos + 1 + grain - 1) / grain * grain, opt_.max_model_len);
    p.moe_gemv = n <= buf_->gemv_rows && moe_gemv_;
    p.stream_experts = streamer_ && p.moe_gemv && streamer_->active(n);
    return p;
}

// The attention's fused wq_a|wkv on the GEMV path reads the FP8 copy hc_pre writes.
GpuModel::SubBlockInput GpuModel::attention_input(const StepPlan& p, const GpuBlock& b) const {
    return b.attn.wq_a_wkv.w && lin_->gemv_ok(b.attn.wq_a_wkv, p.n) ? SubBlockInput::Fp8FromHcPre : SubBlockInput::Bf16;
}

// Every first linear of the MoE on its GEMV path (shared w1|w3, the routed experts, the host pairs)
// reads the FP8 copy hc_pre writes.
GpuModel::SubBlockInput GpuModel::moe_input(const StepPlan& p) {
    return p.moe_gemv ? SubBlockInput::Fp8FromHcPre : SubBlockInput::Bf16;
}

cuda::HcPreArgs GpuModel::hc_pre_args(const GpuHC& hc, const bf16* norm, SubBlockInput input) const {
    Buffers& b = *buf_;
    cuda::HcPreArgs a;
    a.X = b.X;
    a.fn = hc.fn;
    a.scale = hc.scale;
    a.base = hc.base;
    a.n_tok = meta_->n;
    a.x = b.x;
    a.pre = b.pre;
    a.post = b.post;
    a.comb = b.comb;
    a.scratch = b.hc_scratch;
    a.scratch_floats = b.hc_scratch_floats;
    a.gemm = &lin_->dense_gemm();
    a.rms_weight = norm;
    a.rms_eps = static_cast<float>(cfg_.rms_norm_eps);
    if (input == SubBlockInput::Fp8FromHcPre) {
        a.xq = b.xq;
        a.xs = b.xs;
    }
    return a;
}

void GpuModel::forward(const StepPlan& p, cudaStream_t s) {
    Buffers& b = *buf_;
    const ModelConfig& c = cfg_;
    const int64_t D = c.hidden_size;
    const int64_t n = meta_->n;
    tick("start", s);
    cuda::embed_streams(meta_->tokens, w_.embed, b.X, n, D, 4, s);
    record_streams(0, s);  // then each main block records points 2·layer + 1 and + 2
    if (p.stream_experts) streamer_->begin_step(s);
    for (const GpuBlock& blk : w_.layers) {
        run_block(p, blk, s);
        if (b.taps) keep_taps(blk.layer_id, s);
    }
    if (p.stream_experts) streamer_->end_step(s);
    head(w_.hc_head, w_.norm, s);
}

void GpuModel::run_block(const StepPlan& p, const GpuBlock& blk, cudaStream_t s) {
    Buffers& b = *buf_;
    const int64_t n = meta_->n;
    const cuda::HcDims hd = hc_dims(cfg_);
    const bool main_layer = blk.layer_id < cfg_.num_hidden_layers;  // recorded points: main layers only
    // x = attn_norm(collapse of the streams); the norm is fused into hc_pre's finishing kernel, and
    // so is x's FP8 quantisation where the first linears that read x take it (the GEMV paths).
    cuda::hc_pre(hc_pre_args(blk.hc_attn, blk.attn_norm, attention_input(p, blk)), hd, s);
    tick("hyper-connections + norms", s);
    attention(p, blk, b.x, b.a, s);
    cuda::hc_post(b.a, b.X, b.post, b.comb, b.X, n, hd, s);
    if (main_layer) record_streams(2 * blk.layer_id + 1, s);
    cuda::hc_pre(hc_pre_args(blk.hc_ffn, blk.ffn_norm, moe_input(p)), hd, s);
    tick("hyper-connections + norms", s);
    moe(p, blk, b.x, b.a, s);
    cuda::hc_post(b.a, b.X, b.post, b.comb, b.X, n, hd, s);
    if (main_layer) record_streams(2 * blk.layer_id + 2, s);
    tick("hyper-connections + norms", s);
}

void GpuModel::head(const GpuHC& hc, const bf16* norm, cudaStream_t s, bf16* keep_hidden) {
    Buffers& b = *buf_;
    const ModelConfig& c = cfg_;
    const int64_t D = c.hidden_size;
    // Head on the wanted rows only.
    const int64_t r = meta_->n_out;
    if (r == 0) return;
    const float eps = static_cast<float>(c.rms_norm_eps);
    // fp32 from the streams to the logits: no bf16 rounding at the end of the pass (storage_points.h).
    gather_rows_f32(b.X, meta_->out_rows, b.head_rows, r, 4 * D, s);
    cuda::hc_head(b.head_rows, hc.fn, hc.base, hc.scale, b.head_y, r, D, static_cast<float>(c.hc_eps), eps, s);
    if (keep_hidden) cuda::f32_to_bf16(b.head_y, keep_hidden, r * D, s);
    cuda::rmsnorm_f32(b.head_y, norm, b.head_y, r, D, eps, s);
    lin_->bf16_f32(w_.head, b.head_y, r, b.logits, s);
    tick("head", s);
}

void GpuModel::check_host_experts() const {
    if (host_) host_->check_step();
}

std::vector<uint64_t> GpuModel::expert_pick_counts(cudaStream_t s) const {
    const size_t n = static_cast<size_t>(cfg_.num_hidden_layers * cfg_.n_routed_experts);
    ONECARD_CHECK(buf_->pick_counts != nullptr,
                  "gpu model: expert pick counting is off (GpuModelOptions::count_expert_picks)");
    std::vector<uint32_t> c(n);
    CUDA_CHECK(cudaMemcpyAsync(c.data(), buf_->pick_counts, n * sizeof(uint32_t), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    return std::vector<uint64_t>(c.begin(), c.end());
}

void GpuModel::reset_expert_pick_counts(cudaStream_t s) {
    if (!buf_->pick_counts) return;
    CUDA_CHECK(cudaMemsetAsync(buf_->pick_counts, 0,
                               static_cast<size_t>(cfg_.num_hidden_layers * cfg_.n_routed_experts) * sizeof(uint32_t),
                               s));
}

const int32_t* GpuModel::argmax_last(cudaStream_t s) {
    cuda::argmax_rows(buf_->logits, buf_->ids, meta_->n_out, cfg_.vocab_size, s);
    return buf_->ids;
}

const int32_t* GpuModel::sample_last(const cuda::SampleParams* params, const uint32_t* masks, int64_t n_mask_rows,
                                     cudaStream_t s) {
    Buffers& b = *buf_;
    const int64_t n = meta_->n_out;
    ONECARD_CHECK(n_mask_rows >= 0 && n_mask_rows <= n && (n_mask_rows == 0 || masks != nullptr),
                  "gpu model: {} mask rows for {} sampled rows", n_mask_rows, n);
    CUDA_CHECK(cudaMemcpyAsync(b.sample_params, params, static_cast<size_t>(n) * sizeof(cuda::SampleParams),
                               cudaMemcpyHostToDevice, s));
    const size_t words = static_cast<size_t>((cfg_.vocab_size + 31) / 32);
    if (n_mask_rows > 0)
        CUDA_CHECK(cudaMemcpyAsync(b.sample_masks, masks, static_cast<size_t>(n_mask_rows) * words * sizeof(uint32_t),
                                   cudaMemcpyHostToDevice, s));
    cuda::sample_rows(b.logits, b.sample_params, n_mask_rows > 0 ? b.sample_masks : nullptr, b.ids, n, cfg_.vocab_size,
                      b.sample_scratch, s);
    return b.ids;
}

}  // namespace onecard
