#include "model_cuda/host_moe_bridge.h"

#include "backend/cuda/cuda_check.h"
#include "core/error.h"

#include <cuda_runtime.h>
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstring>

namespace onecard {
namespace {

size_t align64(size_t b) {
    return (b + 63) / 64 * 64;
}

uint64_t now_ns() {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count());
}

}  // namespace

HostMoeBridge::HostMoeBridge(const ModelConfig& cfg, const GpuModelWeights& weights, int64_t max_tokens,
                             const HostMoeOptions& opt, uint32_t* device_counters)
    : cfg_(cfg), w_(weights), max_tokens_(max_tokens), opt_(opt) {
    const int64_t D = cfg.hidden_size, K = cfg.num_experts_per_tok, P = max_tokens * K;
    ONECARD_CHECK(max_tokens > 0 && D % 128 == 0, "host experts: max_tokens {} and hidden {} (% 128)", max_tokens, D);
    // Mailbox layout: control | xq | xs | experts | weights | y, each 64-byte aligned.
    const size_t sizes[6] = {sizeof(cuda::HostMoeControl),
                             static_cast<size_t>(max_tokens * D),
                             static_cast<size_t>(max_tokens * D / 128) * 4,
                             static_cast<size_t>(P) * 4,
                             static_cast<size_t>(P) * 4,
                             static_cast<size_t>(P * D) * 2};
    size_t off[6], total = 0;
    for (int i = 0; i < 6; ++i) {
        off[i] = total;
        total += align64(sizes[i]);
    }
    CUDA_CHECK(cudaHostAlloc(&mapped_, total, cudaHostAllocMapped | cudaHostAllocPortable));
    mapped_bytes_ = total;
    std::memset(mapped_, 0, total);
    auto* base = static_cast<uint8_t*>(mapped_);
    ctl_ = reinterpret_cast<cuda::HostMoeControl*>(base + off[0]);
    xq_ = base + off[1];
    xs_ = reinterpret_cast<float*>(base + off[2]);
    experts_ = reinterpret_cast<int32_t*>(base + off[3]);
    weights_ = reinterpret_cast<float*>(base + off[4]);
    y_ = reinterpret_cast<uint16_t*>(base + off[5]);
    void* dbase = nullptr;
    CUDA_CHECK(cudaHostGetDevicePointer(&dbase, mapped_, 0));
    auto* db = static_cast<uint8_t*>(dbase);
    view_.ctl = reinterpret_cast<cuda::HostMoeControl*>(db + off[0]);
    view_.xq = db + off[1];
    view_.xs = reinterpret_cast<float*>(db + off[2]);
    view_.experts = reinterpret_cast<int32_t*>(db + off[3]);
    view_.weights = reinterpret_cast<float*>(db + off[4]);
    view_.y = reinterpret_cast<const __nv_bfloat16*>(db + off[5]);
    ONECARD_CHECK(device_counters != nullptr, "host experts: no device counters");
    CUDA_CHECK(cudaMemset(device_counters, 0, kDeviceCounters * sizeof(uint32_t)));
    view_.seq = device_counters;
    view_.arrive = device_counters + 1;

    const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    n_threads_ = opt.n_threads > 0 ? opt.n_threads : static_cast<int>(std::max(1u, hw - 1));
    isa_ = host::best_isa();
    pool_ = std::make_unique<host::HostExpertPool>(n_threads_, isa_, opt.pin_threads);
    pairs_buf_.reserve(static_cast<size_t>(P));
    distinct_buf_.reserve(static_cast<size_t>(P));
    poller_ = std::thread([this] { poll_loop(); });
}

HostMoeBridge::~HostMoeBridge() {
    stop_.store(true);
    {
        std::lock_guard<std::mutex> lk(mu_);
        ++kicks_;
    }
    wake_.notify_all();
    if (poller_.joinable()) poller_.join();
    pool_.reset();
    if (mapped_) cudaFreeHost(mapped_);
}

void HostMoeBridge::begin_step() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        ++kicks_;
    }
    wake_.notify_one();
}

void HostMoeBridge::poll_loop() {
    uint32_t last = 0;  // the GPU's counter starts at 0: its first request is 1
    uint64_t idle_from = now_ns(), seen_kicks = 0;
    while (!stop_.load(std::memory_order_relaxed)) {
        const uint32_t seq = ctl_->request_seq;
        if (seq != last) {
            std::atomic_thread_fence(std::memory_order_acquire);  // the request's data after its number
            serve(seq);
            last = seq;
            idle_from = now_ns();
            continue;
        }
        if (now_ns() - idle_from < opt_.spin_ns) {
            _mm_pause();
            continue;
        }
        // Idle: sleep until a step begins (or 1 ms passes: a request published without a kick is
        // still served, just later).
        std::unique_lock<std::mutex> lk(mu_);
        if (kicks_ == seen_kicks) wake_.wait_for(lk, std::chrono::milliseconds(1));
        if (kicks_ != seen_kicks) idle_from = now_ns();
        seen_kicks = kicks_;
    }
}

