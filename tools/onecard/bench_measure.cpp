#include "bench_measure.h"

#ifdef ONECARD_HAVE_CUDA

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/stream.h"
#include "backend/host/host_experts.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <thread>

namespace onecard::cli {

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

std::vector<int64_t> parse_int_list(const std::string& list) {
    std::vector<int64_t> out;
    std::stringstream ss(list);
    std::string item;
    while (std::getline(ss, item, ','))
        if (!item.empty()) out.push_back(std::stoll(item));
    return out;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Prints a profile (ms per op group over all layers of one step) and returns it as JSON.
nlohmann::json print_profile(const std::string& what, const std::vector<std::pair<std::string, double>>& prof) {
    double total = 0;
    for (const auto& [k, v] : prof) total += v;
    std::printf("  profile, %s (one step launched op by op, %.2f ms):\n", what.c_str(), total);
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [k, v] : prof) {
        std::printf("    %-40s %9.3f ms %5.1f%%\n", k.c_str(), v, 100.0 * v / std::max(total, 1e-9));
        j[k] = v;
    }
    return j;
}

// Device-to-device copy of 1 GiB, read + write counted (the denominator h200-ceilings.md uses).
double measure_copy_bandwidth(cuda::DeviceArena& arena, cudaStream_t s) {
    const size_t bytes = size_t{1} << 30;
    const auto m = arena.mark();
    void* a = arena.alloc(bytes, "bandwidth probe a");
    void* b = arena.alloc(bytes, "bandwidth probe b");
    CUDA_CHECK(cudaMemsetAsync(a, 1, bytes, s));
    std::vector<double> t;
    for (int i = 0; i < 12; ++i) {
        CUDA_CHECK(cudaStreamSynchronize(s));
        const auto t0 = std::chrono::steady_clock::now();
        CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s));
        CUDA_CHECK(cudaStreamSynchronize(s));
        if (i >= 2) t.push_back(seconds_since(t0));
    }
    arena.release(m);
    return 2.0 * bytes / median(t);
}

// Host-to-device copies from pinned host memory (what staging a host expert for a prefill costs), 256 MiB.
double measure_pinned_h2d(cuda::DeviceArena& arena, cudaStream_t s) {
    const size_t bytes = size_t{256} << 20;
    void* host = nullptr;
    CUDA_CHECK(cudaHostAlloc(&host, bytes, cudaHostAllocPortable));
    std::memset(host, 1, bytes);
    const auto m = arena.mark();
    void* dev = arena.alloc(bytes, "pinned copy probe");
    std::vector<double> t;
    for (int i = 0; i < 8; ++i) {
        CUDA_CHECK(cudaStreamSynchronize(s));
        const auto t0 = std::chrono::steady_clock::now();
        CUDA_CHECK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, s));
        CUDA_CHECK(cudaStreamSynchronize(s));
        if (i >= 2) t.push_back(seconds_since(t0));
    }
    arena.release(m);
    cudaFreeHost(host);
    return bytes / median(t);
}

// The host's read bandwidth while pinned host-to-device copies run without pause, and those copies'
// rate meanwhile: whether the DMA engine's reads of host RAM and the CPU's share one bandwidth (what
// splitting a large batch's host experts between the CPU and PCIe streaming can gain). {cpu, dma}, B/s.
// Runs after the model is built: the device buffer comes from the headroom outside the arena.
std::pair<double, double> measure_host_read_during_copies(int n_threads) {
    const size_t bytes = size_t{256} << 20;
    void* host = nullptr;
    CUDA_CHECK(cudaHostAlloc(&host, bytes, cudaHostAllocPortable));
    std::memset(host, 1, bytes);
    void* dev = nullptr;
    CUDA_CHECK(cudaMalloc(&dev, bytes));
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> copied{0};
    double copy_seconds = 0;
    std::thread copier([&] {
        cuda::Stream cs;
        const auto t0 = std::chrono::steady_clock::now();
        while (!stop.load()) {
            CUDA_CHECK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, cs.get()));
            CUDA_CHECK(cudaStreamSynchronize(cs.get()));
            copied.fetch_add(bytes);
        }
        copy_seconds = seconds_since(t0);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const double cpu = host::measure_host_read_bandwidth(n_threads, size_t{4} << 30, 5);
    stop.store(true);
    copier.join();
    CUDA_CHECK(cudaFree(dev));
    cudaFreeHost(host);
    return {cpu, static_cast<double>(copied.load()) / std::max(copy_seconds, 1e-9)};
}

// Weight bytes one decode step reads with B tokens: everything but the routed experts once, plus
// the distinct experts the batch touches per layer (expected value under uniform routing).
double decode_weight_bytes(const ModelConfig& c, const GpuWeightBytes& wb, int64_t B) {
    const double E = static_cast<double>(c.n_routed_experts), K = static_cast<double>(c.num_experts_per_tok);
    const double distinct = E * (1.0 - std::pow(1.0 - K / E, static_cast<double>(B)));
    const double per_expert = static_cast<double>(wb.routed_experts) / (E * c.num_hidden_layers);
    // The embedding is gathered (B rows), not read whole.
    const double dense = static_cast<double>(wb.total - wb.routed_experts) - c.vocab_size * c.hidden_size * 2.0;
    return dense + c.num_hidden_layers * distinct * per_expert + B * c.hidden_size * 2.0;
}

// KV bytes one token reads at position `pos`: its window and, per compressed layer, the selected
// (CSA) or all visible (HCA) entries, plus the CSA indexer keys.
double decode_kv_bytes(const ModelConfig& c, const KvCacheSpec& spec, int64_t pos) {
    double b = 0;
    for (int64_t il = 0; il < c.num_hidden_layers; ++il) {
        const int64_t r = c.compress_ratio(il);
        b += std::min<int64_t>(pos + 1, c.sliding_window) * spec.entry.entry_bytes();
        if (r == 4)
            b += std::min<int64_t>((pos + 1) / r, c.index_topk) * spec.entry.entry_bytes() +
                 (pos + 1) / r * spec.index_key.entry_bytes();
        else if (r > 0)
            b += (pos + 1) / r * spec.entry.entry_bytes();
    }
    return b;
}

// FLOPs per prefill token of the matmuls with the active parameters (attention scores excluded).
double active_flops_per_token(const ModelConfig& c) {
    const double D = c.hidden_size, H = c.num_attention_heads, hd = c.head_dim, I = c.moe_intermediate_size;
    double p = 0;
    for (int64_t il = 0; il < c.num_hidden_layers; ++il) {
        p += D * c.q_lora_rank + c.q_lora_rank * H * hd + D * hd + H * hd * c.o_lora_rank +
             c.o_groups * c.o_lora_rank * D;
        const int64_t r = c.compress_ratio(il);
        if (r) p += 2.0 * D * (r == 4 ? 2 : 1) * hd;
        if (r == 4) p += c.q_lora_rank * c.index_n_heads * c.index_head_dim + 2.0 * D * 2 * c.index_head_dim;
        p += D * c.n_routed_experts + (c.num_experts_per_tok + 1) * 3.0 * D * I;
    }
    p += D * c.vocab_size / 1.0;  // LM head (one row per sequence in serving; counted per token here)
    return 2.0 * p;
}

}  // namespace onecard::cli

#endif
