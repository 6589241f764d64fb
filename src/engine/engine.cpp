// The public Engine: one engine thread runs EngineCore; callers reach it only through the inbox
// (submissions, cancellations) and read results from per-request event queues.
#include "onecard/engine.h"

#include "core/error.h"
#include "engine/bounded_queue.h"
#include "engine/engine_core.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

namespace onecard {

namespace {
// What callers hand to the engine thread. Guarded by mu; cv wakes the engine thread.
struct Inbox {
    std::mutex mu;
    std::condition_variable cv;        // engine thread waits here
    std::condition_variable not_full;  // submitters wait here
    size_t capacity = 0;
    std::deque<std::pair<GenerateRequest, std::shared_ptr<RequestStream::State>>> submissions;
    std::vector<RequestId> cancels;
    bool wake = false;  // a reader drained a paused request's queue
    bool stop = false;

    void notify_wake() {
        {
            std::lock_guard lk(mu);
            wake = true;
        }
        cv.notify_one();
    }
    void cancel(RequestId id) {
        {
            std::lock_guard lk(mu);
            cancels.push_back(id);
        }
        cv.notify_one();
    }
};
}  // namespace

struct RequestStream::State {
    RequestId id = 0;
    BoundedQueue<EngineEvent> events;
    size_t soft_capacity;             // the engine pauses the request at this many queued events
    std::atomic<bool> paused{false};  // set by the engine thread
    std::atomic<bool> done{false};    // the final event was taken by the reader
    std::weak_ptr<Inbox> inbox;

    State(RequestId i, size_t cap, std::weak_ptr<Inbox> in)
        : id(i), events(cap + 1), soft_capacity(cap), inbox(std::move(in)) {}

    std::optional<EngineEvent> after_pop(std::optional<EngineEvent> ev) {
        if (!ev) return ev;
        if (ev->finished()) done = true;
        // The engine paused us because we were behind; tell it there is room again.
        if (paused && events.size() < soft_capacity)
            if (auto in = inbox.lock()) in->notify_wake();
        return ev;
    }
};

RequestStream::RequestStream(std::shared_ptr<State> state) : state_(std::move(state)) {}
RequestStream::~RequestStream() = default;
RequestId RequestStream::id() const {
    return state_->id;
}

std::optional<EngineEvent> RequestStream::next() {
    if (state_->done) return std::nullopt;
    return state_->after_pop(state_->events.pop());
}

std::optional<EngineEvent> RequestStream::try_next() {
    if (state_->done) return std::nullopt;
    return state_->after_pop(state_->events.try_pop());
}

std::optional<EngineEvent> RequestStream::next_for(std::chrono::milliseconds timeout) {
    if (state_->done) return std::nullopt;
    return state_->after_pop(state_->events.pop_for(timeout));
}

void RequestStream::cancel() {
    if (auto in = state_->inbox.lock()) in->cancel(state_->id);
}

struct Engine::Impl {
    EngineConfig config;
    EngineCore core;
    std::shared_ptr<Inbox> inbox = std::make_shared<Inbox>();
    std::atomic<RequestId> next_id{1};
    std::unordered_map<RequestId, std::shared_ptr<RequestStream::State>> live;  // engine thread only

    mutable std::mutex stats_mu;
    mutable std::condition_variable idle_cv;
    EngineStats stats;
    int64_t n_inflight = 0;  // submitted and not finished; guarded by stats_mu

    std::thread thread;
    // Diagnostics: engine-thread iterations with a step that take at least this long are logged to
    // stderr with their parts (ONECARD_LOG_SLOW_STEPS_MS; 0: off). A step's wall time is what every
    // running stream waits between two tokens, so this is where a stall shows what it was made of.
    double slow_step_s = 0;

    Impl(EngineConfig cfg, std::unique_ptr<ModelRunner> runner)
        : config(std::move(cfg)), core(config, std::move(runner)) {
        if (const char* v = std::getenv("ONECARD_LOG_SLOW_STEPS_MS")) slow_step_s = std::max(0.0, std::atof(v)) / 1e3;
        inbox->capacity = config.submit_queue_capacity;
        publish_stats();
        thread = std::thread([this] { run(); });
    }

    void deliver(EngineEvent ev) {
        auto it = live.find(ev.request_id);
        if (it == live.end()) return;
        const bool fin = ev.finished();
        it->second->events.force_push(std::move(ev));
        if (fin) {
            live.erase(it);
            std::lock_guard lk(stats_mu);
            --n_inflight;
        }
    }

