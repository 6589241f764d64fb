// `onecard serve`: the OpenAI-compatible server (src/server) over the engine and the CPU model.
// Every flag also comes from the environment (ONECARD_<FLAG>, e.g. ONECARD_MAX_MODEL_LEN) and from a
// JSON or vLLM-style YAML config file (--config FILE: {"port": 8001, "allow-cidr": ["10.0.0.0/8"]} or
// `port: 8001`; keys are flag names without "--", '-' or '_'). Precedence: command line, then
// environment, then config file. `vllm serve` command lines work unchanged: the positional model path
// and vLLM's common flags are accepted (server/vllm_compat.h decides which values are refused).
#include "commands.h"
#include "core/error.h"
#include "engine/cpu_model_runner.h"
#include "engine/max_model_len.h"
#include "engine/memory_plan.h"
#include "loader/checkpoint.h"
#include "model/config.h"
#include "model/deepseek_v4.h"
#include "model/expert_profile.h"
#include "model/weights.h"
#include "onecard/engine.h"
#include "serve_compat_flags.h"
#include "serve_demo.h"
#include "serve_front_flags.h"
#include "serve_plan.h"
#include "serve_prefix_cache.h"
#include "serve_signals.h"
#include "server/access_control.h"
#include "server/generation_config.h"
#include "server/openai_server.h"
#include "server/speculative_config.h"
#include "server/startup_checks.h"
#include "server/text_decoder.h"
#include "server/vllm_compat.h"
#include "testing/scripted_runner.h"
#include "tokenizer/tokenizer.h"

#ifdef ONECARD_HAVE_CUDA
#include "backend/cuda/device.h"
#include "engine_cuda/cuda_model_runner.h"
#include "model_cuda/gpu_weights.h"
#endif

#include <nlohmann/json.hpp>

#include <pthread.h>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <thread>