void HostMoeBridge::serve(uint32_t seq) {
    const uint64_t t0 = now_ns();
    uint32_t status = 0;
    try {
        const int64_t layer = ctl_->layer, n = ctl_->n_tokens;
        const int64_t K = cfg_.num_experts_per_tok, D = cfg_.hidden_size, E = cfg_.n_routed_experts;
        ONECARD_CHECK(layer >= 0 && layer < static_cast<int64_t>(w_.layers.size()) && n > 0 && n <= max_tokens_,
                      "host experts: request for layer {} with {} tokens (at most {})", layer, n, max_tokens_);
        const GpuMoE& m = w_.layers[static_cast<size_t>(layer)].ffn;
        ONECARD_CHECK(m.hybrid(), "host experts: layer {} has no host experts", layer);
        pairs_buf_.clear();
        for (int64_t p = 0; p < n * K; ++p) {
            // The GPU hands over the ids of the host's pairs only: -1 marks a pair computed on the GPU
            // (a GPU expert, or a host expert staged into HBM this step).
            const int32_t e = experts_[p];
            if (e < 0) continue;
            ONECARD_CHECK(e < E && m.expert_slot_host[static_cast<size_t>(e)] < 0,
                          "host experts: pair {} names expert {}, which is not a host expert of layer {}", p, e, layer);
            const cuda::MxHostExpert& h = m.host_experts[static_cast<size_t>(e)];
            host::HostExpertPair q;
            q.token = static_cast<int32_t>(p / K);
            q.weight = weights_[p];
            q.expert = host::MxExpertView{{h.w1, h.s1}, {h.w3, h.s3}, {h.w2, h.s2}};
            q.out = y_ + p * D;
            pairs_buf_.push_back(q);
        }
        if (!pairs_buf_.empty()) {
            host::HostMoeJob job;
            job.dim = D;
            job.inter = cfg_.moe_intermediate_size;
            job.swiglu_limit = static_cast<float>(cfg_.swiglu_limit);
            job.xq = xq_;
            job.xs = xs_;
            job.n_tokens = n;
            job.pairs = pairs_buf_.data();
            job.n_pairs = static_cast<int64_t>(pairs_buf_.size());
            pool_->run(job);
        }
    } catch (const std::exception& e) {
        status = 1;
        std::lock_guard<std::mutex> lk(mu_);
        last_error_ = e.what();
    }
    const uint64_t t1 = now_ns();
    ctl_->host_status = status;
    std::atomic_thread_fence(std::memory_order_release);  // the rows and the status before the number
    ctl_->done_seq = seq;
    // Statistics after the GPU has its answer, off its critical path.
    host_ns_.fetch_add(t1 - t0, std::memory_order_relaxed);
    if (status != 0) return;
    pairs_.fetch_add(pairs_buf_.size(), std::memory_order_relaxed);
    distinct_buf_.clear();
    for (const host::HostExpertPair& q : pairs_buf_) distinct_buf_.push_back(q.expert.w1.packed);
    std::sort(distinct_buf_.begin(), distinct_buf_.end());
    expert_reads_.fetch_add(
        static_cast<uint64_t>(std::unique(distinct_buf_.begin(), distinct_buf_.end()) - distinct_buf_.begin()),
        std::memory_order_relaxed);
}

void HostMoeBridge::check_step() const {
    if (ctl_->gpu_error == 0) return;
    std::lock_guard<std::mutex> lk(mu_);
    throw Error(
        fmt::format("host experts: a GPU wait for the host expert pool failed ({}); the step's output is invalid",
                    last_error_.empty() ? "no answer within " + std::to_string(opt_.timeout_ns / 1000000) + " ms"
                                        : "host error: " + last_error_));
}

void HostMoeBridge::check_integrity() const {
    ONECARD_CHECK(mapped_ && ctl_ && pool_ && poller_.joinable(), "host experts: bridge not running");
    pool_->check_integrity();
    ONECARD_CHECK(ctl_->gpu_error == 0, "host experts: a GPU wait failed");
}

}  // namespace onecard