    void publish_stats() {
        std::lock_guard lk(stats_mu);
        stats.n_waiting = core.scheduler().n_waiting();
        stats.n_running = core.scheduler().n_running();
        stats.n_steps = core.n_steps();
        stats.n_free_kv_blocks = core.kv().n_free_blocks();
        stats.n_total_kv_blocks = core.kv().n_total_blocks();
        stats.n_free_kv_slots = core.kv().n_free_slots();
        stats.n_preemptions = core.scheduler().n_preemptions();
        stats.prefix_caching = core.prefix_caching();
        const EngineCore::SpecCounters& sc = core.spec_counters();
        stats.spec_num_drafts = sc.n_drafts;
        stats.spec_num_draft_tokens = sc.n_draft_tokens;
        stats.spec_num_accepted_tokens = sc.n_accepted_tokens;
        stats.spec_num_accepted_tokens_per_pos = sc.accepted_per_pos;
        stats.spec_draft_length = core.scheduler().step_drafts();
        stats.prefix_cache_queries = core.scheduler().n_prefix_queries();
        stats.prefix_cache_hits = core.scheduler().n_prefix_hits();
        stats.prefix_cache_hits_offloaded = core.scheduler().n_prefix_hits_offloaded();
        if (const KvHostTier* t = core.kv().host_tier()) {
            const PrefixCacheStats ps = core.kv().prefix_cache_stats();
            stats.n_host_kv_blocks = ps.n_host_blocks;
            stats.n_total_host_kv_blocks = t->config().max_host_blocks;
            stats.n_prefix_snapshots = ps.n_snapshots;
            stats.n_total_prefix_snapshots = t->config().max_snapshots;
            stats.n_disk_kv_entries = ps.n_disk_entries;
            stats.disk_kv_bytes = ps.disk_bytes;
            if (const KvDiskStore* d = t->disk()) {
                const KvDiskStartupReport& r = d->startup_report();
                stats.disk_reused_entries = r.n_entries;
                stats.disk_reused_bytes = r.bytes;
                stats.disk_removed_torn = r.n_removed_temp;
                stats.disk_removed_foreign = r.n_removed_foreign;
                stats.disk_removed_corrupt = r.n_removed_corrupt;
                stats.disk_removed_excess = r.n_evicted_over_bound;
            }
        }
        idle_cv.notify_all();
    }

    void fail_all(const std::string& what) {
        std::vector<RequestId> ids;
        for (auto& [id, state] : live) ids.push_back(id);
        for (RequestId id : ids) {
            core.abort_request(id);
            EngineEvent fin;
            fin.request_id = id;
            fin.finish_reason = FinishReason::Error;
            fin.error = what;
            deliver(std::move(fin));
        }
    }

    // One line per slow iteration (slow_step_s): its parts in ms and what the step computed.
    void log_slow_step(double admit_s, size_t n_admitted, double step_s, double after_s, double since_prev_s) const {
        const EngineCore::StepTiming& t = core.last_step_timing();
        const double total = admit_s + step_s + after_s;
        if (slow_step_s <= 0 || total < slow_step_s) return;
        std::fprintf(stderr,
                     "engine: step %lld took %.1f ms: admit %.1f (%zu new), schedule %.1f, runner %.1f, outputs %.1f, "
                     "other %.1f, deliver+stats %.1f; %lld rows, %lld tokens (%lld multi-token rows, %lld tokens), "
                     "max position %lld, %lld snapshots, %lld block copies; %.1f ms since the previous step\n",
                     static_cast<long long>(core.n_steps()), total * 1e3, admit_s * 1e3, n_admitted, t.schedule_s * 1e3,
                     t.execute_s * 1e3, t.outputs_s * 1e3, (step_s - t.schedule_s - t.execute_s - t.outputs_s) * 1e3,
                     after_s * 1e3, static_cast<long long>(t.rows), static_cast<long long>(t.tokens),
                     static_cast<long long>(t.prompt_rows), static_cast<long long>(t.prompt_tokens),
                     static_cast<long long>(t.max_position), static_cast<long long>(t.snapshots),
                     static_cast<long long>(t.block_copies), since_prev_s * 1e3);
    }

