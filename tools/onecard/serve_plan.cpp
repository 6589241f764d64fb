#include "serve_plan.h"

#ifdef ONECARD_HAVE_CUDA
#include "backend/cuda/device.h"
#include "core/error.h"
#include "engine/engine_core.h"
#include "engine_cuda/cuda_model_runner.h"
#include "engine_cuda/gpu_plan.h"
#include "model/weights.h"

namespace onecard::cli {

MemoryPlan plan_serve_on_gpu(const ModelConfig& cfg, const Checkpoint* ckpt, const ServePlanInputs& in) {
    // The headers' dtypes and shapes, in checkpoint_layout's order (each .scale right after its
    // .weight, which gpu_planned_tensors pairs them by). A tensor the layout names but the
    // checkpoint lacks is left out here; bind_weights names it next. Without a checkpoint (dummy
    // weights) the official layout itself.
    std::vector<TensorSpec> specs;
    for (const TensorSpec& t : checkpoint_layout(cfg)) {
        if (ckpt == nullptr) {
            specs.push_back(t);
            continue;
        }
        const TensorView* v = ckpt->find(t.name);
        if (v != nullptr) specs.push_back({v->name, v->dtype, v->shape});
    }
    const auto devs = cuda::list_devices();
    ONECARD_CHECK(!devs.empty(), "serve: no usable GPU to plan for ({})", cuda::no_device_reason());
    MemoryPlanOptions o;
    o.device_bytes = devs[0].free_bytes;  // the runner allocates on GPU 0
    o.device_total_bytes = devs[0].total_bytes;
    o.gpu_memory_utilization = in.gpu_memory_utilization;
    o.headroom_bytes = static_cast<uint64_t>(in.headroom_gib * 1073741824.0);
    const bool mtp = in.speculative.enabled() && in.speculative.method == "mtp";
    const bool dspark = in.speculative.enabled() && in.speculative.method == "dspark";
    // The GPU loads the drafter (the MTP block, or the 0731 DSpark stages, both named mtp.*) only to
    // draft with it.
    o.include_mtp = mtp || dspark;
    o.kv_ring_spare = kv_ring_spare(in.speculative);
    o.max_num_seqs = in.max_num_seqs;
    o.max_num_batched_tokens = in.max_num_batched_tokens;
    o.max_context = in.max_model_len;
    o.kv_block_size = in.kv_block_size;
    o.kv_pool_bytes = static_cast<uint64_t>(in.kv_cache_bytes);
    // Offloading keeps room for one full-length request and for a full batch of ordinary ones.
    o.min_kv_tokens = serving_kv_floor_tokens(in.max_model_len, in.max_num_seqs);
    o.allow_host_experts = true;
    o.expert_profile = in.profile;
    // The workspace is what the runner's GpuModel will carve (exact), with the host-expert extras
    // (staging buffer, mailbox counters) only when the plan keeps experts in host RAM.
    CudaRunnerOptions ro;
    ro.max_model_len = in.max_model_len;
    ro.max_num_seqs = in.max_num_seqs;
    ro.max_num_batched_tokens = in.max_num_batched_tokens;
    ro.moe_gemv_max_tokens = in.moe_gemv_max_tokens;
    ro.count_expert_picks = in.count_expert_picks;
    ro.mtp_drafter = mtp;
    ro.dspark_drafter = dspark;
    ro.num_speculative_tokens = mtp || dspark ? in.speculative.num_speculative_tokens : 0;
    KvModelShape kv_shape = kv_model_shape_from_config(cfg);
    kv_shape.ring_spare = o.kv_ring_spare;
    const KvCacheSpec spec = make_kv_cache_spec(kv_shape, in.kv_block_size);
    const std::vector<PlannedTensor> tensors = gpu_planned_tensors(specs);
    o.workspace_bytes = static_cast<uint64_t>(CudaModelRunner::workspace_bytes(cfg, ro, spec, false));
    MemoryPlan plan = make_memory_plan(cfg, tensors, o);
    if (plan.host_experts()) {
        ro.count_expert_picks = in.count_expert_picks || in.count_picks_if_hybrid;
        o.workspace_bytes = static_cast<uint64_t>(CudaModelRunner::workspace_bytes(cfg, ro, spec, true));
        plan = make_memory_plan(cfg, tensors, o);
        // Host experts staged over PCIe: their buffers are workspace too, so plan again with them.
        const int64_t stream = in.stream_experts >= 0 ? in.stream_experts : default_stream_experts(plan);
        if (stream > 0 && plan.host_experts()) {
            ro.host_experts.stream_experts = stream;
            o.workspace_bytes = static_cast<uint64_t>(CudaModelRunner::workspace_bytes(cfg, ro, spec, true));
            plan = make_memory_plan(cfg, tensors, o);
            plan.stream_experts = stream;
        }
    }
    return plan;
}

}  // namespace onecard::cli
#endif
