// FakeModelRunner: a deterministic stand-in for the model, for scheduler/engine tests and scheduler
// benchmarks. Its "logits" are a pseudo-random function of the request's whole token history, so
// they do not depend on batching, chunking or preemption, exactly like a correct model. It also checks
// the SchedulerOutput contract as a real runner relies on it: each chunk starts where the last ended,
// resumption only from position 0 after preemption, KV blocks covering every scheduled position.
#pragma once

#include "engine/model_runner.h"
#include "engine/sampler.h"

#include <chrono>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace onecard {

struct FakeRunnerConfig {
    int64_t vocab_size = 64;
    int64_t max_model_len = 4096;
    KvModelShape kv_shape = tiny_fake_kv_shape();
    std::chrono::microseconds step_delay{0};  // simulated compute time per step
    float logit_scale = 4.0f;                 // logits uniform in [-scale, scale]
    // Sample the rows the engine allows (ScheduledRequest::sampling) here, as a device runner does,
    // with engine/sampler.h's pipeline (a constrained row's mask from RowSampling::fill_mask applied
    // first, as -inf): tests check the engine gives the same tokens either way.
    bool sample_rows = false;

    static KvModelShape tiny_fake_kv_shape();  // SWA, CSA(4), HCA(8): block size must be a multiple of 8
};

struct FakeStepRecord {
    int64_t step = 0;
    int64_t n_scheduled_tokens = 0;
    std::vector<std::pair<RequestId, int64_t>> scheduled;  // (id, n_tokens) in batch order
    std::vector<bool> sampled;                             // per scheduled entry
    int64_t n_runner_sampled = 0;                          // rows this runner sampled itself
    int64_t n_runner_masked = 0;                           // of which constrained (RowSampling::fill_mask)
};

class FakeModelRunner : public ModelRunner {
public:
    explicit FakeModelRunner(FakeRunnerConfig config = {});

    int64_t vocab_size() const override { return config_.vocab_size; }
    int64_t max_model_len() const override { return config_.max_model_len; }
    KvModelShape kv_model_shape() const override { return config_.kv_shape; }
    RunnerOutput execute(const SchedulerOutput& batch) override;

    // The logits row the fake model gives after this token history (for tests' expectations).
    std::vector<float> logits_for(const std::vector<int32_t>& history) const;

    const std::vector<FakeStepRecord>& log() const { return log_; }
    size_t n_live_states() const { return states_.size(); }

private:
    struct SeqState {
        int64_t next_pos = 0;
        uint64_t hash = 0;
        std::vector<int32_t> blocks;  // the request's block table (apply_block_ids)
    };
    static uint64_t mix(uint64_t h, int64_t pos, int32_t token);
    void fill_logits(uint64_t hash, float* row) const;

    FakeRunnerConfig config_;
    std::unordered_map<RequestId, SeqState> states_;
    Sampler sampler_;
    std::vector<uint32_t> mask_;  // a constrained row's token mask (scratch)
    std::vector<FakeStepRecord> log_;
};

}  // namespace onecard
