// vLLM-v1-style scheduler: no prefill or decode phases, only a per-step token budget. Each step decides
// how many tokens of each request to compute:
//   1. running requests with one token left (decode) first, so a long prompt never starves them;
//   2. running requests with more left (prefill chunks), each capped at long_prefill_token_threshold;
//   3. waiting requests in FCFS order while there is budget, a free sequence slot and KV room.
// With new_requests_first, pass 3 runs before pass 2: a request that arrives while a long prompt is
// being prefilled gets its first chunk in the next step, not after the whole long prompt, and that
// step leaves the running prompts' chunks out (at most every other step), so it is a short one.
// When a running request cannot get KV for its tokens, the newest running request is preempted
// (recompute: KV freed, back to the front of the waiting queue), possibly the request itself.
// Admission never preempts. Only the engine thread calls the scheduler.
//
// Prefix caching (when the KV manager has it on): admission starts a request at the longest cached
// prefix of its tokens (KvCacheManager::match_prefix: shared blocks plus a snapshot), every chunk
// asks the runner for snapshots at the block boundaries it crosses, and update_from_output
// registers newly computed full blocks and the snapshots taken.
#pragma once

#include "engine/request.h"
#include "engine/scheduler_output.h"
#include "kvcache/kv_manager.h"

#include <deque>
#include <memory>
#include <unordered_map>
#include <vector>

namespace onecard {

struct SchedulerConfig {
    int64_t max_num_batched_tokens = 2048;
    int64_t long_prefill_token_threshold = 1024;
    int64_t max_num_seqs = 16;
    // The runner can snapshot at a block boundary inside a chunk (ModelRunner::prefix_snapshot_points).
    // When it cannot (the CUDA runner: a step computes its chunk in one pass), prefill chunks end at
    // block boundaries where they can, and never run past the last boundary below the sequence's last
    // token, so each boundary a later request can resume at is some chunk's end.
    bool snapshots_inside_chunks = true;
    int64_t num_speculative_tokens = 0;  // drafts a decode row may verify per step (0: off)
    // Admission (pass 3) before running prefill chunks (pass 2). With a step budget small enough to
    // keep steps fast (the mixed-load gate: a short request's TTFT <= 0.3 s behind a 52K-token cold
    // prefill), a running long prompt would otherwise take every step's budget until it is done. Still
    // FCFS among the waiting; a request is admitted once, then joins the running order. A step that
    // admits a request holds back the running prompts' chunks, unless the previous step did.
    bool new_requests_first = false;
};

class SpecPolicy;

class Scheduler {
public:
    Scheduler(SchedulerConfig config, KvCacheManager& kv);

    // Takes ownership; the request joins the back of the waiting queue. Throws if the id is in use.
    // The request must fit the KV pool on its own (else it would preempt forever): EngineCore::validate
    // checked that (check_fits_kv_pool) before the request was made.
    void add_request(std::unique_ptr<Request> req);
    // Decide this step's work. Allocates KV for everything scheduled.
    SchedulerOutput schedule();
    // Record that the runner computed the batch: advances num_computed_tokens of each scheduled request.
    // (Appending sampled tokens is the engine's job; it calls this first.)
    void update_from_output(const SchedulerOutput& out);
    // Speculative decoding: after update_from_output, the runner also computed n accepted draft
    // tokens of request id (the engine has appended them to its output). Unknown ids are ignored.
    void accept_draft_tokens(RequestId id, int64_t n);
    // Removes a request (finished, cancelled, failed): frees its KV; reported in the next output's
    // finished_ids. Unknown ids are ignored.
    void finish_request(RequestId id);

    Request* find(RequestId id);
    bool has_unfinished() const { return !waiting_.empty() || !running_.empty(); }
    int64_t n_waiting() const { return static_cast<int64_t>(waiting_.size()); }
    int64_t n_running() const { return static_cast<int64_t>(running_.size()); }
    int64_t n_preemptions() const { return n_preemptions_; }
    // Prefix caching, as vLLM counts it: prompt tokens of first admissions looked up, and found cached.
    int64_t n_prefix_queries() const { return n_prefix_queries_; }
    int64_t n_prefix_hits() const { return n_prefix_hits_; }
    // Of those, tokens whose blocks came back from the host (or disk) tier (vLLM's "external" hits).
    int64_t n_prefix_hits_offloaded() const { return n_prefix_hits_offloaded_; }
    const SchedulerConfig& config() const { return config_; }
    // Speculative decoding: each step asks `policy` how many drafts a decode row gets (at most
    // num_speculative_tokens); without one, every decode row gets num_speculative_tokens. The policy
    // must outlive the scheduler.
    void set_spec_policy(SpecPolicy* policy) { spec_policy_ = policy; }
    // Drafts per decode row chosen for the last step (0 when speculation is off or chose none).
    int64_t step_drafts() const { return step_drafts_; }
    const KvCacheManager& kv() const { return kv_; }

    // Throws onecard::Error unless every running request holds KV for at least its computed tokens,
    // waiting requests hold none, the counts match the KV manager, and the KV manager is consistent.
    void check_integrity() const;

private:
    void preempt(Request* victim, SchedulerOutput& out, int64_t& budget);
    // Pass 1 (decode_pass) or 2 over `running` (a snapshot: preemption removes entries from running_).
    void schedule_running(const std::vector<Request*>& running, bool decode_pass, SchedulerOutput& out,
                          int64_t& budget);
    void admit_waiting(SchedulerOutput& out, int64_t& budget);  // pass 3
    ScheduledRequest make_entry(Request& r, int64_t n);
    // n tokens of r from `start`, cut to end at a block boundary when snapshots are taken at chunk ends.
    int64_t chunk_tokens(const Request& r, int64_t start, int64_t n) const;
    // Drafts a decode row of r gets this step (config, budget, max_tokens and KV room allow).
    int64_t draft_tokens_for(const Request& r, int64_t budget_left) const;
    void update_block_hashes(Request& r) const;

    SchedulerConfig config_;
    KvCacheManager& kv_;
    SpecPolicy* spec_policy_ = nullptr;
    int64_t step_drafts_ = 0;
    std::unordered_map<RequestId, std::unique_ptr<Request>> requests_;
    std::deque<Request*> waiting_;
    std::vector<Request*> running_;  // admission order: back() is the newest (the preemption victim)
    std::vector<RequestId> finished_since_last_step_;
    int64_t step_ = 0;
    bool held_prefills_ = false;  // the last step left running prompts' chunks out (new_requests_first)
    int64_t n_preemptions_ = 0;
    int64_t n_prefix_queries_ = 0, n_prefix_hits_ = 0, n_prefix_hits_offloaded_ = 0;
};

}  // namespace onecard
