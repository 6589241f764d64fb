#include "engine/scheduler.h"

#include "core/error.h"
#include "engine/spec_policy.h"

#include <algorithm>

namespace onecard {

Scheduler::Scheduler(SchedulerConfig config, KvCacheManager& kv) : config_(config), kv_(kv) {
    ONECARD_CHECK(config_.max_num_batched_tokens > 0, "scheduler: max_num_batched_tokens must be positive");
    ONECARD_CHECK(config_.long_prefill_token_threshold > 0, "scheduler: long_prefill_token_threshold must be positive");
    // Every running request must be able to decode in every step, or decodes could starve.
    ONECARD_CHECK(config_.max_num_seqs <= config_.max_num_batched_tokens,
                  "scheduler: max_num_seqs {} exceeds max_num_batched_tokens {}", config_.max_num_seqs,
                  config_.max_num_batched_tokens);
    ONECARD_CHECK(config_.max_num_seqs > 0 && config_.max_num_seqs <= kv_.n_total_slots(),
                  "scheduler: max_num_seqs {} must be in [1, {}] (KV slots)", config_.max_num_seqs,
                  kv_.n_total_slots());
}

void Scheduler::add_request(std::unique_ptr<Request> req) {
    ONECARD_CHECK(req && !requests_.contains(req->id), "scheduler: request id {} already in use", req ? req->id : 0);
    ONECARD_CHECK(!req->prompt.empty(), "scheduler: request {} has an empty prompt", req->id);
    req->status = RequestStatus::Waiting;
    waiting_.push_back(req.get());
    requests_.emplace(req->id, std::move(req));
}

Request* Scheduler::find(RequestId id) {
    auto it = requests_.find(id);
    return it == requests_.end() ? nullptr : it->second.get();
}

void Scheduler::update_block_hashes(Request& r) const {
    extend_block_hashes(r.block_hashes, r.tokens(), kv_.spec().block_size);
}

ScheduledRequest Scheduler::make_entry(Request& r, int64_t n) {
    ScheduledRequest e;
    e.id = r.id;
    e.start_pos = r.num_computed_tokens;
    e.token_ids.reserve(static_cast<size_t>(n));
    for (int64_t p = e.start_pos; p < e.start_pos + n; ++p) e.token_ids.push_back(r.token_at(p));
    e.sample = e.start_pos + n == r.num_tokens();
    e.kv = r.kv;
    if (kv_.prefix_caching()) {
        // A snapshot at every block boundary the chunk reaches whose prefix has none yet. Each one
        // lets a later request with this prefix resume there (kv_manager.h bounds how many stay).
        update_block_hashes(r);
        const int64_t bs = kv_.spec().block_size;
        const int64_t first = config_.snapshots_inside_chunks ? (e.start_pos / bs + 1) * bs : e.start_pos + n;
        for (int64_t pos = first; pos <= e.start_pos + n; pos += bs) {
            if (pos % bs != 0) continue;
            const int64_t id = kv_.plan_snapshot(r.block_hashes[static_cast<size_t>(pos / bs - 1)]);
            if (id >= 0) e.save_snapshots.push_back({pos, id});
        }
    }
    return e;
}

int64_t Scheduler::chunk_tokens(const Request& r, int64_t start, int64_t n) const {
    if (!kv_.prefix_caching() || config_.snapshots_inside_chunks) return n;
    const int64_t bs = kv_.spec().block_size, end = start + n;
    const int64_t last_boundary = (r.num_tokens() - 1) / bs * bs;  // where a re-sent sequence resumes
    if (start < last_boundary && end > last_boundary) return last_boundary - start;
    const int64_t aligned = end / bs * bs;
    if (end < r.num_tokens() && aligned > start) return aligned - start;
    return n;
}

void Scheduler::preempt(Request* victim, SchedulerOutput& out, int64_t& budget) {
    // If the victim was already scheduled this step (decodes go first), take its tokens back.
    auto it = std::find_if(out.requests.begin(), out.requests.end(), [&](const auto& e) { return e.id == victim->id; });
    if (it != out.requests.end()) {
        budget += it->n_tokens() + it->n_draft_tokens;
        out.n_scheduled_tokens -= it->n_tokens() + it->n_draft_tokens;
        out.requests.erase(it);
    }
    kv_.free(victim->kv);
    victim->kv = KvHandle{};
    victim->num_computed_tokens = 0;
    victim->status = RequestStatus::Waiting;
    ++victim->n_preemptions;
    ++n_preemptions_;
    running_.erase(std::find(running_.begin(), running_.end(), victim));
    waiting_.push_front(victim);
    out.preempted_ids.push_back(victim->id);
}

void Scheduler::schedule_running(const std::vector<Request*>& running, bool decode_pass, SchedulerOutput& out,
                                 int64_t& budget) {
    for (Request* r : running) {
        if (r->status != RequestStatus::Running || r->paused || budget == 0) continue;
        const int64_t remaining = r->num_tokens() - r->num_computed_tokens;
        if (remaining <= 0 || (remaining == 1) != decode_pass) continue;
        const int64_t n = chunk_tokens(*r, r->num_computed_tokens,
                                       std::min({remaining, config_.long_prefill_token_threshold, budget}));
        const int64_t drafts = decode_pass ? draft_tokens_for(*r, budget - n) : 0;
        const int64_t need = r->num_computed_tokens + n + drafts - kv_.n_tokens(r->kv);  // KV tokens to add
        bool self_preempted = false;
        while (need > 0 && !kv_.can_extend(r->kv, need)) {
            Request* victim = running_.back();
            preempt(victim, out, budget);
            if (victim == r) {
                self_preempted = true;
                break;
            }
        }
        if (self_preempted) continue;
        if (need > 0) kv_.extend(r->kv, need);
        out.requests.push_back(make_entry(*r, n));
        out.requests.back().n_draft_tokens = drafts;
        out.n_scheduled_tokens += n + drafts;
        budget -= n + drafts;
    }
}

void Scheduler::admit_waiting(SchedulerOutput& out, int64_t& budget) {
    // Pass 3: admission, FCFS. Stops at the first request that does not fit (no overtaking).
    // A request preempted in this very step stays out until the next one (its KV was just needed).
    while (!waiting_.empty() && budget > 0 && n_running() < config_.max_num_seqs) {
        Request* r = waiting_.front();
        if (std::find(out.preempted_ids.begin(), out.preempted_ids.end(), r->id) != out.preempted_ids.end()) break;
        PrefixMatch match;
        if (kv_.prefix_caching()) {
            update_block_hashes(*r);
            kv_.promote_from_disk(r->block_hashes, r->tokens());
            match = kv_.match_prefix(r->block_hashes, r->tokens());
        }
        const int64_t start = match.n_tokens;  // < num_tokens(): the last token is always computed
        const int64_t n =
            chunk_tokens(*r, start, std::min({r->num_tokens() - start, config_.long_prefill_token_threshold, budget}));
        if (!kv_.can_allocate(match, start + n)) break;
        waiting_.pop_front();
        r->kv = kv_.allocate(match, start + n);
        r->num_sent_blocks = 0;
        r->num_computed_tokens = start;
        r->status = RequestStatus::Running;
        if (r->num_cached_tokens < 0) {  // first admission: what usage and the hit rate report
            r->num_cached_tokens = std::min(start, r->num_prompt_tokens());
            if (kv_.prefix_caching()) {
                n_prefix_queries_ += r->num_prompt_tokens();
                n_prefix_hits_ += r->num_cached_tokens;
                n_prefix_hits_offloaded_ += static_cast<int64_t>(match.host_blocks.size()) * kv_.spec().block_size;
            }
        }
        running_.push_back(r);
        out.requests.push_back(make_entry(*r, n));
        out.requests.back().restore_snapshot = match.snapshot;
        out.n_scheduled_tokens += n;
        budget -= n;
    }
}

SchedulerOutput Scheduler::schedule() {
    SchedulerOutput out;
    out.step = step_++;
    out.kv_block_size = kv_.spec().block_size;
    out.finished_ids = std::move(finished_since_last_step_);
    finished_since_last_step_.clear();
    // Snapshots planned for a step that never reached update_from_output (the runner failed).
    kv_.abandon_pending_snapshots();
    int64_t budget = config_.max_num_batched_tokens;
    step_drafts_ = config_.num_speculative_tokens;
    if (spec_policy_ != nullptr && step_drafts_ > 0) {
        int64_t decode_rows = 0;
        for (const Request* r : running_)
            decode_rows +=
                r->status == RequestStatus::Running && !r->paused && r->num_tokens() - r->num_computed_tokens == 1;
        step_drafts_ = std::min(step_drafts_, spec_policy_->drafts_for_step(decode_rows, n_running() + n_waiting()));
    }

    // Passes 1 and 2 over the requests running when the step began (admitted ones are scheduled by
    // pass 3 itself), then pass 3; or 1, 3, 2 (new_requests_first).
    const std::vector<Request*> running = running_;
    schedule_running(running, true, out, budget);
    bool admitted = false;
    if (config_.new_requests_first) {
        const size_t before = out.requests.size();
        admit_waiting(out, budget);
        admitted = out.requests.size() > before;
    }
    // A step that admits requests ahead of running prompts leaves those prompts' next chunks out, so it
    // is as short as the admitted prompts make it and their first tokens do not wait for a full step of
    // someone else's prefill (the mixed-load gate's TTFT). At most every other step, so a stream of
    // arrivals cannot stall a long prompt.
    const bool prefilling = std::any_of(running.begin(), running.end(), [](const Request* r) {
        return r->status == RequestStatus::Running && !r->paused && r->num_tokens() - r->num_computed_tokens > 1;
    });
    const bool hold_prefills = admitted && prefilling && !held_prefills_;
    held_prefills_ = hold_prefills;
    if (!hold_prefills) schedule_running(running, false, out, budget);
    if (!config_.new_requests_first) admit_waiting(out, budget);

    // Each request's new blocks only; a fresh table (first admission, or after a preemption) whole.
    for (auto& e : out.requests) {
        Request& r = *find(e.id);
        const std::vector<int32_t>& table = kv_.block_table(e.kv);
        ONECARD_CHECK(r.num_sent_blocks <= static_cast<int64_t>(table.size()),
                      "scheduler: request {}'s KV table shrank from {} to {} blocks", r.id, r.num_sent_blocks,
                      table.size());
        e.new_block_table = r.num_sent_blocks == 0;
        e.block_ids.assign(table.begin() + r.num_sent_blocks, table.end());
        r.num_sent_blocks = static_cast<int64_t>(table.size());
    }
    KvCacheManager::BlockCopies copies = kv_.take_block_copies();
    out.block_spills = std::move(copies.spills);
    out.block_loads = std::move(copies.loads);
    return out;
}

int64_t Scheduler::draft_tokens_for(const Request& r, int64_t budget_left) const {
    // No more drafts than the step budget leaves, than the request may still emit beyond the token
    // it is sure to get, or than its KV can grow by without preempting anyone.
    const int64_t room = r.max_total_tokens - r.num_tokens() - 1;
    const int64_t k = std::min({step_drafts_, budget_left, room});
    if (k <= 0) return 0;
    const int64_t need = r.num_computed_tokens + 1 + k - kv_.n_tokens(r.kv);
    return need <= 0 || kv_.can_extend(r.kv, need) ? k : 0;
}

void Scheduler::accept_draft_tokens(RequestId id, int64_t n) {
    Request* r = find(id);
    if (r == nullptr || r->status != RequestStatus::Running) return;
    ONECARD_CHECK(
        n >= 0 && r->num_computed_tokens + n < r->num_tokens() && kv_.n_tokens(r->kv) >= r->num_computed_tokens + n,
        "scheduler: request {} accepts {} draft tokens at {} computed of {} (KV for {})", id, n, r->num_computed_tokens,
        r->num_tokens(), kv_.n_tokens(r->kv));
    r->num_computed_tokens += n;
}

void Scheduler::update_from_output(const SchedulerOutput& out) {
    for (const auto& e : out.requests) {
        Request* r = find(e.id);
        // The request may have been finished (cancelled) while the batch ran: nothing to advance.
        if (r == nullptr || r->status != RequestStatus::Running) continue;
        ONECARD_CHECK(r->num_computed_tokens == e.start_pos,
                      "scheduler: request {} computed {} tokens, batch started "
                      "at {}",
                      r->id, r->num_computed_tokens, e.start_pos);
        r->num_computed_tokens += e.n_tokens();
        if (!kv_.prefix_caching()) continue;
        kv_.cache_blocks(r->kv, r->block_hashes, r->tokens(), r->num_computed_tokens);
        for (const auto& save : e.save_snapshots) kv_.commit_snapshot(save.id);
    }
}

void Scheduler::finish_request(RequestId id) {
    auto it = requests_.find(id);
    if (it == requests_.end()) return;
    Request* r = it->second.get();
    if (r->status == RequestStatus::Running) {
        kv_.free(r->kv);
        running_.erase(std::find(running_.begin(), running_.end(), r));
    } else {
        waiting_.erase(std::find(waiting_.begin(), waiting_.end(), r));
    }
    finished_since_last_step_.push_back(id);
    requests_.erase(it);
}

void Scheduler::check_integrity() const {
    kv_.check_integrity();
    ONECARD_CHECK(n_running() <= config_.max_num_seqs, "scheduler integrity: {} running > max_num_seqs {}", n_running(),
                  config_.max_num_seqs);
    ONECARD_CHECK(kv_.n_live_sequences() == n_running(), "scheduler integrity: {} live KV sequences but {} running",
                  kv_.n_live_sequences(), n_running());
    ONECARD_CHECK(requests_.size() == running_.size() + waiting_.size(),
                  "scheduler integrity: {} requests but {} running + {} waiting", requests_.size(), running_.size(),
                  waiting_.size());
    for (const Request* r : running_) {
        ONECARD_CHECK(r->status == RequestStatus::Running && r->kv.valid(),
                      "scheduler integrity: running request {} "
                      "without KV",
                      r->id);
        ONECARD_CHECK(kv_.n_tokens(r->kv) >= r->num_computed_tokens,
                      "scheduler integrity: request {} computed {} tokens but holds KV for {}", r->id,
                      r->num_computed_tokens, kv_.n_tokens(r->kv));
        ONECARD_CHECK(r->num_computed_tokens <= r->num_tokens(),
                      "scheduler integrity: request {} computed past its "
                      "tokens",
                      r->id);
    }
    for (const Request* r : waiting_) {
        ONECARD_CHECK(r->status == RequestStatus::Waiting && !r->kv.valid() && r->num_computed_tokens == 0,
                      "scheduler integrity: waiting request {} holds KV or computed tokens", r->id);
    }
}

}  // namespace onecard
