// The contract between scheduler and runner: SchedulerOutput is the only thing a ModelRunner reads.
// It is a self-contained value (copies of token ids, and of the block ids each request gained since
// its last step), so a runner never reaches into scheduler or cache internals; the one exception is
// RowSampling::fill_mask, a callback a runner makes during execute() to get a constrained row's token
// mask just in time.
#pragma once

#include "kvcache/kv_manager.h"
#include "onecard/engine.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

namespace onecard {

// A constrained row's allowed-token mask (engine/token_constraint.h): fills [ceil(vocab / 32)] words,
// bit t set when token t may be sampled (EOS set exactly when the constraint may end).
using RowMaskFn = std::function<void(std::span<uint32_t> mask)>;

// What a runner needs to pick a row's token itself (engine/sampler.h's pipeline without penalties
// or logprobs): the draw is sampler_uniform(seed, counter), as on the host.
struct RowSampling {
    float temperature = 1.0f;  // <= 0: greedy
    int32_t top_k = 0;
    float top_p = 1.0f;
    float min_p = 0.0f;
    uint64_t seed = 0;
    uint64_t counter = 0;  // index of the output token being sampled
    // Set for a grammar-constrained row: a runner that samples the row calls it exactly once, on the
    // thread that called execute(), after it has launched the step's forward and before it samples
    // the row, and excludes every token whose bit is clear (as the host applies -inf to it). Calling
    // it late is the point: the host builds the mask while the device computes the logits it masks.
    // It calls back into the engine (the request's constraint), so it is only valid during execute().
    // A runner that does not sample returns the logits and never calls it.
    RowMaskFn fill_mask;
    // The pipeline above as SamplingParams (no penalties, bias or logprobs: such rows are never
    // the runner's to sample), for the host sampler and speculative decoding's distributions.
    SamplingParams params() const {
        SamplingParams p;
        p.temperature = temperature;
        p.top_k = top_k;
        p.top_p = top_p;
        p.min_p = min_p;
        return p;
    }
};

struct ScheduledRequest {
    RequestId id = 0;
    int64_t start_pos = 0;           // position of token_ids[0]; 0 -> the runner starts fresh state
    std::vector<int32_t> token_ids;  // [n_tokens] tokens to compute this step
    bool sample = false;             // this chunk ends at the last known token: return its logits
    // Speculative decoding, decode rows only: the runner may draft up to this many tokens after
    // token_ids[0] and verify them in this step (the block table covers them; the step budget counted
    // them). The engine clears it for rows the runner must not sample (RowSampling unset or masked).
    int64_t n_draft_tokens = 0;
    // Set by the engine on sampled rows whose parameters need no host work (no penalties, no
    // logprobs): a runner may return the token instead of the logits (RunnerOutput::tokens).
    std::optional<RowSampling> sampling;
    KvHandle kv;  // the request's KV (slot = kv.slot)
    // Its paged blocks, sent as what changed (vLLM's new_block_ids): the blocks its table gained since
    // the request's last step, appended to the runner's copy (apply_block_ids); new_block_table: the
    // whole table, which starts over (the request's first step, and its first after a preemption). A
    // KV table only grows while the request holds it, so the runner's copy then covers
    // [0, start_pos + n_tokens (+ n_draft_tokens)).
    bool new_block_table = false;
    std::vector<int32_t> block_ids;

    // Prefix caching (kvcache/kv_manager.h; only for a runner that supports_prefix_caching()).
    // >= 0: a prefix hit. The request starts at start_pos > 0 from the snapshot in this host entry
    // (KvHostMemory::snapshot, taken at start_pos); its block table's first start_pos / block_size
    // blocks hold the prefix (those of block_loads are copied in before the step computes).
    int64_t restore_snapshot = -1;
    // Snapshots to take while computing this chunk: the state after position pos - 1 (pos a block
    // boundary in (start_pos, start_pos + n_tokens], ascending), written to host entry id.
    struct SnapshotSave {
        int64_t pos = 0;
        int64_t id = -1;
    };
    std::vector<SnapshotSave> save_snapshots;

    int64_t n_tokens() const { return static_cast<int64_t>(token_ids.size()); }
};

// Brings a runner's copy of a request's block table up to this step.
inline void apply_block_ids(const ScheduledRequest& e, std::vector<int32_t>& table) {
    if (e.new_block_table) table.clear();
    table.insert(table.end(), e.block_ids.begin(), e.block_ids.end());
}

struct SchedulerOutput {
    int64_t step = 0;
    int64_t kv_block_size = 0;
    std::vector<ScheduledRequest> requests;  // decode requests first, then prefill chunks
    int64_t n_scheduled_tokens = 0;          // sum of n_tokens()
    // Requests whose runner-side state must be dropped before this step: finished or cancelled
    // since the last step, and requests preempted (they come back later with start_pos 0).
    std::vector<RequestId> finished_ids;
    std::vector<RequestId> preempted_ids;
    // Prefix caching's host tier (KvCacheManager::take_block_copies): before computing, the runner
    // copies every spilled block to its host entry, then every loaded entry into its block, ordered
    // against the step's compute (and any earlier step's) that touches the same device blocks.
    std::vector<KvBlockCopy> block_spills;
    std::vector<KvBlockCopy> block_loads;

    bool empty() const { return requests.empty(); }
};

}  // namespace onecard
