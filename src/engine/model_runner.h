// ModelRunner: executes one SchedulerOutput. Implementations: FakeModelRunner (tests, scheduler
// benchmarks), the CPU DeepSeek-V4 model, later CUDA. A runner owns its per-request model state keyed
// by RequestId and must drop it for finished/preempted ids; it sees nothing else of the engine.
#pragma once

#include "engine/scheduler_output.h"
#include "kvcache/kv_host_tier.h"
#include "kvcache/kv_spec.h"
#include "onecard/engine.h"

#include <cstdint>
#include <string>
#include <vector>

namespace onecard {

struct RunnerOutput {
    // One row per scheduled request with sample == true, in SchedulerOutput order.
    std::vector<RequestId> row_ids;
    // Empty: every row comes as logits. Else [n_rows]: a token >= 0 the runner sampled itself (only
    // for rows with ScheduledRequest::sampling), -1 for a row whose logits are in `logits`.
    std::vector<int32_t> tokens;
    std::vector<float> logits;  // [rows with logits, vocab_size] fp32, in row order
    int64_t vocab_size = 0;
    // Speculative rows (ScheduledRequest::n_draft_tokens > 0). Empty, or [n_rows]: an entry with
    // n_drafts > 0 is a row the runner drafted and verified itself; `tokens` holds what the step
    // emitted (the accepted drafts, then the correction or bonus token, each drawn with the row's
    // RowSampling), and the row's entry in `tokens` above is the first of them.
    struct SpecRow {
        int64_t n_drafts = 0;
        std::vector<int32_t> tokens;
    };
    std::vector<SpecRow> spec;

    // Logits of the j-th row that came as logits.
    const float* row(size_t j) const { return logits.data() + j * static_cast<size_t>(vocab_size); }
    size_t n_logits_rows() const {
        if (tokens.empty()) return row_ids.size();
        size_t n = 0;
        for (int32_t t : tokens) n += t < 0;
        return n;
    }
};

class ModelRunner {
public:
    virtual ~ModelRunner() = default;
    virtual int64_t vocab_size() const = 0;
    virtual int64_t max_model_len() const = 0;
    // The KV layout this model needs (sizes the engine's pool).
    virtual KvModelShape kv_model_shape() const = 0;
    // Called once by the engine after it sized the KV pool from kv_model_shape(): a runner that keeps
    // its KV in the pool (block ids and slots of SchedulerOutput address it) allocates storage here.
    virtual void bind_kv_pool(const KvCacheSpec& spec, const KvPoolSize& size) {
        (void)spec;
        (void)size;
    }
    // Prefix caching (kvcache/kv_manager.h): a runner that can take snapshots of a sequence's state at
    // block boundaries and resume a new sequence from one (ScheduledRequest::save_snapshots,
    // restore_snapshot) and copy blocks to and from the host tier (SchedulerOutput::block_spills,
    // block_loads) says so here; the engine turns prefix caching on only then, so any other runner
    // never sees those fields set and runs as before.
    virtual bool supports_prefix_caching() const { return false; }
    // Bytes one snapshot takes (the engine sizes the snapshot store with it).
    virtual int64_t prefix_snapshot_bytes(const KvCacheSpec& spec) const {
        (void)spec;
        return 0;
    }
    // True if a snapshot can be taken at a boundary inside a chunk; false: only at a chunk's end (the
    // scheduler then cuts chunks at boundaries, SchedulerConfig::snapshots_inside_chunks).
    virtual bool prefix_snapshots_inside_chunks() const { return true; }
    // Called once after bind_kv_pool() when prefix caching is on: the host memory snapshots and
    // host-tier blocks live in (the engine's; valid until the runner is destroyed).
    virtual void bind_host_tier(const KvHostMemory& mem) { (void)mem; }
    // Speculative decoding (issue 17): whether the runner can draft with `method` ("mtp") and
    // verify drafts (ScheduledRequest::n_draft_tokens -> RunnerOutput::spec). The engine refuses a
    // SpeculativeConfig whose method the runner does not support, and otherwise calls
    // enable_speculation once, before the first step (the runner then keeps what drafting needs).
    virtual bool supports_speculation(const std::string& method) const {
        (void)method;
        return false;
    }
    virtual void enable_speculation(const SpeculativeConfig& config) { (void)config; }
    virtual RunnerOutput execute(const SchedulerOutput& batch) = 0;
};

}  // namespace onecard
