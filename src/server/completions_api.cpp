// POST /v1/completions: a text or token-id prompt continued as plain text (no chat template, no
// parsers). Stop strings, logprobs and streaming work as for chat.
#include "core/error.h"
#include "server/api_error.h"
#include "server/generation.h"
#include "server/request_params.h"
#include "server/server_state.h"
#include "server/sse.h"

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

std::vector<int32_t> prompt_ids(const OpenAIServer::State& s, const Json& body, bool add_bos) {
    auto it = body.find("prompt");
    if (it == body.end() || it->is_null()) throw bad_request("'prompt' is required", "prompt");
    const Json* p = &*it;
    const auto vocab = static_cast<int64_t>(s.tokenizer.vocab_size());
    // A one-element batch is the same as its element; larger batches would need n > 1 choices.
    if (p->is_array() && !p->empty() && ((*p)[0].is_string() || (*p)[0].is_array())) {
        if (p->size() != 1) throw bad_request("only one prompt per request is supported", "prompt");
        p = &(*p)[0];
    }
    std::vector<int32_t> ids;
    if (p->is_string()) {
        if (add_bos)
            if (auto bos = s.tokenizer.token_to_id("<｜begin▁of▁sentence｜>")) ids.push_back(*bos);
        auto text = s.tokenizer.encode(p->get<std::string>(), /*allow_special=*/true);
        ids.insert(ids.end(), text.begin(), text.end());
    } else if (p->is_array()) {
        ids = token_ids_of(*p, vocab, "prompt");
    } else {
        throw bad_request("'prompt' must be a string, an array of token ids, or a one-element array of either",
                          "prompt");
    }
    if (ids.empty()) throw bad_request("'prompt' is empty", "prompt");
    return ids;
}

}  // namespace

void handle_completions(OpenAIServer::State& s, const httplib::Request& req, httplib::Response& res) {
    const Json body = parse_body(req.body);
    check_model_field(s, body);
    GenerationOptions gen = parse_generation_options(body, ApiKind::Completion);
    if (auto suffix = body.find("suffix"); suffix != body.end() && !suffix->is_null())
        throw bad_request("suffix is not supported", "suffix");
    std::vector<int32_t> ids = prompt_ids(s, body, opt_bool(body, "add_special_tokens").value_or(true));
    const int64_t n = static_cast<int64_t>(ids.size()), max_len = s.info.max_model_len;
    if (n >= max_len)
        throw bad_request(fmt::format("This model's maximum context length is {} tokens. However, your prompt has {} "
                                      "tokens. Please reduce the length of the prompt.",
                                      max_len, n),
                          "prompt");
    // OpenAI's legacy default is 16 tokens.
    const int64_t max_tokens = gen.max_tokens.value_or(16);
    if (max_tokens > max_len - n)
        throw bad_request(
            fmt::format("max_tokens is {} but the prompt has {} tokens and the maximum context length is {}",
                        max_tokens, n, max_len),
            "max_tokens");
    SamplingParams sp = gen.sampling;
    sp.max_tokens = max_tokens;
    const std::string id = s.new_response_id("cmpl-");
    const int64_t created = static_cast<int64_t>(std::time(nullptr));
    auto& f = access_log_context().fields;
    f["prompt_tokens"] = n;
    f["id"] = id;
    if (s.opts.log_requests_text) f["prompt"] = s.tokenizer.decode(ids);
    auto ar = std::make_shared<ActiveRequest>(s, GenerateRequest{std::move(ids), sp});
    const std::string model = s.info.served_model_name;

    if (!gen.stream) {
        std::string text;
        Json logprobs;
        size_t offset = 0;
        std::optional<EngineEvent> last;
        while (auto ev = ar->next()) {
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
            throw ApiError(503, "the request was cancelled because the server is shutting down").with_retry_after(30);
        }
        if (gen.logprobs && logprobs.is_null())
            logprobs = Json{{"tokens", Json::array()},
                            {"token_logprobs", Json::array()},
                            {"top_logprobs", Json::array()},
                            {"text_offset", Json::array()}};
        Json choice = {{"index", 0},
                       {"text", text},
                       {"logprobs", logprobs},
                       {"finish_reason", api_finish_reason(last->finish_reason)}};
        Json out = {{"id", id},
                    {"object", "text_completion"},
                    {"created", created},
                    {"model", model},
                    {"choices", Json::array({std::move(choice)})},
                    {"usage", Json(usage_json(last->usage))}};
        f["completion_tokens"] = last->usage.completion_tokens;
        f["finish_reason"] = api_finish_reason(last->finish_reason);
        if (s.opts.log_requests_text) f["completion"] = text;
        res.set_content(dump_json(out), "application/json");
        return;
    }

    const bool include_usage = gen.include_usage, want_logprobs = gen.logprobs;
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [&s, ar, id, created, model, include_usage, want_logprobs](size_t, httplib::DataSink& sink) {
            SseWriter w(sink);
            size_t offset = 0;
            std::optional<EngineEvent> last;
            std::string text;
            auto chunk = [&](const std::string& t, Json finish, Json lp) {
                Json c = {{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", model}};
                c["choices"] = Json::array({Json{
                    {"index", 0}, {"text", t}, {"logprobs", std::move(lp)}, {"finish_reason", std::move(finish)}}});
                if (include_usage) c["usage"] = nullptr;
                return c;
            };
            for (;;) {
                std::optional<EngineEvent> ev = ar->next_for(kSsePingInterval);
                if (!ev) {
                    if (ar->finished()) break;
                    if (!w.ping()) {
                        ar->cancel();
                        log_finish_reason("abort");  // the status line already said 200
                        return false;  // client gone while nothing was generated yet
                    }
                    continue;
                }
                text += ev->text_delta;
                Json lp;
                if (want_logprobs && !ev->token_ids.empty()) {
                    nlohmann::json l;
                    append_completion_logprobs(l, s.tokenizer, ev->token_ids, ev->logprobs, offset);
                    lp = Json(l);
                }
                if (!ev->text_delta.empty() || !lp.is_null()) {
                    if (!w.send(chunk(ev->text_delta, nullptr, lp))) {
                        ar->cancel();
                        log_finish_reason("abort");  // the status line already said 200
                        return false;
                    }
                }
                if (ev->finished()) last = std::move(ev);
            }
            if (!last || last->finish_reason == FinishReason::Error) {
                log_finish_reason("error");
                w.send(Json(
                    error_body(500, "generation failed: " + (last ? last->error : std::string("no final event")))));
                w.done();
                return true;
            }
            w.send(chunk("", api_finish_reason(last->finish_reason), nullptr));
            if (include_usage)
                w.send(Json{{"id", id},
                            {"object", "text_completion"},
                            {"created", created},
                            {"model", model},
                            {"choices", Json::array()},
                            {"usage", Json(usage_json(last->usage))}});
            auto& f = access_log_context().fields;
            f["completion_tokens"] = last->usage.completion_tokens;
            f["finish_reason"] = api_finish_reason(last->finish_reason);
            if (s.opts.log_requests_text) f["completion"] = text;
            w.done();
            return w.ok();
        },
        [ar](bool) {});
}

}  // namespace onecard::server
