// CudaModelRunner: executes a SchedulerOutput with GpuModel (model_cuda/gpu_model.h). The weights
// go to HBM once at construction; bind_kv_pool() puts the engine's KV pool (slots + paged blocks,
// kvcache's byte format) in HBM and sizes the step workspace. The scheduler's slot and block ids
// address that pool directly, so preemption frees exactly what the manager frees; the runner keeps
// only the token count per live request, to check the scheduler's positions.
// Sampled rows the engine marks as needing no host work (ScheduledRequest::sampling) are drawn on the
// GPU and only their token ids come back; the logits of the others (penalties, logprobs) come back
// for the engine's sampler. Grammar-constrained rows are drawn on the GPU too: their token masks are
// built on the host while the forward runs and applied in the sampling kernel (execute()).
#pragma once

#include "backend/cuda/arena.h"
#include "backend/cuda/stream.h"
#include "engine/model_runner.h"
#include "engine/spec_verify.h"
#include "model/config.h"
#include "model/expert_placement.h"
#include "model/weights.h"
#include "model_cuda/gpu_model.h"
#include "model_cuda/host_embedding.h"
#include "model_cuda/host_expert_store.h"

#include <chrono>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

namespace onecard {

struct CudaRunnerOptions {
    int64_t max_model_len = 8192;
    int64_t max_num_seqs = 64;
    int64_t max_num_batched_tokens = 2048;  // the scheduler's per-step token budget
    // Device memory the runner takes in one cudaMalloc; 0 = the device's free memory less headroom.
    uint64_t arena_bytes = 0;
    uint64_t headroom_bytes = 2ull << 30;
    size_t moe_scratch_bytes = 0;  // 0: what max_num_batched_tokens needs
    // GpuModelOptions::moe_gemv_max_tokens: steps of at most this many tokens run the routed experts on
    // the grouped MXFP4 GEMV. 0: GpuModel::max_moe_gemv_tokens (model_options).
    int64_t moe_gemv_max_tokens = 0;
    // The memory plan's expert placement (engine/memory_plan.h); experts it keeps off the GPU are
    // pinned in host RAM and computed by the host expert pool. Unset: every expert on the GPU.
    std::optional<ExpertPlacement> expert_placement;
    int64_t kv_cache_bytes = 0;  // the plan's KV pool budget (0: the caller sizes the pool itself)
    // The plan's embed_on_host: the embedding table in pinned, device-mapped host RAM (HostEmbedding).
    bool embed_on_host = false;
    HostMoeOptions host_experts;
    bool count_expert_picks = false;  // keep per-(layer, expert) pick counts (expert_pick_counts)
    // Re-placement while serving (hybrid only; needs count_expert_picks): every this many steps the
    // runner compares recent picks and swaps at most one host expert that became hot with the
    // coldest GPU expert of its layer. 0 = off.
    int64_t expert_swap_interval = 0;
    // Speculative decoding with the checkpoint's mtp.0 block (`--speculative-config` method "mtp"):
    // upload the block and keep its buffers, for up to num_speculative_tokens drafts per row (sizes the
    // logits rows a verify step returns).
    bool mtp_drafter = false;
    // Speculative decoding with the 0731 checkpoint's DSpark drafter (method "dspark"): upload the
    // drafter and keep its buffers (num_speculative_tokens <= dspark_block_size). Not with mtp_drafter.
    bool dspark_drafter = false;
    int64_t num_speculative_tokens = 0;
};

// What the startup report prints (serve): where the memory went and how long loading took.
struct CudaRunnerReport {
    std::string device;
    uint64_t arena_bytes = 0, weight_bytes = 0, kv_pool_bytes = 0, workspace_bytes = 0, free_after = 0;
    uint64_t host_expert_bytes = 0;  // pinned host RAM holding the experts kept off the GPU
    uint64_t host_embed_bytes = 0;   // pinned host RAM holding the embedding table (embed_on_host)
    uint64_t host_tier_bytes = 0;    // pinned host RAM of the prefix cache (snapshots, host KV tier)
    std::string placement;           // ExpertPlacement::summary(), or empty when every expert is on the GPU
    int64_t expert_swaps = 0;        // re-placements done while serving
    int64_t kv_token_capacity = 0, kv_slots = 0;
    double upload_seconds = 0;
};

// vLLM's --load-format dummy: random weights of the config's full shape made on the device
// (model_cuda/gpu_synth.h; host experts and a host embedding table filled likewise), for
// benchmarks and serving tests of shapes whose checkpoint is not at hand. Same seed, same weights.
struct DummyWeights {
    uint64_t seed = 1;
};

class CudaModelRunner : public ModelRunner {
public:
    // Uploads the weights (throws onecard::Error when the model does not fit or the shape is unsupported).
    CudaModelRunner(const ModelConfig& cfg, const ModelWeights& w, const CudaRunnerOptions& opt);
    // The same with dummy weights instead of a checkpoint's.
    CudaModelRunner(const ModelConfig& cfg, DummyWeights dummy, const CudaRunnerOptions& opt);
    ~CudaModelRunner() override;

