// The DeepSeek-V4 forward pass on the GPU, in reference numerics (what DeepSeek's reference code
// computes, QAT simulations included; the CPU's Numerics::Reference is its oracle): one step runs
// any mix of sequences and token counts (decode rows, prefill chunks, multi-token verification)
// through every main layer, reading and writing the engine's paged KV pool (GpuKvPool), and returns
// the logits of the rows asked for.
//
// Differences from the CPU reference, all inside the parity tolerance (rel. L2 <= 2e-2):
//  * activations are bf16 between ops (as REF stores them), math in fp32; the residual streams and the
//    head's hidden stay fp32 (model/storage_points.h says why);
//  * the window rows of a step are read back from their FP8 entries like every other stored vector.
#pragma once

#include "backend/cuda/arena.h"
#include "backend/cuda/ops/hyper_connection.cuh"
#include "backend/cuda/ops/moe_experts.cuh"
#include "backend/cuda/ops/token_pick.cuh"
#include "model/config.h"
#include "model_cuda/gpu_fault_plan.h"
#include "model_cuda/gpu_kv_pool.h"
#include "model_cuda/gpu_linear.h"
#include "model_cuda/gpu_step.h"
#include "model_cuda/gpu_weights.h"
#include "model_cuda/host_expert_stream.h"
#include "model_cuda/host_moe_bridge.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <tuple>
#include <vector>

namespace onecard {

struct GpuModelOptions {
    int64_t max_num_batched_tokens = 2048;  // tokens per step (the scheduler's budget)
    int64_t max_num_seqs = 64;              // sequences per step
    int64_t logits_rows_per_seq = 1;        // logits rows one sequence may ask for in a step: 1 + draft tokens
    int64_t max_model_len = 65536;          // longest sequence (sizes key lists and indexer scratch)
    size_t moe_scratch_bytes =
        0;  // many-token expert path (dequantised experts + rows); 0 = what max_num_batched_tokens needs
    bool cuda_graphs = true;  // replay steps of <= kGraphMaxTokens tokens as CUDA graphs
    // Steps of at most this many tokens run the routed experts through the grouped MXFP4 GEMV (each
    // used expert read once per 8 of its pairs); larger steps dequantise every used expert to bf16 for
    // cuBLAS (MoeExperts), whose fixed cost per expert is ~0.5 s a step at the Flash shape. At most
    // max_moe_gemv_tokens() (the pair grouping's bound; 64 for hybrid models, whose host pairs run on
    // the CPU). Serving and the bench take that bound (CudaModelRunner::model_options).
    int64_t moe_gemv_max_tokens = 64;
    bool count_expert_picks = false;  // count routing picks per (layer, expert) on the device (expert_pick_counts)
    bool mtp = false;                 // buffers for the MTP drafter (gather_mtp_input, save_mtp_pending)
    // The 0731 DSpark drafter (GpuModelWeights::dspark): every step keeps its tokens' taps, and the
    // dspark_* calls run. Needs logits_rows_per_seq >= dspark_block_size.
    bool dspark = false;
    HostMoeOptions host_experts;  // the host expert pool, when the weights keep experts in host RAM
    GpuFaultPlan faults;          // tests only: planted bugs (gpu_fault_plan.h); all off
};

class GpuModel {
public:
    // `weights` (device) and `pool` must outlive the model. Workspace buffers are carved from `arena`.
    GpuModel(const ModelConfig& cfg, const GpuModelWeights& weights, GpuKvPool& pool, const GpuModelOptions& opt,
             cuda::DeviceArena& arena);
    ~GpuModel();

