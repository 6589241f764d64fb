// Host experts (src/backend/host): host read bandwidth and MXFP4 MoE jobs at the real V4-Flash expert
// shape (D = 4096, I = 2048), compared with the read bandwidth measured in the same process.
//   build-host/bench/host_experts_bench --benchmark_min_time=1
// Counters: weight_GBps = checkpoint bytes of the experts touched per second; bw_fraction = that over
// the all-thread read bandwidth. Experts rotate through ~1 GiB so a job's weights are not in cache.
// Arguments: pairs, threads (0 = all), kernel (0 = the pool's default for best_isa(), 1 = avx512_bf16
// where the CPU has it, 2 = Avx2, 3 = Scalar), experts (distinct experts per job, 0 = one per pair;
// fewer makes pairs share experts, which the pool reads once per group), hot (1 = the same experts
// every job, so they come from cache: the kernels' compute ceiling rather than DRAM).
// weight_GBps counts each distinct expert once (what has to be streamed); pair_GBps counts it per pair.
// The thread sweep (1, 2, 4, 8, 12, 15, all) is for the 16-core host; counts above the hardware's are
// skipped.
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

int hw_threads() {
    return std::max(1u, std::thread::hardware_concurrency());
}

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
    const int64_t n_experts = std::min<int64_t>(state.range(3) > 0 ? state.range(3) : n_pairs, kExperts);
    const bool hot = state.range(4) != 0;
    if (threads > hw_threads()) {
        state.SkipWithError("more threads than this machine has");
        return;
    }
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
        // Pair i of token t = i / 6 takes expert (t + i) % n_experts, so a token's picks are distinct
        // where n_experts >= 6 and every expert of the job is used about equally often.
        for (int64_t i = 0; i < n_pairs; ++i) {
            const int64_t t = i * n_tokens / n_pairs;
            pairs[i] = {static_cast<int32_t>(t), 0.2f, s.views[(next_expert + (t + i) % n_experts) % kExperts],
                        out.data() + i * kDim};
        }
        if (!hot) next_expert = (next_expert + n_experts) % kExperts;
        state.ResumeTiming();
        const auto t0 = std::chrono::steady_clock::now();
        pool.run(job);
        run_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        benchmark::DoNotOptimize(out.data());
    }
    const double bytes = static_cast<double>(kExpertBytes) * static_cast<double>(n_experts * state.iterations());
    state.counters["weight_GBps"] = bytes / run_seconds / 1e9;
    state.counters["thread_GBps"] = bytes / run_seconds / 1e9 / threads;
    state.counters["pair_GBps"] =
        bytes / run_seconds / 1e9 * static_cast<double>(n_pairs) / static_cast<double>(n_experts);
    state.counters["read_GBps"] = bw / 1e9;
    state.counters["bw_fraction"] = bytes / run_seconds / bw;
    state.SetLabel(std::string(isa_name(isa)) + "/" + pool.kernel_name());
}
void moe_args(benchmark::internal::Benchmark* b) {
    b->ArgNames({"pairs", "threads", "kernel", "experts", "hot"});
    for (int t : {1, 2, 4, 8, 12, 15, 0})  // thread sweep, DRAM, 1 and 6 pairs and 60 pairs over 30 experts
        for (auto [pairs, experts] : {std::pair{1, 0}, std::pair{6, 0}, std::pair{60, 30}})
            if (t == 0 || t < hw_threads()) b->Args({pairs, t, 0, experts, 0});
    for (int t : {1, 0})  // the same from cache (one expert per pair, hot)
        for (int pairs : {1, 6}) b->Args({pairs, t, 0, 0, 1});
    b->Args({60, 0, 0, 0, 0});  // 60 distinct experts
    b->Args({6, 0, 1, 0, 0})->Args({6, 0, 2, 0, 0})->Args({60, 0, 1, 30, 0})->Args({60, 0, 2, 30, 0});
    b->Args({6, 1, 1, 0, 0})->Args({6, 1, 1, 0, 1});  // avx512_bf16, one thread, DRAM and cache
}
BENCHMARK(BM_HostMoe)->Apply(moe_args)->Unit(benchmark::kMicrosecond)->UseRealTime();

// Handshake overhead: the smallest job (one pair at D = I = 128), all threads.
void BM_HostMoeOverhead(benchmark::State& state) {
    const int threads = static_cast<int>(state.range(0) > 0 ? state.range(0) : hw_threads());
    std::vector<uint8_t> w(3 * (128 * 64 + 128 * 4), 0x11);
    for (size_t i = 0; i < 3; ++i) std::fill_n(w.data() + i * (128 * 64 + 128 * 4) + 128 * 64, 128 * 4, uint8_t{127});
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
