#include "server/responses_convert.h"

#include "core/error.h"
#include "server/api_error.h"
#include "server/request_params.h"
#include "server/response_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace onecard::server {

namespace {

// Message content: a string, or input_text / output_text parts (as chat text parts).
Json message_content(const Json& content, const std::string& where) {
    if (content.is_string()) return content;
    if (!content.is_array()) throw bad_request(where + " must be a string or an array of content parts", where);
    Json parts = Json::array();
    for (size_t j = 0; j < content.size(); ++j) {
        const Json& p = content[j];
        const std::string w = fmt::format("{}[{}]", where, j);
        if (!p.is_object()) throw bad_request(w + " must be an object", w);
        const std::string type = required_string(p, "type", w);
        if (type != "input_text" && type != "output_text" && type != "text")
            throw bad_request(fmt::format("{}.type '{}' is not supported (input_text and output_text are)", w, type),
                              w + ".type");
        parts.push_back({{"type", "text"}, {"text", required_string(p, "text", w)}});
    }
    return parts;
}

// An assistant message's text as one string (so its tool calls can join it).
std::string joined_text(const Json& content) {
    if (content.is_string()) return content.get<std::string>();
    std::string out;
    for (const auto& p : content) out += p["text"].get<std::string>();
    return out;
}

void convert_items(const Json& input, Json& messages) {
    std::string pending_reasoning;  // a reasoning item waits for the assistant turn it belongs to
    auto assistant = [&](std::string content) -> Json& {
        Json m = {{"role", "assistant"}, {"content", std::move(content)}};
        if (!pending_reasoning.empty()) m["reasoning_content"] = std::move(pending_reasoning);
        pending_reasoning.clear();
        messages.push_back(std::move(m));
        return messages.back();
    };
    for (size_t i = 0; i < input.size(); ++i) {
        const Json& it = input[i];
        const std::string w = fmt::format("input[{}]", i);
        if (!it.is_object()) throw bad_request(w + " must be an object", w);
        std::string type = "message";  // EasyInputMessage: {role, content} without a type
        if (auto t = it.find("type"); t != it.end() && !t->is_null()) {
            if (!t->is_string()) throw bad_request(w + ".type must be a string", w + ".type");
            type = t->get<std::string>();
        }
        if (type == "message") {
            const std::string role = required_string(it, "role", w);
            if (role != "user" && role != "assistant" && role != "system" && role != "developer")
                throw bad_request(fmt::format("{}.role '{}' is not one of user, assistant, system, developer", w, role),
                                  w + ".role");
            auto c = it.find("content");
            if (c == it.end()) throw bad_request(w + ".content is required", w + ".content");
            Json content = message_content(*c, w + ".content");
            if (role == "assistant")
                assistant(joined_text(content));
            else
                messages.push_back({{"role", role}, {"content", std::move(content)}});
        } else if (type == "function_call") {
            Json call = {
                {"id", required_string(it, "call_id", w)},
                {"type", "function"},
                {"function",
                 {{"name", required_string(it, "name", w)}, {"arguments", required_string(it, "arguments", w)}}}};
            // One assistant turn holds the calls made together, and the text before them.
            const bool join = !messages.empty() && messages.back()["role"] == "assistant" && pending_reasoning.empty();
            Json& m = join ? messages.back() : assistant("");
            if (!m.contains("tool_calls")) m["tool_calls"] = Json::array();
            m["tool_calls"].push_back(std::move(call));
        } else if (type == "function_call_output") {
            Json m = {{"role", "tool"}, {"tool_call_id", required_string(it, "call_id", w)}};
            auto o = it.find("output");
            if (o == it.end() || !(o->is_string() || o->is_array()))
                throw bad_request(w + ".output must be a string or an array of input_text parts", w + ".output");
            m["content"] = message_content(*o, w + ".output");
            messages.push_back(std::move(m));
        } else if (type == "reasoning") {
            std::string text;
            for (const char* key : {"content", "summary"}) {
                auto parts = it.find(key);
                if (parts == it.end() || parts->is_null()) continue;
                if (!parts->is_array()) throw bad_request(fmt::format("{}.{} must be an array", w, key), w + "." + key);
                for (size_t j = 0; j < parts->size(); ++j)
                    text += required_string((*parts)[j], "text", fmt::format("{}.{}[{}]", w, key, j));
                if (!text.empty()) break;  // content is the reasoning itself; summary only stands in for it
            }
            pending_reasoning += text;
        } else {
            throw bad_request(fmt::format("{}.type '{}' is not supported (message, function_call, "
                                          "function_call_output and reasoning items are)",
                                          w, type),
                              w + ".type");
        }
    }
}

Json convert_tools(const Json& tools) {
    if (!tools.is_array()) throw bad_request("'tools' must be an array", "tools");
    Json out = Json::array();
    for (size_t i = 0; i < tools.size(); ++i) {
        const Json& t = tools[i];
        const std::string w = fmt::format("tools[{}]", i);
        if (!t.is_object()) throw bad_request(w + " must be an object", w);
        const std::string type = required_string(t, "type", w);
        if (type != "function")
            throw bad_request(fmt::format("{}.type '{}' is not supported: only function tools are", w, type),
                              w + ".type");
        Json fn = {{"name", required_string(t, "name", w)}};
        if (auto d = t.find("description"); d != t.end() && !d->is_null()) {
            if (!d->is_string()) throw bad_request(w + ".description must be a string", w + ".description");
            fn["description"] = *d;
        }
        if (auto p = t.find("parameters"); p != t.end() && !p->is_null()) {
            if (!p->is_object()) throw bad_request(w + ".parameters must be a JSON Schema object", w + ".parameters");
            fn["parameters"] = *p;
        }
        // Only an explicit strict (the API's default is true, but enforcing every tool's schema under
        // "auto" would refuse requests whose schemas the grammar cannot hold; structured_output.h).
        if (auto st = t.find("strict"); st != t.end() && st->is_boolean()) fn["strict"] = *st;
        out.push_back({{"type", "function"}, {"function", std::move(fn)}});
    }
    return out;
}

Json convert_tool_choice(const Json& tc) {
    if (tc.is_string()) {
        const std::string v = tc.get<std::string>();
        if (v == "auto" || v == "none" || v == "required") return v;
    } else if (tc.is_object() && tc.contains("type") && tc["type"] == "function") {
        return Json{{"type", "function"}, {"function", {{"name", required_string(tc, "name", "tool_choice")}}}};
    }
    throw bad_request(
        "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"name\": ...}",
        "tool_choice");
}

// text.format -> chat's response_format.
std::optional<Json> convert_text_format(const Json& text) {
    if (!text.is_object()) throw bad_request("'text' must be an object", "text");
    auto f = text.find("format");
    if (f == text.end() || f->is_null()) return std::nullopt;
    if (!f->is_object()) throw bad_request("text.format must be an object", "text.format");
    const std::string type = required_string(*f, "type", "text.format");
    if (type == "text") return std::nullopt;
    if (type == "json_object") return Json{{"type", "json_object"}};
    if (type == "json_schema") {
        auto schema = f->find("schema");
        if (schema == f->end() || !schema->is_object())
            throw bad_request("text.format.schema must be a JSON Schema object", "text.format.schema");
        Json js = {{"name", f->value("name", "response")}, {"schema", *schema}};
        if (auto s = f->find("strict"); s != f->end() && s->is_boolean()) js["strict"] = *s;
        return Json{{"type", "json_schema"}, {"json_schema", std::move(js)}};
    }
    throw bad_request(fmt::format("text.format.type must be text, json_object or json_schema, got '{}'", type),
                      "text.format.type");
}

}  // namespace

