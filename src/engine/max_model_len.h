// The default max_model_len (prompt + output tokens per request) when --max-model-len is not given.
// vLLM's rule is the model's maximum (config.json max_position_embeddings), limited by what the KV
// pool holds. On the GPU that limit comes from the memory plan (memory_plan.h), which itself depends
// on the length: a longer context takes a larger step workspace and, when experts are offloaded, a
// larger KV floor that could push more weights into host RAM (the embedding table first, then experts).
// The default never does the latter: it
// is the longest length whose plan fits, holds that many KV tokens and keeps at least as many experts
// on the GPU as the plan for kMaxModelLenFloor tokens. On the CPU the reference backend has no use
// for a million-token window (its attention is quadratic in the host's time), so the default is
// min(model maximum, kCpuDefaultMaxModelLen); --max-model-len raises it.
#pragma once

#include "engine/memory_plan.h"

#include <cstdint>
#include <functional>
#include <string>

namespace onecard {

inline constexpr int64_t kCpuDefaultMaxModelLen = 8192;
// The length every GPU plan must at least hold (the CPU default, and onecard's earlier default).
inline constexpr int64_t kMaxModelLenFloor = 8192;

struct MaxModelLenChoice {
    int64_t max_model_len = 0;
    std::string why;  // one line for the startup log
    MemoryPlan plan;  // the GPU plan made for max_model_len (empty on the CPU)
};

MaxModelLenChoice default_max_model_len_cpu(int64_t model_max);

// `plan_for(len)` makes the serve plan for max_model_len = len. When even the floor's plan does not
// fit, that plan comes back (fits = false) for the caller to refuse with its reasons.
MaxModelLenChoice default_max_model_len_gpu(int64_t model_max, const std::function<MemoryPlan(int64_t)>& plan_for);

}  // namespace onecard
