#include "engine/engine_core.h"

#include "core/error.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>

namespace onecard {

const char* finish_reason_name(FinishReason r) {
    switch (r) {
        case FinishReason::Stop:
            return "stop";
        case FinishReason::Length:
            return "length";
        case FinishReason::Cancelled:
            return "cancelled";
        case FinishReason::Error:
            return "error";
        case FinishReason::None:
            break;
    }
    return "";
}

int64_t kv_ring_spare(const SpeculativeConfig& speculative) {
    return speculative.enabled() ? speculative.num_speculative_tokens : 0;
}

KvCacheSpec make_engine_kv_spec(const ModelRunner& runner, const EngineConfig& config) {
    KvModelShape shape = runner.kv_model_shape();
    shape.ring_spare = kv_ring_spare(config.speculative);
    return make_kv_cache_spec(shape, config.kv_block_size);
}

EngineCore::EngineCore(const EngineConfig& config, std::unique_ptr<ModelRunner> runner)
    : config_(config), runner_(std::move(runner)), seed_rng_(std::random_device{}()) {
    ONECARD_CHECK(runner_ != nullptr, "engine: no model runner");
    vocab_size_ = runner_->vocab_size();
    max_model_len_ = config_.max_model_len > 0 ? std::min(config_.max_model_len, runner_->max_model_len())
                                               : runner_->max_model_len();
    ONECARD_CHECK(max_model_len_ > 1, "engine: max_model_len {} too small", max_model_len_);
    const SpeculativeConfig& sc = config_.speculative;
    ONECARD_CHECK(sc.method.empty() || (sc.num_speculative_tokens >= 1 && sc.num_speculative_tokens <= 16),
                  "engine: speculative decoding needs num_speculative_tokens in [1, 16], got {}",
                  sc.num_speculative_tokens);
    ONECARD_CHECK(!sc.enabled() || runner_->supports_speculation(sc.method),
                  "engine: speculative decoding method '{}' is not supported by this model runner (the CPU runner "
                  "supports 'mtp' for checkpoints with an mtp.0 block and 'dspark' for 0731 checkpoints; the CUDA "
                  "runner the one it was built with)",
                  sc.method);
    KvCacheSpec spec = make_engine_kv_spec(*runner_, config_);
    const KvPoolSize size = plan_kv_pool(spec, config_.kv_cache_bytes, config_.max_num_seqs);
    PrefixCacheConfig prefix;
    // Prefix-cache snapshots do not carry the draft model's state, so the two are not combined.
    prefix.enabled = config_.enable_prefix_caching && runner_->supports_prefix_caching() && !sc.enabled();
    if (prefix.enabled) {
        const int64_t snapshot_bytes = runner_->prefix_snapshot_bytes(spec);
        const int64_t budget =
            config_.prefix_snapshot_bytes >= 0 ? config_.prefix_snapshot_bytes : config_.kv_cache_bytes / 4;
        prefix.max_snapshots = snapshot_bytes > 0 ? budget / snapshot_bytes : 0;
        prefix.snapshot_bytes = std::max<int64_t>(snapshot_bytes, 1);
        ONECARD_CHECK(config_.kv_offload_bytes >= 0, "engine: kv_offload_bytes {} is negative",
                      config_.kv_offload_bytes);
        prefix.max_host_blocks = config_.kv_offload_bytes / spec.block_bytes;
        if (!config_.kv_disk_dir.empty()) {
            ONECARD_CHECK(prefix.max_host_blocks > 0 && config_.kv_disk_bytes > 0,
                          "engine: a disk KV tier ({}) needs kv_offload_bytes and kv_disk_bytes > 0",
                          config_.kv_disk_dir);
            KvDiskStoreOptions d;
            d.dir = config_.kv_disk_dir;
            d.max_bytes = config_.kv_disk_bytes;
            // What the bytes mean: the model, the KV layout and the runner's snapshot format.
            d.layout_fingerprint = kv_layout_fingerprint(spec, snapshot_bytes, config_.kv_disk_model_id);
            prefix.disk = d;
        }
    }
    kv_ = std::make_unique<KvCacheManager>(std::move(spec), size, prefix);
    runner_->bind_kv_pool(kv_->spec(), size);
    if (const KvHostMemory* host = kv_->host_memory()) runner_->bind_host_tier(*host);
    if (sc.enabled()) {
        runner_->enable_speculation(sc);
        spec_counters_.accepted_per_pos.assign(static_cast<size_t>(sc.num_speculative_tokens), 0);
    }
    SchedulerConfig sched{config_.max_num_batched_tokens, config_.long_prefill_token_threshold, config_.max_num_seqs};
    sched.snapshots_inside_chunks = runner_->prefix_snapshots_inside_chunks();
    sched.new_requests_first = config_.new_requests_first;
    sched.num_speculative_tokens = sc.enabled() ? sc.num_speculative_tokens : 0;
    scheduler_ = std::make_unique<Scheduler>(sched, *kv_);
    if (sc.enabled()) {
        SpecPolicyConfig pc;
        pc.max_drafts = sc.num_speculative_tokens;
        pc.length = sc.fixed_draft_length ? DraftLength::Fixed : DraftLength::Adaptive;
        pc.disable_by_batch_size = sc.disable_by_batch_size;
        spec_policy_ = std::make_unique<SpecPolicy>(pc);
        scheduler_->set_spec_policy(spec_policy_.get());
    }
}

void EngineCore::validate(const GenerateRequest& req) const {
    ONECARD_CHECK(!req.prompt_token_ids.empty(), "request: prompt_token_ids is empty");
    for (int32_t t : req.prompt_token_ids)
        ONECARD_CHECK(t >= 0 && t < vocab_size_, "request: prompt token {} outside the vocabulary [0, {})", t,
                      vocab_size_);
    ONECARD_CHECK(static_cast<int64_t>(req.prompt_token_ids.size()) < max_model_len_,
                  "request: prompt of {} tokens leaves no room under max_model_len {}", req.prompt_token_ids.size(),
                  max_model_len_);
    validate_sampling_params(req.sampling, vocab_size_);
    ONECARD_CHECK(req.sampling.stop.empty() || config_.make_text_decoder,
                  "request: stop strings need a tokenizer (the engine has no text decoder)");
    check_fits_kv_pool(
        max_total_tokens(static_cast<int64_t>(req.prompt_token_ids.size()), req.sampling.max_tokens, max_model_len_),
        *kv_);
}

void EngineCore::add_request(RequestId id, GenerateRequest gr) {
    validate(gr);
    add_validated_request(id, std::move(gr));
}

void EngineCore::add_validated_request(RequestId id, GenerateRequest gr) {
    std::unique_ptr<TokenConstraint> c;
    if (gr.sampling.make_constraint) {
        c = gr.sampling.make_constraint();
        ONECARD_CHECK(c != nullptr, "sampling.make_constraint returned no constraint");
    }
    admit(id, std::move(gr), std::move(c));
}

TokenConstraint* EngineCore::constraint_of(RequestId id) {
    auto it = outputs_.find(id);
    return it == outputs_.end() ? nullptr : it->second.constraint.get();
}

void EngineCore::add_request(RequestId id, GenerateRequest gr, std::unique_ptr<TokenConstraint> constraint) {
    validate(gr);
    admit(id, std::move(gr), std::move(constraint));
}

void EngineCore::admit(RequestId id, GenerateRequest gr, std::unique_ptr<TokenConstraint> constraint) {
    auto req = std::make_unique<Request>();
    req->id = id;
    req->prompt = std::move(gr.prompt_token_ids);
    req->params = std::move(gr.sampling);
    req->seed = req->params.seed ? *req->params.seed : seed_rng_();
    req->times.queued = std::chrono::steady_clock::now();
    req->max_total_tokens = max_total_tokens(req->num_prompt_tokens(), req->params.max_tokens, max_model_len_);
    req->output.reserve(static_cast<size_t>(std::min<int64_t>(req->max_total_tokens - req->num_prompt_tokens(), 4096)));
    OutputState os;
    if (config_.make_text_decoder) os.decoder = config_.make_text_decoder();
    if (!req->params.stop.empty()) os.stop_checker.emplace(req->params.stop, req->params.include_stop_str_in_output);
    os.constraint = std::move(constraint);
    scheduler_->add_request(std::move(req));
    outputs_[id] = std::move(os);
}

EngineEvent EngineCore::final_event(const Request& req, FinishReason reason) const {
    EngineEvent ev;
    ev.request_id = req.id;
    ev.finish_reason = reason;
    ev.usage.prompt_tokens = req.num_prompt_tokens();
    ev.usage.completion_tokens = static_cast<int64_t>(req.output.size());
    ev.usage.cached_tokens = std::max<int64_t>(req.num_cached_tokens, 0);
    ev.usage.n_preemptions = req.n_preemptions;
    ev.times = req.times;
    return ev;
}

std::optional<EngineEvent> EngineCore::abort_request(RequestId id) {
    Request* req = scheduler_->find(id);
    if (req == nullptr) return std::nullopt;
    EngineEvent ev = final_event(*req, FinishReason::Cancelled);
    scheduler_->finish_request(id);
    outputs_.erase(id);
    return ev;
}

void EngineCore::set_paused(RequestId id, bool paused) {
    if (Request* req = scheduler_->find(id)) req->paused = paused;
}

void EngineCore::finish_text(Request& req, EngineEvent& ev) {
    OutputState& os = outputs_[req.id];
    std::string tail = os.decoder ? os.decoder->flush() : std::string();
    if (os.stop_checker) {
        if (ev.stop_string.empty() && !tail.empty()) {
            auto r = os.stop_checker->push(tail);
            ev.text_delta += r.text;
            if (r.stopped) {
                ev.finish_reason = FinishReason::Stop;
                ev.stop_string = r.matched;
                return;
            }
        }
        if (ev.stop_string.empty()) ev.text_delta += os.stop_checker->flush();
    } else {
        ev.text_delta += tail;
    }
}

bool EngineCore::holds_back_stop_tokens(const Request& req) const {
    return static_cast<int64_t>(req.output.size()) < req.params.min_tokens;
}

bool EngineCore::process_token(Request& req, const SampleResult& s, EngineEvent& ev) {
    const SamplingParams& p = req.params;
    const int32_t t = s.token;
    req.output.push_back(t);
    const bool is_eos = !p.ignore_eos && config_.eos_token_id >= 0 && t == config_.eos_token_id;
    const bool is_stop_id = std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), t) != p.stop_token_ids.end();
    FinishReason reason = FinishReason::None;
    if (is_eos || is_stop_id) {
        reason = FinishReason::Stop;  // the stop token itself is counted in usage but not emitted
        ev.stop_token = t;
    } else {
        ev.token_ids.push_back(t);
        if (s.logprobs) ev.logprobs.push_back(*s.logprobs);
        OutputState& os = outputs_[req.id];
        if (os.decoder) {
            std::string delta = os.decoder->push(t);
            if (os.stop_checker) {
                auto r = os.stop_checker->push(delta);
                ev.text_delta += r.text;
                if (r.stopped) {
                    reason = FinishReason::Stop;
                    ev.stop_string = r.matched;
                }
            } else {
                ev.text_delta += delta;
            }
        }
    }
    // Length: the sequence reached the total admission computed (max_tokens or max_model_len, whichever is first).
    if (reason == FinishReason::None && req.num_tokens() >= req.max_total_tokens) reason = FinishReason::Length;
    if (reason == FinishReason::None) return false;
    ev.finish_reason = reason;
    finish_text(req, ev);
    const EngineEvent fin = final_event(req, ev.finish_reason);
    ev.usage = fin.usage;
    ev.times = fin.times;
    return true;
}

