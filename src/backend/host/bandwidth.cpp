// measure_host_read_bandwidth: what the weight-streaming kernels are compared against. Each thread
// sums the 64-bit words of its slice (AVX2 where the CPU has it, so the loop itself is never the limit);
// the buffer is first-touched by the thread that later reads it.
#include "backend/host/host_experts.h"

#include "core/error.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <new>

namespace onecard::host {
namespace {

uint64_t sum_words_portable(const uint64_t* p, size_t n) {
    uint64_t a = 0, b = 0, c = 0, d = 0;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        a += p[i];
        b += p[i + 1];
        c += p[i + 2];
        d += p[i + 3];
    }
    for (; i < n; ++i) a += p[i];
    return a + b + c + d;
}

__attribute__((target("avx2"))) uint64_t sum_words_avx2(const uint64_t* p, size_t n) {
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {  // 128 bytes per iteration, four independent chains
        a = _mm256_add_epi64(a, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
        b = _mm256_add_epi64(b, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 4)));
        c = _mm256_add_epi64(c, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 8)));
        d = _mm256_add_epi64(d, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 12)));
    }
    alignas(32) uint64_t lanes[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                       _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d)));
    return lanes[0] + lanes[1] + lanes[2] + lanes[3] + sum_words_portable(p + i, n - i);
}

}  // namespace

double measure_host_read_bandwidth(int n_threads, size_t bytes, int repeats) {
    ONECARD_CHECK(n_threads >= 1 && repeats >= 1 && bytes >= 4096,
                  "host read bandwidth: bad arguments (threads {}, bytes {}, repeats {})", n_threads, bytes, repeats);
    const bool avx2 = isa_supported(Isa::Avx2);
    const size_t n_words = bytes / sizeof(uint64_t);
    auto* words = static_cast<uint64_t*>(::operator new (n_words * sizeof(uint64_t), std::align_val_t{64}));
    struct Free {
        uint64_t* p;
        ~Free() { ::operator delete (p, std::align_val_t{64}); }
    } free_words{words};

    // Slices are whole 64-byte lines; passes start together on a generation counter and end when
    // every thread has reported, timed by the calling thread (thread 0).
    const size_t per = (n_words / static_cast<size_t>(n_threads)) & ~size_t{7};
    auto slice = [&](int t, size_t& begin, size_t& count) {
        begin = per * static_cast<size_t>(t);
        count = t == n_threads - 1 ? n_words - begin : per;
    };
    std::atomic<int> go{0}, finished{0};
    std::atomic<uint64_t> sink{0};
    const int passes = repeats + 1;  // the first pass (after first touch) is a warm-up
    auto body = [&](int t) {
        size_t begin = 0, count = 0;
        slice(t, begin, count);
        for (size_t i = 0; i < count; ++i) words[begin + i] = begin + i;  // first touch: local pages
        finished.fetch_add(1);
        for (int pass = 1; pass <= passes; ++pass) {
            while (go.load(std::memory_order_acquire) < pass) _mm_pause();
            sink.fetch_add(avx2 ? sum_words_avx2(words + begin, count) : sum_words_portable(words + begin, count),
                           std::memory_order_relaxed);
            finished.fetch_add(1, std::memory_order_release);
        }
    };
    std::vector<std::thread> threads;
    for (int t = 1; t < n_threads; ++t) threads.emplace_back(body, t);

    // Thread 0 runs its share inline, interleaved with the timing.
    size_t begin0 = 0, count0 = 0;
    slice(0, begin0, count0);
    for (size_t i = 0; i < count0; ++i) words[begin0 + i] = begin0 + i;
    finished.fetch_add(1);
    std::vector<double> seconds;
    for (int pass = 1; pass <= passes; ++pass) {
        while (finished.load(std::memory_order_acquire) < n_threads * pass) _mm_pause();
        const auto t0 = std::chrono::steady_clock::now();
        go.store(pass, std::memory_order_release);
        sink.fetch_add(avx2 ? sum_words_avx2(words + begin0, count0) : sum_words_portable(words + begin0, count0),
                       std::memory_order_relaxed);
        finished.fetch_add(1, std::memory_order_release);
        while (finished.load(std::memory_order_acquire) < n_threads * (pass + 1)) _mm_pause();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (pass > 1) seconds.push_back(s);
    }
    for (std::thread& t : threads) t.join();
    ONECARD_CHECK(sink.load() != 1, "host read bandwidth: impossible checksum");  // keeps the sums alive
    std::sort(seconds.begin(), seconds.end());
    return static_cast<double>(n_words * sizeof(uint64_t)) / seconds[seconds.size() / 2];
}

}  // namespace onecard::host
