#include "engine_cuda/cuda_model_runner.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "backend/cuda/ops/token_pick.cuh"
#include "core/error.h"
#include "engine/memory_plan.h"
#include "engine/token_constraint.h"
#include "model_cuda/gpu_synth.h"

#include <algorithm>
#include <thread>

namespace onecard {

CudaModelRunner::CudaModelRunner(const ModelConfig& cfg, const ModelWeights& w, const CudaRunnerOptions& opt)
    : cfg_(cfg), opt_(opt) {
    load(&w, 0);
}

CudaModelRunner::CudaModelRunner(const ModelConfig& cfg, DummyWeights dummy, const CudaRunnerOptions& opt)
    : cfg_(cfg), opt_(opt) {
    load(nullptr, dummy.seed);
}

void CudaModelRunner::load(const ModelWeights* w, uint64_t dummy_seed) {
    const ModelConfig& cfg = cfg_;
    const CudaRunnerOptions& opt = opt_;
    const auto t0 = std::chrono::steady_clock::now();
    check_gpu_model_shape(cfg);
    const auto devices = cuda::list_devices();
    ONECARD_CHECK(!devices.empty(), "cuda runner: no usable GPU ({})", cuda::no_device_reason());
    const cuda::DeviceInfo& d = devices.front();
    report_.device = d.name;
    GpuWeightBytes wb = gpu_weight_bytes(cfg);
    const ExpertPlacement* placement =
        opt.expert_placement && !opt.expert_placement->all_gpu() ? &*opt.expert_placement : nullptr;
    if (placement) {  // only the GPU-resident experts take HBM
        const int64_t all = static_cast<int64_t>(placement->n_layers()) * placement->n_experts;
        const int64_t gpu_part = all > 0 ? wb.routed_experts / all * placement->total_gpu() : 0;
        wb.total -= wb.routed_experts - gpu_part;
        wb.routed_experts = gpu_part;
    }
    if (opt.embed_on_host) {  // the table takes no HBM
        const int64_t embed = cfg.vocab_size * cfg.hidden_size * 2;
        wb.total -= embed;
        wb.embed_head -= embed;
    }
    uint64_t cap = opt.arena_bytes;
    if (cap == 0) {
        ONECARD_CHECK(d.free_bytes > opt.headroom_bytes, "cuda runner: {} has {:.2f} GiB free, less than the headroom",
                      d.name, d.free_bytes / double(1ull << 30));
        cap = d.free_bytes - opt.headroom_bytes;
    }
    // Refuse before uploading anything: the weights alone must leave room for a workspace.
    const uint64_t moe_scratch = opt.moe_scratch_bytes ? opt.moe_scratch_bytes
                                                       : cuda::MoeExperts::scratch_bytes_for(
                                                             cfg.hidden_size, cfg.moe_intermediate_size,
                                                             opt.max_num_batched_tokens * cfg.num_experts_per_tok);
    ONECARD_CHECK(static_cast<uint64_t>(wb.total) + moe_scratch < cap,
                  "cuda runner: the weights need {:.2f} GiB on the GPU (routed experts {:.2f} GiB), the arena has "
                  "{:.2f} GiB; use fewer resident experts or a larger device",
                  wb.total / double(1ull << 30), wb.routed_experts / double(1ull << 30), cap / double(1ull << 30));
    arena_ = std::make_unique<cuda::DeviceArena>(cap, "onecard");
    if (opt.embed_on_host) {
        host_embed_ = std::make_unique<HostEmbedding>(cfg.vocab_size, cfg.hidden_size);
        if (w) host_embed_->fill_from(w->embed);  // dummy: the synthetic fill writes it below
        report_.host_embed_bytes = host_embed_->bytes();
    }
    __nv_bfloat16* embed_at = host_embed_ ? host_embed_->device() : nullptr;
    if (w) {
        weights_ = upload_weights(cfg, *w, *arena_, placement, embed_at);
    } else {  // --load-format dummy: gpu_synth.h's random weights, made in place
        weights_ = synth_weights_on_device(cfg, *arena_, dummy_seed, stream_.get(), placement, embed_at);
        stream_.sync();
    }
    if (opt.mtp_drafter) {
        ONECARD_CHECK(!cfg.dspark && cfg.n_mtp_blocks() >= 1 && (w == nullptr || !w->mtp.empty()),
                      "cuda runner: the MTP drafter needs a model with an mtp.0 block");
        if (w) {
            weights_.mtp = upload_mtp_weights(cfg, *w, *arena_);
        } else {  // dummy weights: the block synthesised like the rest
            weights_.mtp = synth_mtp_on_device(cfg, *arena_, dummy_seed, stream_.get());
            stream_.sync();
        }
    }
    if (opt.dspark_drafter) {
        ONECARD_CHECK(!opt.mtp_drafter && cfg.dspark && (w == nullptr || w->dspark),
                      "cuda runner: the DSpark drafter needs a 0731 model (dspark_* config keys and mtp.0..2 stages), "
                      "and not the MTP drafter as well");
        if (w) {
            weights_.dspark = upload_dspark_weights(cfg, *w, *arena_);
        } else {
            weights_.dspark = synth_dspark_on_device(cfg, *arena_, dummy_seed, stream_.get());
            stream_.sync();
        }
    }
    if (placement) {
        host_store_ = std::make_unique<HostExpertStore>(cfg, *placement);
        if (w)
            host_store_->fill_from(*w);
        else
            host_store_->fill_synthetic(dummy_seed,
                                        static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
        attach_host_experts(weights_, *host_store_, *arena_, opt.host_experts.stream_experts);
        report_.host_expert_bytes = host_store_->bytes();
        report_.placement = placement->summary();
    }
    report_.arena_bytes = cap;
    report_.weight_bytes = arena_->used();
    report_.upload_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

CudaModelRunner::~CudaModelRunner() = default;

void CudaModelRunner::PinnedFree::operator()(uint32_t* p) const {
    cudaFreeHost(p);
}

GpuModelOptions CudaModelRunner::model_options(const ModelConfig& cfg, const CudaRunnerOptions& opt, bool hybrid) {
    GpuModelOptions mo;
    mo.max_num_batched_tokens = opt.max_num_batched_tokens;
    mo.moe_gemv_max_tokens =
        opt.moe_gemv_max_tokens > 0 ? opt.moe_gemv_max_tokens : GpuModel::max_moe_gemv_tokens(cfg, hybrid);
    mo.max_num_seqs = opt.max_num_seqs;
    mo.max_model_len = opt.max_model_len;
    mo.moe_scratch_bytes = opt.moe_scratch_bytes;
    mo.host_experts = opt.host_experts;
    mo.count_expert_picks = opt.count_expert_picks;
    mo.mtp = opt.mtp_drafter;
    mo.dspark = opt.dspark_drafter;
    const bool drafts = opt.mtp_drafter || opt.dspark_drafter;
    mo.logits_rows_per_seq = 1 + (drafts ? opt.num_speculative_tokens : 0);  // a verify step's rows
    // A DSpark block returns its B rows per sequence.
    if (opt.dspark_drafter) mo.logits_rows_per_seq = std::max(mo.logits_rows_per_seq, cfg.dspark->block_size);
    return mo;
}

int64_t CudaModelRunner::workspace_bytes(const ModelConfig& cfg, const CudaRunnerOptions& opt, const KvCacheSpec& spec,
                                         bool hybrid) {
    // The KV pool's per-step entry region is allocated with the pool but sized by the step: count it here.
    return GpuModel::workspace_bytes_for(cfg, model_options(cfg, opt, hybrid), spec, hybrid) +
           opt.max_num_batched_tokens * spec.entry.entry_bytes();
}

KvModelShape CudaModelRunner::kv_model_shape() const {
    return kv_model_shape_from_config(cfg_);
}

void CudaModelRunner::bind_kv_pool(const KvCacheSpec& spec, const KvPoolSize& size) {
    ONECARD_CHECK(pool_ == nullptr, "cuda runner: the KV pool is already bound");
    const size_t before = arena_->used();
    pool_ = std::make_unique<GpuKvPool>(spec, size, opt_.max_num_batched_tokens, *arena_);
    report_.kv_pool_bytes = arena_->used() - before;
    report_.kv_token_capacity = size.n_blocks * spec.block_size;
    report_.kv_slots = size.n_slots;
    const bool hybrid = opt_.expert_placement && !opt_.expert_placement->all_gpu();
    model_ = std::make_unique<GpuModel>(cfg_, weights_, *pool_, model_options(cfg_, opt_, hybrid), *arena_);
    // Pinned, so a constrained row's mask uploads asynchronously behind the forward (execute()).
    // A masked row's index counts the verify rows before it.
    mask_rows_cap_ =
        std::max<int64_t>(1, std::min(opt_.max_num_seqs * model_options(cfg_, opt_, hybrid).logits_rows_per_seq,
                                      opt_.max_num_batched_tokens));
    void* pinned = nullptr;
    CUDA_CHECK(cudaHostAlloc(&pinned,
                             static_cast<size_t>(mask_rows_cap_ * token_mask_words(cfg_.vocab_size)) * sizeof(uint32_t),
                             cudaHostAllocDefault));
    masks_host_.reset(static_cast<uint32_t*>(pinned));
    report_.workspace_bytes = static_cast<uint64_t>(model_->workspace_bytes());
    report_.free_after = arena_->remaining();
}

void CudaModelRunner::LazyPinned::reset(uint8_t* p, int64_t n, int64_t entry_bytes) {
    base = p;
    bytes = std::max<int64_t>(n, 0);
    // Whole entries per chunk: one async copy must lie inside one registration (CUDA refuses a copy
    // spanning two with "invalid argument").
    chunk = entry_bytes > 0 ? std::max<int64_t>(1, kChunkTarget / entry_bytes) * entry_bytes : kChunkTarget;
    pinned.assign(static_cast<size_t>((bytes + chunk - 1) / chunk), 0);
}

void CudaModelRunner::LazyPinned::ensure(const uint8_t* p, int64_t n) {
    ONECARD_CHECK(p >= base && p + n <= base + bytes, "cuda runner: a host-tier copy outside its arena");
    ONECARD_CHECK((p - base) / chunk == (p + n - 1 - base) / chunk,
                  "cuda runner: a host-tier entry spans two pinned chunks");
    for (int64_t c = (p - base) / chunk; c <= (p + n - 1 - base) / chunk; ++c) {
        if (pinned[static_cast<size_t>(c)]) continue;
        const int64_t len = std::min(chunk, bytes - c * chunk);
        CUDA_CHECK(cudaHostRegister(base + c * chunk, static_cast<size_t>(len), cudaHostRegisterDefault));
        pinned[static_cast<size_t>(c)] = 1;
    }
}

CudaModelRunner::LazyPinned::~LazyPinned() {
    for (size_t c = 0; c < pinned.size(); ++c)
        if (pinned[c]) cudaHostUnregister(base + static_cast<int64_t>(c) * chunk);  // nothing to do on failure
}

void CudaModelRunner::bind_host_tier(const KvHostMemory& mem) {
    ONECARD_CHECK(pool_ != nullptr && host_tier_.snapshot_bytes == 0 && host_tier_.block_bytes == 0,
                  "cuda runner: bind_host_tier() before bind_kv_pool() or twice");
    ONECARD_CHECK(mem.n_snapshots == 0 || mem.snapshot_bytes == pool_->spec().slot_bytes,
                  "cuda runner: snapshots of {} bytes, but a slot is {}", mem.snapshot_bytes, pool_->spec().slot_bytes);
    ONECARD_CHECK(mem.n_blocks == 0 || mem.block_bytes == pool_->spec().block_bytes,
                  "cuda runner: host-tier blocks of {} bytes, but a block is {}", mem.block_bytes,
                  pool_->spec().block_bytes);
    host_tier_ = mem;
    pinned_snapshots_.reset(mem.snapshots, mem.n_snapshots * mem.snapshot_bytes, mem.snapshot_bytes);
    pinned_blocks_.reset(mem.blocks, mem.n_blocks * mem.block_bytes, mem.block_bytes);
    report_.host_tier_bytes =
        static_cast<uint64_t>(mem.n_snapshots * mem.snapshot_bytes + mem.n_blocks * mem.block_bytes);
}

void CudaModelRunner::queue_prefix_copies_in(const SchedulerOutput& batch) {
    const auto block_bytes = static_cast<size_t>(pool_->spec().block_bytes);
    auto check_entry = [this](int64_t e) {
        ONECARD_CHECK(e >= 0 && e < host_tier_.n_blocks, "cuda runner: host-tier entry {} outside [0, {})", e,
                      host_tier_.n_blocks);
    };
    // Spills first: a block evicted this step may be the target of one of this step's loads.
    for (const KvBlockCopy& c : batch.block_spills) {
        check_entry(c.host_entry);
        pinned_blocks_.ensure(host_tier_.block(c.host_entry), host_tier_.block_bytes);
        CUDA_CHECK(cudaMemcpyAsync(host_tier_.block(c.host_entry), pool_->base() + pool_->block_offset(c.block),
                                   block_bytes, cudaMemcpyDeviceToHost, stream_.get()));
    }
    for (const KvBlockCopy& c : batch.block_loads) {
        check_entry(c.host_entry);
        pinned_blocks_.ensure(host_tier_.block(c.host_entry), host_tier_.block_bytes);
        CUDA_CHECK(cudaMemcpyAsync(pool_->base() + pool_->block_offset(c.block), host_tier_.block(c.host_entry),
                                   block_bytes, cudaMemcpyHostToDevice, stream_.get()));
    }
    for (const auto& r : batch.requests) {
        if (r.restore_snapshot < 0) continue;
        ONECARD_CHECK(r.restore_snapshot < host_tier_.n_snapshots, "cuda runner: snapshot {} outside [0, {})",
                      r.restore_snapshot, host_tier_.n_snapshots);
        pinned_snapshots_.ensure(host_tier_.snapshot(r.restore_snapshot), host_tier_.snapshot_bytes);
        CUDA_CHECK(
            cudaMemcpyAsync(pool_->base() + pool_->slot_offset(r.kv.slot), host_tier_.snapshot(r.restore_snapshot),
                            static_cast<size_t>(pool_->spec().slot_bytes), cudaMemcpyHostToDevice, stream_.get()));
    }
}

void CudaModelRunner::queue_snapshot_saves(const SchedulerOutput& batch) {
    for (const auto& r : batch.requests)
        for (const auto& save : r.save_snapshots) {
            ONECARD_CHECK(save.pos == r.start_pos + r.n_tokens(),
                          "cuda runner: request {} asks for a snapshot at {} inside its chunk [{}, {})", r.id, save.pos,
                          r.start_pos, r.start_pos + r.n_tokens());
            ONECARD_CHECK(save.id >= 0 && save.id < host_tier_.n_snapshots, "cuda runner: snapshot {} outside [0, {})",
                          save.id, host_tier_.n_snapshots);
            pinned_snapshots_.ensure(host_tier_.snapshot(save.id), host_tier_.snapshot_bytes);
            CUDA_CHECK(cudaMemcpyAsync(host_tier_.snapshot(save.id), pool_->base() + pool_->slot_offset(r.kv.slot),
                                       static_cast<size_t>(pool_->spec().slot_bytes), cudaMemcpyDeviceToHost,
                                       stream_.get()));
        }
}

RunnerOutput CudaModelRunner::execute(const SchedulerOutput& batch) {
    ONECARD_CHECK(model_ != nullptr, "cuda runner: bind_kv_pool() was not called");
    for (RequestId id : batch.finished_ids) {
        tables_.erase(id);
        mtp_pos_.erase(id);
    }
    for (RequestId id : batch.preempted_ids) {
        tables_.erase(id);
        mtp_pos_.erase(id);
    }
    RunnerOutput out;
    out.vocab_size = cfg_.vocab_size;
    if (batch.requests.empty()) return out;
    for (const auto& r : batch.requests) apply_block_ids(r, tables_[r.id]);
    // Speculation: each drafting row feeds [next, drafts...] and gets the logits of all of them.
    std::vector<RowDraft> drafts(batch.requests.size());
    std::vector<std::vector<int32_t>> fed(batch.requests.size());
    if (spec_k_ > 0) drafts = spec_dspark_ ? draft_with_dspark(batch) : draft_with_mtp(batch);
    queue_prefix_copies_in(batch);
    std::vector<GpuStepSeq> seqs;
    seqs.reserve(batch.requests.size());
    for (size_t i = 0; i < batch.requests.size(); ++i) {
        const auto& r = batch.requests[i];
        fed[i].assign(r.token_ids.begin(), r.token_ids.end());
        fed[i].insert(fed[i].end(), drafts[i].tokens.begin(), drafts[i].tokens.end());
        GpuStepSeq q;
        q.slot = r.kv.slot;
        q.block_table = tables_[r.id];  // GpuStepMeta sends the device row only what changed
        q.start_pos = r.start_pos;
        q.tokens = fed[i];
        q.want_logits = r.sample;
        q.logits_rows = 1 + static_cast<int64_t>(drafts[i].tokens.size());
        seqs.push_back(q);
        if (r.sample) out.row_ids.push_back(r.id);
    }
    const float* logits = model_->step(seqs, LogitRows::Last, stream_.get());
    if (spec_dspark_) model_->dspark_push(stream_.get());  // the drafter's context rows of every fed token
    queue_snapshot_saves(batch);
    // Rows the engine lets us sample are drawn on the GPU (only their ids come back); the others'
    // logits are copied for the host sampler. A greedy drafting row's k + 1 verify rows are drawn by
    // argmax; a sampled one's come to the host (verify_sampled).
    // Grammar masks overlap the forward: step() has only queued the forward on the stream, so the
    // constrained rows' masks (RowSampling::fill_mask, the engine's grammar matchers) are built here
    // on the host while the GPU computes the logits they will mask. They go to pinned memory, are
    // uploaded behind the forward and applied inside the sampling kernel (sample_last): a step waits
    // for its masks only when building them outlasts the forward. The pinned rows are rewritten only
    // in the next execute(), after this one's stream_.sync().
    const int64_t words = token_mask_words(cfg_.vocab_size);
    int64_t n_mask_rows = 0;
    std::vector<cuda::SampleParams> params;
    std::vector<int64_t> host_rows, first_row(batch.requests.size(), -1);
    for (size_t i = 0; i < batch.requests.size(); ++i) {
        const auto& r = batch.requests[i];
        if (!r.sample) continue;
        const auto k = static_cast<int64_t>(drafts[i].tokens.size());
        for (int64_t j = 0; j < k; ++j) {
            cuda::SampleParams v;
            v.temperature = 0.0f;  // a verify row: argmax matching (sampled rows: the host decides)
            params.push_back(v);
        }
        const auto row = static_cast<int64_t>(params.size());
        first_row[i] = row - k;
        cuda::SampleParams p;
        if (r.sampling) {
            p.temperature = r.sampling->temperature;
            p.top_k = r.sampling->top_k;
            p.top_p = r.sampling->top_p;
            p.min_p = r.sampling->min_p;
            p.seed = r.sampling->seed;
            p.counter = r.sampling->counter;
            if (r.sampling->fill_mask) {
                ONECARD_CHECK(row < mask_rows_cap_, "cuda runner: sampled row {} past the {} rows of token masks", row,
                              mask_rows_cap_);
                r.sampling->fill_mask(std::span<uint32_t>(masks_host_.get() + row * words, static_cast<size_t>(words)));
                p.masked = 1;
                n_mask_rows = row + 1;
            }
        } else {
            p.temperature = 0.0f;  // a cheap draw whose token is not used
            host_rows.push_back(static_cast<int64_t>(params.size()));
        }
        params.push_back(p);
    }
    const int64_t V = cfg_.vocab_size;
    std::vector<int32_t> ids;
    if (host_rows.size() < params.size()) {
        const int32_t* d_ids = model_->sample_last(params.data(), masks_host_.get(), n_mask_rows, stream_.get());
        ids.resize(params.size());
        CUDA_CHECK(cudaMemcpyAsync(ids.data(), d_ids, ids.size() * 4, cudaMemcpyDeviceToHost, stream_.get()));
    }
    out.logits.resize(host_rows.size() * static_cast<size_t>(V));
    for (size_t j = 0; j < host_rows.size(); ++j)
        CUDA_CHECK(cudaMemcpyAsync(out.logits.data() + j * V, logits + host_rows[j] * V, static_cast<size_t>(V) * 4,
                                   cudaMemcpyDeviceToHost, stream_.get()));
    // Sampled drafting rows: their k + 1 verify rows, for the host's decision.
    std::vector<std::vector<float>> verify_rows(batch.requests.size());
    for (size_t i = 0; i < batch.requests.size(); ++i) {
        if (drafts[i].q.empty()) continue;
        const size_t n = (drafts[i].tokens.size() + 1) * static_cast<size_t>(V);
        verify_rows[i].resize(n);
        CUDA_CHECK(cudaMemcpyAsync(verify_rows[i].data(), logits + first_row[i] * V, n * 4, cudaMemcpyDeviceToHost,
                                   stream_.get()));
    }
    stream_.sync();
    model_->check_host_experts();  // a host expert layer that did not answer fails the step
    if (host_store_ && opt_.expert_swap_interval > 0 && ++steps_since_swap_check_ >= opt_.expert_swap_interval) {
        steps_since_swap_check_ = 0;
        maybe_swap_experts();
    }
    for (int64_t i : host_rows)
        if (!ids.empty()) ids[static_cast<size_t>(i)] = -1;
    // One token per sampled row, or (drafting rows) the accepted drafts and the correction or bonus.
    std::vector<int64_t> kept(batch.requests.size());
    for (size_t i = 0; i < batch.requests.size(); ++i) {
        const auto& r = batch.requests[i];
        kept[i] = r.n_tokens();
        if (!r.sample) continue;
        const auto row = static_cast<size_t>(first_row[i]);
        RunnerOutput::SpecRow sr;
        const std::vector<int32_t>& d = drafts[i].tokens;
        if (!d.empty()) {
            SpecVerdict v;
            if (drafts[i].q.empty()) {  // greedy: argmax matching
                while (v.n_accepted < static_cast<int64_t>(d.size()) &&
                       d[static_cast<size_t>(v.n_accepted)] == ids[row + static_cast<size_t>(v.n_accepted)])
                    ++v.n_accepted;
                v.token = ids[row + static_cast<size_t>(v.n_accepted)];
            } else {
                v = verify_sampled(r, drafts[i], verify_rows[i]);
            }
            sr.n_drafts = static_cast<int64_t>(d.size());
            sr.tokens.assign(d.begin(), d.begin() + v.n_accepted);
            sr.tokens.push_back(v.token);
            kept[i] = 1 + v.n_accepted;
        }
        if (!ids.empty()) out.tokens.push_back(sr.tokens.empty() ? ids[row] : sr.tokens.front());
        if (spec_k_ > 0) out.spec.push_back(std::move(sr));
    }
    if (spec_k_ > 0 && !spec_dspark_) mtp_catch_up(batch, fed, kept);
    return out;
}

// One swap at most per check: in the layer where a host expert's recent picks most exceed its
// coldest GPU expert's, if by more than 2x + 8 picks (hysteresis, so experts do not flap). Recent
// picks decay by half each check.
void CudaModelRunner::maybe_swap_experts() {
    const std::vector<uint64_t> now = model_->expert_pick_counts(stream_.get());
    const int64_t L = cfg_.num_hidden_layers, E = cfg_.n_routed_experts;
    if (last_counts_.size() != now.size()) {
        last_counts_.assign(now.size(), 0);
        recent_picks_.assign(now.size(), 0.0);
    }
    for (size_t i = 0; i < now.size(); ++i) {
        recent_picks_[i] = 0.5 * recent_picks_[i] + static_cast<double>(now[i] - last_counts_[i]);
        last_counts_[i] = now[i];
    }
    const ExpertPlacement& p = host_store_->placement();
    double best_gain = 0;
    int64_t best_layer = -1;
    int32_t best_host = -1, best_gpu = -1;
    for (int64_t l = 0; l < L; ++l) {
        if (p.n_host(l) == 0 || p.n_gpu(l) == 0) continue;
        int32_t hot = -1, cold = -1;
        for (int64_t e = 0; e < E; ++e) {
            const double c = recent_picks_[static_cast<size_t>(l * E + e)];
            if (p.is_on_gpu(l, e)) {
                if (cold < 0 || c < recent_picks_[static_cast<size_t>(l * E + cold)]) cold = static_cast<int32_t>(e);
            } else if (hot < 0 || c > recent_picks_[static_cast<size_t>(l * E + hot)]) {
                hot = static_cast<int32_t>(e);
            }
        }
        const double h = recent_picks_[static_cast<size_t>(l * E + hot)],
                     g = recent_picks_[static_cast<size_t>(l * E + cold)];
        if (h > 2.0 * g + 8.0 && h - g > best_gain) {
            best_gain = h - g;
            best_layer = l;
            best_host = hot;
            best_gpu = cold;
        }
    }
    if (best_layer < 0) return;
    swap_host_expert(weights_, *host_store_, best_layer, best_host, best_gpu, model_->host_staging(), stream_.get());
    ++report_.expert_swaps;
    report_.placement = host_store_->placement().summary();
}

std::vector<uint64_t> CudaModelRunner::expert_pick_counts() {
    ONECARD_CHECK(model_ != nullptr, "cuda runner: bind_kv_pool() was not called");
    return model_->expert_pick_counts(stream_.get());
}

void CudaModelRunner::check_integrity() const {
    arena_->check_integrity();
    if (pool_) pool_->check_integrity();
    if (model_) model_->check_integrity();
    if (host_embed_) host_embed_->check_integrity();
    if (host_store_) host_store_->check_integrity();
    for (const auto& [id, table] : tables_)
        for (int32_t b : table)
            ONECARD_CHECK(pool_ && b >= 0 && b < pool_->size().n_blocks,
                          "cuda runner: request {} holds block {} outside the pool", id, b);
}

}  // namespace onecard