void EngineCore::fail_batch(const SchedulerOutput& out, const std::string& what, std::vector<EngineEvent>& events) {
    for (const auto& e : out.requests) {
        Request* req = scheduler_->find(e.id);
        if (req == nullptr) continue;
        EngineEvent ev = final_event(*req, FinishReason::Error);
        ev.error = what;
        events.push_back(std::move(ev));
        scheduler_->finish_request(e.id);
        outputs_.erase(e.id);
    }
}

EngineEvent EngineCore::fail_request(Request& req, std::string what) {
    EngineEvent ev = final_event(req, FinishReason::Error);
    ev.error = std::move(what);
    scheduler_->finish_request(req.id);
    outputs_.erase(ev.request_id);
    return ev;
}

int32_t EngineCore::mask_eos(const Request& req) const {
    const bool usable = !req.params.ignore_eos && config_.eos_token_id >= 0 && config_.eos_token_id < vocab_size_;
    return usable ? config_.eos_token_id : -1;
}

std::string EngineCore::no_token_reason(const TokenConstraint& c) {
    return c.can_terminate()
               ? "constraint: the constrained output is complete but EOS cannot be sampled (ignore_eos or "
                 "no eos_token_id)"
               : "constraint: no token of the vocabulary continues the constrained output";
}

void EngineCore::build_row_mask(RequestId id, std::span<uint32_t> mask) {
    const Request* req = scheduler_->find(id);
    TokenConstraint* c = constraint_of(id);
    ONECARD_CHECK(req != nullptr && c != nullptr, "engine: token mask asked for request {}, which has no constraint",
                  id);
    RowMask& m = row_masks_[id];
    ++m.n_builds;
    m.n_allowed = build_token_mask(*c, mask, vocab_size_, mask_eos(*req));
    ++n_masks_built_;
}

