// CpuModelRunner: executes a SchedulerOutput with the CPU DeepSeek-V4 forward pass, one
// SequenceState per request. Rows never share state, so a request's logits do not depend on which
// other requests share its batch; only where its chunk boundaries fall can move results (within the
// forward pass's chunking tolerance).
//
// Where the KV lives depends on the numerics:
//  * Numerics::Reference: in the engine's KV pool, in kvcache's byte format. bind_kv_pool() allocates
//    a KvHostArena laid out exactly as the KV manager's spec; every request reads and writes its
//    window rows in its slot and its compressed entries / indexer keys in the blocks of its block
//    table (PagedSequenceKv). The manager's blocks ARE the storage: preemption frees them and the
//    request recomputes from position 0 when it resumes.
//  * Numerics::Exact: in an fp32 store per request (bit-for-bit transformers); the manager's slots
//    and blocks still bound admission and drive preemption.
// The compressors' running state stays fp32 in the SequenceState in both modes (the spec keeps it
// fp32 as well).
//
// Prefix caching (reference numerics: the KV must be in the pool's blocks to be shared). A
// snapshot at block boundary p (a multiple of block_size, so of 4 and 128) holds what the next
// token needs that is not in the blocks: every layer's window ring (the slot's Window regions,
// positions [p - sliding_window, p)) and the CSA compressors' closed-window rows; at p the HCA
// compressors' open window is empty, which is why a boundary at the HCA ratio is the natural
// one: a snapshot anywhere else would carry up to 127 fp32 rows per HCA layer. Bytes per
// snapshot: windows n_layers * sliding_window * entry_bytes + 4 * Σ_CSA 2 * 4 * (2 * head_dim +
// 2 * index_head_dim); at the Flash shape 44 * 128 * 584 + 4 * 21 * 8 * (1024 + 256) = 4.15 MB,
// against 493 KB of paged KV per 128-token block: one every block costs ~8x the blocks' bytes, so
// the engine bounds how many are kept (EngineConfig::prefix_snapshot_bytes, LRU). Snapshots and
// host-tier blocks live in the engine's host memory (bind_host_tier); a snapshot's bytes are
// [n_tokens: int64][carry: fp32 x boundary_carry_floats][window regions in spec order]. Restoring one
// into a fresh state and computing on is bit for bit a cold run (the forward pass is exact under
// any chunking), as tests/unit/prefix_cache_test.cpp checks at every boundary kind.
#pragma once

#include "engine/model_runner.h"
#include "engine/paged_sequence_kv.h"
#include "engine/spec_decoder.h"
#include "model/config.h"
#include "model/deepseek_v4.h"

#include <memory>
#include <unordered_map>
#include <vector>

namespace onecard {

class CpuModelRunner : public ModelRunner {
public:
    // `model` must outlive the runner. max_model_len 0 -> the config's max_position_embeddings.
    explicit CpuModelRunner(const DeepSeekV4& model, int64_t max_model_len = 0);

    int64_t vocab_size() const override { return model_.config().vocab_size; }
    int64_t max_model_len() const override { return max_model_len_; }
    // Kinds from compress_ratios (via ModelConfig::layer_kind), MTP blocks as SWA layers.
    KvModelShape kv_model_shape() const override;
    // Reference numerics: allocates the host arena the paged KV lives in (once).
    void bind_kv_pool(const KvCacheSpec& spec, const KvPoolSize& size) override;
    bool supports_prefix_caching() const override { return model_.numerics() == Numerics::Reference; }
    int64_t prefix_snapshot_bytes(const KvCacheSpec& spec) const override;
    void bind_host_tier(const KvHostMemory& mem) override;
    RunnerOutput execute(const SchedulerOutput& batch) override;
    // Speculative decoding with the checkpoint's mtp.0 block ("mtp") or its 0731 DSpark drafter
    // ("dspark", at most dspark_block_size drafts) (cpu_spec_runner.cpp): every row then keeps what
    // its drafter reads (SpecTrail; DSpark's window rings in the SequenceState), and a decode row with
    // drafts is drafted, verified and rolled back in one call (engine/spec_decoder.h).
    bool supports_speculation(const std::string& method) const override;
    void enable_speculation(const SpeculativeConfig& config) override;

    size_t n_live_states() const { return states_.size(); }
    bool paged_kv() const { return arena_ != nullptr; }
    // Throws onecard::Error unless every live state is consistent and, with paged KV, live requests
    // hold distinct slots and pairwise disjoint block tables (inside the arena) that cover their tokens.
    void check_integrity() const;

private:
    struct Live {
        SequenceState state;
        int32_t slot = -1;                 // paged KV: the request's slot
        std::vector<int32_t> block_table;  // paged KV: the request's table, kept up by apply_block_ids
        SpecTrail trail;                   // speculative decoding on: tokens fed, streams for the MTP block
    };
    void save_snapshot(const Live& live, int64_t id);
    Live restore_snapshot(int64_t id, int32_t slot, int64_t start_pos);
    void copy_blocks(const SchedulerOutput& batch);  // the host tier's spills, then its loads
    // Advances `live` by tokens, returning the logits of the last call; splits the work at the
    // boundaries where snapshots are to be taken.
    std::vector<float> forward_saving(Live& live, const ScheduledRequest& e);
    // Speculative decoding on: computes e for live (a plain chunk, or a decode row's drafts and their
    // verification) and appends its row to out (tokens and spec filled for every row).
    void execute_spec_row(Live& live, const ScheduledRequest& e, RunnerOutput& out);

    const DeepSeekV4& model_;
    int64_t max_model_len_;
    std::unordered_map<RequestId, Live> states_;
    // Paged KV (reference numerics after bind_kv_pool); the arena and layout refer to *spec_.
    std::unique_ptr<KvCacheSpec> spec_;
    std::unique_ptr<KvLayerTable> layout_;
    std::unique_ptr<KvHostArena> arena_;
    KvHostMemory host_;                   // prefix caching: snapshots and host-tier blocks
    std::vector<size_t> window_regions_;  // the spec's Window regions (fixed indices)
    int64_t spec_k_ = 0;                  // num_speculative_tokens (0: off)
    bool spec_dspark_ = false;            // the drafter: DSpark (0731) or else the mtp.0 block
    double spec_threshold_ = 0.0;         // DSpark's early stop (SpeculativeConfig::confidence_threshold)
};

}  // namespace onecard
