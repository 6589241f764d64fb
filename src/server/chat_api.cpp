// POST /v1/chat/completions: render the DeepSeek-V4 prompt, generate through the engine, split the
// output into reasoning / content / DSML tool calls with the streaming parsers.
//
// tool_choice: "auto" (default with tools) renders the tools and parses calls; "none" leaves the tools
// out of the prompt, and any DSML call the model still writes is dropped (not returned as text);
// "required" and a named function are enforced at the prompt level (named: only that
// tool is rendered) and then validated: a completion without a conforming call ends with a
// server_error (500, code tool_choice_not_followed; in a stream, an error event before [DONE]).
// Grammar-constrained decoding will replace the validation later.
#include "core/error.h"
#include "server/api_error.h"
#include "server/generation.h"
#include "server/request_params.h"
#include "server/server_state.h"
#include "server/sse.h"
#include "tokenizer/reasoning_parser.h"

#include <algorithm>
#include <ctime>

namespace onecard::server {

namespace {

enum class ToolChoice { None, Auto, Required, Named };

struct ChatRequest {
    Json render_body;  // what the prompt renderer reads (tools filtered by tool_choice)
    GenerationOptions gen;
    ToolChoice tool_choice = ToolChoice::None;
    std::string named_tool;
    bool parse_tools = false;
};

// One entry of 'tools' (vLLM's shape: name a string; description and parameters optional, null
// meaning absent); returns its name. Everything here is rendered into the prompt verbatim, so a
// wrong type is refused rather than written out as whatever JSON it happens to be.
std::string check_tool(const Json& tool, const std::string& where) {
    const std::string shape = where + " must be {\"type\": \"function\", \"function\": {\"name\": ...}}";
    if (!tool.is_object()) throw bad_request(shape, where);
    if (auto type = tool.find("type"); type != tool.end() && !(type->is_string() && *type == "function"))
        throw bad_request(where + ".type must be \"function\"", where + ".type");
    auto fn = tool.find("function");
    if (fn == tool.end() || !fn->is_object()) throw bad_request(shape, where + ".function");
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string())
        throw bad_request(where + ".function.name must be a string", where + ".function.name");
    if (auto d = fn->find("description"); d != fn->end() && !d->is_null() && !d->is_string())
        throw bad_request(fmt::format("{}.function.description must be a string, got {}", where, d->type_name()),
                          where + ".function.description");
    if (auto p = fn->find("parameters"); p != fn->end() && !p->is_null() && !p->is_object())
        throw bad_request(
            fmt::format("{}.function.parameters must be a JSON Schema object, got {}", where, p->type_name()),
            where + ".function.parameters");
    return name->get<std::string>();
}

ChatRequest parse_chat_request(const OpenAIServer::State& s, const Json& body) {
    check_model_field(s, body);
    ChatRequest r;
    auto it = body.find("messages");
    if (it == body.end() || it->is_null()) throw bad_request("'messages' is required", "messages");
    if (!it->is_array() || it->empty()) throw bad_request("'messages' must be a non-empty array", "messages");
    for (size_t i = 0; i < it->size(); ++i) {
        const Json& m = (*it)[i];
        const std::string where = fmt::format("messages[{}]", i);
        if (!m.is_object()) throw bad_request(where + " must be an object", where);
        auto role = opt_string(m, "role");
        if (!role) throw bad_request(where + ".role is required", where + ".role");
        if (*role != "system" && *role != "user" && *role != "assistant" && *role != "tool" && *role != "developer")
            throw bad_request(
                fmt::format("{}.role '{}' is not one of system, user, assistant, tool, developer", where, *role),
                where + ".role");
        auto c = m.find("content");
        if (c != m.end() && !c->is_null() && !c->is_string() && !c->is_array())
            throw bad_request(where + ".content must be a string or an array of parts", where + ".content");
    }
    check_tool_call_arguments(*it);
    r.gen = parse_generation_options(body, ApiKind::Chat);

    r.render_body = body;
    std::vector<std::string> tool_names;
    if (auto t = body.find("tools"); t != body.end() && !t->is_null()) {
        if (!t->is_array()) throw bad_request("'tools' must be an array", "tools");
        for (size_t i = 0; i < t->size(); ++i) {
            tool_names.push_back(check_tool(t->at(i), fmt::format("tools[{}]", i)));
        }
    }
    r.tool_choice = tool_names.empty() ? ToolChoice::None : ToolChoice::Auto;
    if (auto tc = body.find("tool_choice"); tc != body.end() && !tc->is_null()) {
        if (tc->is_string()) {
            const std::string v = tc->get<std::string>();
            if (v == "none")
                r.tool_choice = ToolChoice::None;
            else if (v == "auto")
                r.tool_choice = tool_names.empty() ? ToolChoice::None : ToolChoice::Auto;
            else if (v == "required")
                r.tool_choice = ToolChoice::Required;
            else
                throw bad_request("'tool_choice' must be none, auto, required or a named function", "tool_choice");
        } else if (tc->is_object() && tc->contains("function") && (*tc)["function"].is_object() &&
                   (*tc)["function"].contains("name") && (*tc)["function"]["name"].is_string()) {
            r.tool_choice = ToolChoice::Named;
            r.named_tool = (*tc)["function"]["name"].get<std::string>();
            if (std::find(tool_names.begin(), tool_names.end(), r.named_tool) == tool_names.end())
                throw bad_request(fmt::format("tool_choice names '{}', which is not in 'tools'", r.named_tool),
                                  "tool_choice");
        } else {
            throw bad_request(
                "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}",
                "tool_choice");
        }
        if (r.tool_choice == ToolChoice::Required && tool_names.empty())
            throw bad_request("tool_choice 'required' needs a non-empty 'tools'", "tool_choice");
    }
    if (r.tool_choice == ToolChoice::None) {
        r.render_body.erase("tools");
    } else if (r.tool_choice == ToolChoice::Named) {
        Json only = Json::array();
        for (const auto& t : r.render_body["tools"])
            if (t["function"]["name"] == r.named_tool) only.push_back(t);
        r.render_body["tools"] = std::move(only);
    }
    r.parse_tools = r.tool_choice != ToolChoice::None;
    if (auto rf = body.find("response_format"); rf != body.end() && !rf->is_null()) {
        if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string())
            throw bad_request("'response_format' must be an object with a string 'type'", "response_format");
        const std::string type = (*rf)["type"].get<std::string>();
        if (type != "text" && type != "json_object" && type != "json_schema")
            throw bad_request("response_format.type must be text, json_object or json_schema", "response_format.type");
        if (type == "json_schema" && (!rf->contains("json_schema") || !(*rf)["json_schema"].is_object()))
            throw bad_request("response_format.json_schema must be an object", "response_format.json_schema");
    }
    if (auto kw = body.find("chat_template_kwargs"); kw != body.end() && !kw->is_null() && !kw->is_object())
        throw bad_request("'chat_template_kwargs' must be an object", "chat_template_kwargs");
    // The encoder maps every OpenAI effort onto V4's (unset / high / max); any other word would be
    // rendered as "high" without a word said, so it is refused, naming the accepted ones.
    static constexpr const char* kEfforts[] = {"none", "minimal", "low", "medium", "high", "xhigh", "max"};
    auto check_effort = [](const Json& holder, const std::string& param) {
        auto re = holder.find("reasoning_effort");
        if (re == holder.end() || re->is_null()) return;
        if (!re->is_string()) throw bad_request(fmt::format("'{}' must be a string", param), param);
        const std::string v = re->get<std::string>();
        if (std::find(std::begin(kEfforts), std::end(kEfforts), v) != std::end(kEfforts)) return;
        throw bad_request(fmt::format("'{}' is '{}'; accepted: none, minimal, low, medium, high, xhigh, max", param, v),
                          param);
    };
    check_effort(body, "reasoning_effort");
    if (auto kw = body.find("chat_template_kwargs"); kw != body.end() && kw->is_object())
        check_effort(*kw, "chat_template_kwargs.reasoning_effort");
    return r;
}

