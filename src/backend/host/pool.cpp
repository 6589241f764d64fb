// HostExpertPool: persistent threads running host MoE jobs as four phases of work units.
//
// Units, in one index space handed out by one atomic counter (next_unit_):
//   A  [0, end_a)      one per token used by the job: decode its FP8 row once, into the kernel's layout
//   B  [end_a, end_b)  (pair, kRowsGateUp rows of w1 and w3): gate and up, rounded to bf16
//   C  [end_b, end_c)  (pair, 128-block of inter): weighted SwiGLU + FP8 1x128 quant-dequant
//   D  [end_c, end_d)  (pair, kRowsDown rows of w2): the expert's output rows in bf16
// A unit waits only for what it reads: a B unit for its token's A unit, a C unit for all B units of
// its pair, a D unit for all C units of its pair (per-slot / per-pair progress counters), so there is
// no phase-wide barrier and no idle tail between phases. Units are claimed in index order (B, C, D
// pair-major), so every unit waited for has a smaller index and is held by a running thread that
// never waits on a larger one: no deadlock, and any number of threads (even one) may take part. Every output element belongs to one unit with a fixed op sequence, so the bits do not depend
// on the thread count or on who ran what.
//
// Handshake: run() writes the plan, sets open_ (release), bumps seq_ and wakes sleepers. A worker that
// sees a new seq_ increments inside_, and only reads the plan if open_ is still set; at the end run()
// waits for all units, clears open_ and waits for inside_ == 0, so no worker touches a plan after run()
// returns and the next run() may rewrite it. inside_/open_ and sleepers_/seq_ are each a store-then-load
// pair on both sides, all seq_cst, so one side always sees the other (no lost job, no lost wake-up).
#include "backend/host/host_experts.h"
#include "backend/host/mxfp4_dot.h"
#include "backend/host/pair_math.h"

#include "core/error.h"

#include <immintrin.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <new>

namespace onecard::host {
namespace {

constexpr int64_t kRowsGateUp = 32;  // rows of w1 (and of w3) per B unit: 2 x 32 KB at dim 4096
constexpr int64_t kRowsDown = 64;    // rows of w2 per D unit: 64 KB at inter 2048
constexpr int kSpinsBeforeYield = 1024;

// Spin-wait step: pause, and every kSpinsBeforeYield spins give the core away, so oversubscribed
// pools (more threads than free cores) still make progress.
inline void spin_pause(int& spins) {
    _mm_pause();
    if (++spins % kSpinsBeforeYield == 0) std::this_thread::yield();
}

class AlignedBuffer {
public:
    AlignedBuffer() = default;
    AlignedBuffer(const AlignedBuffer&) = delete;
    AlignedBuffer& operator=(const AlignedBuffer&) = delete;
    ~AlignedBuffer() { release(); }
    void reserve(size_t bytes) {  // grows only: steady-state jobs allocate nothing
        if (bytes <= cap_) return;
        release();
        ptr_ = static_cast<std::byte*>(::operator new(bytes, std::align_val_t{64}));
        cap_ = bytes;
    }
    std::byte* data() const { return ptr_; }
    size_t capacity() const { return cap_; }

private:
    void release() {
        if (ptr_) ::operator delete(ptr_, std::align_val_t{64});
        ptr_ = nullptr;
        cap_ = 0;
    }
    std::byte* ptr_ = nullptr;
    size_t cap_ = 0;
};

}  // namespace

struct HostExpertPool::Plan {
    HostMoeJob job;
    detail::DotRowsFn dot = nullptr;
    detail::VecLayout layout = detail::VecLayout::F32Natural;
    float e4m3[256] = {};
    size_t x_stride = 0, h_stride = 0;  // bytes per token slot row [dim] / per pair row [inter]
    int64_t blocks_b = 0, blocks_c = 0, blocks_d = 0;  // units per pair in phases B, C, D
    int64_t end_a = 0, end_b = 0, end_c = 0, end_d = 0;
    // progress: [n_slots] A done (0/1) | [n_pairs] B units done | [n_pairs] C units done
    std::unique_ptr<std::atomic<int32_t>[]> progress;
    size_t progress_cap = 0;
    std::vector<int32_t> slot_of_token;  // [n_tokens] -1 = unused
    std::vector<int32_t> token_of_slot;  // [n_slots]
    AlignedBuffer x_act;                 // [n_slots, dim] in layout
    AlignedBuffer gate, up;              // [n_pairs, inter] fp32 (bf16 values)
    AlignedBuffer h_act;                 // [n_pairs, inter] in layout (FP8-dequantised SwiGLU output)

