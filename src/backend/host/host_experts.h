// Host experts: MXFP4 routed experts computed on the host CPU, straight from the checkpoint's bytes.
// The full model's 256 routed experts per layer do not fit one GPU, so cold experts stay in host RAM
// and the CPU computes them while the GPU runs the rest of the layer. The numerics follow the GPU
// expert path's rounding points (gate/up in bf16, weighted SwiGLU in bf16, FP8 1x128 quantisation of
// the SwiGLU output, expert row in bf16), so a pair gives the same result wherever it runs up to the
// fp32 summation order of the dot products.
//
// Every output element is computed by one thread in one fixed order, so results are bit-identical for
// any thread count, and for every ISA path on inputs the checkpoint can produce (see mxfp4_dot.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace onecard::host {

// Avx512 = AVX-512F/BW/DQ/VL (a vdpbf16ps kernel too, where the CPU has avx512_bf16: see the pool).
enum class Isa { Scalar, Avx2, Avx512 };
Isa best_isa();  // the widest path this CPU runs (detected once)
const char* isa_name(Isa);
bool isa_supported(Isa);  // Scalar always; Avx2 needs AVX2+FMA; Avx512 needs AVX-512F/BW

// One MXFP4 matrix W[n_out, n_in] in the shipped layout:
//   packed [n_out, n_in/2] uint8, element 2j = low nibble of byte j (E2M1 code, bit 3 = sign)
//   scale  [n_out, n_in/32] uint8 UE8M0, 2^(s-127) for 32 consecutive elements of a row
struct MxMatrixView {
    const uint8_t* packed = nullptr;
    const uint8_t* scale = nullptr;
};
// w1, w3: [inter, dim] (gate, up); w2: [dim, inter] (down).
struct MxExpertView {
    MxMatrixView w1, w3, w2;
};
// One (token, expert) pick: out[dim] receives the expert's bf16 output row (bits), already multiplied
// by the routing weight (applied to the SwiGLU output, as the GPU does).
struct HostExpertPair {
    int32_t token = 0;
    float weight = 1.0f;
    MxExpertView expert;
    uint16_t* out = nullptr;  // [dim] bf16 bits
};
struct HostMoeJob {
    int64_t dim = 0, inter = 0;   // D, I (multiples of 128)
    float swiglu_limit = 0;       // <= 0: no clamp
    const uint8_t* xq = nullptr;  // [n_tokens, dim] E4M3 (OCP e4m3fn)
    const float* xs = nullptr;    // [n_tokens, dim/128] block scales (powers of two)
    int64_t n_tokens = 0;
    const HostExpertPair* pairs = nullptr;
    int64_t n_pairs = 0;
};

// Throws onecard::Error naming the first problem (shape not a multiple of 128, null pointer, token
// out of range, non-finite weight). Called by both entry points below.
void validate_job(const HostMoeJob&);

// Scalar, single thread: the plain readable definition every faster path is checked against.
void run_host_moe_reference(const HostMoeJob&);

// A fixed set of threads that runs jobs in four phases (decode activations; gate/up rows; SwiGLU + FP8;
// down rows), each phase a list of work units handed out by an atomic counter. Workers busy-wait
// (_mm_pause) on the job sequence number for `spin_us` after each job, then sleep on a condition
// variable, so back-to-back jobs (one per MoE layer) start within a microsecond or two.
class HostExpertPool {
public:
    // n_threads counts the calling thread (n_threads - 1 workers). pin_threads: worker i is pinned to
    // the i-th CPU of this process's affinity mask (the caller is left alone); failure is not fatal.
    // spin_us: how long idle workers busy-wait for the next job before sleeping. prefer_bf16_dot: on
    // Avx512, take the avx512_bf16 (vdpbf16ps) kernel where the CPU has it. Same bits either way; off by
    // default because the fp32 AVX-512F kernel measured faster on Sapphire Rapids (13 vs 9.6 GB/s per
    // core, bench/host_experts_bench). Throws onecard::Error if the CPU lacks `isa` or n_threads < 1.
    HostExpertPool(int n_threads, Isa isa, bool pin_threads, int spin_us = 5000, bool prefer_bf16_dot = false);
    ~HostExpertPool();
    HostExpertPool(const HostExpertPool&) = delete;
    HostExpertPool& operator=(const HostExpertPool&) = delete;

    // Blocking; the calling thread works too. Not reentrant: one run at a time per pool.
    void run(const HostMoeJob&);
    void check_integrity() const;  // throws onecard::Error on inconsistent state

    int n_threads() const { return n_threads_; }
    Isa isa() const { return isa_; }
    const char* kernel_name() const;  // the row-dot variant in use ("scalar", "avx2", "avx512", "avx512_bf16")
    int pinned_threads() const { return pinned_.load(); }  // workers whose pinning succeeded
    uint64_t jobs_run() const { return seq_.load(); }

private:
    struct Plan;  // the current job's unit ranges, pointers and scratch (pool.cpp)

    void worker_main(int index);
    void work_on_current_job();  // claim and run units until none are left
    void run_unit(int64_t unit);
    void wait_done_at_least(int64_t count) const;

    const int n_threads_;
    const Isa isa_;
    const int spin_us_;
    int kernel_index_ = 0;  // into detail::dot_kernels()

    // Job handshake (protocol in pool.cpp).
    std::atomic<uint64_t> seq_{0};   // bumped once per job: what idle workers spin on
    std::atomic<bool> open_{false};  // the plan may be read
    std::atomic<int> inside_{0};     // workers between "saw a job" and "done with the plan"
    std::atomic<int> sleepers_{0};   // workers blocked on cv_
    std::atomic<bool> stop_{false};
    std::atomic<bool> running_{false};
    std::atomic<int64_t> next_unit_{0}, done_units_{0};
    std::atomic<int> pinned_{0};
    std::mutex mu_;
    std::condition_variable cv_;

    std::unique_ptr<Plan> plan_;  // written by the caller only while no worker can read it
    std::vector<std::thread> workers_;
};

// Multi-threaded streaming read of `bytes` of memory (sum of 64-bit words), median of `repeats`
// timed passes after one warm-up pass: bytes/s.
double measure_host_read_bandwidth(int n_threads, size_t bytes, int repeats);

}  // namespace onecard::host
