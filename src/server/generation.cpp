#include "server/generation.h"

#include "core/error.h"
#include "engine/engine_core.h"
#include "server/api_error.h"
#include "server/sse.h"

#include <algorithm>
#include <cmath>

namespace onecard::server {

ActiveRequest::ActiveRequest(OpenAIServer::State& s, GenerateRequest request) : s_(s) {
    Engine* engine = s_.engine.load(std::memory_order_acquire);
    if (!s_.ready.load() || s_.draining.load() || engine == nullptr)
        throw ApiError(503, s_.draining ? "the server is shutting down" : "the model is still loading", {},
                       "service_unavailable")
            .with_retry_after(s_.draining ? 30 : 5);
    const int64_t limit = s_.opts.max_num_seqs + s_.opts.max_queued_requests;
    if (s_.inflight.fetch_add(1) >= limit) {
        s_.inflight.fetch_sub(1);
        throw ApiError(429, fmt::format("too many requests: {} are already queued or running", limit), {},
                       "rate_limit_exceeded")
            .with_retry_after(1);
    }
    // --seed (vLLM's): a request without its own seed gets one from the server's seed and its
    // admission number, so a server restarted with the same seed replays the same request order alike.
    if (s_.opts.seed && !request.sampling.seed) {
        uint64_t x = *s_.opts.seed + 0x9E3779B97F4A7C15ull * s_.seed_serial.fetch_add(1);
        x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
        x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
        request.sampling.seed = x ^ (x >> 31);
    }
    n_prompt_ = static_cast<int64_t>(request.prompt_token_ids.size());
    t_start_ = t_last_ = std::chrono::steady_clock::now();
    try {
        stream_ = engine->submit(std::move(request));
    } catch (const Error& e) {
        s_.inflight.fetch_sub(1);
        throw bad_request(e.what());
    } catch (...) {
        s_.inflight.fetch_sub(1);
        throw;
    }
    serial_ = s_.next_serial++;
    std::lock_guard lk(s_.live_mu);
    s_.live[serial_] = stream_;
}

ActiveRequest::~ActiveRequest() {
    if (!finished_) {
        stream_->cancel();
        // Drain to the final event so the engine has released the request (and its KV) before the
        // HTTP thread moves on; the engine answers a cancel within one step.
        std::optional<EngineEvent> last;
        while ((last = stream_->next()))
            if (last->finished()) break;
        record_end("abort", n_prompt_, n_generated_, 0, last ? &last->times : nullptr);
    }
    {
        std::lock_guard lk(s_.live_mu);
        s_.live.erase(serial_);
    }
    s_.inflight.fetch_sub(1);
}

void ActiveRequest::cancel() {
    stream_->cancel();
}

void ActiveRequest::record_end(const std::string& reason, int64_t prompt, int64_t completion, int64_t cached,
                               const RequestTimes* times) {
    if (recorded_) return;
    recorded_ = true;
    // The usage count includes a final EOS/stop token that no event carried: count it now.
    if (completion > n_generated_) s_.metrics.record_generation_tokens(completion - n_generated_);
    auto seconds = [](auto d) { return std::max(0.0, std::chrono::duration<double>(d).count()); };
    RequestTiming t;
    t.e2e_s = seconds(std::chrono::steady_clock::now() - t_start_);
    // The engine's first schedule starts the prefill (vLLM's phases); without it, the admission here.
    const bool scheduled = times != nullptr && times->first_scheduled.has_value();
    if (scheduled) t.queue_s = seconds(*times->first_scheduled - times->queued);
    if (got_first_) {
        t.prefill_s = seconds(t_first_ - (scheduled ? *times->first_scheduled : t_start_));
        t.decode_s = seconds(t_last_ - t_first_);
    }
    s_.metrics.record_finished(reason, prompt, completion, cached, t);
}

std::optional<EngineEvent> ActiveRequest::next() {
    if (finished_) return std::nullopt;
    // A gone client is cancelled here; the blocking read below then takes the Cancelled final event.
    while (client_.known() && !client_gone_) {
        if (client_.gone()) {
            client_gone_ = true;
            cancel();
            log_finish_reason("abort");
            break;
        }
        if (auto ev = stream_->next_for(kClientCheckInterval)) return account(std::move(*ev));
    }
    auto ev = stream_->next();
    if (!ev) {
        finished_ = true;
        return ev;
    }
    return account(std::move(*ev));
}

std::optional<EngineEvent> ActiveRequest::next_for(std::chrono::milliseconds timeout) {
    if (finished_) return std::nullopt;
    auto ev = stream_->next_for(timeout);
    if (!ev) return ev;  // nothing yet: the final event always comes before the stream is done
    return account(std::move(*ev));
}

std::optional<EngineEvent> ActiveRequest::account(EngineEvent e) {
    std::optional<EngineEvent> ev(std::move(e));
    const auto now = std::chrono::steady_clock::now();
    // The first event of a request means its prefill is done: its prompt tokens count from now.
    if (!prompt_counted_) {
        prompt_counted_ = true;
        s_.metrics.record_prompt_tokens(n_prompt_);
    }
    if (!ev->token_ids.empty()) {
        const double dt = std::chrono::duration<double>(now - t_last_).count();
        if (!got_first_) {
            s_.metrics.record_ttft(dt);
            got_first_ = true;
            t_first_ = now;
            for (size_t i = 1; i < ev->token_ids.size(); ++i) s_.metrics.record_inter_token(0.0);
        } else {
            // Tokens that arrive together share the interval.
            const double per = dt / static_cast<double>(ev->token_ids.size());
            for (size_t i = 0; i < ev->token_ids.size(); ++i) s_.metrics.record_inter_token(per);
        }
        t_last_ = now;
        n_generated_ += static_cast<int64_t>(ev->token_ids.size());
        s_.metrics.record_generation_tokens(static_cast<int64_t>(ev->token_ids.size()));
    }
    if (ev->finished()) {
        finished_ = true;
        if (ev->finish_reason == FinishReason::Error && ev->error.rfind(kNonFiniteLogitsError, 0) == 0)
            s_.metrics.record_nonfinite_logits();
        record_end(api_finish_reason(ev->finish_reason), ev->usage.prompt_tokens, ev->usage.completion_tokens,
                   ev->usage.cached_tokens, &ev->times);
    }
    return ev;
}

std::vector<std::shared_ptr<ActiveRequest>> admit_choices(OpenAIServer::State& s,
                                                          const std::vector<std::vector<int32_t>>& prompts,
                                                          const SamplingParams& sampling, int64_t n) {
    const int64_t total = static_cast<int64_t>(prompts.size()) * n;
    if (total > s.opts.max_num_seqs)
        throw bad_request(fmt::format("{} choices ({} prompt(s) x n = {}) exceed --max-num-seqs {}: they could not "
                                      "run together",
                                      total, prompts.size(), n, s.opts.max_num_seqs),
                          "n");
    std::vector<std::shared_ptr<ActiveRequest>> ars;
    for (const auto& prompt : prompts)
        for (int64_t j = 0; j < n; ++j) {
            SamplingParams sp = sampling;
            if (sp.seed) *sp.seed += static_cast<uint64_t>(j);
            ars.push_back(std::make_shared<ActiveRequest>(s, GenerateRequest{prompt, std::move(sp)}));
        }
    return ars;
}

bool interleave_events(std::vector<std::shared_ptr<ActiveRequest>>& ars,
                       const std::function<bool(size_t, const EngineEvent&)>& on_event,
                       const std::function<bool()>& ping) {
    // One request: wait on it alone. Several: poll each briefly in turn, so one choice's tokens never
    // wait behind another's (the engine runs them in the same steps).
    const auto wait = ars.size() == 1 ? kSsePingInterval : std::chrono::milliseconds(5);
    std::vector<bool> done(ars.size(), false);
    size_t n_done = 0;
    auto quiet_since = std::chrono::steady_clock::now();
    while (n_done < ars.size()) {
        bool any = false;
        for (size_t i = 0; i < ars.size(); ++i) {
            if (done[i]) continue;
            std::optional<EngineEvent> ev = ars[i]->next_for(wait);
            if (!ev) {
                if (ars[i]->finished()) {
                    done[i] = true;
                    ++n_done;
                }
                continue;
            }
            any = true;
            if (!on_event(i, *ev)) return false;
            if (ev->finished()) {
                done[i] = true;
                ++n_done;
            }
        }
        const auto now = std::chrono::steady_clock::now();
        if (any) {
            quiet_since = now;
        } else if (now - quiet_since >= kSsePingInterval) {
            if (!ping()) return false;
            quiet_since = now;
        }
    }
    return true;
}

void log_finish_reason(const std::string& reason) {
    access_log_context().fields["finish_reason"] = reason;
}

const char* api_finish_reason(FinishReason r) {
    switch (r) {
        case FinishReason::Stop:
            return "stop";
        case FinishReason::Length:
            return "length";
        case FinishReason::Cancelled:
            return "abort";
        case FinishReason::Error:
            return "error";
        case FinishReason::None:
            break;
    }
    return "";
}

nlohmann::json usage_json(const Usage& u, std::optional<int64_t> reasoning_tokens) {
    nlohmann::json j = {{"prompt_tokens", u.prompt_tokens},
                        {"completion_tokens", u.completion_tokens},
                        {"total_tokens", u.prompt_tokens + u.completion_tokens},
                        {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
    if (reasoning_tokens)
        j["completion_tokens_details"] = {{"reasoning_tokens", std::min(*reasoning_tokens, u.completion_tokens)}};
    return j;
}

namespace {
// -inf is not JSON; vLLM reports -9999.0 for it.
double finite_logprob(float lp) {
    return std::isfinite(lp) ? static_cast<double>(lp) : -9999.0;
}

nlohmann::json token_entry(const Tokenizer& tok, int32_t id, float lp) {
    std::string bytes;
    tok.append_token_bytes(id, false, bytes);
    nlohmann::json b = nlohmann::json::array();
    for (unsigned char c : bytes) b.push_back(static_cast<int>(c));
    const std::vector<int32_t> one{id};
    return {{"token", tok.decode(one)}, {"logprob", finite_logprob(lp)}, {"bytes", std::move(b)}};
}
}  // namespace

nlohmann::json chat_logprobs_json(const Tokenizer& tok, const std::vector<int32_t>& ids,
                                  const std::vector<TokenLogprobs>& lps) {
    nlohmann::json content = nlohmann::json::array();
    for (size_t i = 0; i < ids.size() && i < lps.size(); ++i) {
        nlohmann::json e = token_entry(tok, ids[i], lps[i].sampled.logprob);
        nlohmann::json top = nlohmann::json::array();
        for (const auto& t : lps[i].top) top.push_back(token_entry(tok, t.token, t.logprob));
        e["top_logprobs"] = std::move(top);
        content.push_back(std::move(e));
    }
    return content;
}

void append_completion_logprobs(nlohmann::json& out, const Tokenizer& tok, const std::vector<int32_t>& ids,
                                const std::vector<TokenLogprobs>& lps, size_t& text_offset) {
    if (!out.is_object() || !out.contains("tokens"))
        out = {{"tokens", nlohmann::json::array()},
               {"token_logprobs", nlohmann::json::array()},
               {"top_logprobs", nlohmann::json::array()},
               {"text_offset", nlohmann::json::array()}};
    for (size_t i = 0; i < ids.size() && i < lps.size(); ++i) {
        const std::vector<int32_t> one{ids[i]};
        const std::string text = tok.decode(one);
        out["tokens"].push_back(text);
        out["token_logprobs"].push_back(finite_logprob(lps[i].sampled.logprob));
        nlohmann::json top = nlohmann::json::object();
        for (const auto& t : lps[i].top) {
            const std::vector<int32_t> tid{t.token};
            top[tok.decode(tid)] = finite_logprob(t.logprob);
        }
        out["top_logprobs"].push_back(std::move(top));
        out["text_offset"].push_back(text_offset);
        text_offset += text.size();
    }
}

}  // namespace onecard::server