    float* gate_row(int64_t p) const { return reinterpret_cast<float*>(gate.data()) + p * job.inter; }
    float* up_row(int64_t p) const { return reinterpret_cast<float*>(up.data()) + p * job.inter; }
    std::byte* x_row(int64_t slot) const { return x_act.data() + slot * x_stride; }
    std::byte* h_row(int64_t p) const { return h_act.data() + p * h_stride; }
};

HostExpertPool::HostExpertPool(int n_threads, Isa isa, bool pin_threads, int spin_us, bool prefer_bf16_dot)
    : n_threads_(n_threads), isa_(isa), spin_us_(std::max(0, spin_us)), plan_(std::make_unique<Plan>()) {
    ONECARD_CHECK(n_threads >= 1, "host expert pool: n_threads {} must be >= 1", n_threads);
    kernel_index_ = detail::kernel_index_for(isa, prefer_bf16_dot);  // throws if the CPU lacks the ISA
    const detail::DotKernel& k = detail::dot_kernels()[kernel_index_];
    plan_->dot = k.fn;
    plan_->layout = k.layout;
    detail::make_e4m3_table(plan_->e4m3);

    std::vector<int> cpus;  // this process's allowed CPUs, for pinning
    if (pin_threads) {
        cpu_set_t set;
        CPU_ZERO(&set);
        if (sched_getaffinity(0, sizeof(set), &set) == 0)
            for (int c = 0; c < CPU_SETSIZE; ++c)
                if (CPU_ISSET(c, &set)) cpus.push_back(c);
    }
    workers_.reserve(static_cast<size_t>(n_threads - 1));
    for (int i = 1; i < n_threads; ++i) {
        workers_.emplace_back([this, i] { worker_main(i); });
        if (!cpus.empty()) {  // worker i -> the i-th allowed CPU (the caller, typically on the 0th, stays free)
            cpu_set_t one;
            CPU_ZERO(&one);
            CPU_SET(cpus[static_cast<size_t>(i) % cpus.size()], &one);
            if (pthread_setaffinity_np(workers_.back().native_handle(), sizeof(one), &one) == 0) ++pinned_;
        }
    }
}

HostExpertPool::~HostExpertPool() {
    stop_.store(true);
    {
        std::lock_guard<std::mutex> lk(mu_);
        cv_.notify_all();
    }
    for (std::thread& t : workers_) t.join();
}

const char* HostExpertPool::kernel_name() const { return detail::dot_kernels()[kernel_index_].name; }

void HostExpertPool::worker_main(int /*index*/) {
    uint64_t last = 0;
    for (;;) {
        // Spin on the sequence number for spin_us_, then sleep until run() or the destructor wakes us.
        int spins = 0;
        const auto t0 = std::chrono::steady_clock::now();
        while (seq_.load(std::memory_order_acquire) == last && !stop_.load(std::memory_order_relaxed)) {
            spin_pause(spins);
            if (spins % 256 == 0 &&
                std::chrono::steady_clock::now() - t0 > std::chrono::microseconds(spin_us_)) {
                std::unique_lock<std::mutex> lk(mu_);
                sleepers_.fetch_add(1);
                while (seq_.load() == last && !stop_.load()) cv_.wait(lk);
                sleepers_.fetch_sub(1);
                break;
            }
        }
        if (stop_.load()) return;
        inside_.fetch_add(1);
        const uint64_t cur = seq_.load();
        if (open_.load()) work_on_current_job();
        inside_.fetch_sub(1);
        last = cur;
    }
}

namespace {
void wait_at_least(const std::atomic<int32_t>& counter, int32_t count) {
    int spins = 0;
    while (counter.load(std::memory_order_acquire) < count) spin_pause(spins);
}
}  // namespace

void HostExpertPool::wait_done_at_least(int64_t count) const {
    int spins = 0;
    while (done_units_.load(std::memory_order_acquire) < count) spin_pause(spins);
}

void HostExpertPool::work_on_current_job() {
    const Plan& pl = *plan_;
    const int64_t n_slots = pl.end_a, n_pairs = pl.job.n_pairs;
    std::atomic<int32_t>* a_done = pl.progress.get();  // [n_slots]
    std::atomic<int32_t>* b_done = a_done + n_slots;   // [n_pairs]
    std::atomic<int32_t>* c_done = b_done + n_pairs;   // [n_pairs]
    for (;;) {
        const int64_t u = next_unit_.fetch_add(1, std::memory_order_relaxed);
        if (u >= pl.end_d) return;
        // Wait for this unit's inputs (release/acquire on the counters carries their data), run it,
        // then count it where its readers look.
        std::atomic<int32_t>* mine = nullptr;
        if (u < pl.end_a) {
            mine = &a_done[u];
        } else if (u < pl.end_b) {
            const int64_t p = (u - pl.end_a) / pl.blocks_b;
            wait_at_least(a_done[pl.slot_of_token[static_cast<size_t>(pl.job.pairs[p].token)]], 1);
            mine = &b_done[p];
        } else if (u < pl.end_c) {
            const int64_t p = (u - pl.end_b) / pl.blocks_c;
            wait_at_least(b_done[p], static_cast<int32_t>(pl.blocks_b));
            mine = &c_done[p];
        } else {
            wait_at_least(c_done[(u - pl.end_c) / pl.blocks_d], static_cast<int32_t>(pl.blocks_c));
        }
        run_unit(u);
        if (mine) mine->fetch_add(1, std::memory_order_release);
        done_units_.fetch_add(1, std::memory_order_release);
    }
}

void HostExpertPool::run_unit(int64_t u) {
    const Plan& pl = *plan_;
    const HostMoeJob& job = pl.job;
    const int64_t D = job.dim, I = job.inter;
    if (u < pl.end_a) {  // A: decode one token row, 128 elements at a time, into the kernel's layout
        const int64_t t = pl.token_of_slot[static_cast<size_t>(u)];
        float chunk[128];
        for (int64_t b = 0; b < D; b += 128) {
            detail::decode_act_row(job.xq + t * D + b, job.xs + t * (D / 128) + b / 128, 128, pl.e4m3, chunk);
            detail::to_layout(pl.layout, chunk, 128, pl.x_row(u) + detail::layout_bytes(pl.layout, b));
        }
        return;
    }
    if (u < pl.end_b) {  // B: rows [r0, r0 + n) of w1 and w3
        const int64_t p = (u - pl.end_a) / pl.blocks_b, r0 = (u - pl.end_a) % pl.blocks_b * kRowsGateUp;
        const int64_t n = std::min(kRowsGateUp, I - r0);
        const HostExpertPair& pr = job.pairs[p];
        const std::byte* x = pl.x_row(pl.slot_of_token[static_cast<size_t>(pr.token)]);
        float* g = pl.gate_row(p) + r0;
        float* v = pl.up_row(p) + r0;
        pl.dot(pr.expert.w1.packed + r0 * (D / 2), pr.expert.w1.scale + r0 * (D / 32), D, n, x, g);
        pl.dot(pr.expert.w3.packed + r0 * (D / 2), pr.expert.w3.scale + r0 * (D / 32), D, n, x, v);
        for (int64_t i = 0; i < n; ++i) {
            g[i] = detail::bf16_value(g[i]);
            v[i] = detail::bf16_value(v[i]);
        }
        return;
    }
    if (u < pl.end_c) {  // C: one 128-block of SwiGLU + FP8, written in the kernel's layout
        const int64_t p = (u - pl.end_b) / pl.blocks_c, c0 = (u - pl.end_b) % pl.blocks_c * 128;
        float h[128];
        detail::swiglu_quant_block(pl.gate_row(p) + c0, pl.up_row(p) + c0, job.pairs[p].weight, job.swiglu_limit,
                                   h);
        detail::to_layout(pl.layout, h, 128, pl.h_row(p) + detail::layout_bytes(pl.layout, c0));
        return;
    }
    // D: rows [d0, d0 + n) of w2
    const int64_t p = (u - pl.end_c) / pl.blocks_d, d0 = (u - pl.end_c) % pl.blocks_d * kRowsDown;
    const int64_t n = std::min(kRowsDown, D - d0);
    const HostExpertPair& pr = job.pairs[p];
    float y[kRowsDown];
    pl.dot(pr.expert.w2.packed + d0 * (I / 2), pr.expert.w2.scale + d0 * (I / 32), I, n, pl.h_row(p), y);
    for (int64_t i = 0; i < n; ++i) pr.out[d0 + i] = detail::bf16_bits(y[i]);
}

void HostExpertPool::run(const HostMoeJob& job) {
    ONECARD_CHECK(!running_.exchange(true), "host expert pool: run() called while another run() is in progress");
    struct Reset {
        std::atomic<bool>& flag;
        ~Reset() { flag.store(false); }
    } reset{running_};
    validate_job(job);
    if (job.n_pairs == 0) return;

    // Build the plan. No worker reads it now: open_ is false and inside_ was 0 when the last run ended.
    Plan& pl = *plan_;
    pl.job = job;
    pl.slot_of_token.assign(static_cast<size_t>(job.n_tokens), -1);
    pl.token_of_slot.clear();
    for (int64_t i = 0; i < job.n_pairs; ++i) {
        int32_t& slot = pl.slot_of_token[static_cast<size_t>(job.pairs[i].token)];
        if (slot < 0) {
            slot = static_cast<int32_t>(pl.token_of_slot.size());
            pl.token_of_slot.push_back(job.pairs[i].token);
        }
    }
    const int64_t n_slots = static_cast<int64_t>(pl.token_of_slot.size());
    pl.x_stride = detail::layout_bytes(pl.layout, job.dim);
    pl.h_stride = detail::layout_bytes(pl.layout, job.inter);
    pl.x_act.reserve(pl.x_stride * static_cast<size_t>(n_slots));
    pl.gate.reserve(sizeof(float) * static_cast<size_t>(job.n_pairs * job.inter));
    pl.up.reserve(sizeof(float) * static_cast<size_t>(job.n_pairs * job.inter));
    pl.h_act.reserve(pl.h_stride * static_cast<size_t>(job.n_pairs));
    pl.blocks_b = (job.inter + kRowsGateUp - 1) / kRowsGateUp;
    pl.blocks_c = job.inter / 128;
    pl.blocks_d = (job.dim + kRowsDown - 1) / kRowsDown;
    pl.end_a = n_slots;
    pl.end_b = pl.end_a + job.n_pairs * pl.blocks_b;
    pl.end_c = pl.end_b + job.n_pairs * pl.blocks_c;
    pl.end_d = pl.end_c + job.n_pairs * pl.blocks_d;
    const size_t n_progress = static_cast<size_t>(n_slots + 2 * job.n_pairs);
    if (pl.progress_cap < n_progress) {
        pl.progress = std::make_unique<std::atomic<int32_t>[]>(n_progress);
        pl.progress_cap = n_progress;
    }
    for (size_t i = 0; i < n_progress; ++i) pl.progress[i].store(0, std::memory_order_relaxed);
    next_unit_.store(0, std::memory_order_relaxed);
    done_units_.store(0, std::memory_order_relaxed);

    // Publish, wake, work, then close.
    open_.store(true);
    seq_.fetch_add(1);
    if (sleepers_.load() > 0) {
        std::lock_guard<std::mutex> lk(mu_);
        cv_.notify_all();
    }
    work_on_current_job();
    wait_done_at_least(pl.end_d);
    open_.store(false);
    int spins = 0;
    while (inside_.load() != 0) spin_pause(spins);
}

void HostExpertPool::check_integrity() const {
    ONECARD_CHECK(n_threads_ >= 1 && workers_.size() == static_cast<size_t>(n_threads_ - 1),
                  "host expert pool: {} workers for {} threads", workers_.size(), n_threads_);
    for (const std::thread& t : workers_) ONECARD_CHECK(t.joinable(), "host expert pool: a worker has exited");
    const auto& kernels = detail::dot_kernels();
    ONECARD_CHECK(kernel_index_ >= 0 && static_cast<size_t>(kernel_index_) < kernels.size(),
                  "host expert pool: kernel index {} out of range", kernel_index_);
    const detail::DotKernel& k = kernels[static_cast<size_t>(kernel_index_)];
    ONECARD_CHECK(k.isa == isa_ && detail::kernel_supported(k) && plan_ && plan_->dot == k.fn &&
                      plan_->layout == k.layout,
                  "host expert pool: kernel {} does not match ISA {}", k.name, isa_name(isa_));
    ONECARD_CHECK(pinned_.load() >= 0 && pinned_.load() <= n_threads_ - 1, "host expert pool: {} pinned of {} workers",
                  pinned_.load(), n_threads_ - 1);
    ONECARD_CHECK(plan_->e4m3[0x38] == 1.0f && plan_->e4m3[0xB8] == -1.0f && plan_->e4m3[0x7E] == 448.0f,
                  "host expert pool: E4M3 table corrupted");
    if (running_.load()) return;  // the rest describes an idle pool
    ONECARD_CHECK(!open_.load() && inside_.load() == 0, "host expert pool: idle but open {} with {} workers inside",
                  open_.load(), inside_.load());
    const Plan& pl = *plan_;
    if (seq_.load() == 0) return;
    ONECARD_CHECK(pl.end_a <= pl.end_b && pl.end_b <= pl.end_c && pl.end_c <= pl.end_d,
                  "host expert pool: unit ranges out of order ({}, {}, {}, {})", pl.end_a, pl.end_b, pl.end_c,
                  pl.end_d);
    ONECARD_CHECK(done_units_.load() == pl.end_d && next_unit_.load() >= pl.end_d,
                  "host expert pool: last job finished {} of {} units (next {})", done_units_.load(), pl.end_d,
                  next_unit_.load());
    const size_t n_pairs = static_cast<size_t>(pl.job.n_pairs), n_slots = pl.token_of_slot.size();
    ONECARD_CHECK(pl.x_act.capacity() >= pl.x_stride * n_slots && pl.h_act.capacity() >= pl.h_stride * n_pairs &&
                      pl.gate.capacity() >= sizeof(float) * n_pairs * static_cast<size_t>(pl.job.inter) &&
                      pl.up.capacity() >= sizeof(float) * n_pairs * static_cast<size_t>(pl.job.inter),
                  "host expert pool: scratch smaller than the last job");
    ONECARD_CHECK(pl.progress_cap >= n_slots + 2 * n_pairs, "host expert pool: progress counters too few");
    for (size_t i = 0; i < n_slots + 2 * n_pairs; ++i) {
        const int64_t want = i < n_slots ? 1 : i < n_slots + n_pairs ? pl.blocks_b : pl.blocks_c;
        ONECARD_CHECK(pl.progress[i].load() == want, "host expert pool: progress counter {} is {}, not {}", i,
                      pl.progress[i].load(), want);
    }
    for (size_t s = 0; s < n_slots; ++s) {
        const int32_t t = pl.token_of_slot[s];
        ONECARD_CHECK(t >= 0 && static_cast<size_t>(t) < pl.slot_of_token.size() &&
                          pl.slot_of_token[static_cast<size_t>(t)] == static_cast<int32_t>(s),
                      "host expert pool: token slot map inconsistent at slot {}", s);
    }
}

}  // namespace onecard::host