std::optional<SampleResult> EngineCore::sample_host(Request& req, std::span<const float> row, std::string& reason) {
    TokenConstraint* constraint = constraint_of(req.id);
    if (!holds_back_stop_tokens(req) && constraint == nullptr)
        return sampler_.sample(row, req.params, req.prompt, req.output, req.seed);
    masked_row_.assign(row.begin(), row.end());
    const int32_t eos = mask_eos(req);
    if (constraint != nullptr) {
        const int64_t n_allowed = apply_token_constraint(*constraint, masked_row_, eos, constraint_mask_);
        ++n_masks_built_;
        if (n_allowed == 0) {
            reason = no_token_reason(*constraint);
            return std::nullopt;
        }
    }
    if (holds_back_stop_tokens(req)) {
        // min_tokens: EOS and the stop ids get no probability until enough tokens are out.
        if (eos >= 0) masked_row_[static_cast<size_t>(eos)] = -INFINITY;
        for (int32_t t : req.params.stop_token_ids)
            if (t >= 0 && t < vocab_size_) masked_row_[static_cast<size_t>(t)] = -INFINITY;
        if (constraint != nullptr &&
            std::none_of(masked_row_.begin(), masked_row_.end(), [](float x) { return x > -INFINITY; })) {
            reason = "constraint: the constrained output is complete before min_tokens";
            return std::nullopt;
        }
    }
    return sampler_.sample(masked_row_, req.params, req.prompt, req.output, req.seed);
}

