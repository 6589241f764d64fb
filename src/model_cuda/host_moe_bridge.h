// The host half of hybrid experts (the GPU half: backend/cuda/ops/host_moe.cuh). Owns the mailbox
// in mapped pinned memory and one poller thread that, for each request the GPU publishes, builds
// the layer's host pairs (the picks whose expert the placement keeps in host RAM), runs them on the
// host expert pool (backend/host) and answers. The poller spins while steps arrive and sleeps
// after a few idle milliseconds; begin_step() wakes it, so an idle server does not burn a core.
#pragma once

#include "backend/cuda/ops/host_moe.cuh"
#include "backend/host/host_experts.h"
#include "model/config.h"
#include "model_cuda/gpu_weights.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace onecard {

struct HostMoeOptions {
    int n_threads = 0;  // host expert threads incl. the poller; 0 = hardware threads - 1
    bool pin_threads = true;
    uint64_t timeout_ns = 10'000'000'000ull;  // a GPU wait longer than this fails the step
    uint64_t spin_ns = 5'000'000ull;          // the poller spins this long after a request before sleeping
    // Large decode steps stage up to stream_experts host experts per layer over PCIe into HBM and
    // compute them on the GPU, while the host computes the rest (the DMA engine's reads of host RAM
    // come on top of the CPU's: HostExpertStreamer). Steps of fewer than stream_min_tokens tokens
    // leave every host expert to the host. 0: never.
    int64_t stream_experts = 0;
    int64_t stream_min_tokens = 32;
};

class HostMoeBridge {
public:
    // Device words the bridge needs (request counter, publish arrivals), carved by GpuModel.
    static constexpr int64_t kDeviceCounters = 2;
    // `weights` must be hybrid (attach_host_experts) and outlive the bridge; max_tokens bounds the
    // tokens of one published request (the GEMV path's rows, min(max_num_batched_tokens,
    // GpuModelOptions::moe_gemv_max_tokens): a bound of its own, not the step budget); device_counters: kDeviceCounters
    // uint32 of device memory (zeroed here).
    HostMoeBridge(const ModelConfig& cfg, const GpuModelWeights& weights, int64_t max_tokens, const HostMoeOptions& opt,
                  uint32_t* device_counters);
    ~HostMoeBridge();
    HostMoeBridge(const HostMoeBridge&) = delete;
    HostMoeBridge& operator=(const HostMoeBridge&) = delete;

    const cuda::HostMoeDeviceView& view() const { return view_; }
    // Before queueing a step that publishes: wakes the poller.
    void begin_step();
    // After the step's stream has synchronised: throws onecard::Error if a GPU wait timed out or the
    // host failed (the message says which and the host's last error).
    void check_step() const;
    // Host pairs computed since construction (benchmarks, tests).
    uint64_t host_pairs() const { return pairs_.load(); }
    // Host experts read per request summed (pairs sharing an expert in one request read it once).
    uint64_t host_expert_reads() const { return expert_reads_.load(); }
    double host_seconds() const { return static_cast<double>(host_ns_.load()) * 1e-9; }
    int n_threads() const { return n_threads_; }
    const char* isa() const { return host::isa_name(isa_); }
    void check_integrity() const;

private:
    void poll_loop();
    void serve(uint32_t seq);

    const ModelConfig cfg_;
    const GpuModelWeights& w_;
    const int64_t max_tokens_;
    const HostMoeOptions opt_;
    int n_threads_ = 1;
    host::Isa isa_ = host::Isa::Scalar;
    std::unique_ptr<host::HostExpertPool> pool_;
    void* mapped_ = nullptr;  // the mailbox (cudaHostAllocMapped)
    size_t mapped_bytes_ = 0;
    cuda::HostMoeControl* ctl_ = nullptr;
    uint8_t* xq_ = nullptr;
    float* xs_ = nullptr;
    int32_t* experts_ = nullptr;
    float* weights_ = nullptr;
    uint16_t* y_ = nullptr;  // bf16 bits
    cuda::HostMoeDeviceView view_;
    std::vector<host::HostExpertPair> pairs_buf_;  // the poller's, reused
    std::atomic<bool> stop_{false};
    std::atomic<uint64_t> pairs_{0}, expert_reads_{0}, host_ns_{0};
    std::vector<const uint8_t*> distinct_buf_;  // the poller's, reused
    mutable std::mutex mu_;
    std::condition_variable wake_;
    uint64_t kicks_ = 0;      // guarded by mu_
    std::string last_error_;  // guarded by mu_
    std::thread poller_;
};

}  // namespace onecard