ResponsesRequest responses_to_chat(const Json& body, const ConversationLookup& lookup) {
    ResponsesRequest r;
    Json& chat = r.chat_body;
    chat = Json::object();
    if (auto m = body.find("model"); m != body.end()) chat["model"] = *m;
    if (opt_bool(body, "background").value_or(false))
        throw bad_request("background responses are not supported", "background");

    Json conversation = Json::array();
    const std::optional<std::string> prev = opt_string(body, "previous_response_id");
    if (prev) {
        std::optional<Json> stored = lookup ? lookup(*prev) : std::nullopt;
        if (!stored)
            throw ApiError(400,
                           fmt::format("Previous response with id '{}' not found (responses are kept in memory, the "
                                       "last {} at most, and not with store: false)",
                                       *prev, kMaxStoredResponses),
                           "previous_response_id", "previous_response_not_found");
        conversation = std::move(*stored);
    }
    auto input = body.find("input");
    if (input == body.end() || input->is_null()) throw bad_request("'input' is required", "input");
    if (input->is_string()) {
        conversation.push_back({{"role", "user"}, {"content", *input}});
    } else if (input->is_array()) {
        if (input->empty()) throw bad_request("'input' must not be empty", "input");
        convert_items(*input, conversation);
    } else {
        throw bad_request("'input' must be a string or an array of input items", "input");
    }
    r.conversation = conversation;

    Json messages = Json::array();
    const std::optional<std::string> instructions = opt_string(body, "instructions");
    if (instructions) messages.push_back({{"role", "system"}, {"content", *instructions}});
    for (auto& m : conversation) messages.push_back(std::move(m));
    chat["messages"] = std::move(messages);

    Json tools = Json::array();
    if (auto t = body.find("tools"); t != body.end() && !t->is_null()) {
        chat["tools"] = convert_tools(*t);
        tools = *t;
    }
    Json tool_choice = "auto";
    if (auto tc = body.find("tool_choice"); tc != body.end() && !tc->is_null()) {
        chat["tool_choice"] = convert_tool_choice(*tc);
        tool_choice = *tc;
    }
    const auto max_output = opt_int(body, "max_output_tokens", 1, std::numeric_limits<int64_t>::max());
    if (max_output) chat["max_tokens"] = *max_output;
    const auto temperature = opt_number(body, "temperature", 0.0, 2.0);
    if (temperature) chat["temperature"] = *temperature;
    const auto top_p = opt_number(body, "top_p", 0.0, 1.0);
    if (top_p) chat["top_p"] = *top_p;

    Json reasoning = {{"effort", nullptr}, {"summary", nullptr}};
    if (auto re = body.find("reasoning"); re != body.end() && !re->is_null()) {
        if (!re->is_object()) throw bad_request("'reasoning' must be an object", "reasoning");
        if (auto e = re->find("effort"); e != re->end() && !e->is_null()) {
            // The efforts chat's reasoning_effort takes; the encoder maps them onto V4's.
            static constexpr const char* kEfforts[] = {"none", "minimal", "low", "medium", "high", "xhigh", "max"};
            const std::string v = e->is_string() ? e->get<std::string>() : e->dump();
            if (!e->is_string() || std::find(std::begin(kEfforts), std::end(kEfforts), v) == std::end(kEfforts))
                throw bad_request(
                    fmt::format("reasoning.effort is '{}'; accepted: none, minimal, low, medium, high, xhigh, max", v),
                    "reasoning.effort");
            chat["reasoning_effort"] = v;
            reasoning["effort"] = v;
        }
        if (auto s = re->find("summary"); s != re->end() && !s->is_null()) {
            if (!s->is_string()) throw bad_request("reasoning.summary must be a string", "reasoning.summary");
            reasoning["summary"] = *s;
        }
    }
    Json text = {{"format", {{"type", "text"}}}};
    if (auto t = body.find("text"); t != body.end() && !t->is_null()) {
        if (auto rf = convert_text_format(*t)) chat["response_format"] = std::move(*rf);
        text = *t;
    }
    r.stream = opt_bool(body, "stream").value_or(false);
    r.store = opt_bool(body, "store").value_or(true);
    const bool parallel = opt_bool(body, "parallel_tool_calls").value_or(true);
    Json metadata = Json::object();
    if (auto m = body.find("metadata"); m != body.end() && !m->is_null()) {
        if (!m->is_object()) throw bad_request("'metadata' must be an object", "metadata");
        metadata = *m;
    }
    r.echo = {{"instructions", instructions ? Json(*instructions) : Json(nullptr)},
              {"max_output_tokens", max_output ? Json(*max_output) : Json(nullptr)},
              {"parallel_tool_calls", parallel},
              {"previous_response_id", prev ? Json(*prev) : Json(nullptr)},
              {"reasoning", std::move(reasoning)},
              {"store", r.store},
              {"temperature", temperature ? Json(*temperature) : Json(1.0)},
              {"text", std::move(text)},
              {"tool_choice", std::move(tool_choice)},
              {"tools", std::move(tools)},
              {"top_p", top_p ? Json(*top_p) : Json(1.0)},
              {"truncation", "disabled"},
              {"metadata", std::move(metadata)}};
    return r;
}