namespace {
// The first non-finite entry of a row, or -1.
int64_t first_non_finite(std::span<const float> row) {
    for (size_t i = 0; i < row.size(); ++i)
        if (!std::isfinite(row[i])) return static_cast<int64_t>(i);
    return -1;
}
}  // namespace

void EngineCore::check_spec_rows(const SchedulerOutput& out, const RunnerOutput& result) const {
    if (result.spec.empty()) return;
    ONECARD_CHECK(result.spec.size() == result.row_ids.size() && result.tokens.size() == result.row_ids.size(),
                  "runner: {} speculative entries and {} tokens for {} rows", result.spec.size(), result.tokens.size(),
                  result.row_ids.size());
    size_t i = 0;
    for (const auto& e : out.requests) {
        if (!e.sample) continue;
        const RunnerOutput::SpecRow& r = result.spec[i];
        ONECARD_CHECK(r.n_drafts == 0 ||
                          (r.n_drafts <= e.n_draft_tokens && !r.tokens.empty() &&
                           static_cast<int64_t>(r.tokens.size()) <= r.n_drafts + 1 && r.tokens[0] == result.tokens[i]),
                      "runner: request {} verified {} drafts ({} allowed) and emitted {} tokens", e.id, r.n_drafts,
                      e.n_draft_tokens, r.tokens.size());
        for (int32_t t : r.tokens)
            ONECARD_CHECK(t >= 0 && t < vocab_size_, "runner: speculative token {} for request {} (vocab {})", t, e.id,
                          vocab_size_);
        ++i;
    }
}

