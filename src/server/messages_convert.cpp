#include "server/messages_convert.h"

#include "core/error.h"
#include "server/api_error.h"
#include "server/request_params.h"

#include <fmt/format.h>

#include <limits>

namespace onecard::server {

namespace {

// A block's "type" (every Anthropic content block has one).
std::string block_type(const Json& block, const std::string& where) {
    if (!block.is_object()) throw bad_request(where + " must be an object", where);
    auto t = block.find("type");
    if (t == block.end() || !t->is_string()) throw bad_request(where + ".type must be a string", where + ".type");
    return t->get<std::string>();
}

// Text blocks as OpenAI content parts (the chat encoder joins text parts with a blank line). A string
// stays a string.
Json text_content(const Json& content, const std::string& where) {
    if (content.is_string()) return content;
    if (!content.is_array()) throw bad_request(where + " must be a string or an array of text blocks", where);
    Json parts = Json::array();
    for (size_t j = 0; j < content.size(); ++j) {
        const std::string w = fmt::format("{}[{}]", where, j);
        const std::string type = block_type(content[j], w);
        if (type != "text") throw bad_request(fmt::format("{}.type must be \"text\", got '{}'", w, type), w + ".type");
        parts.push_back({{"type", "text"}, {"text", required_string(content[j], "text", w)}});
    }
    return parts;
}

// A user message's blocks in order: runs of text become user messages, each tool_result a tool message.
void convert_user(const Json& content, const std::string& where, Json& out) {
    if (content.is_string()) {
        out.push_back({{"role", "user"}, {"content", content}});
        return;
    }
    Json parts = Json::array();
    auto flush = [&] {
        if (!parts.empty()) out.push_back({{"role", "user"}, {"content", std::move(parts)}});
        parts = Json::array();
    };
    for (size_t j = 0; j < content.size(); ++j) {
        const Json& b = content[j];
        const std::string w = fmt::format("{}[{}]", where, j);
        const std::string type = block_type(b, w);
        if (type == "text") {
            parts.push_back({{"type", "text"}, {"text", required_string(b, "text", w)}});
        } else if (type == "tool_result") {
            flush();
            Json m = {{"role", "tool"}, {"tool_call_id", required_string(b, "tool_use_id", w)}};
            Json c = "";
            if (auto it = b.find("content"); it != b.end() && !it->is_null()) c = text_content(*it, w + ".content");
            if (auto e = b.find("is_error"); e != b.end() && !e->is_null()) {
                if (!e->is_boolean()) throw bad_request(w + ".is_error must be a boolean", w + ".is_error");
                // The model has no flag for a failed call: the text says so.
                if (e->get<bool>()) {
                    if (c.is_string())
                        c = "Error: " + c.get<std::string>();
                    else
                        c.insert(c.begin(), Json{{"type", "text"}, {"text", "Error:"}});
                }
            }
            m["content"] = std::move(c);
            out.push_back(std::move(m));
        } else {
            throw bad_request(
                fmt::format("{}.type '{}' is not supported in a user message (text and tool_result are)", w, type),
                w + ".type");
        }
    }
    flush();
}

void convert_assistant(const Json& content, const std::string& where, Json& out) {
    Json m = {{"role", "assistant"}};
    if (content.is_string()) {
        m["content"] = content;
        out.push_back(std::move(m));
        return;
    }
    std::string text, thinking;
    Json calls = Json::array();
    for (size_t j = 0; j < content.size(); ++j) {
        const Json& b = content[j];
        const std::string w = fmt::format("{}[{}]", where, j);
        const std::string type = block_type(b, w);
        if (type == "text") {
            text += required_string(b, "text", w);
        } else if (type == "thinking") {
            thinking += required_string(b, "thinking", w);
        } else if (type == "redacted_thinking") {
            continue;  // opaque to us; DeepSeek never produces it
        } else if (type == "tool_use") {
            auto input = b.find("input");
            if (input == b.end() || !input->is_object())
                throw bad_request(w + ".input must be an object", w + ".input");
            calls.push_back(
                {{"id", required_string(b, "id", w)},
                 {"type", "function"},
                 {"function", {{"name", required_string(b, "name", w)}, {"arguments", dump_json(*input)}}}});
        } else {
            throw bad_request(
                fmt::format("{}.type '{}' is not supported in an assistant message (text, thinking, tool_use are)", w,
                            type),
                w + ".type");
        }
    }
    m["content"] = text;
    if (!thinking.empty()) m["reasoning_content"] = thinking;
    if (!calls.empty()) m["tool_calls"] = std::move(calls);
    out.push_back(std::move(m));
}

Json convert_tools(const Json& tools) {
    if (!tools.is_array()) throw bad_request("'tools' must be an array", "tools");
    Json out = Json::array();
    for (size_t i = 0; i < tools.size(); ++i) {
        const Json& t = tools[i];
        const std::string w = fmt::format("tools[{}]", i);
        if (!t.is_object()) throw bad_request(w + " must be an object", w);
        if (auto type = t.find("type"); type != t.end() && !type->is_null() && *type != "custom")
            throw bad_request(fmt::format("{}.type '{}' is not supported: only client tools (name, input_schema) are",
                                          w, type->is_string() ? type->get<std::string>() : type->dump()),
                              w + ".type");
        Json fn = {{"name", required_string(t, "name", w)}};
        if (auto d = t.find("description"); d != t.end() && !d->is_null()) {
            if (!d->is_string()) throw bad_request(w + ".description must be a string", w + ".description");
            fn["description"] = *d;
        }
        auto schema = t.find("input_schema");
        if (schema == t.end() || !schema->is_object())
            throw bad_request(w + ".input_schema must be a JSON Schema object", w + ".input_schema");
        fn["parameters"] = *schema;
        out.push_back({{"type", "function"}, {"function", std::move(fn)}});
    }
    return out;
}

Json convert_tool_choice(const Json& tc) {
    const std::string shape = "'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}";
    if (!tc.is_object()) throw bad_request(shape, "tool_choice");
    const std::string type = block_type(tc, "tool_choice");
    if (auto d = tc.find("disable_parallel_tool_use"); d != tc.end() && !d->is_null() && !d->is_boolean())
        throw bad_request("tool_choice.disable_parallel_tool_use must be a boolean",
                          "tool_choice.disable_parallel_tool_use");
    if (type == "auto") return "auto";
    if (type == "any") return "required";
    if (type == "none") return "none";
    if (type == "tool")
        return Json{{"type", "function"}, {"function", {{"name", required_string(tc, "name", "tool_choice")}}}};
    throw bad_request(fmt::format("tool_choice.type must be auto, any, tool or none, got '{}'", type),
                      "tool_choice.type");
}

}  // namespace

MessagesRequest messages_to_chat(const Json& body, MessagesRoute route) {
    MessagesRequest r;
    Json& chat = r.chat_body;
    chat = Json::object();
    if (auto m = body.find("model"); m != body.end()) chat["model"] = *m;

    Json messages = Json::array();
    if (auto sys = body.find("system"); sys != body.end() && !sys->is_null())
        messages.push_back({{"role", "system"}, {"content", text_content(*sys, "system")}});
    auto it = body.find("messages");
    if (it == body.end() || it->is_null()) throw bad_request("'messages' is required", "messages");
    if (!it->is_array() || it->empty()) throw bad_request("'messages' must be a non-empty array", "messages");
    for (size_t i = 0; i < it->size(); ++i) {
        const Json& m = (*it)[i];
        const std::string where = fmt::format("messages[{}]", i);
        if (!m.is_object()) throw bad_request(where + " must be an object", where);
        auto role = m.find("role");
        if (role == m.end() || !role->is_string() || (*role != "user" && *role != "assistant"))
            throw bad_request(where + ".role must be \"user\" or \"assistant\"", where + ".role");
        auto content = m.find("content");
        if (content == m.end() || !(content->is_string() || content->is_array()))
            throw bad_request(where + ".content must be a string or an array of content blocks", where + ".content");
        if (*role == "user")
            convert_user(*content, where + ".content", messages);
        else
            convert_assistant(*content, where + ".content", messages);
    }
    // A last assistant message is a prefill: the answer continues it.
    if ((*it)[it->size() - 1]["role"] == "assistant") chat["continue_final_message"] = true;
    chat["messages"] = std::move(messages);

    if (auto t = body.find("tools"); t != body.end() && !t->is_null()) chat["tools"] = convert_tools(*t);
    if (auto tc = body.find("tool_choice"); tc != body.end() && !tc->is_null())
        chat["tool_choice"] = convert_tool_choice(*tc);

    std::optional<int64_t> max_tokens;
    if (route == MessagesRoute::Create) {
        max_tokens = opt_int(body, "max_tokens", 1, std::numeric_limits<int64_t>::max());
        if (!max_tokens) throw bad_request("'max_tokens' is required", "max_tokens");
        chat["max_tokens"] = *max_tokens;
        if (auto st = body.find("stop_sequences"); st != body.end() && !st->is_null()) {
            if (!st->is_array()) throw bad_request("'stop_sequences' must be an array of strings", "stop_sequences");
            if (st->size() > 16) throw bad_request("'stop_sequences' may hold at most 16 strings", "stop_sequences");
            for (const auto& s : *st)
                if (!s.is_string() || s.get<std::string>().empty())
                    throw bad_request("'stop_sequences' must hold non-empty strings", "stop_sequences");
            if (!st->empty()) chat["stop"] = *st;
        }
        // Anthropic's temperature range is [0, 1].
        if (auto t = opt_number(body, "temperature", 0.0, 1.0)) chat["temperature"] = *t;
        if (auto p = opt_number(body, "top_p", 0.0, 1.0)) chat["top_p"] = *p;
        if (auto k = opt_int(body, "top_k", 0, std::numeric_limits<int32_t>::max())) chat["top_k"] = *k;
        r.stream = opt_bool(body, "stream").value_or(false);
    }

    if (auto th = body.find("thinking"); th != body.end() && !th->is_null()) {
        if (!th->is_object()) throw bad_request("'thinking' must be an object", "thinking");
        const std::string type = block_type(*th, "thinking");
        if (type == "enabled") {
            std::optional<int64_t> b;
            try {
                b = opt_int(*th, "budget_tokens", 1024, std::numeric_limits<int64_t>::max());
            } catch (const ApiError&) {
                throw bad_request("thinking.budget_tokens must be an integer >= 1024", "thinking.budget_tokens");
            }
            if (!b)
                throw bad_request("thinking.budget_tokens is required when thinking is enabled",
                                  "thinking.budget_tokens");
            if (max_tokens && *b >= *max_tokens)
                throw bad_request(
                    fmt::format("thinking.budget_tokens ({}) must be less than max_tokens ({})", *b, *max_tokens),
                    "thinking.budget_tokens");
            r.thinking = true;
        } else if (type != "disabled") {
            throw bad_request(fmt::format("thinking.type must be \"enabled\" or \"disabled\", got '{}'", type),
                              "thinking.type");
        }
    }
    chat["chat_template_kwargs"] = {{"thinking", r.thinking}};
    return r;
}

StopReason anthropic_stop_reason(const EngineEvent& last, const ParsedCompletion& pc) {
    if (last.finish_reason == FinishReason::Length) return {"max_tokens", {}};
    if (!pc.tool_calls.empty()) return {"tool_use", {}};
    if (!last.stop_string.empty()) return {"stop_sequence", last.stop_string};
    return {"end_turn", {}};
}

Json anthropic_usage(const Usage& u) {
    return {{"input_tokens", u.prompt_tokens - u.cached_tokens},
            {"output_tokens", u.completion_tokens},
            {"cache_creation_input_tokens", 0},
            {"cache_read_input_tokens", u.cached_tokens}};
}

std::string thinking_signature(const std::string& thinking) {
    uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
    for (unsigned char c : thinking) h = (h ^ c) * 0x100000001b3ull;
    return fmt::format("onecard-{:016x}", h);
}

namespace {
Json tool_use_block(const ParsedToolCall& c) {
    // The parser's arguments are a JSON object's text; an unparsable one (a truncated call) stays as
    // {} rather than failing the whole answer.
    Json input = Json::parse(c.arguments, nullptr, false);
    if (!input.is_object()) input = Json::object();
    return {{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", std::move(input)}};
}
}  // namespace

Json messages_response(const std::string& id, const std::string& model, const ParsedCompletion& pc,
                       const StopReason& stop, const Usage& usage) {
    Json content = Json::array();
    if (!pc.reasoning.empty())
        content.push_back(
            {{"type", "thinking"}, {"thinking", pc.reasoning}, {"signature", thinking_signature(pc.reasoning)}});
    if (!pc.content.empty()) content.push_back({{"type", "text"}, {"text", pc.content}});
    for (const auto& c : pc.tool_calls) content.push_back(tool_use_block(c));
    return {{"id", id},
            {"type", "message"},
            {"role", "assistant"},
            {"model", model},
            {"content", std::move(content)},
            {"stop_reason", stop.reason},
            {"stop_sequence", stop.stop_sequence.empty() ? Json(nullptr) : Json(stop.stop_sequence)},
            {"usage", anthropic_usage(usage)}};
}

MessagesStreamEncoder::MessagesStreamEncoder(std::string id, std::string model, int64_t n_prompt_tokens)
    : id_(std::move(id)), model_(std::move(model)), n_prompt_(n_prompt_tokens) {}

std::vector<SseEvent> MessagesStreamEncoder::start() {
    started_ = true;
    Json msg = {{"id", id_},
                {"type", "message"},
                {"role", "assistant"},
                {"model", model_},
                {"content", Json::array()},
                {"stop_reason", nullptr},
                {"stop_sequence", nullptr},
                {"usage", {{"input_tokens", n_prompt_}, {"output_tokens", 0}}}};
    return {{"message_start", {{"type", "message_start"}, {"message", std::move(msg)}}}};
}

void MessagesStreamEncoder::open(Block kind, Json content_block, std::vector<SseEvent>& out) {
    close(out);
    open_ = kind;
    out.push_back(
        {"content_block_start",
         {{"type", "content_block_start"}, {"index", n_blocks_}, {"content_block", std::move(content_block)}}});
    ++n_blocks_;
}

void MessagesStreamEncoder::close(std::vector<SseEvent>& out) {
    if (open_ == Block::None) return;
    const int index = n_blocks_ - 1;
    if (open_ == Block::Thinking) {
        out.push_back({"content_block_delta",
                       {{"type", "content_block_delta"},
                        {"index", index},
                        {"delta", {{"type", "signature_delta"}, {"signature", thinking_signature(thinking_)}}}}});
        thinking_.clear();
    }
    out.push_back({"content_block_stop", {{"type", "content_block_stop"}, {"index", index}}});
    open_ = Block::None;
}

std::vector<SseEvent> MessagesStreamEncoder::push(const std::vector<ParseEvent>& events) {
    std::vector<SseEvent> out;
    auto delta = [&](Json d) {
        out.push_back({"content_block_delta",
                       {{"type", "content_block_delta"}, {"index", n_blocks_ - 1}, {"delta", std::move(d)}}});
    };
    for (const auto& ev : events) {
        switch (ev.kind) {
            case ParseEventKind::Reasoning:
                if (ev.text.empty()) break;
                if (open_ != Block::Thinking)
                    open(Block::Thinking, {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}, out);
                thinking_ += ev.text;
                delta({{"type", "thinking_delta"}, {"thinking", ev.text}});
                break;
            case ParseEventKind::Content:
                if (ev.text.empty()) break;
                if (open_ != Block::Text) open(Block::Text, {{"type", "text"}, {"text", ""}}, out);
                delta({{"type", "text_delta"}, {"text", ev.text}});
                break;
            case ParseEventKind::ToolCallBegin:
                open(Block::ToolUse,
                     {{"type", "tool_use"}, {"id", ev.id}, {"name", ev.name}, {"input", Json::object()}}, out);
                break;
            case ParseEventKind::ToolCallArgs:
                if (open_ == Block::ToolUse && !ev.text.empty())
                    delta({{"type", "input_json_delta"}, {"partial_json", ev.text}});
                break;
            case ParseEventKind::ToolCallEnd:
                if (open_ == Block::ToolUse) close(out);
                break;
        }
    }
    return out;
}

std::vector<SseEvent> MessagesStreamEncoder::finish(const StopReason& stop, const Usage& usage) {
    std::vector<SseEvent> out;
    close(out);
    finished_ = true;
    out.push_back({"message_delta",
                   {{"type", "message_delta"},
                    {"delta",
                     {{"stop_reason", stop.reason},
                      {"stop_sequence", stop.stop_sequence.empty() ? Json(nullptr) : Json(stop.stop_sequence)}}},
                    {"usage", anthropic_usage(usage)}}});
    out.push_back({"message_stop", {{"type", "message_stop"}}});
    return out;
}

void MessagesStreamEncoder::check_integrity() const {
    ONECARD_CHECK(n_blocks_ >= 0, "messages stream: negative block count {}", n_blocks_);
    ONECARD_CHECK(open_ == Block::None || n_blocks_ > 0, "messages stream: a block is open but none was started");
    ONECARD_CHECK(!finished_ || open_ == Block::None, "messages stream: a block is still open after message_stop");
    ONECARD_CHECK(started_ || n_blocks_ == 0, "messages stream: a block was started before message_start");
    ONECARD_CHECK(open_ == Block::Thinking || thinking_.empty(), "messages stream: thinking text outside a block");
}

}  // namespace onecard::server