    // Runs one step on `stream`. Returns the device logits [n_out, vocab] fp32 (valid until the next
    // step): one row per sequence with want_logits (its last token; LogitRows::Last), or every token's
    // row (LogitRows::All). Sequences starting at position 0 start fresh state in their slot.
    const float* step(std::span<const GpuStepSeq> seqs, LogitRows rows, cudaStream_t stream);
    int64_t n_out_rows() const { return meta_->n_out; }
    // The residual streams X [n, 4, D] fp32 of the last step's tokens, in step order, after its last
    // block and before hc_head (valid until the next step or mtp_step).
    const float* last_streams() const;
    // The MTP block mtp.0 (dsv4-model.md §6.2; the CPU's DeepSeekV4::forward_mtp) over one step: each
    // sequence's `tokens` are the tokens at p + 1 for its MTP positions p = start_pos, ... (its KV is
    // the pool's layer num_hidden_layers, a window ring), `streams` [n, 4, D] fp32 on the device the
    // main model's pre-hc_head streams at those positions, in step order (may be last_streams()).
    // Returns the logits like step(); last_streams() then holds the block's output streams (the next
    // draft position's input). Throws unless the weights carry the MTP block (GpuModelWeights::mtp).
    // Runs eagerly (no graphs).
    const float* mtp_step(std::span<const GpuStepSeq> seqs, const float* streams, LogitRows rows, cudaStream_t stream);
    // The MTP drafter's streams (GpuModelOptions::mtp). A run of input rows for an mtp_step: the
    // pending row of KV slot `slot` (slot >= 0, n = 1), or n rows of last_streams() from step row `row`.
    struct MtpRun {
        int32_t slot = -1;
        int64_t row = 0, n = 1;
    };
    // Copies the runs, in order, into the MTP input buffer and returns it ([Σ n, 4, D] fp32).
    const float* gather_mtp_input(std::span<const MtpRun> runs, cudaStream_t stream);
    // Sets KV slot `first`'s pending row to last_streams()' row `second`, for each pair.
    void save_mtp_pending(std::span<const std::pair<int32_t, int64_t>> slot_rows, cudaStream_t stream);
    // The 0731 DSpark drafter (GpuModelOptions::dspark; docs/dspark.md; the CPU oracle is
    // DeepSeekV4::dspark_push_context / dspark_block and model/dspark_heads.h markov_step).
    // dspark_push: after a step(), writes each stage's context row of every token of that step into
    // the stage's window ring (pool layer num_hidden_layers + s). A verify step's rejected positions
    // are pushed too: a later step that feeds those positions again overwrites them, and nothing reads
    // them before (a block reads only positions below its own, and the rings' spare rows keep the
    // rejected rows off every row it reads: KvModelShape::ring_spare >= the drafts per step).
    void dspark_push(cudaStream_t stream);
    // One parallel pass of the block [next, noise x (B-1)] for each sequence: its `tokens` the B ids at
    // positions start_pos = n .. n + B - 1 (the positions of its next token and the B - 1 after it),
    // want_logits with logits_rows = B. Returns the base logits [n_seqs·B, vocab] (sequence r's slot j
    // at row r·B + j; valid until the next step). Writes nothing to the pool but the step region.
    // Runs eagerly (no graphs).
    const float* dspark_block(std::span<const GpuStepSeq> seqs, cudaStream_t stream);
    // After dspark_block: adds the Markov bias of prev[r] (host, one token per sequence) to slot j's row
    // of each sequence; returns, on the device, the argmax of every row of the block [n_seqs·B] (slot
    // j's at r·B + j) and slot j's confidence logits [n_seqs] (w_conf · [pre-norm hidden ; w1[prev]]).
    struct DSparkSlot {
        const int32_t* ids = nullptr;
        const float* confidence = nullptr;
    };
    DSparkSlot dspark_markov(int64_t j, std::span<const int32_t> prev, cudaStream_t stream);
    // Greedy tokens [n_out] of the last step's logits, on the device.
    const int32_t* argmax_last(cudaStream_t stream);
    // Tokens [n_out] of the last step's logits drawn with params[i] for row i (host array of n_out
    // entries; cuda::sample_rows: engine/sampler.h's pipeline without penalties), on the device.
    // masks: host [n_mask_rows, ceil(vocab / 32)] allowed-token bitmasks (pinned, so the upload is
    // asynchronous; must stay unchanged until the stream passes it), uploaded before the draw; rows
    // with params[i].masked must be below n_mask_rows.
    const int32_t* sample_last(const cuda::SampleParams* params, const uint32_t* masks, int64_t n_mask_rows,
                               cudaStream_t stream);

