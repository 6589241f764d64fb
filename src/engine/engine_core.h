// EngineCore: the synchronous step loop (schedule -> run -> update), single-threaded. It owns the KV
// manager, the scheduler and the sampler; the public Engine runs one EngineCore on its own thread.
// Tests drive EngineCore directly to check scheduling step by step.
#pragma once

#include "engine/model_runner.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/spec_policy.h"
#include "engine/stop_checker.h"
#include "engine/token_constraint.h"
#include "kvcache/kv_manager.h"
#include "onecard/engine.h"

#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace onecard {

// How a request's error begins when the model gave it a logits row with NaN or Inf: that request ends
// with FinishReason::Error (a broken row says nothing about the other rows of the step, which go on),
// and the server counts such requests by this prefix.
inline constexpr std::string_view kNonFiniteLogitsError = "non-finite logits";

// Maps the model's attention layout onto the KV layout (kept here so kvcache needs no model headers),
// with kv_ring_spare(config.speculative) spare ring rows.
KvCacheSpec make_engine_kv_spec(const ModelRunner& runner, const EngineConfig& config);
// Spare ring rows speculative decoding needs (KvModelShape::ring_spare): a verify step of k drafts
// writes k + 1 positions and drops up to k of them, which k - 1 spare rows make harmless; k are
// kept (one row per draft is simpler to state and costs one more row per ring). 0 when off.
int64_t kv_ring_spare(const SpeculativeConfig& speculative);

class EngineCore {
public:
    EngineCore(const EngineConfig& config, std::unique_ptr<ModelRunner> runner);

    // Throws onecard::Error naming the bad field (the prompt, the sampling params, whether the request
    // fits max_model_len and the KV pool). Reads only immutable state: safe from any thread.
    void validate(const GenerateRequest& req) const;
    // validate(req), then admits it. Builds the request's constraint with req.sampling.make_constraint
    // when it is set.
    void add_request(RequestId id, GenerateRequest req);
    // add_request for a request validate() passed already: the public Engine's route (Engine::submit
    // validates on the caller's thread, so the error reaches the caller; the engine thread admits).
    void add_validated_request(RequestId id, GenerateRequest req);
    // With a constraint (a grammar): every sampled token is masked by it, EOS only when it can
    // terminate. The mask is built once per sampled row: applied to the logits here when the row is
    // sampled on the host, or handed to the runner (RowSampling::fill_mask) when the runner samples
    // it. (sampling.make_constraint is not called.) Validates first.
    void add_request(RequestId id, GenerateRequest req, std::unique_ptr<TokenConstraint> constraint);
    // Removes the request; returns its final Cancelled event (nullopt if unknown or already finished).
    std::optional<EngineEvent> abort_request(RequestId id);
    // Skip a running request in scheduling without freeing its KV (its reader is behind).
    void set_paused(RequestId id, bool paused);

    // One step. Returns the events produced (at most one per request). last_step_scheduled() tells
    // whether any token was computed (false when everything left is paused or nothing is queued).
    std::vector<EngineEvent> step();
    bool last_step_scheduled() const { return last_step_scheduled_; }
    bool has_unfinished() const { return scheduler_->has_unfinished(); }