Json assistant_turn(const ParsedCompletion& pc) {
    Json m = {{"role", "assistant"}, {"content", pc.content}};
    if (!pc.reasoning.empty()) m["reasoning_content"] = pc.reasoning;
    if (!pc.tool_calls.empty()) {
        Json calls = Json::array();
        for (const auto& c : pc.tool_calls)
            calls.push_back(
                {{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
        m["tool_calls"] = std::move(calls);
    }
    return m;
}

Json responses_usage(const Usage& u, int64_t reasoning_tokens) {
    return {{"input_tokens", u.prompt_tokens},
            {"input_tokens_details", {{"cached_tokens", u.cached_tokens}}},
            {"output_tokens", u.completion_tokens},
            {"output_tokens_details", {{"reasoning_tokens", std::min(reasoning_tokens, u.completion_tokens)}}},
            {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

ResponseBuilder::ResponseBuilder(std::string id, int64_t created_at, std::string model, Json echo)
    : id_(std::move(id)) {
    response_ = {
        {"id", id_},        {"object", "response"},          {"created_at", created_at},  {"status", "in_progress"},
        {"error", nullptr}, {"incomplete_details", nullptr}, {"model", std::move(model)}, {"output", Json::array()},
        {"usage", nullptr}};
    for (auto& [k, v] : echo.items()) response_[k] = v;
}

SseEvent ResponseBuilder::event(const char* type, Json fields) {
    Json data = {{"type", type}};
    for (auto& [k, v] : fields.items()) data[k] = std::move(v);
    data["sequence_number"] = sequence_++;
    return {type, std::move(data)};
}

std::vector<SseEvent> ResponseBuilder::start() {
    std::vector<SseEvent> out;
    out.push_back(event("response.created", {{"response", response_}}));
    out.push_back(event("response.in_progress", {{"response", response_}}));
    return out;
}

void ResponseBuilder::open(Item kind, Json item, std::vector<SseEvent>& out) {
    close(out);
    open_ = kind;
    text_.clear();
    item_ = std::move(item);
    const int64_t index = static_cast<int64_t>(response_["output"].size());
    Json added = item_;
    added["status"] = "in_progress";
    out.push_back(event("response.output_item.added", {{"output_index", index}, {"item", std::move(added)}}));
    if (kind == Item::Reasoning || kind == Item::Message) {
        const Json part = kind == Item::Reasoning ? Json{{"type", "reasoning_text"}, {"text", ""}}
                                                  : Json{{"type", "output_text"},
                                                         {"text", ""},
                                                         {"annotations", Json::array()},
                                                         {"logprobs", Json::array()}};
        out.push_back(event("response.content_part.added",
                            {{"item_id", item_["id"]}, {"output_index", index}, {"content_index", 0}, {"part", part}}));
    }
}

void ResponseBuilder::close(std::vector<SseEvent>& out) {
    if (open_ == Item::None) return;
    const int64_t index = static_cast<int64_t>(response_["output"].size());
    const Json item_id = item_["id"];
    if (open_ == Item::FunctionCall) {
        item_["arguments"] = text_;
        out.push_back(
            event("response.function_call_arguments.done",
                  {{"item_id", item_id}, {"output_index", index}, {"name", item_["name"]}, {"arguments", text_}}));
    } else {
        const bool reasoning = open_ == Item::Reasoning;
        Json part = reasoning ? Json{{"type", "reasoning_text"}, {"text", text_}}
                              : Json{{"type", "output_text"},
                                     {"text", text_},
                                     {"annotations", Json::array()},
                                     {"logprobs", Json::array()}};
        Json done = {{"item_id", item_id}, {"output_index", index}, {"content_index", 0}, {"text", text_}};
        if (!reasoning) done["logprobs"] = Json::array();
        out.push_back(event(reasoning ? "response.reasoning_text.done" : "response.output_text.done", std::move(done)));
        out.push_back(event("response.content_part.done",
                            {{"item_id", item_id}, {"output_index", index}, {"content_index", 0}, {"part", part}}));
        item_["content"] = Json::array({std::move(part)});
    }
    item_["status"] = "completed";
    out.push_back(event("response.output_item.done", {{"output_index", index}, {"item", item_}}));
    response_["output"].push_back(std::move(item_));
    item_ = Json();
    text_.clear();
    open_ = Item::None;
}

std::vector<SseEvent> ResponseBuilder::push(const std::vector<ParseEvent>& events) {
    std::vector<SseEvent> out;
    const std::string base = id_.substr(id_.find('_') + 1);
    for (const auto& ev : events) {
        const int64_t index = static_cast<int64_t>(response_["output"].size());
        switch (ev.kind) {
            case ParseEventKind::Reasoning:
                if (ev.text.empty()) break;
                if (open_ != Item::Reasoning)
                    open(Item::Reasoning,
                         {{"id", fmt::format("rs_{}_{}", base, n_reasoning_++)},
                          {"type", "reasoning"},
                          {"summary", Json::array()},
                          {"content", Json::array()}},
                         out);
                text_ += ev.text;
                out.push_back(event("response.reasoning_text.delta", {{"item_id", item_["id"]},
                                                                      {"output_index", response_["output"].size()},
                                                                      {"content_index", 0},
                                                                      {"delta", ev.text}}));
                break;
            case ParseEventKind::Content:
                if (ev.text.empty()) break;
                if (open_ != Item::Message)
                    open(Item::Message,
                         {{"id", fmt::format("msg_{}_{}", base, n_messages_++)},
                          {"type", "message"},
                          {"role", "assistant"},
                          {"content", Json::array()}},
                         out);
                text_ += ev.text;
                out.push_back(event("response.output_text.delta", {{"item_id", item_["id"]},
                                                                   {"output_index", response_["output"].size()},
                                                                   {"content_index", 0},
                                                                   {"delta", ev.text},
                                                                   {"logprobs", Json::array()}}));
                break;
            case ParseEventKind::ToolCallBegin:
                open(Item::FunctionCall,
                     {{"id", fmt::format("fc_{}_{}", base, ev.index)},
                      {"type", "function_call"},
                      {"call_id", ev.id},
                      {"name", ev.name},
                      {"arguments", ""}},
                     out);
                break;
            case ParseEventKind::ToolCallArgs:
                if (open_ != Item::FunctionCall || ev.text.empty()) break;
                text_ += ev.text;
                out.push_back(event("response.function_call_arguments.delta",
                                    {{"item_id", item_["id"]}, {"output_index", index}, {"delta", ev.text}}));
                break;
            case ParseEventKind::ToolCallEnd:
                if (open_ == Item::FunctionCall) close(out);
                break;
        }
    }
    return out;
}

std::vector<SseEvent> ResponseBuilder::finish(const EngineEvent& last, int64_t reasoning_tokens) {
    std::vector<SseEvent> out;
    close(out);
    ended_ = true;
    const bool cut = last.finish_reason == FinishReason::Length;
    response_["status"] = cut ? "incomplete" : "completed";
    response_["incomplete_details"] = cut ? Json{{"reason", "max_output_tokens"}} : Json(nullptr);
    response_["usage"] = responses_usage(last.usage, reasoning_tokens);
    out.push_back(event(cut ? "response.incomplete" : "response.completed", {{"response", response_}}));
    return out;
}

std::vector<SseEvent> ResponseBuilder::fail(const std::string& message) {
    std::vector<SseEvent> out;
    // The open item is left out: a failed response's partial output is not an answer.
    open_ = Item::None;
    item_ = Json();
    text_.clear();
    ended_ = true;
    response_["status"] = "failed";
    response_["error"] = {{"code", "server_error"}, {"message", message}};
    out.push_back(event("response.failed", {{"response", response_}}));
    return out;
}

void ResponseBuilder::check_integrity() const {
    ONECARD_CHECK(response_["output"].is_array(), "response builder: output is not an array");
    ONECARD_CHECK(!ended_ || open_ == Item::None, "response builder: an item is open after the response ended");
    ONECARD_CHECK(open_ != Item::None || text_.empty(), "response builder: text held with no item open");
    for (const auto& item : response_["output"])
        ONECARD_CHECK(item.contains("id") && item.value("status", "") == "completed",
                      "response builder: output item without id or not completed: {}", dump_json(item));
}

}  // namespace onecard::server