    void run() {
        using Clock = std::chrono::steady_clock;
        auto seconds = [](Clock::time_point a, Clock::time_point b) {
            return std::chrono::duration<double>(b - a).count();
        };
        Clock::time_point prev_end = Clock::now();
        for (;;) {
            std::deque<std::pair<GenerateRequest, std::shared_ptr<RequestStream::State>>> subs;
            std::vector<RequestId> cancels;
            bool stop = false;
            {
                std::unique_lock lk(inbox->mu);
                auto has_input = [&] {
                    return inbox->stop || !inbox->submissions.empty() || !inbox->cancels.empty() || inbox->wake;
                };
                if (!core.has_unfinished() || !core.last_step_scheduled()) {
                    // Nothing runnable: sleep until a caller or a reader wakes us (timeout as a safety net).
                    inbox->cv.wait_for(lk, std::chrono::milliseconds(50), has_input);
                }
                stop = inbox->stop;
                subs.swap(inbox->submissions);
                cancels.swap(inbox->cancels);
                inbox->wake = false;
            }
            const Clock::time_point t_admit = Clock::now();
            const size_t n_admitted = subs.size();
            if (!subs.empty()) inbox->not_full.notify_all();
            for (auto& [req, state] : subs) {
                live[state->id] = state;
                try {
                    core.add_validated_request(state->id, std::move(req));  // submit() validated it
                } catch (const std::exception& e) {
                    EngineEvent ev;
                    ev.request_id = state->id;
                    ev.finish_reason = FinishReason::Error;
                    ev.error = e.what();
                    deliver(std::move(ev));
                }
            }
            for (RequestId id : cancels)
                if (auto ev = core.abort_request(id)) deliver(std::move(*ev));
            if (stop) break;
            for (auto& [id, state] : live) {
                const bool behind = state->events.size() >= state->soft_capacity;
                state->paused = behind;
                core.set_paused(id, behind);
            }
            const int64_t steps_before = core.n_steps();
            const Clock::time_point t_step = Clock::now();
            Clock::time_point t_after = t_step;
            try {
                std::vector<EngineEvent> events = core.step();
                t_after = Clock::now();
                for (auto& ev : events) deliver(std::move(ev));
                // Idle is the cheap moment to prove the KV bookkeeping is whole (mini-sglang habit).
                if (!core.has_unfinished()) core.check_integrity();
            } catch (const std::exception& e) {
                // A bug in the engine itself (runner errors are handled per batch in EngineCore):
                // end every stream with the error rather than taking the process down.
                fail_all(e.what());
            }
            publish_stats();
            const Clock::time_point t_end = Clock::now();
            if (slow_step_s > 0 && core.n_steps() != steps_before)
                log_slow_step(seconds(t_admit, t_step), n_admitted, seconds(t_step, t_after), seconds(t_after, t_end),
                              seconds(prev_end, t_admit));
            if (core.n_steps() != steps_before) prev_end = t_end;
        }
        // Shutdown: everything still known ends with Cancelled so no reader blocks forever.
        std::vector<RequestId> ids;
        for (auto& [id, state] : live) ids.push_back(id);
        for (RequestId id : ids) {
            if (auto ev = core.abort_request(id)) {
                deliver(std::move(*ev));
            } else {
                EngineEvent fin;
                fin.request_id = id;
                fin.finish_reason = FinishReason::Cancelled;
                deliver(std::move(fin));
            }
        }
        publish_stats();
    }
};

Engine::Engine(EngineConfig config, std::unique_ptr<ModelRunner> runner)
    : impl_(std::make_unique<Impl>(std::move(config), std::move(runner))) {}

Engine::~Engine() {
    {
        std::lock_guard lk(impl_->inbox->mu);
        impl_->inbox->stop = true;
    }
    impl_->inbox->cv.notify_one();
    impl_->inbox->not_full.notify_all();
    impl_->thread.join();
    // Submissions that raced with shutdown never reached the engine thread: end their streams too.
    for (auto& [req, state] : impl_->inbox->submissions) {
        EngineEvent fin;
        fin.request_id = state->id;
        fin.finish_reason = FinishReason::Cancelled;
        state->events.force_push(std::move(fin));
    }
}

std::shared_ptr<RequestStream> Engine::submit(GenerateRequest request) {
    impl_->core.validate(request);
    const RequestId id = impl_->next_id++;
    auto state = std::make_shared<RequestStream::State>(id, impl_->config.event_queue_capacity, impl_->inbox);
    {
        std::unique_lock lk(impl_->inbox->mu);
        impl_->inbox->not_full.wait(
            lk, [&] { return impl_->inbox->stop || impl_->inbox->submissions.size() < impl_->inbox->capacity; });
        ONECARD_CHECK(!impl_->inbox->stop, "engine: submit after shutdown");
        {
            std::lock_guard slk(impl_->stats_mu);
            ++impl_->n_inflight;
        }
        impl_->inbox->submissions.emplace_back(std::move(request), state);
    }
    impl_->inbox->cv.notify_one();
    return std::make_shared<RequestStream>(std::move(state));
}

void Engine::cancel(RequestId id) {
    impl_->inbox->cancel(id);
}

EngineStats Engine::stats() const {
    std::lock_guard lk(impl_->stats_mu);
    return impl_->stats;
}

void Engine::wait_idle() const {
    std::unique_lock lk(impl_->stats_mu);
    impl_->idle_cv.wait(lk, [&] { return impl_->n_inflight == 0; });
}

}  // namespace onecard
