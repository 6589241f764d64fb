// POST /v1/completions: a text or token-id prompt, or a batch of them, continued as plain text (no
// chat template, no parsers), n choices per prompt, the prompt prepended with echo. Stop strings,
// logprobs and streaming work as for chat.
#include "core/error.h"
#include "server/api_error.h"
#include "server/generation.h"
#include "server/request_params.h"
#include "server/server_state.h"
#include "server/sse.h"

#include <algorithm>
#include <ctime>

namespace onecard::server {

namespace {

std::vector<int32_t> token_ids_of(const Json& arr, int64_t vocab, const char* param) {
    std::vector<int32_t> ids;
    for (const auto& t : arr) {
        if (!t.is_number_integer()) throw bad_request(fmt::format("'{}' token ids must be integers", param), param);
        const int64_t v = t.is_number_unsigned() && t.get<uint64_t>() > INT64_MAX ? -1 : t.get<int64_t>();
        if (v < 0 || v >= vocab)
            throw bad_request(
                fmt::format("'{}' holds token id {} outside the vocabulary [0, {})", param, t.dump(), vocab), param);
        ids.push_back(static_cast<int32_t>(v));
    }
    return ids;
}

// One prompt of a request: its tokens and its text (what echo returns).
struct CompletionPrompt {
    std::vector<int32_t> ids;
    std::string text;
};

// 'prompt': a string, an array of token ids, or a batch (an array of strings or of token-id arrays):
// one choice per prompt (n each), in order.
std::vector<CompletionPrompt> prompts_of(const OpenAIServer::State& s, const Json& body, bool add_bos) {
    auto it = body.find("prompt");
    if (it == body.end() || it->is_null()) throw bad_request("'prompt' is required", "prompt");
    const Json& p = *it;
    const auto vocab = static_cast<int64_t>(s.tokenizer.vocab_size());
    auto one = [&](const Json& q, const std::string& param) {
        CompletionPrompt cp;
        if (q.is_string()) {
            if (add_bos)
                if (auto bos = s.tokenizer.token_to_id("<｜begin▁of▁sentence｜>")) cp.ids.push_back(*bos);
            cp.text = q.get<std::string>();
            auto text = s.tokenizer.encode(cp.text, /*allow_special=*/true);
            cp.ids.insert(cp.ids.end(), text.begin(), text.end());
        } else if (q.is_array()) {
            cp.ids = token_ids_of(q, vocab, "prompt");
            cp.text = s.tokenizer.decode(cp.ids);
        } else {
            throw bad_request(fmt::format("'{}' must be a string or an array of token ids", param), "prompt");
        }
        if (cp.ids.empty()) throw bad_request(fmt::format("'{}' is empty", param), "prompt");
        return cp;
    };
    std::vector<CompletionPrompt> out;
    if (p.is_array() && !p.empty() && (p[0].is_string() || p[0].is_array())) {
        for (size_t i = 0; i < p.size(); ++i) {
            if (p[i].is_string() != p[0].is_string() || p[i].is_array() != p[0].is_array())
                throw bad_request("a batch of prompts must be all strings or all token-id arrays", "prompt");
            out.push_back(one(p[i], fmt::format("prompt[{}]", i)));
        }
    } else if (p.is_string() || p.is_array()) {
        out.push_back(one(p, "prompt"));
    } else {
        throw bad_request("'prompt' must be a string, an array of token ids, or an array of either", "prompt");
    }
    return out;
}

}  // namespace

void handle_completions(OpenAIServer::State& s, const httplib::Request& req, httplib::Response& res) {
    const Json body = parse_body(req.body);
    check_model_field(s, body);
    GenerationOptions gen = parse_generation_options(body, ApiKind::Completion, s.opts.sampling_defaults);
    if (auto suffix = body.find("suffix"); suffix != body.end() && !suffix->is_null())
        throw bad_request("suffix is not supported", "suffix");
    const bool echo = opt_bool(body, "echo").value_or(false);
    // vLLM answers echo + logprobs with the prompt's logprobs too; the engine computes none.
    if (echo && gen.logprobs)
        throw bad_request("echo with logprobs is not supported (the prompt's logprobs are not computed)", "echo");
    std::vector<CompletionPrompt> prompts = prompts_of(s, body, opt_bool(body, "add_special_tokens").value_or(true));
    const int64_t max_len = s.info.max_model_len;
    int64_t n_prompt_tokens = 0, longest = 0;
    for (const auto& cp : prompts) {
        const int64_t n = static_cast<int64_t>(cp.ids.size());
        n_prompt_tokens += n;
        longest = std::max(longest, n);
        if (n >= max_len)
            throw bad_request(
                fmt::format("This model's maximum context length is {} tokens. However, your prompt has {} "
                            "tokens. Please reduce the length of the prompt.",
                            max_len, n),
                "prompt");
    }
    if (gen.max_tokens && *gen.max_tokens > max_len - longest)
        throw bad_request(
            fmt::format("max_tokens is {} but the prompt has {} tokens and the maximum context length is {}",
                        *gen.max_tokens, longest, max_len),
            "max_tokens");
    SamplingParams sp = gen.sampling;
    sp.max_tokens = resolve_max_tokens(gen, max_len - longest);
    const std::string id = s.new_response_id("cmpl-");
    const int64_t created = static_cast<int64_t>(std::time(nullptr));
    auto& f = access_log_context().fields;
    f["prompt_tokens"] = n_prompt_tokens;
    f["id"] = id;
    if (s.opts.log_requests_text) f["prompt"] = prompts.front().text;
    std::vector<std::vector<int32_t>> prompt_ids;
    for (const auto& cp : prompts) prompt_ids.push_back(cp.ids);
    const int64_t n = gen.n;
    std::vector<std::shared_ptr<ActiveRequest>> ars = admit_choices(s, prompt_ids, sp, n);
    // What each choice starts with: its prompt's text when echoing.
    std::vector<std::string> echoed(ars.size());
    if (echo)
        for (size_t i = 0; i < ars.size(); ++i) echoed[i] = prompts[i / static_cast<size_t>(n)].text;
    const std::string model = s.info.served_model_name;
    // Usage as vLLM counts it: every prompt once, every choice's completion.
    auto total_usage = [n_prompt_tokens](const std::vector<EngineEvent>& lasts) {
        Usage u = lasts.front().usage;
        u.prompt_tokens = n_prompt_tokens;
        u.completion_tokens = 0;
        for (const auto& e : lasts) u.completion_tokens += e.usage.completion_tokens;
        return usage_json(u);
    };

    if (!gen.stream) {
        // Nothing is written before the result: the connection itself says when the client left.
        const ClientConnection client = ClientConnection::of(req);
        for (auto& ar : ars) ar->watch_client(client);
        Json choices = Json::array();
        std::vector<EngineEvent> lasts;
        for (size_t i = 0; i < ars.size(); ++i) {
            std::string text = echoed[i];
            Json logprobs;
            size_t offset = 0;
            std::optional<EngineEvent> last;
            while (auto ev = ars[i]->next()) {
                text += ev->text_delta;
                if (gen.logprobs) {
                    nlohmann::json lp = logprobs.is_null() ? nlohmann::json() : nlohmann::json(logprobs);
                    append_completion_logprobs(lp, s.tokenizer, ev->token_ids, ev->logprobs, offset);
                    logprobs = Json(lp);
                }
                if (ev->finished()) last = std::move(ev);
            }
            if (!last || last->finish_reason == FinishReason::Error) {
                log_finish_reason("error");
                throw ApiError(500, "generation failed: " + (last ? last->error : std::string("no final event")));
            }
            if (last->finish_reason == FinishReason::Cancelled) {
                log_finish_reason("abort");
                throw ApiError(503, ars[i]->client_gone()
                                        ? "the client closed the connection"
                                        : "the request was cancelled because the server is shutting down")
                    .with_retry_after(30);
            }
            if (gen.logprobs && logprobs.is_null())
                logprobs = Json{{"tokens", Json::array()},
                                {"token_logprobs", Json::array()},
                                {"top_logprobs", Json::array()},
                                {"text_offset", Json::array()}};
            choices.push_back(Json{{"index", i},
                                   {"text", text},
                                   {"logprobs", logprobs},
                                   {"finish_reason", api_finish_reason(last->finish_reason)}});
            if (i == 0 && s.opts.log_requests_text) f["completion"] = text;
            lasts.push_back(std::move(*last));
        }
        Json out = {{"id", id},       {"object", "text_completion"},   {"created", created},
                    {"model", model}, {"choices", std::move(choices)}, {"usage", Json(total_usage(lasts))}};
        f["completion_tokens"] = out["usage"]["completion_tokens"];
        f["finish_reason"] = out["choices"][0]["finish_reason"];
        res.set_content(dump_json(out), "application/json");
        return;
    }

    const bool include_usage = gen.include_usage, want_logprobs = gen.logprobs;
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [&s, ars, echoed, id, created, model, include_usage, want_logprobs, total_usage](
            size_t, httplib::DataSink& sink) mutable {
            SseWriter w(sink);
            std::vector<size_t> offsets(ars.size(), 0);
            std::vector<std::optional<EngineEvent>> lasts(ars.size());
            std::vector<std::string> texts = echoed;
            auto chunk = [&](size_t index, const std::string& t, Json finish, Json lp) {
                Json c = {{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", model}};
                c["choices"] = Json::array({Json{
                    {"index", index}, {"text", t}, {"logprobs", std::move(lp)}, {"finish_reason", std::move(finish)}}});
                if (include_usage) c["usage"] = nullptr;
                return c;
            };
            auto gone = [&] {
                for (auto& ar : ars) ar->cancel();
                log_finish_reason("abort");  // the status line already said 200
                return false;
            };
            // Echo: each choice's stream starts with its prompt.
            for (size_t i = 0; i < ars.size(); ++i)
                if (!echoed[i].empty() && !w.send(chunk(i, echoed[i], nullptr, nullptr))) return gone();
            const bool all = interleave_events(
                ars,
                [&](size_t i, const EngineEvent& ev) {
                    texts[i] += ev.text_delta;
                    Json lp;
                    if (want_logprobs && !ev.token_ids.empty()) {
                        nlohmann::json l;
                        append_completion_logprobs(l, s.tokenizer, ev.token_ids, ev.logprobs, offsets[i]);
                        lp = Json(l);
                    }
                    if (!ev.text_delta.empty() || !lp.is_null())
                        if (!w.send(chunk(i, ev.text_delta, nullptr, lp))) return false;
                    if (!ev.finished()) return true;
                    lasts[i] = ev;
                    if (ev.finish_reason == FinishReason::Error) return true;
                    return w.send(chunk(i, "", api_finish_reason(ev.finish_reason), nullptr));
                },
                [&w] { return w.ping(); });
            if (!all) return gone();
            for (const auto& last : lasts)
                if (!last || last->finish_reason == FinishReason::Error) {
                    log_finish_reason("error");
                    w.send(Json(
                        error_body(500, "generation failed: " + (last ? last->error : std::string("no final event")))));
                    w.done();
                    return true;
                }
            std::vector<EngineEvent> finals;
            for (auto& last : lasts) finals.push_back(std::move(*last));
            if (include_usage)
                w.send(Json{{"id", id},
                            {"object", "text_completion"},
                            {"created", created},
                            {"model", model},
                            {"choices", Json::array()},
                            {"usage", Json(total_usage(finals))}});
            auto& f = access_log_context().fields;
            int64_t n_completion = 0;
            for (const auto& e : finals) n_completion += e.usage.completion_tokens;
            f["completion_tokens"] = n_completion;
            f["finish_reason"] = api_finish_reason(finals.front().finish_reason);
            if (s.opts.log_requests_text) f["completion"] = texts.front();
            w.done();
            return w.ok();
        },
        [](bool) {});
}

}  // namespace onecard::server