    const SchedulerOutput& last_output() const { return last_output_; }
    const Scheduler& scheduler() const { return *scheduler_; }
    const KvCacheManager& kv() const { return *kv_; }
    const EngineConfig& config() const { return config_; }
    int64_t max_model_len() const { return max_model_len_; }
    int64_t n_steps() const { return n_steps_; }
    // What the last step that ran did and how long each part took (wall clock): the diagnostics of
    // slow steps (Engine, ONECARD_LOG_SLOW_STEPS_MS), a step's cost being what a decode stream waits.
    struct StepTiming {
        double schedule_s = 0, execute_s = 0, outputs_s = 0;
        int64_t rows = 0, tokens = 0;                // scheduled requests, tokens computed
        int64_t prompt_rows = 0, prompt_tokens = 0;  // rows of more than one token (prompt chunks, verify)
        int64_t max_position = 0;                    // the largest position computed
        int64_t snapshots = 0, block_copies = 0;     // prefix-cache snapshots saved, host-tier blocks moved
    };
    const StepTiming& last_step_timing() const { return last_timing_; }
    // Token masks built for constrained rows since construction (host and runner paths together):
    // one per constrained row sampled.
    int64_t n_masks_built() const { return n_masks_built_; }
    // Prefix caching is on: asked for (EngineConfig::enable_prefix_caching) and the runner supports it.
    bool prefix_caching() const { return kv_->prefix_caching(); }
    // Speculative decoding counters since construction (vLLM's spec_decode metrics).
    struct SpecCounters {
        int64_t n_drafts = 0;                   // rows that verified drafts
        int64_t n_draft_tokens = 0;             // drafted tokens verified
        int64_t n_accepted_tokens = 0;          // of those, accepted
        std::vector<int64_t> accepted_per_pos;  // [num_speculative_tokens] accepted at draft position j
    };
    const SpecCounters& spec_counters() const { return spec_counters_; }
    // The draft-length policy (speculative decoding on), else nullptr.
    const SpecPolicy* spec_policy() const { return spec_policy_.get(); }
    void check_integrity() const {
        scheduler_->check_integrity();
        if (spec_policy_) spec_policy_->check_integrity();
        for (const auto& [id, os] : outputs_)
            if (os.constraint) os.constraint->check_integrity();
    }

private:
    struct OutputState {
        std::unique_ptr<TextDecoder> decoder;
        std::optional<StopChecker> stop_checker;
        std::unique_ptr<TokenConstraint> constraint;  // null: unconstrained
    };
    TokenConstraint* constraint_of(RequestId id);
    // Puts a validated request on the scheduler's waiting queue.
    void admit(RequestId id, GenerateRequest req, std::unique_ptr<TokenConstraint> constraint);
    // The EOS id a mask allows when the constraint can end, or -1 (ignore_eos, no EOS).
    int32_t mask_eos(const Request& req) const;
    static std::string no_token_reason(const TokenConstraint& c);
    // RowSampling::fill_mask of a constrained row: builds its mask into `mask`, records it in row_masks_.
    void build_row_mask(RequestId id, std::span<uint32_t> mask);
    // Masks `row` for req (min_tokens, constraint) into masked_row_ and samples it. An empty result
    // means no token is allowed: `reason` says why (the request then ends).
    std::optional<SampleResult> sample_host(Request& req, std::span<const float> row, std::string& reason);
    // Appends the sampled token to req and fills ev; returns true if the request finished.
    // min_tokens not yet reached: EOS and stop ids are masked, so the row is sampled on the host.
    bool holds_back_stop_tokens(const Request& req) const;
    bool process_token(Request& req, const SampleResult& s, EngineEvent& ev);
    // A speculative row's tokens after the first (already processed; `finished` is its result):
    // appends them until the request ends, advances the scheduler by the accepted drafts, counts.
    bool process_spec_row(Request& req, const RunnerOutput::SpecRow& row, EngineEvent& ev, bool finished);
    // Throws unless the runner's speculative rows stay within what each row was allowed.
    void check_spec_rows(const SchedulerOutput& out, const RunnerOutput& result) const;
    void finish_text(Request& req, EngineEvent& ev);
    void fail_batch(const SchedulerOutput& out, const std::string& what, std::vector<EngineEvent>& events);
    // Ends one request with FinishReason::Error and `what` as its error.
    EngineEvent fail_request(Request& req, std::string what);
    EngineEvent final_event(const Request& req, FinishReason reason) const;

    EngineConfig config_;
    // Declared before runner_ so that it is destroyed after it: the runner may hold the manager's
    // host-tier memory registered (ModelRunner::bind_host_tier) until its destructor.
    std::unique_ptr<KvCacheManager> kv_;
    std::unique_ptr<ModelRunner> runner_;
    int64_t vocab_size_ = 0;
    int64_t max_model_len_ = 0;
    std::unique_ptr<SpecPolicy> spec_policy_;  // declared before the scheduler, which holds a pointer to it
    std::unique_ptr<Scheduler> scheduler_;
    Sampler sampler_;
    std::mt19937_64 seed_rng_;  // seeds for requests that bring none
    std::unordered_map<RequestId, OutputState> outputs_;
    SchedulerOutput last_output_;
    bool last_step_scheduled_ = false;
    int64_t n_steps_ = 0;
    StepTiming last_timing_;
    std::vector<float> masked_row_;          // [vocab] a logits row with tokens masked (min_tokens, constraint), reused
    std::vector<uint32_t> constraint_mask_;  // [ceil(vocab / 32)] scratch for the constraint's mask
    // This step's masks built through RowSampling::fill_mask, per request: how often (must be once)
    // and how many tokens they allowed (0: the request fails, as on the host path).
    struct RowMask {
        int64_t n_builds = 0;
        int64_t n_allowed = 0;
    };
    std::unordered_map<RequestId, RowMask> row_masks_;
    int64_t n_masks_built_ = 0;
    SpecCounters spec_counters_;
};

}  // namespace onecard
