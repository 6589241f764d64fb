// Host experts (src/backend/host): host read bandwidth and MXFP4 MoE jobs at the real V4-Flash expert
// shape (D = 4096, I = 2048), compared with the read bandwidth measured in the same process.
//   build-host/bench/host_experts_bench --benchmark_min_time=1
// Counters: weight_GBps = checkpoint bytes of the experts touched per second; bw_fraction = that over
// the all-thread read bandwidth. Experts rotate through ~1 GiB so a job's weights are not in cache.
// Arguments: pairs, threads (0 = all), kernel (0 = the pool's default for best_isa(), 1 = avx512_bf16
// where the CPU has it, 2 = Avx2, 3 = Scalar).
#include "backend/host/host_experts.h"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

namespace {

using namespace onecard::host;

constexpr int64_t kDim = 4096, kInter = 2048;
constexpr size_t kMatrixBytes = kDim * kInter / 2 + kDim * kInter / 32;  // packed + scales
constexpr size_t kExpertBytes = 3 * kMatrixBytes;
constexpr int kExperts = 80;  // ~1.07 GB: more than twice any L3 this runs on

int hw_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

struct ExpertStore {
    std::vector<uint8_t> bytes;  // [kExperts][w1 | w3 | w2], each [packed | scale]
    std::vector<MxExpertView> views;
    ExpertStore() : bytes(kExperts * kExpertBytes) {
        std::mt19937_64 rng(1);
        for (size_t i = 0; i + 8 <= bytes.size(); i += 8) {
            const uint64_t r = rng();
            std::copy_n(reinterpret_cast<const uint8_t*>(&r), 8, bytes.data() + i);
        }
        for (int e = 0; e < kExperts; ++e) {
            uint8_t* base = bytes.data() + e * kExpertBytes;
            auto matrix = [&](int m) -> MxMatrixView {
                uint8_t* p = base + m * kMatrixBytes;
                uint8_t* s = p + kDim * kInter / 2;
                for (size_t i = 0; i < kDim * kInter / 32; ++i) s[i] = static_cast<uint8_t>(118 + s[i] % 4);
                return {p, s};
            };
            views.push_back({matrix(0), matrix(1), matrix(2)});
        }
    }
};
const ExpertStore& store() {
    static const ExpertStore s;
    return s;
}

double read_bandwidth() {  // all threads, once per process
    static const double bw = measure_host_read_bandwidth(hw_threads(), size_t{512} << 20, 5);
    return bw;
}

void BM_HostReadBandwidth(benchmark::State& state) {
    const int threads = static_cast<int>(state.range(0));
    double bw = 0;
    for (auto _ : state) bw = measure_host_read_bandwidth(threads, size_t{512} << 20, 3);
    state.counters["GBps"] = bw / 1e9;
}
BENCHMARK(BM_HostReadBandwidth)->Arg(1)->Arg(hw_threads())->Unit(benchmark::kMillisecond)->Iterations(2);

void BM_HostMoe(benchmark::State& state) {
    const int64_t n_pairs = state.range(0);
    const int threads = static_cast<int>(state.range(1) > 0 ? state.range(1) : hw_threads());
    const int kernel = static_cast<int>(state.range(2));
    Isa isa = best_isa();
    if (kernel == 2) isa = Isa::Avx2;
    if (kernel == 3) isa = Isa::Scalar;
    if (!isa_supported(isa)) {
        state.SkipWithError("ISA not supported by this CPU");
        return;
    }
    const ExpertStore& s = store();
    const double bw = read_bandwidth();
    HostExpertPool pool(threads, isa, true, 5000, kernel == 1);

    const int64_t n_tokens = std::max<int64_t>(1, n_pairs / 6);  // decode: top-6 picks per token
    std::mt19937_64 rng(2);
    std::vector<uint8_t> xq(static_cast<size_t>(n_tokens * kDim));
    for (uint8_t& c : xq) c = static_cast<uint8_t>(rng() % 0x7F);  // positive, no NaN
    std::vector<float> xs(static_cast<size_t>(n_tokens * kDim / 128), 1.0f / 256);
    std::vector<uint16_t> out(static_cast<size_t>(n_pairs * kDim));
    std::vector<HostExpertPair> pairs(static_cast<size_t>(n_pairs));
    HostMoeJob job;
    job.dim = kDim;
    job.inter = kInter;
    job.swiglu_limit = 10.0f;
    job.xq = xq.data();
    job.xs = xs.data();
    job.n_tokens = n_tokens;
    job.pairs = pairs.data();
    job.n_pairs = n_pairs;
    int64_t next_expert = 0;
    double run_seconds = 0;  // pool.run alone (the counters' time base)
    for (auto _ : state) {
        state.PauseTiming();  // choosing the next (cold) experts is not the job
        for (int64_t i = 0; i < n_pairs; ++i) {
            pairs[i] = {static_cast<int32_t>(i * n_tokens / n_pairs), 0.2f, s.views[next_expert],
                        out.data() + i * kDim};
            next_expert = (next_expert + 1) % kExperts;
        }
        state.ResumeTiming();
        const auto t0 = std::chrono::steady_clock::now();
        pool.run(job);
        run_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        benchmark::DoNotOptimize(out.data());
    }
    const double bytes = static_cast<double>(kExpertBytes) * static_cast<double>(n_pairs * state.iterations());
    state.counters["weight_GBps"] = bytes / run_seconds / 1e9;
    state.counters["read_GBps"] = bw / 1e9;
    state.counters["bw_fraction"] = bytes / run_seconds / bw;
    state.SetLabel(std::string(isa_name(isa)) + "/" + pool.kernel_name());
}
BENCHMARK(BM_HostMoe)
    ->ArgNames({"pairs", "threads", "kernel"})
    ->Args({1, 0, 0})
    ->Args({6, 0, 0})
    ->Args({60, 0, 0})
    ->Args({6, 1, 0})
    ->Args({6, 0, 1})
    ->Args({6, 0, 2})
    ->Args({60, 0, 1})
    ->Args({60, 0, 2})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// Handshake overhead: the smallest job (one pair at D = I = 128), all threads.
void BM_HostMoeOverhead(benchmark::State& state) {
    const int threads = static_cast<int>(state.range(0) > 0 ? state.range(0) : hw_threads());
    std::vector<uint8_t> w(3 * (128 * 64 + 128 * 4), 0x11);
    for (size_t i = 0; i < 3; ++i)
        std::fill_n(w.data() + i * (128 * 64 + 128 * 4) + 128 * 64, 128 * 4, uint8_t{127});
    auto m = [&](int i) -> MxMatrixView {
        const uint8_t* p = w.data() + i * (128 * 64 + 128 * 4);
        return {p, p + 128 * 64};
    };
    std::vector<uint8_t> xq(128, 0x38);
    std::vector<float> xs(1, 1.0f);
    std::vector<uint16_t> out(128);
    HostExpertPair pair{0, 1.0f, {m(0), m(1), m(2)}, out.data()};
    HostMoeJob job;
    job.dim = job.inter = 128;
    job.xq = xq.data();
    job.xs = xs.data();
    job.n_tokens = 1;
    job.pairs = &pair;
    job.n_pairs = 1;
    HostExpertPool pool(threads, best_isa(), true);
    for (auto _ : state) pool.run(job);
}
BENCHMARK(BM_HostMoeOverhead)->Arg(1)->Arg(0)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
