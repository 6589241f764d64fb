// ModelRunner: executes one SchedulerOutput. Implementations: FakeModelRunner (tests, scheduler
// benchmarks), the CPU DeepSeek-V4 model, later CUDA. A runner owns its per-request model state keyed
// by RequestId and must drop it for finished/preempted ids; it sees nothing else of the engine.
#pragma once

#include "engine/scheduler_output.h"
#include "kvcache/kv_spec.h"

#include <cstdint>
#include <vector>

namespace onecard {

struct RunnerOutput {
    // One row per scheduled request with sample == true, in SchedulerOutput order.
    std::vector<RequestId> row_ids;
    std::vector<float> logits;  // [n_rows, vocab_size] fp32
    int64_t vocab_size = 0;

    const float* row(size_t i) const { return logits.data() + i * static_cast<size_t>(vocab_size); }
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
    virtual RunnerOutput execute(const SchedulerOutput& batch) = 0;
};

}  // namespace onecard
