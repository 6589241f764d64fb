// `onecard plan`: the memory plan for a model on this GPU (or a given device size), before anything
// is loaded: weights by component and storage format (GPU and host bytes), which routed experts
// stay on the GPU when not all fit (the rest in pinned host RAM; ranked by --expert-profile, else
// uniform), KV pool and token capacity, activations, graphs, headroom. Prints the report and one
// JSON line; exits 1 with the refusal (how much is missing, which options would fit) when the plan
// does not fit the GPU plus host RAM.
// With --gpus N (expert parallelism, src/parallel): one plan per GPU, E/N routed experts on each.
#include "commands.h"
#include "core/error.h"
#include "engine/memory_plan.h"
#include "model/config.h"
#include "model/expert_profile.h"
#include "model/synth.h"
#include "model/weights.h"
#include "parallel/parallel_plan.h"

#ifdef ONECARD_HAVE_CUDA
#include "backend/cuda/device.h"
#include "engine_cuda/gpu_plan.h"
#endif

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>

namespace onecard::cli {

namespace {

struct PlanArgs {
    std::string model;      // checkpoint dir (its config.json)
    std::string preset;     // synthetic shape instead: tiny | small | flash
    double device_gib = 0;  // 0: the GPU's free memory (or the H200 default without a GPU)
    double headroom_gib = 2.0;
    double gpu_memory_utilization = 0;  // > 0: that fraction of the card's total memory (vLLM)
    std::string expert_profile;         // use counts ranking (layer, expert) pairs for the GPU
    double host_ram_gib = 0;            // 0: MemAvailable less 8 GiB
    bool no_host_experts = false;
    int64_t experts = -1;
    bool no_mtp = false;
    int64_t kv_tokens = 0;
    int64_t max_num_seqs = 64;
    int64_t max_num_batched_tokens = 8192;
    int64_t block_size = 256;
    int gpus = 1;  // > 1: expert parallelism, one plan per GPU (docs/PARALLEL.md)
};

}  // namespace

void add_cmd_plan(CLI::App& app) {
    auto a = std::make_shared<PlanArgs>();
    CLI::App* cmd = app.add_subcommand(
        "plan", "Memory plan for one GPU (or each of N with --gpus): what fits, and what to change when it does not");
    cmd->add_option("--model", a->model, "checkpoint directory (reads config.json)");
    cmd->add_option("--synth", a->preset, "synthetic shape instead of --model: tiny | small | flash")
        ->check(CLI::IsMember({"tiny", "small", "flash"}));
    cmd->add_option("--device-gib", a->device_gib, "device memory to plan against (default: free memory of GPU 0)");
    cmd->add_option("--headroom-gib", a->headroom_gib, "reserved, never planned (default 2)");
    cmd->add_option("--gpu-memory-utilization", a->gpu_memory_utilization,
                    "fraction of the GPU's total memory to use, as in vLLM (default: its free memory)")
        ->check(CLI::Range(0.0, 1.0));
    cmd->add_option(
        "--expert-profile", a->expert_profile,
        "expert-use profile (onecard profile-experts) ranking the experts kept on the GPU (default: uniform)");
    cmd->add_option("--host-ram-gib", a->host_ram_gib,
                    "pinned host RAM for the routed experts that do not fit (default: MemAvailable less 8 GiB)");
    cmd->add_flag("--no-host-experts", a->no_host_experts,
                  "plan for the GPU alone: refuse instead of offloading experts");
    cmd->add_option("--experts", a->experts, "routed experts per layer kept on the GPU (default: all)");
    cmd->add_flag("--no-mtp", a->no_mtp, "leave the MTP block out");
    cmd->add_option("--kv-tokens", a->kv_tokens, "KV pool capacity in tokens (default: all memory left)");
    // vLLM's names (serve's flags); the earlier --max-sequences and --max-step-tokens still parse.
    cmd->add_option("--max-num-seqs,--max-sequences", a->max_num_seqs, "live sequences (one fixed KV slot each)");
    cmd->add_option("--max-num-batched-tokens,--max-step-tokens", a->max_num_batched_tokens,
                    "tokens per step (the largest prefill chunk), sizes activations");
    cmd->add_option("--block-size", a->block_size, "KV block size in tokens (multiple of 128)");
    cmd->add_option("--gpus", a->gpus,
                    "GPUs of this host for expert parallelism (routed experts split, the rest replicated)")
        ->check(CLI::Range(1, 8));
    cmd->callback([a] {
        ONECARD_CHECK(a->model.empty() != a->preset.empty(), "plan: give exactly one of --model DIR or --synth PRESET");
        ModelConfig cfg;
        if (!a->model.empty()) {
            cfg = load_config(std::filesystem::path(a->model) / "config.json");
        } else {
            SynthOptions so;
            so.preset = *synth_preset_from_name(a->preset);
            cfg = synth_config(so);
        }
        std::vector<PlannedTensor> tensors;
#ifdef ONECARD_HAVE_CUDA
        // Sized as the CUDA backend holds them (wo_a in bf16, FP8 scales as fp32): the plan the runner
        // will check against.
        tensors = gpu_planned_tensors(checkpoint_layout(cfg));
#else
        for (const auto& t : checkpoint_layout(cfg)) tensors.push_back({t.name, t.dtype, t.nbytes()});
#endif

        MemoryPlanOptions opt;
        opt.headroom_bytes = static_cast<uint64_t>(a->headroom_gib * 1073741824.0);
        opt.gpu_memory_utilization = a->gpu_memory_utilization;
        opt.host_ram_bytes = static_cast<uint64_t>(a->host_ram_gib * 1073741824.0);
        // Expert parallelism splits the experts over GPUs instead (and its planner plans GPUs alone).
        opt.allow_host_experts = !a->no_host_experts && a->gpus == 1;
        std::optional<ExpertUseProfile> profile;
        if (!a->expert_profile.empty()) {
            profile = ExpertUseProfile::load_for(a->expert_profile, cfg.num_hidden_layers, cfg.n_routed_experts);
            opt.expert_profile = &*profile;
        }
        opt.n_resident_experts = a->experts;
        opt.include_mtp = !a->no_mtp;
        opt.kv_tokens = a->kv_tokens;
        opt.max_num_seqs = a->max_num_seqs;
        opt.max_num_batched_tokens = a->max_num_batched_tokens;
        opt.kv_block_size = a->block_size;
        if (a->device_gib > 0) {
            opt.device_bytes = static_cast<uint64_t>(a->device_gib * 1073741824.0);
        } else {
#ifdef ONECARD_HAVE_CUDA
            const auto devs = cuda::list_devices();
            if (!devs.empty()) {
                opt.device_bytes = devs[0].free_bytes;
                opt.device_total_bytes = devs[0].total_bytes;
            }
            // Expert parallelism plans every GPU alike: against the least free of the first N.
            for (size_t i = 1; i < devs.size() && i < static_cast<size_t>(a->gpus); ++i)
                opt.device_bytes = std::min<uint64_t>(opt.device_bytes, devs[i].free_bytes);
#endif
        }
        if (a->gpus > 1) {
            const auto pp = parallel::make_parallel_memory_plan(cfg, tensors, a->gpus, opt);
            std::printf("%s%s\n", parallel::parallel_memory_plan_report(pp).c_str(),
                        parallel::parallel_memory_plan_json(pp).c_str());
            parallel::require_parallel_plan_fits(pp);
            return;
        }
        const MemoryPlan plan = make_memory_plan(cfg, tensors, opt);
        std::printf("%s%s\n", memory_plan_report(plan).c_str(), memory_plan_json(plan).c_str());
        require_plan_fits(plan);
    });
}

}  // namespace onecard::cli
