// POST /v1/chat/completions: render the DeepSeek-V4 prompt, generate through the engine, split the
// output into reasoning / content / DSML tool calls with the streaming parsers. The validation,
// rendering and generation loop live in chat_pipeline.cpp (shared with /v1/responses and /v1/messages);
// this file maps them onto chat-completions objects and chunks.
//
// tool_choice "required" or a named function is forced by the DSML grammar during generation
// (structured_output.h); a completion that still does not follow it (only possible when it ran out of
// max_tokens, or thinking never ended) ends with a server_error (500, code tool_choice_not_followed;
// in a stream, an error event before [DONE]).
#include "core/error.h"
#include "server/api_error.h"
#include "server/chat_pipeline.h"
#include "server/generation.h"
#include "server/request_params.h"
#include "server/server_state.h"
#include "server/sse.h"

#include <ctime>

namespace onecard::server {

namespace {

// Folds parser events into one chunk delta per run of the same kind (content, reasoning, tool calls).
Json deltas_for(const std::vector<ParseEvent>& events, bool parse_tools) {
    Json deltas = Json::array();
    for (const auto& ev : events) {
        Json d;
        switch (ev.kind) {
            case ParseEventKind::Content:
                d["content"] = ev.text;
                break;
            case ParseEventKind::Reasoning:
                d["reasoning_content"] = ev.text;
                break;
            case ParseEventKind::ToolCallBegin:
                if (!parse_tools) continue;
                d["tool_calls"] = Json::array({Json{{"index", ev.index},
                                                    {"id", ev.id},
                                                    {"type", "function"},
                                                    {"function", Json{{"name", ev.name}, {"arguments", ""}}}}});
                break;
            case ParseEventKind::ToolCallArgs:
                if (!parse_tools) continue;
                d["tool_calls"] = Json::array({Json{{"index", ev.index}, {"function", Json{{"arguments", ev.text}}}}});
                break;
            case ParseEventKind::ToolCallEnd:
                continue;
        }
        if (ev.kind == ParseEventKind::Content || ev.kind == ParseEventKind::Reasoning) {
            const char* key = ev.kind == ParseEventKind::Content ? "content" : "reasoning_content";
            if (!deltas.empty() && deltas.back().contains(key) && deltas.back().size() == 1) {
                deltas.back()[key] = deltas.back()[key].get<std::string>() + ev.text;
                continue;
            }
            if (ev.text.empty()) continue;
        }
        deltas.push_back(std::move(d));
    }
    return deltas;
}

std::string finish_reason_of(const ChatRequest& cr, const EngineEvent& ev, const ParsedCompletion& pc) {
    if (ev.finish_reason == FinishReason::Stop && cr.parse_tools && !pc.tool_calls.empty()) return "tool_calls";
    return api_finish_reason(ev.finish_reason);
}

}  // namespace

void handle_chat_completions(OpenAIServer::State& s, const httplib::Request& req, httplib::Response& res) {
    const Json body = parse_body(req.body);
    PreparedChat p = prepare_chat(s, body);
    const std::string id = s.new_response_id("chatcmpl-");
    const int64_t created = static_cast<int64_t>(std::time(nullptr));
    const ChatRequest& cr = p.chat;
    const int64_t n = cr.gen.n;
    // Tool-call ids are unique in the response: choice j > 0 gets its own prefix.
    std::vector<ReasoningParserOptions> popts;
    for (int64_t j = 0; j < n; ++j)
        popts.push_back(parser_options(p, "call_" + id.substr(9, 12) + "_" + (j == 0 ? "" : std::to_string(j) + "_")));
    std::vector<std::shared_ptr<ActiveRequest>> ars = admit_choices(s, {p.ids}, p.sampling, n);
    access_log_context().fields["id"] = id;
    // Usage as OpenAI and vLLM count it for n choices: the prompt once, the completions summed.
    auto total_usage = [](const std::vector<ChatOutcome>& os) {
        Usage u = os.front().last->usage;
        int64_t reasoning = 0;
        u.completion_tokens = 0;
        for (const auto& o : os) {
            u.completion_tokens += o.last->usage.completion_tokens;
            reasoning += o.reasoning_tokens;
        }
        return usage_json(u, reasoning);
    };

    if (!cr.gen.stream) {
        // Nothing is written before the result: the connection itself says when the client left.
        const ClientConnection client = ClientConnection::of(req);
        for (auto& ar : ars) ar->watch_client(client);
        std::vector<ChatOutcome> outcomes;
        Json choices = Json::array();
        for (int64_t j = 0; j < n; ++j) {
            Json logprobs = Json::array();
            ChatOutcome o =
                run_chat_generation(*ars[static_cast<size_t>(j)], popts[static_cast<size_t>(j)], cr.parse_tools,
                                    [&](const std::vector<ParseEvent>&, const EngineEvent& ev) {
                                        if (cr.gen.logprobs)
                                            for (auto& e : chat_logprobs_json(s.tokenizer, ev.token_ids, ev.logprobs))
                                                logprobs.push_back(Json(e));
                                        return true;
                                    });
            if (std::string f = o.failure(); !f.empty()) {
                if (o.last && o.last->finish_reason == FinishReason::Cancelled) {
                    log_finish_reason("abort");
                    throw ApiError(503, f).with_retry_after(30);
                }
                log_finish_reason("error");
                throw ApiError(500, f);
            }
            const ParsedCompletion& pc = o.completion;
            if (std::string v = tool_choice_violation(cr, pc); !v.empty())
                throw ApiError(500, v, "tool_choice", "tool_choice_not_followed");
            Json msg = {{"role", "assistant"}};
            msg["content"] = pc.content.empty() && !pc.tool_calls.empty() ? Json(nullptr) : Json(pc.content);
            msg["reasoning_content"] = pc.reasoning.empty() ? Json(nullptr) : Json(pc.reasoning);
            if (!pc.tool_calls.empty()) {
                Json calls = Json::array();
                for (const auto& c : pc.tool_calls)
                    calls.push_back({{"id", c.id},
                                     {"type", "function"},
                                     {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
                msg["tool_calls"] = std::move(calls);
            }
            Json choice = {{"index", j}, {"message", std::move(msg)}};
            choice["logprobs"] = cr.gen.logprobs ? Json{{"content", std::move(logprobs)}} : Json(nullptr);
            choice["finish_reason"] = finish_reason_of(cr, *o.last, pc);
            choices.push_back(std::move(choice));
            outcomes.push_back(std::move(o));
        }
        Json out = {{"id", id},
                    {"object", "chat.completion"},
                    {"created", created},
                    {"model", s.info.served_model_name},
                    {"choices", std::move(choices)},
                    {"usage", Json(total_usage(outcomes))}};
        auto& f = access_log_context().fields;
        f["completion_tokens"] = out["usage"]["completion_tokens"];
        f["finish_reason"] = out["choices"][0]["finish_reason"];
        if (s.opts.log_requests_text) f["completion"] = outcomes.front().completion.content;
        res.set_content(dump_json(out), "application/json");
        return;
    }

    // Streaming: the whole generation runs inside the content provider on this HTTP thread; the
    // choices' chunks interleave as their tokens come, each carrying its index.
    const std::string model = s.info.served_model_name;
    const bool include_usage = cr.gen.include_usage, want_logprobs = cr.gen.logprobs;
    const ChatRequest chat = cr;
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [&s, ars, popts, id, created, model, include_usage, want_logprobs, chat, total_usage](
            size_t, httplib::DataSink& sink) mutable {
            SseWriter w(sink);
            auto chunk = [&](size_t index, Json delta, Json finish, Json logprobs) {
                Json c = {{"id", id}, {"object", "chat.completion.chunk"}, {"created", created}, {"model", model}};
                Json choice = {{"index", index},
                               {"delta", std::move(delta)},
                               {"logprobs", std::move(logprobs)},
                               {"finish_reason", std::move(finish)}};
                c["choices"] = Json::array({std::move(choice)});
                if (include_usage) c["usage"] = nullptr;
                return c;
            };
            auto gone = [&] {
                for (auto& ar : ars) ar->cancel();
                log_finish_reason("abort");  // the status line already said 200
                return false;
            };
            for (size_t j = 0; j < ars.size(); ++j)
                if (!w.send(chunk(j, Json{{"role", "assistant"}, {"content", ""}}, nullptr, nullptr))) return gone();
            std::vector<ChatChoiceState> states;
            for (const auto& po : popts) states.emplace_back(po, chat.parse_tools);
            std::vector<ChatOutcome> outcomes(ars.size());
            bool failed = false;
            const bool all = interleave_events(
                ars,
                [&](size_t j, const EngineEvent& ev) {
                    const std::vector<ParseEvent> pes = states[j].push(ev);
                    Json deltas = deltas_for(pes, chat.parse_tools);
                    Json lp = want_logprobs && !ev.token_ids.empty()
                                  ? Json{{"content", Json(chat_logprobs_json(s.tokenizer, ev.token_ids, ev.logprobs))}}
                                  : Json(nullptr);
                    if (deltas.empty() && !lp.is_null()) deltas.push_back(Json::object());
                    for (size_t i = 0; i < deltas.size(); ++i)
                        if (!w.send(chunk(j, deltas[i], nullptr, i == 0 ? lp : Json(nullptr)))) return false;
                    if (!ev.finished()) return true;
                    outcomes[j] = states[j].finish();
                    const ChatOutcome& o = outcomes[j];
                    if (!o.last || o.last->finish_reason == FinishReason::Error) {
                        failed = true;
                        return true;
                    }
                    const ParsedCompletion& pc = o.completion;
                    if (std::string v = tool_choice_violation(chat, pc); !v.empty())
                        if (!w.send(Json(error_body(500, v, "tool_choice", "tool_choice_not_followed")))) return false;
                    return w.send(chunk(j, Json::object(), finish_reason_of(chat, *o.last, pc), nullptr));
                },
                [&w] { return w.ping(); });
            // Client gone: every choice is cancelled (the ActiveRequests' owners free the KV).
            if (!all) return gone();
            for (size_t j = 0; j < ars.size(); ++j)
                if (!outcomes[j].last) {
                    outcomes[j] = states[j].finish();
                    failed = true;
                }
            if (failed) {
                log_finish_reason("error");
                for (const auto& o : outcomes)
                    if (std::string f = o.failure(); !f.empty()) {
                        w.send(Json(error_body(500, f)));
                        break;
                    }
                w.done();
                return true;
            }
            if (include_usage) {
                Json u = {
                    {"id", id},       {"object", "chat.completion.chunk"}, {"created", created},
                    {"model", model}, {"choices", Json::array()},          {"usage", Json(total_usage(outcomes))}};
                w.send(u);
            }
            auto& f = access_log_context().fields;
            int64_t n_completion = 0;
            for (const auto& o : outcomes) n_completion += o.last->usage.completion_tokens;
            f["completion_tokens"] = n_completion;
            f["finish_reason"] = finish_reason_of(chat, *outcomes.front().last, outcomes.front().completion);
            if (s.opts.log_requests_text) f["completion"] = outcomes.front().completion.content;
            w.done();
            return w.ok();
        },
        [](bool) { /* releasing the last reference cancels an unfinished request */ });
}

}  // namespace onecard::server
