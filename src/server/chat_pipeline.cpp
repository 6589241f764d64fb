// The chat pipeline shared by /v1/chat/completions, /v1/responses and /v1/messages (chat_pipeline.h).
#include "server/chat_pipeline.h"

#include "core/error.h"
#include "server/api_error.h"
#include "server/sse.h"
#include "server/structured_output.h"

#include <algorithm>

namespace onecard::server {

namespace {

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

}  // namespace

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
    r.gen = parse_generation_options(body, ApiKind::Chat, s.opts.sampling_defaults);

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

PreparedChat prepare_chat(OpenAIServer::State& s, const Json& body, const std::string& max_tokens_param) {
    PreparedChat p;
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
                          !max_tokens_param.empty()                ? max_tokens_param
                          : body.contains("max_completion_tokens") ? "max_completion_tokens"
                                                                   : "max_tokens");
    p.sampling.max_tokens = resolve_max_tokens(p.chat.gen, room);
    p.sampling.make_constraint = chat_constraint(s, body, p.chat, p.prompt.generation_in_reasoning);
    auto& f = access_log_context().fields;
    f["prompt_tokens"] = n;
    if (s.opts.log_requests_text) f["prompt"] = p.prompt.text;
    return p;
}

std::string ChatOutcome::failure() const {
    if (!last) return "generation failed: no final event";
    if (last->finish_reason == FinishReason::Error) return "generation failed: " + last->error;
    if (last->finish_reason == FinishReason::Cancelled)
        return client_gone ? "the client closed the connection"
                           : "the request was cancelled because the server is shutting down";
    return {};
}

ReasoningParserOptions parser_options(const PreparedChat& p, const std::string& id_prefix) {
    ReasoningParserOptions o;
    o.start_in_reasoning = p.prompt.generation_in_reasoning;
    o.dsml.id_prefix = id_prefix;
    return o;
}

ChatChoiceState::ChatChoiceState(const ReasoningParserOptions& popts, bool parse_tools)
    : parser_(popts), parse_tools_(parse_tools) {}

// A request that does not parse tools drops whatever DSML call the model still writes: the sinks
// and the outcome never see it (tool_choice "none" returns no call, and no markup as text either).
bool ChatChoiceState::keep(const ParseEvent& pe) const {
    return parse_tools_ || (pe.kind != ParseEventKind::ToolCallBegin && pe.kind != ParseEventKind::ToolCallArgs &&
                            pe.kind != ParseEventKind::ToolCallEnd);
}

std::vector<ParseEvent> ChatChoiceState::push(const EngineEvent& ev) {
    reasoning_.before_event(parser_.in_reasoning());
    std::vector<ParseEvent> pes = parser_.push(ev.text_delta);
    reasoning_.after_event(ev);
    if (ev.finished()) {
        auto rest = parser_.finish();
        pes.insert(pes.end(), rest.begin(), rest.end());
        flushed_ = true;
    }
    std::erase_if(pes, [&](const ParseEvent& pe) { return !keep(pe); });
    for (const auto& pe : pes) apply_event(out_.completion, pe);
    if (ev.finished()) out_.last = ev;
    return pes;
}

ChatOutcome ChatChoiceState::finish() {
    if (!flushed_) {
        flushed_ = true;
        for (const auto& pe : parser_.finish())
            if (keep(pe)) apply_event(out_.completion, pe);
    }
    out_.reasoning_tokens = reasoning_.count();
    return std::move(out_);
}

ChatOutcome run_chat_generation(ActiveRequest& ar, const ReasoningParserOptions& popts, bool parse_tools,
                                const ChatEventSink& on_events, const ChatPing& ping) {
    ChatChoiceState choice(popts, parse_tools);
    auto gone = [&] {
        ar.cancel();
        log_finish_reason("abort");  // a stream's status line already said 200
        ChatOutcome out = choice.finish();
        out.client_gone = true;
        return out;
    };
    for (;;) {
        std::optional<EngineEvent> ev = ping ? ar.next_for(kSsePingInterval) : ar.next();
        if (!ev) {
            if (!ping || ar.finished()) break;
            if (!ping()) return gone();  // client gone while nothing was generated yet
            continue;
        }
        const std::vector<ParseEvent> pes = choice.push(*ev);
        if (!on_events(pes, *ev)) return gone();
        if (ev->finished()) break;
    }
    ChatOutcome out = choice.finish();
    out.client_gone = ar.client_gone();  // a non-streaming request's watched client hung up
    return out;
}

}  // namespace onecard::server