// The call the tool_choice demands is missing: the empty string when the completion conforms.
std::string tool_choice_violation(const ChatRequest& r, const ParsedCompletion& pc) {
    if (r.tool_choice == ToolChoice::Required && pc.tool_calls.empty())
        return "tool_choice is 'required' but the model called no tool";
    if (r.tool_choice == ToolChoice::Named) {
        if (pc.tool_calls.empty())
            return fmt::format("tool_choice names '{}' but the model called no tool", r.named_tool);
        for (const auto& c : pc.tool_calls)
            if (c.name != r.named_tool)
                return fmt::format("tool_choice names '{}' but the model called '{}'", r.named_tool, c.name);
    }
    return {};
}

struct Prepared {
    ChatRequest chat;
    ChatPrompt prompt;
    std::vector<int32_t> ids;
    SamplingParams sampling;
};

Prepared prepare(OpenAIServer::State& s, const Json& body) {
    Prepared p;
    p.chat = parse_chat_request(s, body);
    try {
        p.prompt = render_chat_request(p.chat.render_body, s.info.chat_variant);
    } catch (const Error& e) {
        throw bad_request(e.what(), "messages");
    }
    p.ids = s.tokenizer.encode(p.prompt.text, /*allow_special=*/true);
    const int64_t n = static_cast<int64_t>(p.ids.size()), max_len = s.info.max_model_len;
    if (n >= max_len)
        throw bad_request(fmt::format("This model's maximum context length is {} tokens. However, your messages "
                                      "resulted in {} tokens. Please reduce the length of the messages.",
                                      max_len, n),
                          "messages");
    p.sampling = p.chat.gen.sampling;
    const int64_t room = max_len - n;
    if (p.chat.gen.max_tokens && *p.chat.gen.max_tokens > room)
        throw bad_request(fmt::format("max_tokens is {} but the prompt has {} tokens and the maximum context length is "
                                      "{}: at most {} tokens can be generated",
                                      *p.chat.gen.max_tokens, n, max_len, room),
                          body.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens");
    p.sampling.max_tokens = p.chat.gen.max_tokens.value_or(room);
    auto& f = access_log_context().fields;
    f["prompt_tokens"] = n;
    if (s.opts.log_requests_text) f["prompt"] = p.prompt.text;
    return p;
}

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
    Prepared p = prepare(s, body);
    const std::string id = s.new_response_id("chatcmpl-");
    const int64_t created = static_cast<int64_t>(std::time(nullptr));
    ReasoningParserOptions popts;
    popts.start_in_reasoning = p.prompt.generation_in_reasoning;
    popts.dsml.id_prefix = "call_" + id.substr(9, 12) + "_";
    auto ar = std::make_shared<ActiveRequest>(s, GenerateRequest{std::move(p.ids), p.sampling});
    access_log_context().fields["id"] = id;

    const ChatRequest& cr = p.chat;

    if (!cr.gen.stream) {
        ReasoningParser parser(popts);
        ParsedCompletion pc;
        Json logprobs = Json::array();
        std::optional<EngineEvent> last;
        ReasoningTokenCount reasoning;
        while (auto ev = ar->next()) {
            reasoning.before_event(parser.in_reasoning());
            for (const auto& pe : parser.push(ev->text_delta)) apply_event(pc, pe);
            reasoning.after_event(*ev);
            if (cr.gen.logprobs)
                for (auto& e : chat_logprobs_json(s.tokenizer, ev->token_ids, ev->logprobs))
                    logprobs.push_back(Json(e));
            if (ev->finished()) last = std::move(ev);
        }
        for (const auto& pe : parser.finish()) apply_event(pc, pe);
        if (!last || last->finish_reason == FinishReason::Error) {
            log_finish_reason("error");
            throw ApiError(500, "generation failed: " + (last ? last->error : std::string("no final event")));
        }
        if (last->finish_reason == FinishReason::Cancelled) {
            log_finish_reason("abort");
            throw ApiError(503, "the request was cancelled because the server is shutting down").with_retry_after(30);
        }
        if (!cr.parse_tools) pc.tool_calls.clear();
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
        choice["finish_reason"] = finish_reason_of(cr, *last, pc);
        Json out = {{"id", id},
                    {"object", "chat.completion"},
                    {"created", created},
                    {"model", s.info.served_model_name},
                    {"choices", Json::array({std::move(choice)})},
                    {"usage", Json(usage_json(last->usage, reasoning.count()))}};
        auto& f = access_log_context().fields;
        f["completion_tokens"] = last->usage.completion_tokens;
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
            ReasoningParser parser(popts);
            ParsedCompletion pc;
            if (!w.send(chunk(Json{{"role", "assistant"}, {"content", ""}}, nullptr, nullptr))) {
                ar->cancel();
                log_finish_reason("abort");  // the status line already said 200
                return false;
            }
            std::optional<EngineEvent> last;
            ReasoningTokenCount reasoning;
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
                reasoning.before_event(parser.in_reasoning());
                std::vector<ParseEvent> pes = parser.push(ev->text_delta);
                reasoning.after_event(*ev);
                if (ev->finished()) {
                    auto tail = parser.finish();
                    pes.insert(pes.end(), tail.begin(), tail.end());
                }
                for (const auto& pe : pes) apply_event(pc, pe);
                Json deltas = deltas_for(pes, chat.parse_tools);
                Json lp = want_logprobs && !ev->token_ids.empty()
                              ? Json{{"content", Json(chat_logprobs_json(s.tokenizer, ev->token_ids, ev->logprobs))}}
                              : Json(nullptr);
                if (deltas.empty() && !lp.is_null()) deltas.push_back(Json::object());
                for (size_t i = 0; i < deltas.size(); ++i) {
                    if (!w.send(chunk(deltas[i], nullptr, i == 0 ? lp : Json(nullptr)))) {
                        ar->cancel();
                        log_finish_reason("abort");  // the status line already said 200
                        return false;  // client gone: the ActiveRequest's owner cancels and frees the KV
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
            if (!chat.parse_tools) pc.tool_calls.clear();
            if (std::string v = tool_choice_violation(chat, pc); !v.empty())
                w.send(Json(error_body(500, v, "tool_choice", "tool_choice_not_followed")));
            w.send(chunk(Json::object(), finish_reason_of(chat, *last, pc), nullptr));
            if (include_usage) {
                Json u = {
                    {"id", id},       {"object", "chat.completion.chunk"}, {"created", created},
                    {"model", model}, {"choices", Json::array()},          {"usage", Json(usage_json(last->usage, reasoning.count()))}};
                w.send(u);
            }
            auto& f = access_log_context().fields;
            f["completion_tokens"] = last->usage.completion_tokens;
            f["finish_reason"] = finish_reason_of(chat, *last, pc);
            if (s.opts.log_requests_text) f["completion"] = pc.content;
            w.done();
            return w.ok();
        },
        [ar](bool) { /* releasing the last reference cancels an unfinished request */ });
}

}  // namespace onecard::server
