// POST /v1/responses: the OpenAI Responses API over the chat pipeline (responses_convert.h says how
// the fields map). Finished responses are kept for previous_response_id and for GET / DELETE
// /v1/responses/{id} in the server's ResponseStore (response_store.h: in memory, the last 1024 /
// 256 MiB, least recently used out first; never with store: false). A response is kept only once it
// completed or stopped at max_output_tokens: a failed or abandoned one has no conversation to continue.
#include "server/api_error.h"
#include "server/chat_pipeline.h"
#include "server/generation.h"
#include "server/responses_convert.h"
#include "server/server_state.h"
#include "server/sse.h"

#include <fmt/format.h>

#include <ctime>

namespace onecard::server {

namespace {

void keep(OpenAIServer::State& s, const ResponsesRequest& rr, const std::string& id, const ChatOutcome& o,
          const Json& response) {
    if (!rr.store) return;
    Json conversation = rr.conversation;
    conversation.push_back(assistant_turn(o.completion));
    s.responses.put(id, std::move(conversation), response);
}

// The {id} of /v1/responses/{id}.
std::string path_id(const httplib::Request& req) {
    return req.matches.size() > 1 ? std::string(req.matches[1]) : std::string();
}

// OpenAI's answer for an id it does not hold (404, its wording; code "not_found" as every 404 here).
ApiError no_such_response(const std::string& id) {
    return ApiError(404, fmt::format("Response with id '{}' not found.", id));
}

void log_outcome(OpenAIServer::State& s, const ChatOutcome& o, const Json& response) {
    auto& f = access_log_context().fields;
    f["completion_tokens"] = o.last->usage.completion_tokens;
    f["finish_reason"] = response["status"];
    if (s.opts.log_requests_text) f["completion"] = o.completion.content;
}

}  // namespace

void handle_responses(OpenAIServer::State& s, const httplib::Request& req, httplib::Response& res) {
    const Json body = parse_body(req.body);
    ResponsesRequest rr = responses_to_chat(body, [&s](const std::string& id) { return s.responses.get(id); });
    PreparedChat p = prepare_chat(s, rr.chat_body, "max_output_tokens");
    const std::string id = s.new_response_id("resp_");
    const int64_t created = static_cast<int64_t>(std::time(nullptr));
    const ReasoningParserOptions popts = parser_options(p, "call_" + id.substr(5, 12) + "_");
    auto ar = std::make_shared<ActiveRequest>(s, GenerateRequest{std::move(p.ids), p.sampling});
    access_log_context().fields["id"] = id;
    auto builder = std::make_shared<ResponseBuilder>(id, created, s.info.served_model_name, rr.echo);

    if (!rr.stream) {
        ar->watch_client(ClientConnection::of(req));  // nothing is written before the result
        ChatOutcome o = run_chat_generation(*ar, popts, p.chat.parse_tools,
                                            [&](const std::vector<ParseEvent>& pes, const EngineEvent&) {
                                                builder->push(pes);
                                                return true;
                                            });
        if (std::string f = o.failure(); !f.empty()) {
            const bool cancelled = o.last && o.last->finish_reason == FinishReason::Cancelled;
            log_finish_reason(cancelled ? "abort" : "error");
            throw cancelled ? ApiError(503, f).with_retry_after(30) : ApiError(500, f);
        }
        if (std::string v = tool_choice_violation(p.chat, o.completion); !v.empty())
            throw ApiError(500, v, "tool_choice", "tool_choice_not_followed");
        builder->finish(*o.last, o.reasoning_tokens);
        builder->check_integrity();
        keep(s, rr, id, o, builder->response());
        log_outcome(s, o, builder->response());
        res.set_content(dump_json(builder->response()), "application/json");
        return;
    }

    const ChatRequest chat = p.chat;
    auto request = std::make_shared<ResponsesRequest>(std::move(rr));
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [&s, ar, popts, id, chat, request, builder](size_t, httplib::DataSink& sink) {
            SseWriter w(sink);
            auto send_all = [&w](const std::vector<SseEvent>& evs) {
                for (const auto& e : evs)
                    if (!w.send_event(e.name.c_str(), e.data)) return false;
                return true;
            };
            if (!send_all(builder->start())) {
                ar->cancel();
                log_finish_reason("abort");  // the status line already said 200
                return false;
            }
            ChatOutcome o = run_chat_generation(
                *ar, popts, chat.parse_tools,
                [&](const std::vector<ParseEvent>& pes, const EngineEvent&) { return send_all(builder->push(pes)); },
                [&w] { return w.ping(); });
            if (o.client_gone) return false;
            std::string failure = o.failure();
            if (failure.empty()) failure = tool_choice_violation(chat, o.completion);
            if (!failure.empty()) {
                log_finish_reason(o.last && o.last->finish_reason == FinishReason::Cancelled ? "abort" : "error");
                send_all(builder->fail(failure));
                w.end();
                return true;
            }
            send_all(builder->finish(*o.last, o.reasoning_tokens));
            builder->check_integrity();
            keep(s, *request, id, o, builder->response());
            log_outcome(s, o, builder->response());
            w.end();
            return w.ok();
        },
        [ar](bool) { /* releasing the last reference cancels an unfinished request */ });
}

// GET /v1/responses/{id}: the response object as its creation returned it (OpenAI's retrieve).
void handle_response_get(OpenAIServer::State& s, const httplib::Request& req, httplib::Response& res) {
    const std::string id = path_id(req);
    std::optional<Json> r = s.responses.response(id);
    if (!r) throw no_such_response(id);
    res.set_content(dump_json(*r), "application/json");
}

// DELETE /v1/responses/{id}: OpenAI's delete answer; the id no longer continues a conversation.
void handle_response_delete(OpenAIServer::State& s, const httplib::Request& req, httplib::Response& res) {
    const std::string id = path_id(req);
    if (!s.responses.erase(id)) throw no_such_response(id);
    res.set_content(dump_json(Json{{"id", id}, {"object", "response"}, {"deleted", true}}), "application/json");
}

}  // namespace onecard::server