    const ModelConfig& config() const { return cfg_; }
    // Throws onecard::Error if the scratch arena holds allocations between steps, a captured graph is
    // out of range, or the last step's metadata exceeds the capacity.
    void check_integrity() const;
    void set_cuda_graphs(bool on) { opt_.cuda_graphs = on; }
    // Profiling (benchmark only): the next step runs without a graph and records an event after
    // each op group; profile_result() then gives milliseconds per group summed over the layers.
    void profile_next_step() { profile_ = true; }
    std::vector<std::pair<std::string, double>> profile_result();
    // Tests: route decode-sized steps through the many-token paths (grouped MoE, GEMM linears) instead
    // of the GEMV kernels, to check each path against the others (default: Gemv, Gemv).
    enum class ExpertPath { Gemv, Grouped };  // routed experts: mxfp4_grouped_gemv, or MoeExperts' GEMMs
    enum class LinearPath { Gemv, Gemm };     // FP8 linears: the GEMV kernels, or cuBLASLt GEMMs
    void set_decode_paths(ExpertPath experts, LinearPath linears);
    // Tests: plants the faults of `plan` in the steps that follow (drops captured graphs, which
    // recorded the old behaviour).
    void set_faults(const GpuFaultPlan& plan);
    // Tests (teacher forcing, gpu_tame_test.cpp): while on, each step copies the residual streams X
    // [n, 4, D] fp32 to the host at every sub-block boundary: the embedding, then after each layer's
    // attention and MoE sub-blocks (2·layers + 1 points); recorded_streams() holds the last step's
    // [2·layers + 1][n, 4, D]. Steps run without CUDA graphs while on (the copies wait on the host).
    void set_stream_recording(bool on);
    const std::vector<float>& recorded_streams() const { return recorded_; }
    int64_t n_graphs() const { return static_cast<int64_t>(graphs_.size()); }
    // Nodes (kernel launches, copies, memsets) of the graph captured last: a decode step's launch count.
    int64_t last_graph_nodes() const { return last_graph_nodes_; }
    // Steps of at most this many tokens run as CUDA graphs (decode and short verify steps).
    static constexpr int64_t kGraphMaxTokens = 64;
    // Bytes of the workspace (activations, scratch) this model took from the arena.
    int64_t workspace_bytes() const { return workspace_bytes_; }
    // What a GpuModel with these options takes from its arena (workspace_bytes() of one built over
    // `spec`'s pool, exactly, up to one 256-byte alignment gap): the memory planner's workspace.
    // hybrid: the weights keep experts in host RAM (staging buffer, mailbox counters). No GPU needed.
    static int64_t workspace_bytes_for(const ModelConfig& cfg, const GpuModelOptions& opt, const KvCacheSpec& spec,
                                       bool hybrid);
    // The largest moe_gemv_max_tokens allowed: 4096 / top_k (the pair grouping), 64 when hybrid.
    // Serving and the bench use it by default: the many-token expert path dequantises every used expert
    // for cuBLAS, a fixed ~0.56 s a step at the Flash shape (docs/results.md).
    static int64_t max_moe_gemv_tokens(const ModelConfig& cfg, bool hybrid);
    // After the last step's stream has synchronised: throws onecard::Error if the host expert pool
    // did not answer a layer of it (its output is then invalid). No-op without host experts.
    void check_host_experts() const;
    // Device staging buffer of one host expert (hybrid weights only; swap_host_expert uses it between steps).
    uint8_t* host_staging() const { return host_staging_; }
    // The host expert pool, or nullptr when every expert is on the GPU.
    const HostMoeBridge* host_experts() const { return host_.get(); }
    // Host experts staged over PCIe on large decode steps, or nullptr.
    const HostExpertStreamer* host_expert_streamer() const { return streamer_.get(); }
    // Picks per (layer, expert) since the last reset, [layers · E] (count_expert_picks; synchronises).
    std::vector<uint64_t> expert_pick_counts(cudaStream_t stream) const;
    void reset_expert_pick_counts(cudaStream_t stream);

private:
    struct Buffers;
    struct Carved;
    static void carve(const ModelConfig& cfg, const GpuModelOptions& opt, int64_t max_blocks_per_seq, bool hybrid,
                      cuda::DeviceArena& arena, Buffers& b, Carved& c);
    // Graphs are keyed by what the captured launches depend on besides the device metadata: token
    // count, logits rows and the position bound that sizes key lists and indexer scores.
    struct GraphKey {
        int64_t n = 0, n_out = 0, pos_bound = 0;
        bool operator<(const GraphKey& o) const {
            return std::tie(n, n_out, pos_bound) < std::tie(o.n, o.n_out, o.pos_bound);
        }
    };
    // The path choices of one step, made once in step() from the token count, the positions and the
    // options, and read by the layer code. Everything here is fixed by a GraphKey and the options
    // (whose change drops the graphs), so a replayed graph always matches its plan.
    struct StepPlan {
        int64_t n = 0;                // tokens in the step
        int64_t pos_bound = 0;        // positions of this step are < pos_bound (rounded up: graph reuse)
        bool moe_gemv = false;        // routed experts on the GEMV path (else MoeExperts' grouped GEMMs)
        bool stream_experts = false;  // host experts staged over PCIe this step (HostExpertStreamer)
        bool dspark_block = false;    // a DSpark block pass: bidirectional block keys, no ring writes
    };
    // Where a sub-block's first linears read its input: the bf16 x, or the FP8 copy of x that hc_pre's
    // finishing kernel writes (Buffers::xq/xs) when they are on the GEMV path.
    enum class SubBlockInput { Bf16, Fp8FromHcPre };
    // Uploads a step's metadata and checks it against the logits rows and max_model_len.
    void build_meta(std::span<const GpuStepSeq> seqs, LogitRows rows, cudaStream_t s);
    StepPlan plan_step(int64_t n, int64_t max_pos) const;
    SubBlockInput attention_input(const StepPlan& p, const GpuBlock& b) const;
    static SubBlockInput moe_input(const StepPlan& p);
    // hc_pre of one sub-block over this step's streams: its mixes, fused norm and (input) the FP8 copy of x.
    cuda::HcPreArgs hc_pre_args(const GpuHC& hc, const __nv_bfloat16* norm, SubBlockInput input) const;
    void forward(const StepPlan& p, cudaStream_t s);  // every layer and the head, for the metadata in meta_
    void run_block(const StepPlan& p, const GpuBlock& blk, cudaStream_t s);  // one decoder block over X
    // Logits of the wanted rows; keep_hidden (optional, [n_out, D]) gets their pre-norm hidden.
    void head(const GpuHC& hc, const __nv_bfloat16* norm, cudaStream_t s, __nv_bfloat16* keep_hidden = nullptr);
    void mtp_forward(const StepPlan& p, const float* streams, cudaStream_t s);  // gpu_model_mtp.cpp
    void keep_taps(int64_t layer, cudaStream_t s);  // DSpark: the taps of a main layer's output (gpu_model_dspark.cpp)
    void tick(const char* label, cudaStream_t s);   // profiling: time since the last tick goes to label
    void record_streams(int64_t point, cudaStream_t s);  // set_stream_recording: X into recorded_[point]
    void drop_graphs();
    // The two sub-layers of a block (gpu_model_sublayers.cpp).
    void attention(const StepPlan& p, const GpuBlock& b, const __nv_bfloat16* xn, __nv_bfloat16* out, cudaStream_t s);
    void moe(const StepPlan& p, const GpuBlock& b, const __nv_bfloat16* xn, __nv_bfloat16* out, cudaStream_t s);