namespace onecard::cli {
namespace {

namespace fs = std::filesystem;

struct ServeArgs {
    std::string model, tokenizer, config, numerics = "reference", test_script;
    std::vector<std::string> served_model_names;  // the first is the id in responses; all are accepted
    std::string generation_config = "auto";       // auto | vllm | DIR (vLLM's --generation-config)
    std::string device = "auto";                  // auto | cpu | cuda
    bool demo = false;
    server::ServerOptions opts;
    FrontFlags front;  // the HTTP front end's deadlines (serve_front_flags.h)
    std::vector<std::string> api_keys;
    std::string api_key_file;
    int64_t max_model_len = 0;
    int64_t max_num_seqs = 16;
    int64_t max_num_batched_tokens = 2048;
    int64_t long_prefill_token_threshold = 1024;
    bool new_requests_first = true;   // EngineConfig::new_requests_first
    int64_t moe_gemv_max_tokens = 0;  // CudaRunnerOptions::moe_gemv_max_tokens (0: auto)
    int64_t kv_cache_memory_bytes = 1LL << 30;
    double shutdown_timeout = 30.0;
    double gpu_headroom_gib = 2.0;
    double gpu_memory_utilization = 0;    // > 0: the fraction of the GPU's total memory to plan (vLLM)
    std::string expert_profile;           // use counts ranking experts for the GPU; written back at shutdown
    int64_t expert_swap_interval = 256;   // hybrid: steps between re-placement checks (0 = never move experts)
    std::string stream_experts = "auto";  // hybrid: host experts per layer staged over PCIe on large decode steps
    int64_t stream_min_tokens = 32;       // ... on steps of at least this many tokens
    bool no_access_log = false;
    // vLLM compatibility (server/vllm_compat.h): the positional model, and flags onecard only checks.
    std::string model_positional;
    server::VllmFlags vllm;
    std::vector<std::string> allowed_origins;
    bool disable_uvicorn_access_log = false;
    uint64_t seed = 0;
    bool enable_prefix_caching = true;   // vLLM's --enable-prefix-caching / --no-enable-prefix-caching
    int64_t kv_offload_bytes = -1;       // host KV tier (-1: choose_kv_offload_bytes's default; 0: off)
    int64_t prefix_snapshot_bytes = -1;  // host RAM for state snapshots (-1: max(KV pool / 4, 2 GiB))
    std::string kv_disk_dir;             // disk KV tier below it (empty: off)
    int64_t kv_disk_bytes = 0;           // its bound (0 with a dir: half the filesystem's free space, at most 256 GiB)
    std::string speculative_config;      // vLLM's --speculative-config JSON ("" -> off)
    std::string load_format = "auto";    // vLLM's --load-format: auto | safetensors | dummy (random weights, GPU)
    bool compat_bool = false;            // target of the accepted-and-ignored vLLM flags
    std::string compat_value;            // target of the accepted-and-ignored vLLM options with a value
};

// The vLLM-only flags: refused when they ask for what onecard would not do, otherwise named once.
void apply_vllm_flags(CLI::App* cmd, ServeArgs& a) {
    if (!a.model_positional.empty()) {
        ONECARD_CHECK(a.model.empty() || a.model == a.model_positional,
                      "serve: the model is given twice ('{}' and --model '{}')", a.model_positional, a.model);
        a.model = a.model_positional;
    }
    server::check_vllm_flags(a.vllm, a.model);
    const server::LogLevel level = server::parse_log_level(a.vllm.log_level);
    // Access-log lines are info-level: above info (warning, error, critical) they are off.
    if (level > server::LogLevel::Info || a.disable_uvicorn_access_log) a.no_access_log = true;
    // The checked vLLM flags whose accepted values are what onecard does anyway (registered below).
    const std::vector<std::string> checked = {
        "--tool-call-parser",     "--reasoning-parser",       "--kv-cache-dtype",     "--dtype",
        "--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size", "--chat-template"};
    std::fputs(server::ignored_flags_line(no_effect_vllm_flags_given(cmd, checked)).c_str(), stderr);
}

// `onecard serve` exits with this when it cannot listen on --host/--port (98 = EADDRINUSE on Linux).
constexpr int kExitCannotListen = 98;

// --max-num-batched-tokens when not given and the plan keeps every expert on the GPU: steps this small
// run the routed experts on the MXFP4 GEMV (GpuModel::max_moe_gemv_tokens, 682 at top-6) instead of
// dequantising every used expert for cuBLAS (~0.56 s a step at the Flash shape). Measured through serve
// with a 52K-token prompt among decoding streams (docs/results.md, 2026-12-03): 512-token steps
// prefill it at 2.1K tok/s with 0.56 s decode gaps at worst, 2048-token steps at 1.4K tok/s with 1.0 s.
constexpr int64_t kAllGpuStepTokens = 512;

// Whether to run on the GPU: --device cuda insists (and fails with the reason), auto uses a GPU when
// there is one and the CUDA kernels take the model's shape, cpu never. `why` says why not.
bool use_cuda(const ServeArgs& a, const ModelConfig& cfg, std::string& why) {
    if (a.device == "cpu") return false;
#ifdef ONECARD_HAVE_CUDA
    std::string reason = cuda::no_device_reason();
    if (reason.empty()) {
        try {
            check_gpu_model_shape(cfg);
        } catch (const Error& e) {
            reason = e.what();
        }
    }
    if (reason.empty() && a.numerics != "reference") reason = "the CUDA backend computes reference numerics only";
    ONECARD_CHECK(reason.empty() || a.device != "cuda", "serve: --device cuda: {}", reason);
    why = reason;
    return reason.empty();
#else
    (void)cfg;
    ONECARD_CHECK(a.device != "cuda", "serve: --device cuda: this build has no CUDA backend");
    why = a.device == "auto" ? "" : "no CUDA backend in this build";
    return false;
#endif
}

void run_serve(CLI::App* cmd, ServeArgs& a) {
    if (!a.config.empty()) apply_config_file(cmd, a.config);
    apply_vllm_flags(cmd, a);
    sigset_t stop_signals;
    block_stop_signals(stop_signals);
    const auto t0 = std::chrono::steady_clock::now();

    const bool test_mode = !a.test_script.empty();
    if (test_mode) {
        const char* allow = std::getenv("ONECARD_TEST_MODE");
        ONECARD_CHECK(allow && std::string(allow) == "1",
                      "serve: --test-script replaces the model with a scripted runner and is for tests only; "
                      "it needs ONECARD_TEST_MODE=1 in the environment");
    }
    fs::path model_dir = a.model;
    if (a.demo || a.model.empty()) model_dir = ensure_demo(!test_mode, test_mode);
    // The demo is a 17 MB model: grammar-held tool calls (as llama.cpp's server holds them) are what make
    // its calls valid; `--model models/demo` serves it unconstrained.
    if (a.demo && !test_mode) a.opts.strict_tools_all = true;
    const fs::path tok_path = a.tokenizer.empty() ? model_dir / "tokenizer.json" : fs::path(a.tokenizer);
    ONECARD_CHECK(fs::exists(tok_path), "serve: no tokenizer at '{}' (pass --tokenizer FILE)", tok_path.string());
    const Tokenizer tokenizer = Tokenizer::from_file(tok_path);

    std::optional<ModelConfig> cfg;
    std::unique_ptr<DeepSeekV4> model;
    std::unique_ptr<ModelRunner> runner;
#ifdef ONECARD_HAVE_CUDA
    CudaModelRunner* cuda_runner = nullptr;
#endif
    const bool kv_bytes_given = cmd->get_option("--kv-cache-memory-bytes")->count() > 0;
    int64_t weights_bytes = 0;
    int32_t eos = 1;
    server::ModelInfo info;
    if (!test_mode || fs::exists(model_dir / "config.json")) {
        cfg = load_config(model_dir / "config.json");
        eos = static_cast<int32_t>(cfg->eos_token_id);
        info.chat_variant = cfg->variant == ModelVariant::V4Flash0731 ? ChatVariant::V40731 : ChatVariant::V4;
        // Before the port is bound and a weight read: a wrong --tokenizer fails now, not mid-request.
        server::check_vocabulary(*cfg, model_dir / "config.json", tokenizer, tok_path);
    }
    const int64_t cfg_max = cfg ? cfg->max_position_embeddings : 1 << 20;
    // Without --max-model-len: the CPU default here (engine/max_model_len.h); a GPU replaces it below
    // with what its memory plan holds, before anything is loaded. Said at startup either way.
    const bool max_len_given = a.max_model_len > 0;
    MaxModelLenChoice len_choice = default_max_model_len_cpu(cfg_max);
    int64_t max_len = max_len_given ? a.max_model_len : len_choice.max_model_len;
    ONECARD_CHECK(max_len <= cfg_max, "serve: --max-model-len {} exceeds the model's {}", max_len, cfg_max);
    std::vector<std::string> keys = a.api_keys;
    if (!a.api_key_file.empty()) {
        auto more = server::read_api_key_file(a.api_key_file);
        keys.insert(keys.end(), more.begin(), more.end());
    }
    server::ServerOptions so = a.opts;
    apply_front_flags(a.front, so);
    so.api_keys = keys;
    so.max_num_seqs = a.max_num_seqs;
    so.access_log = !a.no_access_log;
    so.allowed_origins = parse_allowed_origins(a.allowed_origins);
    if (cmd->get_option("--seed")->count() > 0) so.seed = a.seed;
    // vLLM's --generation-config: the model's recommended sampling defaults, unless "vllm".
    so.sampling_defaults = server::resolve_generation_config(a.generation_config, model_dir.string());
    if (!so.sampling_defaults.empty())
        std::fprintf(stderr,
                     "serve: sampling defaults from generation_config.json: %s (--generation-config vllm "
                     "ignores them)\n",
                     so.sampling_defaults.describe().c_str());
    info.served_model_name =
        a.served_model_names.empty() ? (a.model.empty() ? "onecard-demo" : a.model) : a.served_model_names.front();
    if (a.served_model_names.size() > 1)
        info.model_aliases.assign(a.served_model_names.begin() + 1, a.served_model_names.end());
    info.root = model_dir.string();
    info.max_model_len = max_len;
    info.eos_token_id = eos;
    // The port is bound before the model loads, so a taken port fails here at once (exit code
    // kExitCannotListen) instead of after minutes of loading; while the model loads, /health and
    // /ready answer 503.
    std::unique_ptr<Engine> engine_owner;  // declared before the server: it outlives the HTTP threads
    server::OpenAIServer srv(so, tokenizer, info);
    int port = 0;
    try {
        port = srv.bind();
    } catch (const Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        std::exit(kExitCannotListen);
    }
    std::thread http([&srv] { srv.run(); });
    // A load that fails stops the listener and joins its thread before the error unwinds further.
    struct StopHttpOnUnwind {
        server::OpenAIServer& srv;
        std::thread& t;
        ~StopHttpOnUnwind() {
            if (!t.joinable()) return;
            srv.shutdown(std::chrono::milliseconds(0));
            t.join();
        }
    } stop_http{srv, http};
    {
        const std::string scheme = srv.is_tls() ? "https" : "http";
        nlohmann::json listening = {
            {"event", "listening"}, {"url", scheme + "://" + so.host + ":" + std::to_string(port)}, {"port", port}};
        // On stderr: stdout's first JSON line stays the ready line that scripts wait for.
        std::fprintf(stderr, "%s\nserve: listening on %s:%d; the probes answer 503 while the model loads\n",
                     listening.dump().c_str(), so.host.c_str(), port);
    }
    // The startup report's device part (filled when the CUDA runner is used).
    nlohmann::json device_report = {{"device", "cpu"}};
    std::string device_line;
    std::string plan_line, plan_json;  // the memory plan (CUDA path), for the startup report
    std::optional<ExpertUseProfile> profile;
    if (test_mode) {
        runner = std::make_unique<server::ScriptedRunner>(tokenizer, a.test_script, max_len, eos);
    } else if (std::string why; use_cuda(a, *cfg, why)) {
#ifdef ONECARD_HAVE_CUDA
        ONECARD_CHECK(a.numerics == "reference", "serve: the CUDA backend computes reference numerics only");
        // --load-format dummy: random weights of config.json's shape, made on the GPU (no checkpoint).
        const bool dummy = a.load_format == "dummy";
        const uint64_t dummy_seed = a.seed == 0 ? 1 : a.seed;
        std::optional<Checkpoint> ckpt;
        if (dummy)
            std::fprintf(stderr,
                         "serve: --load-format dummy: random weights of %s's shape, made on the GPU (seed %llu)\n",
                         (model_dir / "config.json").c_str(), static_cast<unsigned long long>(dummy_seed));
        else
            ckpt = Checkpoint::open(model_dir);  // headers only so far: nothing is uploaded yet
        if (!a.expert_profile.empty() && fs::exists(a.expert_profile)) {
            profile = ExpertUseProfile::load_for(a.expert_profile, cfg->num_hidden_layers, cfg->n_routed_experts);
        } else if (!a.expert_profile.empty()) {
            std::fprintf(stderr,
                         "serve: no expert profile at %s yet: uniform placement; the picks counted while "
                         "serving are written there at shutdown\n",
                         a.expert_profile.c_str());
        }
        // The plan first: a model that fits neither the GPU nor the GPU plus host RAM is refused
        // here, with its numbers, before a byte is uploaded.
        ServePlanInputs pin;
        pin.max_model_len = max_len;
        pin.max_num_seqs = a.max_num_seqs;
        pin.max_num_batched_tokens = a.max_num_batched_tokens;
        pin.moe_gemv_max_tokens = a.moe_gemv_max_tokens;
        pin.kv_block_size = EngineConfig{}.kv_block_size;
        pin.kv_cache_bytes = kv_bytes_given ? a.kv_cache_memory_bytes : 0;
        pin.gpu_memory_utilization = a.gpu_memory_utilization;
        pin.headroom_gib = a.gpu_headroom_gib;
        pin.profile = profile ? &*profile : nullptr;
        pin.count_expert_picks = !a.expert_profile.empty();
        pin.count_picks_if_hybrid = a.expert_swap_interval > 0;
        pin.stream_experts = a.stream_experts == "auto" ? -1 : std::stoll(a.stream_experts);
        if (!a.speculative_config.empty()) pin.speculative = server::parse_speculative_config(a.speculative_config);
        const bool mtp_drafter = pin.speculative.enabled() && pin.speculative.method == "mtp";
        const bool dspark_drafter = pin.speculative.enabled() && pin.speculative.method == "dspark";
        MemoryPlan plan;
        const Checkpoint* ckpt_ptr = ckpt ? &*ckpt : nullptr;
        if (max_len_given) {
            plan = plan_serve_on_gpu(*cfg, ckpt_ptr, pin);
        } else {
            len_choice = default_max_model_len_gpu(cfg_max, [&](int64_t len) {
                pin.max_model_len = len;
                return plan_serve_on_gpu(*cfg, ckpt_ptr, pin);
            });
            max_len = len_choice.max_model_len;
            pin.max_model_len = max_len;
            plan = std::move(len_choice.plan);
        }
        const bool step_given = cmd->get_option("--max-num-batched-tokens")->count() > 0;
        const int64_t gemv_step = std::max(kAllGpuStepTokens, a.max_num_seqs);
        if (!step_given && !plan.host_experts() && gemv_step < a.max_num_batched_tokens &&
            gemv_step <= GpuModel::max_moe_gemv_tokens(*cfg, false) &&
            (a.moe_gemv_max_tokens == 0 || gemv_step <= a.moe_gemv_max_tokens)) {
            // A smaller step needs less workspace: the plan still fits and keeps every expert on the GPU.
            a.max_num_batched_tokens = gemv_step;
            pin.max_num_batched_tokens = gemv_step;
            plan = plan_serve_on_gpu(*cfg, ckpt_ptr, pin);
            std::fprintf(stderr,
                         "serve: --max-num-batched-tokens %lld (every expert on the GPU: steps this small run the "
                         "routed experts on the MXFP4 GEMV; larger ones dequantise them for cuBLAS)\n",
                         static_cast<long long>(gemv_step));
        }
        std::fputs(memory_plan_report(plan).c_str(), stderr);
        require_plan_fits(plan);
        if ((mtp_drafter || dspark_drafter) && plan.host_experts())
            throw Error(
                "serve: speculative decoding on the GPU needs every routed expert on the GPU, but this plan keeps "
                "some in host RAM; leave out --speculative-config or serve a shorter --max-model-len / fewer "
                "--max-num-seqs");
        plan_line = memory_plan_line(plan) + "\n";
        plan_json = memory_plan_json(plan);
        std::fprintf(stderr, "serve: loading %s onto the GPU\n", model_dir.c_str());
        std::optional<ModelWeights> w;
        if (ckpt) {
            w = bind_weights(*cfg, *ckpt);
            for (const auto& f : fs::directory_iterator(model_dir))
                if (f.path().extension() == ".safetensors") weights_bytes += static_cast<int64_t>(f.file_size());
        }
        CudaRunnerOptions ro;
        ro.max_model_len = max_len;
        ro.max_num_seqs = a.max_num_seqs;
        ro.max_num_batched_tokens = a.max_num_batched_tokens;
        ro.moe_gemv_max_tokens = a.moe_gemv_max_tokens;
        ro.headroom_bytes = static_cast<uint64_t>(a.gpu_headroom_gib * (1ull << 30));
        ro.expert_placement = plan.placement;
        // The arena is the plan's GPU budget less its headroom (--gpu-memory-utilization bounds what we take).
        ro.arena_bytes = plan.device_bytes - plan.headroom_bytes;
        ro.kv_cache_bytes = static_cast<int64_t>(plan.kv_pool_bytes);
        ro.embed_on_host = plan.embed_on_host;
        // Counting costs a kernel per MoE layer: only for a profile, or to re-place host experts.
        ro.expert_swap_interval = plan.host_experts() ? a.expert_swap_interval : 0;
        ro.count_expert_picks = !a.expert_profile.empty() || ro.expert_swap_interval > 0;
        ro.host_experts.stream_experts = plan.host_experts() ? plan.stream_experts : 0;
        ro.host_experts.stream_min_tokens = a.stream_min_tokens;
        ro.mtp_drafter = mtp_drafter;
        ro.dspark_drafter = dspark_drafter;
        ro.num_speculative_tokens = mtp_drafter || dspark_drafter ? pin.speculative.num_speculative_tokens : 0;
        auto cr = w ? std::make_unique<CudaModelRunner>(*cfg, *w, ro)
                    : std::make_unique<CudaModelRunner>(*cfg, DummyWeights{dummy_seed}, ro);
        a.kv_cache_memory_bytes = static_cast<int64_t>(plan.kv_pool_bytes);
        // The plan's workspace is the runner's own (CudaModelRunner::workspace_bytes): its KV budget stands.
        ONECARD_CHECK(plan.workspace_exact, "serve: the GPU plan has no exact workspace");
        std::fprintf(stderr, "serve: weights on the GPU (%.2f GiB in %.1fs); KV pool budget %.2f GiB\n",
                     cr->report().weight_bytes / double(1ull << 30), cr->report().upload_seconds,
                     a.kv_cache_memory_bytes / double(1ull << 30));
        cuda_runner = cr.get();
        runner = std::move(cr);
#endif
    } else {
        if (!why.empty()) std::fprintf(stderr, "serve: running on the CPU: %s\n", why.c_str());
        ONECARD_CHECK(a.load_format != "dummy",
                      "serve: --load-format dummy makes random weights on the GPU; the CPU backend reads a checkpoint "
                      "(make one with `onecard synth`)");
        if (a.gpu_memory_utilization > 0 || !a.expert_profile.empty() || a.moe_gemv_max_tokens > 0)
            std::fprintf(stderr,
                         "serve: --gpu-memory-utilization, --expert-profile and --moe-gemv-max-tokens have no effect "
                         "on the CPU backend (the CPU reference keeps every expert in host memory)\n");
        Checkpoint ckpt = Checkpoint::open(model_dir);
        ModelWeights w = bind_weights(*cfg, ckpt);
        for (const auto& f : fs::directory_iterator(model_dir))
            if (f.path().extension() == ".safetensors") weights_bytes += static_cast<int64_t>(f.file_size());
        model = std::make_unique<DeepSeekV4>(*cfg, w, a.numerics == "exact" ? Numerics::Exact : Numerics::Reference);
        runner = std::make_unique<CpuModelRunner>(*model, max_len);
    }

    if (!max_len_given)
        std::fprintf(stderr, "serve: max_model_len %lld (no --max-model-len): %s\n", static_cast<long long>(max_len),
                     len_choice.why.c_str());

    EngineConfig ec;
    ec.eos_token_id = eos;
    ec.max_num_seqs = a.max_num_seqs;
    ec.max_num_batched_tokens = a.max_num_batched_tokens;
    ec.long_prefill_token_threshold = a.long_prefill_token_threshold;
    ec.new_requests_first = a.new_requests_first;
    ec.kv_cache_bytes = a.kv_cache_memory_bytes;
    ec.max_model_len = max_len;
    ec.submit_queue_capacity = static_cast<size_t>(a.max_num_seqs + a.opts.max_queued_requests + 16);
    ec.make_text_decoder = server::make_text_decoder_factory(tokenizer);
    ec.enable_prefix_caching = a.enable_prefix_caching;
    if (!a.speculative_config.empty()) ec.speculative = server::parse_speculative_config(a.speculative_config);
    const bool prefix_caching_asked = cmd->get_option("--enable-prefix-caching")->count() > 0;
    const bool runner_caches = runner->supports_prefix_caching();
    if (a.enable_prefix_caching && runner_caches) {
        bool on_gpu = false;
#ifdef ONECARD_HAVE_CUDA
        on_gpu = cuda_runner != nullptr;
#endif
        PrefixTierFlags f{a.prefix_snapshot_bytes, a.kv_offload_bytes, a.kv_disk_dir, a.kv_disk_bytes};
        std::fputs(configure_prefix_tiers(
                       ec, f, on_gpu, kv_disk_model_id(model_dir, a.load_format == "dummy", a.seed == 0 ? 1 : a.seed))
                       .c_str(),
                   stderr);
    } else if (!a.kv_disk_dir.empty() || a.kv_offload_bytes > 0) {
        std::fprintf(stderr, "serve: --kv-offload-bytes / --kv-disk-dir have no effect without prefix caching\n");
    }
    engine_owner = std::make_unique<Engine>(ec, std::move(runner));
    Engine& engine = *engine_owner;
    if (!a.enable_prefix_caching)
        std::fprintf(stderr, "serve: prefix caching off (--no-enable-prefix-caching)\n");
    else if (runner_caches)
        std::fputs(prefix_cache_report(engine, ec).c_str(), stderr);
    else if (prefix_caching_asked)
        std::fprintf(stderr,
                     "serve: --enable-prefix-caching: not supported by the %s; serving without a prefix "
                     "cache\n",
                     test_mode ? "test-script runner" : "CPU backend in exact numerics");
    std::fprintf(stderr, "serve: engine up (%lld KV blocks); warming up\n",
                 static_cast<long long>(engine.stats().n_total_kv_blocks));
#ifdef ONECARD_HAVE_CUDA
    if (cuda_runner) {
        const CudaRunnerReport& r = cuda_runner->report();
        const double gib = double(1ull << 30);
        device_report = {{"device", "cuda"},
                         {"gpu", r.device},
                         {"weights_gib", r.weight_bytes / gib},
                         {"kv_pool_gib", r.kv_pool_bytes / gib},
                         {"kv_token_capacity", r.kv_token_capacity},
                         {"kv_slots", r.kv_slots},
                         {"workspace_gib", r.workspace_bytes / gib},
                         {"arena_free_gib", r.free_after / gib},
                         {"headroom_gib", a.gpu_headroom_gib},
                         {"weights_upload_s", r.upload_seconds},
                         {"host_expert_gib", r.host_expert_bytes / gib},
                         {"host_embed_gib", r.host_embed_bytes / gib}};
        device_line = fmt::format(
            "onecard serve: {}: weights {:.2f} GiB, KV pool {:.2f} GiB ({} tokens, {} sequences), workspace {:.2f} "
            "GiB, {:.2f} GiB of the arena unused, {:.1f} GiB headroom outside it; weights uploaded in {:.1f}s\n",
            r.device, r.weight_bytes / gib, r.kv_pool_bytes / gib, r.kv_token_capacity, r.kv_slots,
            r.workspace_bytes / gib, r.free_after / gib, a.gpu_headroom_gib, r.upload_seconds);
    }
#endif

    srv.attach_engine(engine, max_len);

    // Warm-up before /ready says yes: one token through the whole engine path; on the GPU also a prompt
    // of one full step, so what a kernel path costs the first time it runs (module loading, cuBLAS
    // heuristics, the first pinned host-tier chunk) is paid here and not by the streams decoding beside
    // the first long prompt (measured through serve on the H200: that prompt's first 384-token chunk
    // took 0.69 s, the next ones 0.15 s).
    {
        auto warm_up = [&](std::vector<int32_t> prompt) {
            SamplingParams warm;
            warm.temperature = 0;
            warm.max_tokens = 1;
            auto stream = engine.submit({std::move(prompt), warm});
            while (auto ev = stream->next())
                if (ev->finished())
                    ONECARD_CHECK(ev->finish_reason != FinishReason::Error, "serve: warm-up failed: {}", ev->error);
        };
        warm_up({static_cast<int32_t>(cfg ? cfg->bos_token_id : 0)});
        bool on_gpu = false;
#ifdef ONECARD_HAVE_CUDA
        on_gpu = cuda_runner != nullptr;
#endif
        if (on_gpu && cfg) {
            const int64_t n = std::min<int64_t>(a.max_num_batched_tokens, max_len - 1);
            std::vector<int32_t> prompt(static_cast<size_t>(std::max<int64_t>(n, 1)));
            for (size_t i = 0; i < prompt.size(); ++i)  // any ids: only the step's shape matters here
                prompt[i] = static_cast<int32_t>((7 + 131 * static_cast<int64_t>(i)) % cfg->vocab_size);
            warm_up(std::move(prompt));
        }
    }
    srv.set_ready(true);
    const double ready_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const EngineStats st = engine.stats();
    const std::string scheme = srv.is_tls() ? "https" : "http";
    std::fputs(plan_line.c_str(), stdout);
    std::fputs(device_line.c_str(), stdout);
    std::printf(
        "onecard serve: %s on %s://%s:%d (%s), max_model_len %lld, max_num_seqs %lld, ready in %.2fs\n",
        info.served_model_name.c_str(), scheme.c_str(), so.host.c_str(), port,
        test_mode ? "TEST SCRIPT, no model" : (a.numerics + (model ? " numerics, CPU" : " numerics, CUDA")).c_str(),
        static_cast<long long>(max_len), static_cast<long long>(a.max_num_seqs), ready_s);
    nlohmann::json line = {{"event", "ready"},
                           {"model", info.served_model_name},
                           {"root", info.root},
                           {"url", scheme + "://" + so.host + ":" + std::to_string(port)},
                           {"port", port},
                           {"weights_bytes", weights_bytes},
                           {"kv_blocks", st.n_total_kv_blocks},
                           {"kv_block_tokens", ec.kv_block_size},
                           {"kv_cache_bytes", ec.kv_cache_bytes},
                           {"prefix_caching", st.prefix_caching},
                           {"max_model_len", max_len},
                           {"tls", srv.is_tls()},
                           {"auth", !keys.empty()},
                           {"allow_cidr", so.allow_cidrs},
                           {"allow_path", so.allow_paths},
                           {"time_to_ready_s", ready_s}};
    line.update(device_report);
    if (!plan_json.empty()) line["memory_plan"] = nlohmann::json::parse(plan_json);
    std::printf("%s\nready\n", line.dump().c_str());
    std::printf(
        "try: curl %s%s://%s:%d/v1/chat/completions -H 'Content-Type: application/json'%s -d "
        "'{\"messages\": [{\"role\": \"user\", \"content\": \"Hello!\"}], \"max_tokens\": 64, "
        "\"chat_template_kwargs\": {\"thinking\": false}}'\n",
        srv.is_tls() ? "-k " : "", scheme.c_str(), so.host.c_str(), port,
        keys.empty() ? "" : " -H \"Authorization: Bearer $ONECARD_API_KEY\"");
    std::fflush(stdout);

    int sig = 0;
    mark_serving();  // from here a stop signal drains (its handler forwards it to this sigwait)
    sigwait(&stop_signals, &sig);
    std::fprintf(stderr, "serve: signal %d: draining (up to %.1fs; a second signal cancels what is left)\n", sig,
                 a.shutdown_timeout);
    // A second SIGTERM/SIGINT during the drain cancels what is still in flight at once (uvicorn and
    // vLLM do the same on a second Ctrl-C): whoever asked twice wants the process gone now, but the
    // streams still end with a final chunk and [DONE] rather than a reset connection. The main thread
    // keeps waiting for signals while another drains: the kernel hands a process-directed signal to
    // the main thread first when it waits for it, and OpenBLAS's pool (started before main(), so it
    // does not block them) would otherwise take the second one and die of it, cutting streams mid-chunk.
    std::atomic<bool> drained{false};
    int64_t n_cancelled = 0;
    const pthread_t main_thread = pthread_self();
    std::thread drainer([&] {
        n_cancelled = srv.shutdown(std::chrono::milliseconds(static_cast<int64_t>(a.shutdown_timeout * 1000)));
        drained = true;
        pthread_kill(main_thread, SIGTERM);  // wakes the sigwait below (blocked here, so only it sees it)
    });
    for (bool cut = false; !drained.load();) {
        sigwait(&stop_signals, &sig);
        if (drained.load() || cut) continue;
        std::fprintf(stderr, "serve: second signal: cancelling the requests still in flight\n");
        srv.cut_drain();
        cut = true;
    }
    drainer.join();
    http.join();
#ifdef ONECARD_HAVE_CUDA
    // The picks counted while serving, added to the profile this run started from, for the next
    // start's placement. The engine is drained and idle here; a failure only costs the profile.
    if (cuda_runner && !a.expert_profile.empty()) {
        try {
            ExpertUseProfile seen = ExpertUseProfile::from_counts(cfg->num_hidden_layers, cfg->n_routed_experts,
                                                                  cuda_runner->expert_pick_counts());
            if (profile) seen.merge(*profile);
            seen.save(a.expert_profile);
            std::fprintf(stderr, "serve: expert profile written to %s (%llu picks)\n", a.expert_profile.c_str(),
                         static_cast<unsigned long long>(seen.total()));
        } catch (const std::exception& e) {
            std::fprintf(stderr, "serve: expert profile not written: %s\n", e.what());
        }
    }
#endif
    std::fprintf(stderr, "serve: stopped (%lld request(s) cancelled at the deadline)\n",
                 static_cast<long long>(n_cancelled));
}

}  // namespace

void add_cmd_serve(CLI::App& app) {
    auto a = std::make_shared<ServeArgs>();
    CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (chat, completions, tools, metrics)");
    auto& o = a->opts;
    cmd->add_option("--model", a->model, "checkpoint directory (default: the demo checkpoint)");
    cmd->add_flag("--demo", a->demo,
                  "serve the trained demo model (models/demo; else a random-weight one in ~/.cache/onecard), with "
                  "--strict-tools-all on");
    cmd->add_option("--tokenizer", a->tokenizer, "tokenizer.json (default: <model>/tokenizer.json)");
    cmd->add_option("--served-model-name", a->served_model_names,
                    "model id(s) clients use, as in vLLM: the first names the model in responses and metrics, every "
                    "one is listed and accepted (default: the --model path)");
    cmd->add_option("--host", o.host, "listen address (default 127.0.0.1)");
    cmd->add_option("--port", o.port, "listen port (default 8000; 0 = any free port)")->check(CLI::Range(0, 65535));
    cmd->add_option("--api-key", a->api_keys,
                    "accepted API key (repeatable); clients send 'Authorization: Bearer KEY'");
    cmd->add_option("--api-key-file", a->api_key_file, "file with accepted API keys, one per line");
    cmd->add_option("--allow-cidr", o.allow_cidrs,
                    "client networks allowed (repeatable, IPv4/IPv6 CIDR); default: all");
    cmd->add_option("--allow-path", o.allow_paths,
                    "request paths served (repeatable; exact, or a prefix ending in '*': --allow-path '/v1/*' "
                    "--allow-path /health); any other path gets 404 as if it had no route, before the API key is "
                    "asked for; default: every route");
    cmd->add_option("--tls-cert,--ssl-certfile", o.tls_cert, "PEM certificate: serve HTTPS");
    cmd->add_option("--tls-key,--ssl-keyfile", o.tls_key, "PEM private key for --tls-cert");
    cmd->add_option("--max-model-len", a->max_model_len,
                    "prompt + output tokens per request (default: on a GPU the model's maximum, limited to what the "
                    "KV pool holds without moving experts to host RAM; on the CPU min(model's maximum, 8192))");
    cmd->add_option("--max-num-seqs", a->max_num_seqs, "requests running at once (default 16)")
        ->check(CLI::PositiveNumber);
    cmd->add_option("--max-num-batched-tokens", a->max_num_batched_tokens,
                    "tokens per engine step (default 2048; on a GPU holding every expert, 512 or --max-num-seqs: "
                    "steps the routed-expert GEMV takes)")
        ->check(CLI::PositiveNumber);
    cmd->add_option("--long-prefill-token-threshold", a->long_prefill_token_threshold,
                    "most prompt tokens one request takes per step (default 1024)")
        ->check(CLI::PositiveNumber);
    cmd->add_flag("--new-requests-first,!--no-new-requests-first", a->new_requests_first,
                  "admit waiting requests before running prompts take their next chunk, so a short request is "
                  "not held behind a long prefill (default on)");
    cmd->add_option("--moe-gemv-max-tokens", a->moe_gemv_max_tokens,
                    "GPU: steps of at most this many tokens run the routed experts on the grouped MXFP4 GEMV, larger "
                    "ones dequantise the used experts for cuBLAS (default 0 = auto: 4096 / experts per token with "
                    "every expert on the GPU, 64 with host experts)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--kv-cache-memory-bytes", a->kv_cache_memory_bytes, "KV pool budget in bytes (default 1 GiB)")
        ->check(CLI::PositiveNumber);
    cmd->add_option("--kv-offload-bytes", a->kv_offload_bytes,
                    "host RAM for the prefix cache's host KV tier: cached blocks evicted from the KV pool move there "
                    "and come back on a hit (default: a quarter of the free host RAM, at most 64 GiB; 0 = off)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--prefix-snapshot-bytes", a->prefix_snapshot_bytes,
                    "host RAM for the prefix cache's state snapshots, one per resumable 128-token boundary "
                    "(default: a quarter of the KV pool, at least 2 GiB)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--kv-disk-dir", a->kv_disk_dir,
                    "directory for a disk KV tier below the host tier (checksummed entries, LRU; reused after a "
                    "restart of the same model; /dev/shm works)");
    cmd->add_option("--kv-disk-bytes", a->kv_disk_bytes,
                    "bound of the disk KV tier (default: half the directory's free space, at most 256 GiB)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--max-queued-requests", o.max_queued_requests,
                    "requests waiting beyond --max-num-seqs before 429 (default 256)")
        ->check(CLI::NonNegativeNumber);
    // Negative limits are refused here: "-1" would otherwise reach a size_t as 2^64 - 1, i.e. no limit.
    // (CLI11's own NonNegativeNumber words it as "not in range 0 to 1.8e308".)
    const CLI::Validator non_negative(
        [](std::string& v) -> std::string {
            char* end = nullptr;
            const double d = std::strtod(v.c_str(), &end);
            if (end == v.c_str() || *end != '\0') return "'" + v + "' is not a number";
            return d < 0 ? "must not be negative, got " + v + " (a negative limit does not mean 'no limit')" : "";
        },
        ">=0");
    cmd->add_option("--http-threads", o.http_threads,
                    "threads serving complete requests (default max-num-seqs + max-queued-requests + 16); idle or slow "
                    "connections use none")
        ->check(non_negative);
    cmd->add_option("--max-body-bytes", o.max_body_bytes,
                    "largest request body, 1 B to 1 GiB and at most --max-buffered-body-bytes; larger gets 413 "
                    "(default 16 MiB)")
        ->check(non_negative);
    add_front_flags(cmd, a->front, o);
    cmd->add_option("--shutdown-timeout", a->shutdown_timeout,
                    "seconds SIGTERM/SIGINT waits for in-flight requests (default 30)")
        ->check(non_negative);
    cmd->add_option("--numerics", a->numerics, "reference | exact")->check(CLI::IsMember({"reference", "exact"}));
    cmd->add_option("--device", a->device,
                    "auto (the GPU when there is one and it takes the model's shape) | cpu | cuda")
        ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
    cmd->add_option("--gpu-headroom-gib", a->gpu_headroom_gib,
                    "GPU memory left outside onecard's one allocation (default 2)");
    cmd->add_option("--gpu-memory-utilization", a->gpu_memory_utilization,
                    "fraction of the GPU's total memory this server may use, as in vLLM (default: its free memory)")
        ->check(CLI::Range(0.0, 1.0));
    cmd->add_option("--expert-profile", a->expert_profile,
                    "expert-use profile (onecard profile-experts) ranking the experts kept on the GPU when not all "
                    "fit; the picks counted while serving are added to it at shutdown");
    cmd->add_option("--expert-swap-interval", a->expert_swap_interval,
                    "with experts in host RAM: every N steps move at most one host expert that became hot onto the GPU "
                    "in place of the coldest GPU expert of its layer (0: never; default 256)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--stream-experts", a->stream_experts,
                    "with experts in host RAM: on decode steps of at least --stream-min-tokens tokens, copy this many "
                    "of each layer's host experts over PCIe into GPU memory and compute them there, while the host "
                    "CPU computes the rest; auto (default): 35% of the host experts per layer when the host takes at "
                    "least 2% of the picks (no profile, or a profile that leaves it that many), else 0")
        ->check(CLI::IsMember({"auto"}) | CLI::NonNegativeNumber);
    cmd->add_option("--stream-min-tokens", a->stream_min_tokens,
                    "smallest decode step (tokens) that stages host experts over PCIe (default 32)")
        ->check(CLI::PositiveNumber);
    cmd->add_flag("--log-requests-text", o.log_requests_text, "access log includes prompt and completion text");
    cmd->add_flag("--no-access-log", a->no_access_log, "no per-request JSON log lines");
    cmd->add_option("--test-script", a->test_script,
                    "TESTS ONLY (needs ONECARD_TEST_MODE=1): replace the model with a scripted runner "
                    "(src/testing/scripted_runner.h)");
    cmd->add_option("--config", a->config,
                    "JSON or YAML file of flag values, as vLLM's --config (command line and environment win)");
    cmd->add_flag("--strict-tools-all", o.strict_tools_all,
                  "under tool_choice auto, hold every tool's arguments to its parameters schema (where the grammar "
                  "can), not only tools with strict: true");
    cmd->add_flag("--metrics-require-auth", o.metrics_require_auth,
                  "/metrics asks for the API key too (default: open, like /health)");
    cmd->add_flag("--log-probe-requests", o.log_probe_requests,
                  "access-log /health, /ready, /metrics and /version as well (default: only their errors)");
    cmd->add_option("--allowed-origins", a->allowed_origins,
                    "CORS: origins browsers may call from (repeatable, or vLLM's JSON list; \"*\" = any)");
    // vLLM's flags (`vllm serve` lines start onecard unchanged; server/vllm_compat.h has the policy).
    auto& v = a->vllm;
    cmd->add_option("model_path", a->model_positional, "checkpoint directory, as `vllm serve MODEL` takes it");
    cmd->add_option("--generation-config", a->generation_config,
                    "sampling defaults: auto (the model's generation_config.json), vllm (none) or a folder holding "
                    "generation_config.json, as in vLLM");
    cmd->add_option("--seed", a->seed, "seed for requests that bring none (vLLM's --seed): reproducible runs");
    cmd->add_option("--log-level,--uvicorn-log-level", v.log_level,
                    "trace | debug | info | warning | error | critical (above info: no access log)");
    cmd->add_flag("--disable-uvicorn-access-log", a->disable_uvicorn_access_log, "vLLM: same as --no-access-log");
    cmd->add_option("--tool-call-parser", v.tool_call_parser, "vLLM: deepseek_v4 (onecard always parses DSML)");
    cmd->add_option("--reasoning-parser", v.reasoning_parser, "vLLM: deepseek_v4 (onecard always splits <think>)");
    cmd->add_option("--kv-cache-dtype", v.kv_cache_dtype, "vLLM: auto | fp8 (onecard's KV cache is always FP8)");
    cmd->add_option("--dtype", v.dtype, "vLLM: auto | bfloat16 (the checkpoint's own formats)");
    cmd->add_option("--chat-template", v.chat_template,
                    "vLLM: only the model's own template (onecard renders DeepSeek-V4's format itself)");
    cmd->add_option("--tensor-parallel-size", v.tensor_parallel_size, "vLLM: 1 (one GPU)");
    cmd->add_option("--pipeline-parallel-size", v.pipeline_parallel_size, "vLLM: 1 (one GPU)");
    cmd->add_option("--data-parallel-size", v.data_parallel_size, "vLLM: 1 (one onecard per GPU)");
    cmd->add_option(
        "--speculative-config", a->speculative_config,
        "vLLM: speculative decoding, e.g. '{\"method\":\"mtp\",\"num_speculative_tokens\":3}' (V4-Flash) or "
        "'{\"method\":\"dspark\",\"num_speculative_tokens\":5}' (0731, at most dspark_block_size); "
        "the CUDA backend drafts greedy requests with mtp, the CPU backend every request with either; the "
        "engine refuses a method the runner cannot run)");
    cmd->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", a->enable_prefix_caching,
                  "automatic prefix caching (default on; the CUDA backend and the CPU backend in reference "
                  "numerics have it)");
    add_no_effect_vllm_flags(cmd, a->compat_bool, a->compat_value);
    cmd->add_option("--load-format", a->load_format,
                    "vLLM: auto | safetensors (the checkpoint's weights) or dummy (random weights of config.json's "
                    "shape made on the GPU, for benchmarks; --seed picks them)")
        ->check(CLI::IsMember({"auto", "safetensors", "dummy"}));
    // Environment: ONECARD_<FLAG> for every flag (--max-model-len -> ONECARD_MAX_MODEL_LEN).
    for (CLI::Option* opt : cmd->get_options()) {
        if (opt->get_lnames().empty() || opt->get_lnames()[0] == "help") continue;
        std::string env = "ONECARD_";
        for (char c : opt->get_lnames()[0])
            env += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        opt->envname(env);
    }
    cmd->callback([cmd, a]() { run_serve(cmd, *a); });
}

}  // namespace onecard::cli
