// `onecard bench`'s measuring helpers: the fixed method's statistics, the bandwidth probes its
// fractions are judged against, and the byte and FLOP models of a step (what a step must read or
// compute). CUDA builds only.
#pragma once

#ifdef ONECARD_HAVE_CUDA

#include "backend/cuda/arena.h"
#include "kvcache/kv_spec.h"
#include "model/config.h"
#include "model_cuda/gpu_weights.h"

#include <cuda_runtime.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace onecard::cli {

double median(std::vector<double> v);
std::vector<int64_t> parse_int_list(const std::string& list);  // "1,8,64"
double seconds_since(std::chrono::steady_clock::time_point t0);
// Prints a profile (ms per op group over all layers of one step) and returns it as JSON.
nlohmann::json print_profile(const std::string& what, const std::vector<std::pair<std::string, double>>& prof);
// Device-to-device copy of 1 GiB, read + write counted (the denominator h200-ceilings.md uses), B/s.
double measure_copy_bandwidth(cuda::DeviceArena& arena, cudaStream_t s);
// Host-to-device copies from pinned host memory (what staging a host expert for a prefill costs), B/s.
double measure_pinned_h2d(cuda::DeviceArena& arena, cudaStream_t s);
// The host's read bandwidth while pinned host-to-device copies run without pause, and those copies'
// rate meanwhile: whether the DMA engine's reads of host RAM and the CPU's share one bandwidth. {cpu,
// dma}, B/s. Its device buffer comes from outside any arena.
std::pair<double, double> measure_host_read_during_copies(int n_threads);
// Weight bytes one decode step reads with B tokens: everything but the routed experts once, plus
// the distinct experts the batch touches per layer (expected value under uniform routing).
double decode_weight_bytes(const ModelConfig& c, const GpuWeightBytes& wb, int64_t B);
// KV bytes one token reads at position `pos`: its window and, per compressed layer, the selected
// (CSA) or all visible (HCA) entries, plus the CSA indexer keys.
double decode_kv_bytes(const ModelConfig& c, const KvCacheSpec& spec, int64_t pos);
// FLOPs per prefill token of the matmuls with the active parameters (attention scores excluded).
double active_flops_per_token(const ModelConfig& c);

}  // namespace onecard::cli

#endif