    int64_t vocab_size() const override { return cfg_.vocab_size; }
    int64_t max_model_len() const override { return opt_.max_model_len; }
    KvModelShape kv_model_shape() const override;
    void bind_kv_pool(const KvCacheSpec& spec, const KvPoolSize& size) override;
    // Prefix caching: a snapshot is the sequence's whole slot (window rings and compressor rings,
    // spec.slot_bytes), copied out after a chunk that ends at a block boundary (a step computes its
    // chunk in one pass, so not inside one) and back into a fresh slot on a hit. Snapshots and
    // host-tier blocks live in the engine's host memory, registered as pinned here; every copy runs on
    // the compute stream (spills and loads and restores before the step's kernels, saves after), so it
    // is ordered against every kernel that reads or writes the same device bytes: a restore cannot race
    // a running step (the garbling vLLM #47282 saw with a side stream and no event). The host memory is
    // registered (pinned) 1 GiB at a time as copies first reach it.
    bool supports_prefix_caching() const override { return true; }
    int64_t prefix_snapshot_bytes(const KvCacheSpec& spec) const override { return spec.slot_bytes; }
    bool prefix_snapshots_inside_chunks() const override { return false; }
    void bind_host_tier(const KvHostMemory& mem) override;
    RunnerOutput execute(const SchedulerOutput& batch) override;
    // Speculative decoding (cuda_spec_runner.cpp): "mtp" when the runner was built with mtp_drafter
    // (a checkpoint with mtp.0, or dummy weights), "dspark" with dspark_drafter (0731). Rows with drafts are drafted by
    // the MTP block and verified in the step's forward. Greedy rows: argmax drafts and argmax matching on the device
    // (the output is the plain greedy output). Sampled rows: the drafter's and the verify rows' logits come to the
    // host, where the CPU backend's code draws the drafts and decides (engine/spec_verify.h: standard speculative
    // sampling, output distributed as the target's). Every step also runs the MTP block over the positions the step
    // kept, so a row can draft at any step.
    bool supports_speculation(const std::string& method) const override;
    void enable_speculation(const SpeculativeConfig& config) override;

