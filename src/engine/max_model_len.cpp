#include "engine/max_model_len.h"

#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>

namespace onecard {

MaxModelLenChoice default_max_model_len_cpu(int64_t model_max) {
    MaxModelLenChoice c;
    c.max_model_len = std::min(model_max, kCpuDefaultMaxModelLen);
    c.why = model_max <= kCpuDefaultMaxModelLen
                ? fmt::format("the model's maximum (max_position_embeddings {})", model_max)
                : fmt::format("the CPU backend's default, min(the model's {}, {}); --max-model-len raises it",
                              model_max, kCpuDefaultMaxModelLen);
    return c;
}

MaxModelLenChoice default_max_model_len_gpu(int64_t model_max, const std::function<MemoryPlan(int64_t)>& plan_for) {
    MaxModelLenChoice c;
    const int64_t floor = std::min(model_max, kMaxModelLenFloor);
    c.max_model_len = floor;
    c.plan = plan_for(floor);
    if (!c.plan.fits) {
        c.why = fmt::format("no plan fits even {} tokens", floor);
        return c;
    }
    const int64_t host_pairs = c.plan.placement.total_host();
    const bool embed_on_host = c.plan.embed_on_host;
    // A length is usable when its own plan fits, its pool holds it, and it moved no weights to the host
    // (no expert, and not the embedding table, which the planner moves first).
    // A length the planner refuses outright (a backend limit on the context it sizes) is not usable
    // either: the default stays below it instead of failing the start.
    auto usable = [&](int64_t len, MemoryPlan& p) {
        try {
            p = plan_for(len);
        } catch (const Error&) {
            return false;
        }
        return p.fits && p.kv_token_capacity >= len && p.placement.total_host() <= host_pairs &&
               (embed_on_host || !p.embed_on_host);
    };
    // A longer length only shrinks the pool (larger workspace), so the floor plan's capacity bounds it;
    // between the floor (usable) and that bound, the longest usable length by bisection.
    int64_t lo = floor, hi = std::min(model_max, c.plan.kv_token_capacity);
    MemoryPlan p;
    if (hi > lo && usable(hi, p)) {
        lo = hi;
        c.plan = std::move(p);
    } else {
        while (hi - lo > 1) {
            const int64_t mid = lo + (hi - lo) / 2;
            if (usable(mid, p)) {
                lo = mid;
                c.plan = std::move(p);
            } else {
                hi = mid;
            }
        }
    }
    c.max_model_len = lo;
    c.why = lo == model_max
                ? fmt::format("the model's maximum (max_position_embeddings {}); the KV pool holds {} tokens",
                              model_max, c.plan.kv_token_capacity)
                : fmt::format(
                      "what the KV pool holds beside the weights ({} tokens; the model allows {}); "
                      "--max-model-len, --kv-cache-memory-bytes or --gpu-memory-utilization change it",
                      c.plan.kv_token_capacity, model_max);
    return c;
}

}  // namespace onecard