    ModelConfig cfg_;
    const GpuModelWeights& w_;
    GpuKvPool& pool_;
    GpuModelOptions opt_;
    std::unique_ptr<cuda::DeviceArena> ws_;  // per-call scratch of the linears (a region of the caller's arena)
    std::unique_ptr<GpuStepMeta> meta_;
    std::unique_ptr<GpuLinears> lin_;
    std::unique_ptr<cuda::MoeExperts> experts_;
    std::unique_ptr<HostMoeBridge> host_;           // hybrid layers only
    std::unique_ptr<HostExpertStreamer> streamer_;  // weights that stage host experts over PCIe only
    uint8_t* host_staging_ = nullptr;               // the many-token path's staging buffer for host experts
    std::unique_ptr<Buffers> buf_;
    int64_t workspace_bytes_ = 0;
    bool moe_gemv_ = false;  // decode MoE may take the GEMV path (no host sync: capturable)
    std::map<GraphKey, cudaGraphExec_t> graphs_;
    int64_t last_graph_nodes_ = 0;
    // What ran last (dspark_push needs a main step's taps, dspark_markov a block pass's logits).
    enum class LastRun { None, Step, Mtp, DSparkBlock };
    LastRun last_run_ = LastRun::None;
    bool profile_ = false, profiling_ = false;
    bool recording_ = false;
    std::vector<float> recorded_;  // set_stream_recording: [2·layers + 1][n, 4, D]
    std::vector<std::pair<const char*, cudaEvent_t>> ticks_;
    // Planted faults' device data (tests only; allocated by the first set_faults that needs it):
    // ones [max_num_batched_tokens] int32 (the RoPE fault's extra rotation), swap [max_num_batched_tokens] fp32.
    std::unique_ptr<cuda::DeviceArena> fault_arena_;
    int32_t* fault_ones_ = nullptr;
    float* fault_swap_ = nullptr;
};

}  // namespace onecard