    const CudaRunnerReport& report() const { return report_; }
    // The GpuModel options bind_kv_pool() uses, and the workspace such a model takes (exact: the
    // memory plan's workspace_bytes). hybrid: the placement keeps experts in host RAM.
    static GpuModelOptions model_options(const ModelConfig& cfg, const CudaRunnerOptions& opt, bool hybrid);
    static int64_t workspace_bytes(const ModelConfig& cfg, const CudaRunnerOptions& opt, const KvCacheSpec& spec,
                                   bool hybrid);
    // Picks per (layer, expert) counted on the GPU since start (CudaRunnerOptions::count_expert_picks).
    std::vector<uint64_t> expert_pick_counts();
    // Throws unless the arena, the KV pool and the model's state (its block-table rows among it) are sound
    // and every live request's block table names blocks of the pool.
    // A request's token count lives in the scheduler alone (Request::num_computed_tokens; the step's
    // start_pos): the runner keeps no second counter.
    void check_integrity() const;

private:
    void load(const ModelWeights* w, uint64_t dummy_seed);  // w == nullptr: dummy weights from the seed
    // The host tier's copies and the snapshot restores of a step, queued on the stream before its forward.
    void queue_prefix_copies_in(const SchedulerOutput& batch);
    void queue_snapshot_saves(const SchedulerOutput& batch);  // after the forward
    // Speculative decoding: the drafts of the batch's rows with n_draft_tokens (index = request index
    // in the batch; empty tokens: no drafts), from the MTP block (the MTP position before each row's
    // next token is final, the further ones are dropped). Sampled rows also get q, the [k, vocab]
    // distributions their drafts were drawn from.
    struct RowDraft {
        std::vector<int32_t> tokens;
        std::vector<double> q;  // sampled rows only
    };
    std::vector<RowDraft> draft_with_mtp(const SchedulerOutput& batch);
    // The same from the DSpark drafter: one block pass for all drafting rows, then the Markov head slot
    // by slot (docs/dspark.md §3-4); its rings are kept up by GpuModel::dspark_push after every step.
    std::vector<RowDraft> draft_with_dspark(const SchedulerOutput& batch);
    // The drafting rows of a batch: decode rows the engine gave drafts (it gives them only to rows the
    // runner samples itself, without a mask) at a position where drafting can start.
    std::vector<size_t> drafting_rows(const SchedulerOutput& batch) const;
    // A sampled row's verdict from its k + 1 verify logits rows [k + 1, vocab] on the host.
    SpecVerdict verify_sampled(const ScheduledRequest& r, const RowDraft& d, std::span<const float> rows) const;
    // After the step's main forward, with its tokens (fed[i]) and kept counts (kept[i]) per request:
    // runs the MTP block over every position the step kept whose next token is known, and keeps the
    // main streams of each row's last kept position for its next draft.
    void mtp_catch_up(const SchedulerOutput& batch, const std::vector<std::vector<int32_t>>& fed,
                      const std::vector<int64_t>& kept);

    ModelConfig cfg_;
    CudaRunnerOptions opt_;
    cuda::Stream stream_;
    std::unique_ptr<cuda::DeviceArena> arena_;
    std::unique_ptr<HostExpertStore> host_store_;  // experts kept in host RAM (hybrid), or null
    std::unique_ptr<HostEmbedding> host_embed_;    // the embedding table in host RAM (embed_on_host), or null
    GpuModelWeights weights_;
    std::unique_ptr<GpuKvPool> pool_;
    std::unique_ptr<GpuModel> model_;
    // Live requests' block tables, kept up from each step's new block ids (apply_block_ids).
    std::unordered_map<RequestId, std::vector<int32_t>> tables_;
    int64_t spec_k_ = 0;                              // num_speculative_tokens (0: off)
    bool spec_dspark_ = false;                        // the drafter: DSpark (0731) or else the mtp.0 block
    double spec_threshold_ = 0.0;                     // DSpark's early stop (SpeculativeConfig::confidence_threshold)
    std::unordered_map<RequestId, int64_t> mtp_pos_;  // speculation: MTP positions computed per request
    KvHostMemory host_tier_;                          // prefix caching (bind_host_tier)
    // Host memory registered as pinned in ~64 MiB chunks (whole entries each) on first use: pinning tens
    // of GiB of host tier at start would cost seconds and RAM the tier may never fill, and registering
    // a chunk stalls the step that first touches it (measured through serve on the H200: a 1 GiB chunk
    // held a decode stream ~0.4 s).
    struct LazyPinned {
        static constexpr int64_t kChunkTarget = int64_t{64} << 20;
        uint8_t* base = nullptr;
        int64_t bytes = 0, chunk = kChunkTarget;
        std::vector<char> pinned;  // [chunks]
        void reset(uint8_t* p, int64_t n, int64_t entry_bytes);
        void ensure(const uint8_t* p, int64_t n);  // registers the chunks [p, p + n) touches
        ~LazyPinned();
    };
    LazyPinned pinned_snapshots_, pinned_blocks_;
    struct PinnedFree {
        void operator()(uint32_t* p) const;
    };
    // Pinned [mask_rows_cap_, ceil(vocab / 32)]: the constrained rows' token masks of a step.
    std::unique_ptr<uint32_t, PinnedFree> masks_host_;
    int64_t mask_rows_cap_ = 0;
    // Re-placement: steps since the last check, the cumulative counts read then, and decayed recent picks.
    void maybe_swap_experts();
    int64_t steps_since_swap_check_ = 0;
    std::vector<uint64_t> last_counts_;
    std::vector<double> recent_picks_;
    CudaRunnerReport report_;
};

}  // namespace onecard
