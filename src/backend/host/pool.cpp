// HostExpertPool: persistent threads running host MoE jobs as four phases of work units.
//
// Pairs that share an expert (all six weight pointers equal) form a GROUP of up to kMaxVecs pairs; its
// gate/up and down rows are read once for all of them with the multi-vector row-dot (mxfp4_dot.h), so
// a batch whose tokens pick the same experts streams each expert once, not once per pair.
// Units, in one index space handed out by one atomic counter (next_unit_):
//   A  [0, end_a)      one per token used by the job: decode its FP8 row once, into the kernel's layout
//   B  [end_a, end_b)  (group, kRowsGateUp rows of w1 and w3): gate and up of every pair, rounded to bf16
//   C  [end_b, end_c)  (pair, 128-block of inter): weighted SwiGLU + FP8 1x128 quant-dequant
//   D  [end_c, end_d)  (group, kRowsDown rows of w2): the expert's output rows of every pair, in bf16
// A unit waits only for what it reads: a B unit for its pairs' A units, a C unit for the B units that
// wrote its 128 rows (per-(group, row block) flags), a D unit for all C units of its group (per-group
// count). A D unit that must wait prefetches its own w2 rows into L2 meanwhile, so the wait at the end
// of a group's gate/up (the one real dependency: every down row reads all of h) still moves weights.
// Units are claimed in index order (B, D group-major, C pair-major in group order), so every unit
// waited for has a smaller index and is held by a running thread that never waits on a larger one: no
// deadlock, and any number of threads (even one) may take part. Every output element belongs to one
// unit with a fixed op sequence, so the bits depend neither on the thread count nor on the grouping.
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

// Unit sizes: small enough that one pair still gives 128 B and 128 D units (8.5 rounds of 15 threads,
// so the last round's idle share is small), large enough that the per-call start (a pass whose first
// bytes the prefetch has not reached) stays a few percent.
constexpr int64_t kRowsGateUp = 16;  // rows of w1 (and of w3) per B unit: 2 x 32 KB at dim 4096
constexpr int64_t kRowsDown = 32;    // rows of w2 per D unit: 32 KB at inter 2048
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
        ptr_ = static_cast<std::byte*>(::operator new (bytes, std::align_val_t{64}));
        cap_ = bytes;
    }
    std::byte* data() const { return ptr_; }
    size_t capacity() const { return cap_; }

