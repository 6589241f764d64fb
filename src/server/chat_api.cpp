// POST /v1/chat/completions: render the DeepSeek-V4 prompt, generate through the engine, split the
// output into reasoning / content / DSML tool calls with the streaming parsers. The validation,
// rendering and generation loop live in chat_pipeline.cpp (shared with /v1/responses and /v1/messages);
// this file maps them onto chat-completions objects and chunks.
//
// tool_choice "required" or a named function that the completion does not follow ends with a
// server_error (500, code tool_choice_not_followed; in a stream, an error event before [DONE]).
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
    const ReasoningParserOptions popts = parser_options(p, "call_" + id.substr(9, 12) + "_");
    auto ar = std::make_shared<ActiveRequest>(s, GenerateRequest{std::move(p.ids), p.sampling});
    access_log_context().fields["id"] = id;

    const ChatRequest& cr = p.chat;

    if (!cr.gen.stream) {
        Json logprobs = Json::array();
        ChatOutcome o = run_chat_generation(*ar, popts, cr.parse_tools, [&](const std::vector<ParseEvent>&,
                                                                            const EngineEvent& ev) {
            if (cr.gen.logprobs)
                for (auto& e : chat_logprobs_json(s.tokenizer, ev.token_ids, ev.logprobs)) logprobs.push_back(Json(e));
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
                calls.push_back(
                    {{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
            msg["tool_calls"] = std::move(calls);
        }
        Json choice = {{"index", 0}, {"message", std::move(msg)}};
        choice["logprobs"] = cr.gen.logprobs ? Json{{"content", std::move(logprobs)}} : Json(nullptr);
        choice["finish_reason"] = finish_reason_of(cr, *o.last, pc);
        Json out = {{"id", id},
                    {"object", "chat.completion"},
                    {"created", created},
                    {"model", s.info.served_model_name},
                    {"choices", Json::array({std::move(choice)})},
                    {"usage", Json(usage_json(o.last->usage, o.reasoning_tokens))}};
        auto& f = access_log_context().fields;
        f["completion_tokens"] = o.last->usage.completion_tokens;
        f["finish_reason"] = out["choices"][0]["finish_reason"];
        if (s.opts.log_requests_text) f["completion"] = pc.content;
        res.set_content(dump_json(out), "application/json");
        return;
    }

    // Streaming: the whole generation runs inside the content provider on this HTTP thread.
    const std::string model = s.info.served_model_name;
    const bool include_usage = cr.gen.include_usage, want_logprobs = cr.gen.logprobs;
    const ChatRequest chat = cr;
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [&s, ar, popts, id, created, model, include_usage, want_logprobs, chat](size_t, httplib::DataSink& sink) {
            SseWriter w(sink);
            auto chunk = [&](Json delta, Json finish, Json logprobs) {
                Json c = {{"id", id}, {"object", "chat.completion.chunk"}, {"created", created}, {"model", model}};
                Json choice = {{"index", 0},
                               {"delta", std::move(delta)},
                               {"logprobs", std::move(logprobs)},
                               {"finish_reason", std::move(finish)}};
                c["choices"] = Json::array({std::move(choice)});
                if (include_usage) c["usage"] = nullptr;
                return c;
            };
            if (!w.send(chunk(Json{{"role", "assistant"}, {"content", ""}}, nullptr, nullptr))) {
                ar->cancel();
                log_finish_reason("abort");  // the status line already said 200
                return false;
            }
            ChatOutcome o = run_chat_generation(
                *ar, popts, chat.parse_tools,
                [&](const std::vector<ParseEvent>& pes, const EngineEvent& ev) {
                    Json deltas = deltas_for(pes, chat.parse_tools);
                    Json lp = want_logprobs && !ev.token_ids.empty()
                                  ? Json{{"content", Json(chat_logprobs_json(s.tokenizer, ev.token_ids, ev.logprobs))}}
                                  : Json(nullptr);
                    if (deltas.empty() && !lp.is_null()) deltas.push_back(Json::object());
                    for (size_t i = 0; i < deltas.size(); ++i)
                        if (!w.send(chunk(deltas[i], nullptr, i == 0 ? lp : Json(nullptr)))) return false;
                    return true;
                },
                [&w] { return w.ping(); });
            // Client gone: the ActiveRequest's owner cancels and frees the KV.
            if (o.client_gone) return false;
            if (!o.last || o.last->finish_reason == FinishReason::Error) {
                log_finish_reason("error");
                w.send(Json(error_body(500, o.failure())));
                w.done();
                return true;
            }
            const ParsedCompletion& pc = o.completion;
            if (std::string v = tool_choice_violation(chat, pc); !v.empty())
                w.send(Json(error_body(500, v, "tool_choice", "tool_choice_not_followed")));
            w.send(chunk(Json::object(), finish_reason_of(chat, *o.last, pc), nullptr));
            if (include_usage) {
                Json u = {{"id", id},
                          {"object", "chat.completion.chunk"},
                          {"created", created},
                          {"model", model},
                          {"choices", Json::array()},
                          {"usage", Json(usage_json(o.last->usage, o.reasoning_tokens))}};
                w.send(u);
            }
            auto& f = access_log_context().fields;
            f["completion_tokens"] = o.last->usage.completion_tokens;
            f["finish_reason"] = finish_reason_of(chat, *o.last, pc);
            if (s.opts.log_requests_text) f["completion"] = pc.content;
            w.done();
            return w.ok();
        },
        [ar](bool) { /* releasing the last reference cancels an unfinished request */ });
}

}  // namespace onecard::server
