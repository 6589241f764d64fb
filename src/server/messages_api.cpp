// POST /v1/messages and /v1/messages/count_tokens: the Anthropic Messages API over the chat pipeline
// (messages_convert.h says how the fields map). Errors on these routes use Anthropic's error object
// (the route table in openai_server.cpp marks them), and the key may come as x-api-key. The
// anthropic-version header is accepted whatever its value: there is one version of this mapping.
#include "server/api_error.h"
#include "server/chat_pipeline.h"
#include "server/generation.h"
#include "server/messages_convert.h"
#include "server/server_state.h"
#include "server/sse.h"

namespace onecard::server {

namespace {

// A 500 for a tool_choice the model did not follow, as chat reports it.
void check_tool_choice(const ChatRequest& cr, const ParsedCompletion& pc) {
    if (std::string v = tool_choice_violation(cr, pc); !v.empty())
        throw ApiError(500, v, "tool_choice", "tool_choice_not_followed");
}

void log_outcome(OpenAIServer::State& s, const ChatOutcome& o, const StopReason& stop) {
    auto& f = access_log_context().fields;
    f["completion_tokens"] = o.last->usage.completion_tokens;
    f["finish_reason"] = stop.reason;
    if (s.opts.log_requests_text) f["completion"] = o.completion.content;
}

}  // namespace

void handle_messages(OpenAIServer::State& s, const httplib::Request& req, httplib::Response& res) {
    const Json body = parse_body(req.body);
    MessagesRequest mr = messages_to_chat(body, MessagesRoute::Create);
    PreparedChat p = prepare_chat(s, mr.chat_body, "max_tokens");
    const std::string id = s.new_response_id("msg_");
    const ReasoningParserOptions popts = parser_options(p, "toolu_" + id.substr(4, 12) + "_");
    auto ar = std::make_shared<ActiveRequest>(s, GenerateRequest{std::move(p.ids), p.sampling});
    access_log_context().fields["id"] = id;
    const std::string model = s.info.served_model_name;

    if (!mr.stream) {
        ar->watch_client(ClientConnection::of(req));  // nothing is written before the result
        ChatOutcome o = run_chat_generation(*ar, popts, p.chat.parse_tools,
                                            [](const std::vector<ParseEvent>&, const EngineEvent&) { return true; });
        if (std::string f = o.failure(); !f.empty()) {
            const bool cancelled = o.last && o.last->finish_reason == FinishReason::Cancelled;
            log_finish_reason(cancelled ? "abort" : "error");
            throw cancelled ? ApiError(503, f).with_retry_after(30) : ApiError(500, f);
        }
        check_tool_choice(p.chat, o.completion);
        const StopReason stop = anthropic_stop_reason(*o.last, o.completion);
        log_outcome(s, o, stop);
        res.set_content(dump_json(messages_response(id, model, o.completion, stop, o.last->usage)), "application/json");
        return;
    }

    const int64_t n_prompt = ar->n_prompt_tokens();
    const ChatRequest chat = p.chat;
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [&s, ar, popts, id, model, n_prompt, chat](size_t, httplib::DataSink& sink) {
            SseWriter w(sink);
            MessagesStreamEncoder enc(id, model, n_prompt);
            auto send_all = [&w](const std::vector<SseEvent>& evs) {
                for (const auto& e : evs)
                    if (!w.send_event(e.name.c_str(), e.data)) return false;
                return true;
            };
            if (!send_all(enc.start())) {
                ar->cancel();
                log_finish_reason("abort");  // the status line already said 200
                return false;
            }
            ChatOutcome o = run_chat_generation(
                *ar, popts, chat.parse_tools,
                [&](const std::vector<ParseEvent>& pes, const EngineEvent&) { return send_all(enc.push(pes)); },
                [&w] { return w.ping(); });
            if (o.client_gone) return false;
            std::string failure = o.failure();
            if (failure.empty()) failure = tool_choice_violation(chat, o.completion);
            if (!failure.empty()) {
                // After the 200 status line an error can only be an event (Anthropic's "error" event).
                log_finish_reason(o.last && o.last->finish_reason == FinishReason::Cancelled ? "abort" : "error");
                const int status = o.last && o.last->finish_reason == FinishReason::Cancelled ? 503 : 500;
                w.send_event("error", Json(error_body(ErrorShape::Anthropic, status, failure)));
                w.end();
                return true;
            }
            const StopReason stop = anthropic_stop_reason(*o.last, o.completion);
            send_all(enc.finish(stop, o.last->usage));
            enc.check_integrity();
            log_outcome(s, o, stop);
            w.end();
            return w.ok();
        },
        [ar](bool) { /* releasing the last reference cancels an unfinished request */ });
}

void handle_messages_count_tokens(OpenAIServer::State& s, const httplib::Request& req, httplib::Response& res) {
    const Json body = parse_body(req.body);
    MessagesRequest mr = messages_to_chat(body, MessagesRoute::CountTokens);
    // The same rendering a generation would get: the count is exactly the prompt's tokens.
    PreparedChat p = prepare_chat(s, mr.chat_body);
    res.set_content(dump_json(Json{{"input_tokens", static_cast<int64_t>(p.ids.size())}}), "application/json");
}

}  // namespace onecard::server