private:
    void release() {
        if (ptr_) ::operator delete (ptr_, std::align_val_t{64});
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
    detail::DotRowsMultiFn multi = nullptr;
    detail::VecLayout layout = detail::VecLayout::F32Natural;
    float e4m3[256] = {};
    size_t x_stride = 0, h_stride = 0;                 // bytes per token slot row [dim] / per pair row [inter]
    int64_t blocks_b = 0, blocks_c = 0, blocks_d = 0;  // units per group (B, D) / per pair (C)
    int64_t end_a = 0, end_b = 0, end_c = 0, end_d = 0;
    int64_t n_groups = 0;
    // progress: [n_slots] A done (0/1) | [n_groups * blocks_b] B unit done (0/1) | [n_groups] C units done
    std::unique_ptr<std::atomic<int32_t>[]> progress;
    size_t progress_cap = 0;
    std::vector<int32_t> slot_of_token;  // [n_tokens] -1 = unused
    std::vector<int32_t> token_of_slot;  // [n_slots]
    std::vector<int32_t> order;          // [n_pairs] pair indices, group after group
    std::vector<int32_t> group_first;    // [n_groups + 1] group g = order[group_first[g], group_first[g+1])
    std::vector<int32_t> group_of_pair;  // [n_pairs]
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
    plan_->multi = k.multi;
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

const char* HostExpertPool::kernel_name() const {
    return detail::dot_kernels()[kernel_index_].name;
}

void HostExpertPool::worker_main(int /*index*/) {
    uint64_t last = 0;
    for (;;) {
        // Spin on the sequence number for spin_us_, then sleep until run() or the destructor wakes us.
        int spins = 0;
        const auto t0 = std::chrono::steady_clock::now();
        while (seq_.load(std::memory_order_acquire) == last && !stop_.load(std::memory_order_relaxed)) {
            spin_pause(spins);
            if (spins % 256 == 0 && std::chrono::steady_clock::now() - t0 > std::chrono::microseconds(spin_us_)) {
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
// The same, prefetching [p, p + bytes) into L2 one line per spin until the counter is reached or the
// range is covered: the weights the waiting unit will read next arrive during the wait.
void wait_prefetching(const std::atomic<int32_t>& counter, int32_t count, const uint8_t* p, int64_t bytes) {
    int spins = 0;
    for (int64_t o = 0; counter.load(std::memory_order_acquire) < count;) {
        if (o < bytes) {
            _mm_prefetch(reinterpret_cast<const char*>(p + o), _MM_HINT_T1);
            o += 64;
        } else {
            spin_pause(spins);
        }
    }
}
bool same_expert(const MxExpertView& a, const MxExpertView& b) {
    return a.w1.packed == b.w1.packed && a.w1.scale == b.w1.scale && a.w3.packed == b.w3.packed &&
           a.w3.scale == b.w3.scale && a.w2.packed == b.w2.packed && a.w2.scale == b.w2.scale;
}
}  // namespace

void HostExpertPool::wait_done_at_least(int64_t count) const {
    int spins = 0;
    while (done_units_.load(std::memory_order_acquire) < count) spin_pause(spins);
}

void HostExpertPool::work_on_current_job() {
    const Plan& pl = *plan_;
    const int64_t n_slots = pl.end_a;
    const int64_t I = pl.job.inter;
    std::atomic<int32_t>* a_done = pl.progress.get();                   // [n_slots]
    std::atomic<int32_t>* b_done = a_done + n_slots;                    // [n_groups * blocks_b]
    std::atomic<int32_t>* c_done = b_done + pl.n_groups * pl.blocks_b;  // [n_groups]
    for (;;) {
        const int64_t u = next_unit_.fetch_add(1, std::memory_order_relaxed);
        if (u >= pl.end_d) return;
        // Wait for this unit's inputs (release/acquire on the counters carries their data), run it,
        // then count it where its readers look.
        std::atomic<int32_t>* mine = nullptr;
        if (u < pl.end_a) {
            mine = &a_done[u];
        } else if (u < pl.end_b) {
            const int64_t grp = (u - pl.end_a) / pl.blocks_b;
            for (int32_t q = pl.group_first[grp]; q < pl.group_first[grp + 1]; ++q)
                wait_at_least(a_done[pl.slot_of_token[static_cast<size_t>(pl.job.pairs[pl.order[q]].token)]], 1);
            mine = &b_done[u - pl.end_a];
        } else if (u < pl.end_c) {
            const int64_t q = (u - pl.end_b) / pl.blocks_c, c0 = (u - pl.end_b) % pl.blocks_c * 128;
            const int64_t grp = pl.group_of_pair[static_cast<size_t>(pl.order[q])];
            const int64_t last = std::min(pl.blocks_b, (c0 + 128 + kRowsGateUp - 1) / kRowsGateUp);
            for (int64_t blk = c0 / kRowsGateUp; blk < last; ++blk) wait_at_least(b_done[grp * pl.blocks_b + blk], 1);
            mine = &c_done[grp];
        } else {
            const int64_t grp = (u - pl.end_c) / pl.blocks_d, d0 = (u - pl.end_c) % pl.blocks_d * kRowsDown;
            const int32_t want = (pl.group_first[grp + 1] - pl.group_first[grp]) * static_cast<int32_t>(pl.blocks_c);
            const MxMatrixView& w2 = pl.job.pairs[pl.order[pl.group_first[grp]]].expert.w2;
            wait_prefetching(c_done[grp], want, w2.packed + d0 * (I / 2),
                             std::min(kRowsDown, pl.job.dim - d0) * (I / 2));
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
    const void* x[detail::kMaxVecs] = {};
    float* o[detail::kMaxVecs] = {};
    if (u < pl.end_b) {  // B: rows [r0, r0 + n) of w1 and w3, for every pair of the group
        const int64_t grp = (u - pl.end_a) / pl.blocks_b, r0 = (u - pl.end_a) % pl.blocks_b * kRowsGateUp;
        const int64_t n = std::min(kRowsGateUp, I - r0);
        const int32_t q0 = pl.group_first[grp], nv = pl.group_first[grp + 1] - q0;
        const MxExpertView& e = job.pairs[pl.order[q0]].expert;
        for (int32_t v = 0; v < nv; ++v) {
            const int32_t p = pl.order[q0 + v];
            x[v] = pl.x_row(pl.slot_of_token[static_cast<size_t>(job.pairs[p].token)]);
            o[v] = pl.gate_row(p) + r0;
        }
        pl.multi(e.w1.packed + r0 * (D / 2), e.w1.scale + r0 * (D / 32), D, n, x, nv, o);
        for (int32_t v = 0; v < nv; ++v) o[v] = pl.up_row(pl.order[q0 + v]) + r0;
        pl.multi(e.w3.packed + r0 * (D / 2), e.w3.scale + r0 * (D / 32), D, n, x, nv, o);
        for (int32_t v = 0; v < nv; ++v) {
            float* g = pl.gate_row(pl.order[q0 + v]) + r0;
            float* w = pl.up_row(pl.order[q0 + v]) + r0;
            for (int64_t i = 0; i < n; ++i) {
                g[i] = detail::bf16_value(g[i]);
                w[i] = detail::bf16_value(w[i]);
            }
        }
        return;
    }
    if (u < pl.end_c) {  // C: one 128-block of SwiGLU + FP8, written in the kernel's layout
        const int64_t p = pl.order[(u - pl.end_b) / pl.blocks_c], c0 = (u - pl.end_b) % pl.blocks_c * 128;
        float h[128];
        detail::swiglu_quant_block(pl.gate_row(p) + c0, pl.up_row(p) + c0, job.pairs[p].weight, job.swiglu_limit, h);
        detail::to_layout(pl.layout, h, 128, pl.h_row(p) + detail::layout_bytes(pl.layout, c0));
        return;
    }
    // D: rows [d0, d0 + n) of w2, for every pair of the group
    const int64_t grp = (u - pl.end_c) / pl.blocks_d, d0 = (u - pl.end_c) % pl.blocks_d * kRowsDown;
    const int64_t n = std::min(kRowsDown, D - d0);
    const int32_t q0 = pl.group_first[grp], nv = pl.group_first[grp + 1] - q0;
    const MxExpertView& e = job.pairs[pl.order[q0]].expert;
    float y[detail::kMaxVecs][kRowsDown];
    for (int32_t v = 0; v < nv; ++v) {
        x[v] = pl.h_row(pl.order[q0 + v]);
        o[v] = y[v];
    }
    pl.multi(e.w2.packed + d0 * (I / 2), e.w2.scale + d0 * (I / 32), I, n, x, nv, o);
    for (int32_t v = 0; v < nv; ++v) {
        uint16_t* out = job.pairs[pl.order[q0 + v]].out + d0;
        for (int64_t i = 0; i < n; ++i) out[i] = detail::bf16_bits(y[v][i]);
    }
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
    // Groups: pairs of one expert, in order of the expert's first pair (and of the pairs within it),
    // split into runs of at most kMaxVecs. pairs x distinct experts comparisons: microseconds next to
    // the megabytes each expert streams.
    pl.order.clear();
    pl.group_first.clear();
    pl.group_of_pair.assign(static_cast<size_t>(job.n_pairs), -1);
    for (int64_t i = 0; i < job.n_pairs; ++i) {
        if (pl.group_of_pair[static_cast<size_t>(i)] >= 0) continue;
        int32_t in_group = detail::kMaxVecs;
        for (int64_t j = i; j < job.n_pairs; ++j) {
            if (pl.group_of_pair[static_cast<size_t>(j)] >= 0 || !same_expert(job.pairs[i].expert, job.pairs[j].expert))
                continue;
            if (in_group == detail::kMaxVecs) {
                pl.group_first.push_back(static_cast<int32_t>(pl.order.size()));
                in_group = 0;
            }
            pl.group_of_pair[static_cast<size_t>(j)] = static_cast<int32_t>(pl.group_first.size() - 1);
            pl.order.push_back(static_cast<int32_t>(j));
            ++in_group;
        }
    }
    pl.n_groups = static_cast<int64_t>(pl.group_first.size());
    pl.group_first.push_back(static_cast<int32_t>(pl.order.size()));
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
    pl.end_b = pl.end_a + pl.n_groups * pl.blocks_b;
    pl.end_c = pl.end_b + job.n_pairs * pl.blocks_c;
    pl.end_d = pl.end_c + pl.n_groups * pl.blocks_d;
    const size_t n_progress = static_cast<size_t>(n_slots + pl.n_groups * pl.blocks_b + pl.n_groups);
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
                      plan_->multi == k.multi && plan_->layout == k.layout,
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
    const size_t n_groups = static_cast<size_t>(pl.n_groups), n_b = n_groups * static_cast<size_t>(pl.blocks_b);
    ONECARD_CHECK(pl.progress_cap >= n_slots + n_b + n_groups, "host expert pool: progress counters too few");
    for (size_t i = 0; i < n_slots + n_b; ++i)
        ONECARD_CHECK(pl.progress[i].load() == 1, "host expert pool: progress flag {} is {}, not 1", i,
                      pl.progress[i].load());
    // (The pairs themselves are the caller's and may be gone: only the plan's own arrays are checked.)
    ONECARD_CHECK(pl.group_first.size() == n_groups + 1 && pl.order.size() == n_pairs &&
                      pl.group_of_pair.size() == n_pairs && pl.group_first.front() == 0 &&
                      pl.group_first.back() == static_cast<int32_t>(n_pairs),
                  "host expert pool: {} groups over {} pairs inconsistent", n_groups, n_pairs);
    for (size_t g = 0; g < n_groups; ++g) {
        const int32_t size = pl.group_first[g + 1] - pl.group_first[g];
        ONECARD_CHECK(size >= 1 && size <= detail::kMaxVecs, "host expert pool: group {} has {} pairs", g, size);
        ONECARD_CHECK(pl.progress[n_slots + n_b + g].load() == size * pl.blocks_c,
                      "host expert pool: group {} finished {} C units of {}", g, pl.progress[n_slots + n_b + g].load(),
                      size * pl.blocks_c);
        for (int32_t q = pl.group_first[g]; q < pl.group_first[g + 1]; ++q) {
            const int32_t p = pl.order[static_cast<size_t>(q)];
            ONECARD_CHECK(p >= 0 && static_cast<size_t>(p) < n_pairs &&
                              pl.group_of_pair[static_cast<size_t>(p)] == static_cast<int32_t>(g),
                          "host expert pool: pair {} misfiled in group {}", p, g);
        }
    }
    for (size_t s = 0; s < n_slots; ++s) {
        const int32_t t = pl.token_of_slot[s];
        ONECARD_CHECK(t >= 0 && static_cast<size_t>(t) < pl.slot_of_token.size() &&
                          pl.slot_of_token[static_cast<size_t>(t)] == static_cast<int32_t>(s),
                      "host expert pool: token slot map inconsistent at slot {}", s);
    }
}

}  // namespace onecard::host