bool EngineCore::process_spec_row(Request& req, const RunnerOutput::SpecRow& row, EngineEvent& ev, bool finished) {
    // The first token went through the usual path; the rest are the same kind of token (drawn with
    // the row's RowSampling), one after another until the request ends.
    int64_t n_more = 0;
    for (size_t t = 1; t < row.tokens.size() && !finished; ++t, ++n_more)
        finished = process_token(req, SampleResult{row.tokens[t], std::nullopt}, ev);
    if (!finished) scheduler_->accept_draft_tokens(req.id, n_more);
    const auto n_accepted = static_cast<int64_t>(row.tokens.size()) - 1;
    ++spec_counters_.n_drafts;
    spec_counters_.n_draft_tokens += row.n_drafts;
    spec_counters_.n_accepted_tokens += n_accepted;
    if (spec_policy_) spec_policy_->record_verify(row.n_drafts, n_accepted);
    for (int64_t j = 0; j < n_accepted && j < static_cast<int64_t>(spec_counters_.accepted_per_pos.size()); ++j)
        ++spec_counters_.accepted_per_pos[static_cast<size_t>(j)];
    return finished;
}

std::vector<EngineEvent> EngineCore::step() {
    std::vector<EngineEvent> events;
    const auto t_start = std::chrono::steady_clock::now();
    SchedulerOutput out = scheduler_->schedule();
    last_step_scheduled_ = !out.empty();
    if (out.empty() && out.finished_ids.empty() && out.preempted_ids.empty()) {
        last_output_ = std::move(out);
        return events;
    }
    ++n_steps_;
    const auto now = std::chrono::steady_clock::now();
    auto seconds = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
    last_timing_ = StepTiming{};
    last_timing_.schedule_s = seconds(t_start, now);
    last_timing_.rows = static_cast<int64_t>(out.requests.size());
    last_timing_.block_copies = static_cast<int64_t>(out.block_spills.size() + out.block_loads.size());
    for (const auto& e : out.requests) {
        last_timing_.tokens += e.n_tokens();
        if (e.n_tokens() > 1) {
            ++last_timing_.prompt_rows;
            last_timing_.prompt_tokens += e.n_tokens();
        }
        last_timing_.max_position = std::max(last_timing_.max_position, e.start_pos + e.n_tokens() - 1);
        last_timing_.snapshots += static_cast<int64_t>(e.save_snapshots.size());
    }
    for (const auto& e : out.requests)
        if (Request* req = scheduler_->find(e.id); req != nullptr && !req->times.first_scheduled)
            req->times.first_scheduled = now;
    // Rows whose sampling needs nothing of the host (no penalties, logit_bias, logprobs or min_tokens) may
    // be sampled by the runner on its device; it draws with the same (seed, counter) as Sampler, so the
    // choice does not change which token a request gets. A constrained row also carries a callback
    // for its token mask: the runner calls it once the forward is launched, so the grammar's mask is
    // built on this thread while the device computes the logits (see RowSampling::fill_mask).
    row_masks_.clear();
    // Drafts (speculative decoding) only for rows the runner samples itself without a mask: the
    // verification draws the emitted tokens with the row's RowSampling.
    for (auto& e : out.requests) {
        const int64_t drafts = e.n_draft_tokens;
        e.n_draft_tokens = 0;
        const Request* req = e.sample ? scheduler_->find(e.id) : nullptr;
        if (req == nullptr) continue;
        const SamplingParams& p = req->params;
        if (needs_host_sampling(p) || holds_back_stop_tokens(*req)) continue;
        e.sampling = RowSampling{p.temperature, p.top_k, p.top_p, p.min_p, req->seed, req->output.size(), {}};
        if (constraint_of(e.id) != nullptr)
            e.sampling->fill_mask = [this, id = e.id](std::span<uint32_t> mask) { build_row_mask(id, mask); };
        else
            e.n_draft_tokens = drafts;
    }
    RunnerOutput result;
    auto t_outputs = std::chrono::steady_clock::now();
    try {
        const auto t0 = std::chrono::steady_clock::now();
        result = runner_->execute(out);
        t_outputs = std::chrono::steady_clock::now();
        last_timing_.execute_s = seconds(t0, t_outputs);
        if (spec_policy_) {  // the step cost the draft-length choice weighs (engine/spec_policy.h)
            int64_t n_tokens = 0;
            for (const auto& e : out.requests) n_tokens += e.n_tokens() + e.n_draft_tokens;
            spec_policy_->record_step(n_tokens,
                                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        size_t n_sample = 0;
        for (const auto& e : out.requests) {
            if (!e.sample) continue;
            ONECARD_CHECK(n_sample < result.row_ids.size() && result.row_ids[n_sample] == e.id,
                          "runner: logits row {} is not for request {}", n_sample, e.id);
            if (!result.tokens.empty() && n_sample < result.tokens.size() && result.tokens[n_sample] >= 0)
                ONECARD_CHECK(e.sampling && result.tokens[n_sample] < vocab_size_,
                              "runner: sampled token {} for request {} (vocab {}, device sampling {})",
                              result.tokens[n_sample], e.id, vocab_size_, e.sampling ? "allowed" : "not allowed");
            ++n_sample;
        }
        check_spec_rows(out, result);
        ONECARD_CHECK(n_sample == result.row_ids.size() && result.vocab_size == vocab_size_ &&
                          (result.tokens.empty() || result.tokens.size() == n_sample) &&
                          result.logits.size() == result.n_logits_rows() * static_cast<size_t>(vocab_size_),
                      "runner: returned {} rows ({} tokens, {} floats of logits, width {}) for {} sampled requests "
                      "(vocab {})",
                      result.row_ids.size(), result.tokens.size(), result.logits.size(), result.vocab_size, n_sample,
                      vocab_size_);
    } catch (const std::exception& e) {
        fail_batch(out, e.what(), events);
        last_output_ = std::move(out);
        return events;
    }
    scheduler_->update_from_output(out);
    size_t j = 0;  // rows that came as logits
    for (size_t i = 0; i < result.row_ids.size(); ++i) {
        const bool on_runner = !result.tokens.empty() && result.tokens[i] >= 0;
        const float* logits = on_runner ? nullptr : result.row(j++);
        Request* req = scheduler_->find(result.row_ids[i]);
        if (req == nullptr) continue;
        SampleResult s;
        if (on_runner) {
            s.token = result.tokens[i];
            if (const TokenConstraint* c = constraint_of(req->id)) {
                // The runner drew from the mask it got from build_row_mask; an empty mask means no
                // token was allowed (the drawn id is meaningless), as on the host path.
                const auto m = row_masks_.find(req->id);
                if (m == row_masks_.end() || m->second.n_builds != 1) {
                    events.push_back(fail_request(
                        *req, fmt::format("runner: sampled constrained request {} with its token mask built {} times "
                                          "(must be once)",
                                          req->id, m == row_masks_.end() ? 0 : m->second.n_builds)));
                    continue;
                }
                if (m->second.n_allowed == 0) {
                    events.push_back(fail_request(*req, no_token_reason(*c)));
                    continue;
                }
            }
        } else {
            const std::span<const float> row(logits, static_cast<size_t>(vocab_size_));
            // A NaN/Inf row means the forward pass went wrong for this sequence (overflow, bad
            // weights, a kernel bug): sampling it would emit an arbitrary token as if it were real.
            if (const int64_t bad = first_non_finite(row); bad >= 0) {
                events.push_back(fail_request(
                    *req, fmt::format("{} from the model for output token {} (vocabulary entry {} is {}); the "
                                      "request was stopped",
                                      kNonFiniteLogitsError, req->output.size(), bad, row[static_cast<size_t>(bad)])));
                continue;
            }
            std::string reason;
            std::optional<SampleResult> drawn = sample_host(*req, row, reason);
            if (!drawn) {
                events.push_back(fail_request(*req, std::move(reason)));
                continue;
            }
            s = std::move(*drawn);
        }
        TokenConstraint* constraint = constraint_of(req->id);
        const bool is_eos = config_.eos_token_id >= 0 && s.token == config_.eos_token_id;
        if (constraint != nullptr && !is_eos && !constraint->accept(s.token)) {
            events.push_back(
                fail_request(*req, fmt::format("constraint: sampled token {} is outside its mask (output token {})",
                                               s.token, req->output.size())));
            continue;
        }
        EngineEvent ev;
        ev.request_id = req->id;
        bool finished = process_token(*req, s, ev);
        if (!result.spec.empty() && result.spec[i].n_drafts > 0)
            finished = process_spec_row(*req, result.spec[i], ev, finished);
        events.push_back(std::move(ev));
        if (finished) {
            scheduler_->finish_request(req->id);
            outputs_.erase(events.back().request_id);
        }
    }
    last_timing_.outputs_s = seconds(t_outputs, std::chrono::steady_clock::now());
    last_output_ = std::move(out);
    return events;
}

}  // namespace onecard
