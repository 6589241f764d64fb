// Follows the official encoder's control flow step by step (merge tool messages -> order tool results ->
// drop old reasoning -> render each message with its transition); comments name the Python function each
// part corresponds to so a later encoder revision can be diffed against this file.
#include "tokenizer/chat_encoding.h"

#include "core/error.h"
#include "tokenizer/chat_tokens.h"

#include <algorithm>
#include <map>
#include <optional>
#include <vector>

namespace onecard {
namespace {

using namespace std::string_view_literals;

constexpr std::string_view kEffortV4Max =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root "
    "cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial "
    "scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
    "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n";
// 0731 "high" reuses the V4 "max" text; 0731 "max" is new.
constexpr std::string_view kEffort0731Max =
    "Reasoning Effort: Beyond maximum \u2014 exhaustive, relentless, and uncompromising.\n"
    "You MUST reason with the utmost depth and rigor, leaving absolutely nothing to chance: exhaustively "
    "decompose the problem into its most fundamental components, trace every causal chain to its root, and "
    "resolve the underlying cause rather than any surface symptom.\n"
    "Do not stop reasoning until you have independently verified the solution from multiple angles and are "
    "certain that no assumption remains unchecked and no error remains undiscovered.\n\n";

constexpr std::string_view kToolsHead =
    "## Tools\n\n"
    "You have access to a set of tools to help answer the user's question. You can invoke tools by writing a "
    "\"<｜DSML｜tool_calls>\" block like the following:\n\n"
    "<｜DSML｜tool_calls>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME\">\n"
    "<｜DSML｜parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</｜DSML｜parameter>\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "</｜DSML｜tool_calls>\n\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other types (numbers, "
    "booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside "
    "<think>...</think> BEFORE any tool calls or final response.\n\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n\n"
    "### Available Tool Schemas\n\n";
constexpr std::string_view kToolsTail =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";
constexpr std::string_view kResponseFormatHead =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

const std::map<std::string, std::string_view, std::less<>> kTaskTokens = {
    {"action", "<｜action｜>"}, {"query", "<｜query｜>"}, {"authority", "<｜authority｜>"},
    {"domain", "<｜domain｜>"}, {"title", "<｜title｜>"}, {"read_url", "<｜read_url｜>"},
};

struct ToolCallIn {
    std::string id;
    std::string name;
    OrderedJson arguments;  // usually a JSON string; anything else is encoded as the official code does
};

struct Block {
    bool is_tool_result = false;
    std::string text;         // text, or the tool result already flattened to text
    std::string tool_use_id;  // tool results only
};

// One message in the encoder's internal form (after merge_tool_messages).
struct Msg {
    std::string role;
    std::string content;
    bool has_blocks = false;  // "content_blocks" present (every merged user message)
    std::vector<Block> blocks;
    OrderedJson tools;            // [n_tools] OpenAI tool objects, or null
    OrderedJson response_format;  // or null
    std::vector<ToolCallIn> tool_calls;
    std::string reasoning;
    bool wo_eos = false;
    std::optional<std::string> task;
};

std::string where(size_t i) {
    return fmt::format("messages[{}]", i);
}

std::string text_or_empty(const OrderedJson& v, const std::string& what) {
    if (v.is_null()) return "";
    ONECARD_CHECK(v.is_string(), "chat: {} must be a string or null, got {}", what, v.type_name());
    return v.get<std::string>();
}

// part.get("type") as a string: "" when absent or null, a clear error when it is another kind (nlohmann's
// value() would throw its own type_error, which names no field).
std::string type_of(const OrderedJson& part, const std::string& what) {
    if (!part.contains("type") || part["type"].is_null()) return "";
    ONECARD_CHECK(part["type"].is_string(), "chat: {}.type must be a string, got {}", what, part["type"].type_name());
    return part["type"].get<std::string>();
}

// Python's str() of part.get("type") in "[Unsupported <type>]": None when absent or null.
std::string type_shown(const OrderedJson& part, const std::string& type) {
    return !part.contains("type") || part["type"].is_null() ? std::string("None") : type;
}

// Tool results may carry a list of parts: text parts joined by a blank line, others marked unsupported.
std::string tool_content_text(const OrderedJson& v, const std::string& what) {
    if (!v.is_array()) return text_or_empty(v, what);
    std::string out;
    for (size_t i = 0; i < v.size(); ++i) {
        const auto& part = v[i];
        ONECARD_CHECK(part.is_object(), "chat: {}[{}] must be an object", what, i);
        if (i) out += "\n\n";
        const std::string type = type_of(part, fmt::format("{}[{}]", what, i));
        if (type == "text")
            out += text_or_empty(part.value("text", OrderedJson()), what + ".text");
        else
            out += fmt::format("[Unsupported {}]", type_shown(part, type));
    }
    return out;
}

Msg parse_message(const OrderedJson& m, size_t i) {
    ONECARD_CHECK(m.is_object(), "chat: {} must be an object", where(i));
    ONECARD_CHECK(m.contains("role") && m["role"].is_string(), "chat: {} has no string 'role'", where(i));
    Msg msg;
    msg.role = m["role"].get<std::string>();
    const OrderedJson content = m.value("content", OrderedJson());
    msg.content = msg.role == "tool" ? tool_content_text(content, where(i) + ".content")
                                     : text_or_empty(content, where(i) + ".content");
    if (m.contains("tools") && json_truthy(m["tools"])) {
        ONECARD_CHECK(m["tools"].is_array(), "chat: {}.tools must be an array", where(i));
        msg.tools = m["tools"];
    }
    if (m.contains("response_format")) msg.response_format = m["response_format"];
    msg.reasoning = text_or_empty(m.value("reasoning_content", OrderedJson()), where(i) + ".reasoning_content");
    msg.wo_eos = m.contains("wo_eos") && json_truthy(m["wo_eos"]);
    if (m.contains("task") && !m["task"].is_null()) {
        ONECARD_CHECK(m["task"].is_string() && kTaskTokens.count(m["task"].get<std::string>()),
                      "chat: {}.task must be one of action, query, authority, domain, title, read_url", where(i));
        msg.task = m["task"].get<std::string>();
    }
    if (m.contains("tool_calls") && json_truthy(m["tool_calls"])) {
        const auto& tcs = m["tool_calls"];
        ONECARD_CHECK(tcs.is_array(), "chat: {}.tool_calls must be an array", where(i));
        for (size_t k = 0; k < tcs.size(); ++k) {
            const auto& tc = tcs[k];
            const std::string w = fmt::format("{}.tool_calls[{}]", where(i), k);
            ONECARD_CHECK(tc.is_object() && tc.contains("function") && tc["function"].is_object(),
                          "chat: {} has no 'function' object", w);
            const auto& fn = tc["function"];
            ONECARD_CHECK(fn.contains("name") && fn["name"].is_string(), "chat: {}.function.name missing", w);
            ONECARD_CHECK(fn.contains("arguments"), "chat: {}.function.arguments missing", w);
            ToolCallIn call;
            call.name = fn["name"].get<std::string>();
            call.arguments = fn["arguments"];
            // sort_tool_results_by_call_order: tc.get("id") or tc["function"].get("id", "")
            if (tc.contains("id") && json_truthy(tc["id"]) && tc["id"].is_string())
                call.id = tc["id"].get<std::string>();
            else if (fn.contains("id") && fn["id"].is_string())
                call.id = fn["id"].get<std::string>();
            msg.tool_calls.push_back(std::move(call));
        }
    }
    return msg;
}

// merge_tool_messages: tool messages become tool_result blocks of a user message; consecutive user turns
// (and tool results followed by user text) collapse into one user message whose blocks join with "\n\n".
std::vector<Msg> merge_tool_messages(const OrderedJson& messages) {
    ONECARD_CHECK(messages.is_array(), "chat: messages must be an array");
    std::vector<Msg> merged;
    for (size_t i = 0; i < messages.size(); ++i) {
        Msg msg = parse_message(messages[i], i);
        const bool prev_user_blocks = !merged.empty() && merged.back().role == "user" && merged.back().has_blocks;
        if (msg.role == "tool") {
            Block b{true, msg.content, ""};
            const auto& raw = messages[i];
            if (raw.contains("tool_call_id") && raw["tool_call_id"].is_string())
                b.tool_use_id = raw["tool_call_id"].get<std::string>();
            if (prev_user_blocks) {
                merged.back().blocks.push_back(std::move(b));
            } else {
                Msg u;
                u.role = "user";
                u.has_blocks = true;
                u.blocks.push_back(std::move(b));
                merged.push_back(std::move(u));
            }
        } else if (msg.role == "user") {
            Block b{false, msg.content, ""};
            if (prev_user_blocks && !merged.back().task) {
                merged.back().blocks.push_back(std::move(b));
            } else {
                // The official code rebuilds user messages with only content/task/wo_eos (tools are dropped).
                Msg u;
                u.role = "user";
                u.content = msg.content;
                u.has_blocks = true;
                u.blocks.push_back(std::move(b));
                u.task = msg.task;
                u.wo_eos = msg.wo_eos;
                merged.push_back(std::move(u));
            }
        } else {
            merged.push_back(std::move(msg));
        }
    }
    return merged;
}

// sort_tool_results_by_call_order: tool_result blocks follow the latest assistant's call order (stable; ids
// the assistant did not issue sort as position 0).
void sort_tool_results_by_call_order(std::vector<Msg>& messages) {
    std::map<std::string, size_t> order;
    for (Msg& msg : messages) {
        if (msg.role == "assistant" && !msg.tool_calls.empty()) {
            order.clear();
            for (size_t k = 0; k < msg.tool_calls.size(); ++k)
                if (!msg.tool_calls[k].id.empty()) order[msg.tool_calls[k].id] = k;
        } else if (msg.role == "user" && !msg.blocks.empty()) {
            std::vector<Block> results;
            for (const Block& b : msg.blocks)
                if (b.is_tool_result) results.push_back(b);
            if (results.size() <= 1 || order.empty()) continue;
            auto rank = [&](const Block& b) {
                auto it = order.find(b.tool_use_id);
                return it == order.end() ? size_t{0} : it->second;
            };
            std::stable_sort(results.begin(), results.end(),
                             [&](const Block& a, const Block& b) { return rank(a) < rank(b); });
            size_t next = 0;
            for (Block& b : msg.blocks)
                if (b.is_tool_result) b = results[next++];
        }
    }
}

int find_last_user_index(const std::vector<Msg>& messages) {
    for (int i = static_cast<int>(messages.size()) - 1; i >= 0; --i)
        if (messages[static_cast<size_t>(i)].role == "user" || messages[static_cast<size_t>(i)].role == "developer")
            return i;
    return -1;
}

// _drop_thinking_messages: before the last user turn, assistant reasoning is removed and developer turns
// disappear entirely.
std::vector<Msg> drop_thinking_messages(const std::vector<Msg>& messages) {
    const int last_user = find_last_user_index(messages);
    std::vector<Msg> out;
    for (size_t i = 0; i < messages.size(); ++i) {
        const Msg& m = messages[i];
        const bool keep_role = m.role == "user" || m.role == "system" || m.role == "tool" ||
                               m.role == "latest_reminder" || m.role == "direct_search_results";
        if (keep_role || static_cast<int>(i) >= last_user) {
            out.push_back(m);
        } else if (m.role == "assistant") {
            Msg copy = m;
            copy.reasoning.clear();
            out.push_back(std::move(copy));
        }
    }
    return out;
}

std::string render_tools(const OrderedJson& tools) {
    std::string out(kToolsHead);
    for (size_t i = 0; i < tools.size(); ++i) {
        ONECARD_CHECK(tools[i].is_object() && tools[i].contains("function"), "chat: tools[{}] has no 'function' object",
                      i);
        if (i) out += "\n";
        py_json_dump_to(out, tools[i]["function"]);
    }
    out += kToolsTail;
    return out;
}

void append_tools_and_format(std::string& out, const Msg& m) {
    if (!m.tools.is_null()) out += "\n\n" + render_tools(m.tools);
    if (json_truthy(m.response_format)) {
        out += "\n\n";
        out += kResponseFormatHead;
        py_json_dump_to(out, m.response_format);
    }
}

// encode_arguments_to_dsml: one <parameter> per top-level key; strings raw, everything else as JSON.
std::string encode_arguments_to_dsml(const ToolCallIn& call) {
    OrderedJson args;
    bool parsed = false;
    if (call.arguments.is_string()) {
        args = OrderedJson::parse(call.arguments.get_ref<const std::string&>(), nullptr, false);
        parsed = !args.is_discarded();
    }
    if (!parsed) args = OrderedJson{{"arguments", call.arguments}};  // what the official fallback does
    ONECARD_CHECK(args.is_object(), "chat: arguments of tool call '{}' are JSON but not an object", call.name);
    std::string out;
    bool first = true;
    for (const auto& [key, value] : args.items()) {
        if (!first) out += "\n";
        first = false;
        const bool is_str = value.is_string();
        out += fmt::format("<{}parameter name=\"{}\" string=\"{}\">", dsv4::kDsml, key, is_str ? "true" : "false");
        if (is_str)
            out += value.get_ref<const std::string&>();
        else
            py_json_dump_to(out, value);
        out += fmt::format("</{}parameter>", dsv4::kDsml);
    }
    return out;
}

std::string_view effort_prefix(const EncodeOptions& opts) {
    if (opts.thinking_mode != ThinkingMode::Thinking) return {};
    if (opts.variant == ChatVariant::V4) return opts.reasoning_effort == ReasoningEffort::Max ? kEffortV4Max : "";
    switch (opts.reasoning_effort) {
        case ReasoningEffort::High:
            return kEffortV4Max;
        case ReasoningEffort::Max:
            return kEffort0731Max;
        default:
            return {};
    }
}

// render_message: one message plus the transition that follows it.
std::string render_message(size_t index, const std::vector<Msg>& messages, const EncodeOptions& opts,
                           bool drop_thinking) {
    const Msg& msg = messages[index];
    const int last_user = find_last_user_index(messages);
    const bool thinking = opts.thinking_mode == ThinkingMode::Thinking;
    std::string out;
    if (index == 0) out += effort_prefix(opts);

    if (msg.role == "system") {
        out += msg.content;
        append_tools_and_format(out, msg);
    } else if (msg.role == "developer") {
        ONECARD_CHECK(!msg.content.empty(), "chat: developer message {} has empty content", index);
        out += dsv4::kUser;
        out += msg.content;
        append_tools_and_format(out, msg);
    } else if (msg.role == "user") {
        out += dsv4::kUser;
        if (!msg.blocks.empty()) {
            for (size_t k = 0; k < msg.blocks.size(); ++k) {
                if (k) out += "\n\n";
                const Block& b = msg.blocks[k];
                if (b.is_tool_result)
                    out += "<tool_result>" + b.text + "</tool_result>";
                else
                    out += b.text;
            }
        } else {
            out += msg.content;
        }
    } else if (msg.role == "latest_reminder") {
        out += dsv4::kLatestReminder;
        out += msg.content;
    } else if (msg.role == "assistant") {
        std::string calls;
        if (!msg.tool_calls.empty()) {
            calls = fmt::format("\n\n<{}{}>\n", dsv4::kDsml, dsv4::kToolCallsBlock);
            for (size_t k = 0; k < msg.tool_calls.size(); ++k) {
                if (k) calls += "\n";
                calls += fmt::format("<{}invoke name=\"{}\">\n", dsv4::kDsml, msg.tool_calls[k].name);
                calls += encode_arguments_to_dsml(msg.tool_calls[k]);
                calls += fmt::format("\n</{}invoke>", dsv4::kDsml);
            }
            calls += fmt::format("\n</{}{}>", dsv4::kDsml, dsv4::kToolCallsBlock);
        }
        // An assistant answering a quick-instruction task never carries a reasoning block.
        const bool prev_has_task = index > 0 && messages[index - 1].task.has_value();
        if (thinking && !prev_has_task && (!drop_thinking || static_cast<int>(index) > last_user)) {
            out += msg.reasoning;
            out += dsv4::kThinkEnd;
        }
        out += msg.content;
        out += calls;
        if (!msg.wo_eos) out += dsv4::kEos;
    } else if (msg.role == "tool") {
        fail("chat: tool message {} was not merged into a user turn", index);
    } else {
        fail("chat: message {} has unknown role '{}'", index, msg.role);
    }

    // Transition: only when this is the last message or the next one is assistant / latest_reminder.
    if (index + 1 < messages.size()) {
        const std::string& next = messages[index + 1].role;
        if (next != "assistant" && next != "latest_reminder") return out;
    }
    if (msg.task) {
        const std::string_view token = kTaskTokens.at(*msg.task);
        if (*msg.task != "action") {
            out += token;
        } else {
            out += dsv4::kAssistant;
            out += thinking ? dsv4::kThinkStart : dsv4::kThinkEnd;
            out += token;
        }
    } else if (msg.role == "user" || msg.role == "developer") {
        out += dsv4::kAssistant;
        const bool open_think = thinking && (!drop_thinking || static_cast<int>(index) >= last_user);
        out += open_think ? dsv4::kThinkStart : dsv4::kThinkEnd;
    }
    return out;
}

ReasoningEffort map_effort(std::string_view s, ChatVariant variant) {
    if (s == "max" || s == "xhigh") return ReasoningEffort::Max;
    if (variant == ChatVariant::V4) return ReasoningEffort::High;  // V4 renders nothing below max
    if (s == "low" || s == "minimal" || s == "medium") return ReasoningEffort::Low;
    return ReasoningEffort::High;
}

// OpenAI content: a string, null, or a list of parts; text parts join with a blank line (as DeepSeek's
// multimodal encoder joins them). Tool messages keep non-text parts as "[Unsupported <type>]".
OrderedJson flatten_content(const OrderedJson& content, const std::string& role, size_t i) {
    if (content.is_null()) return "";
    if (!content.is_array()) return content;
    std::string out;
    for (size_t k = 0; k < content.size(); ++k) {
        const auto& part = content[k];
        if (k) out += "\n\n";
        if (part.is_string()) {
            out += part.get<std::string>();
            continue;
        }
        ONECARD_CHECK(part.is_object(), "chat: {}.content[{}] must be an object", where(i), k);
        const std::string type = type_of(part, fmt::format("{}.content[{}]", where(i), k));
        if (type == "text") {
            const OrderedJson text = part.value("text", OrderedJson());
            if (json_truthy(text)) out += text_or_empty(text, fmt::format("{}.content[{}].text", where(i), k));
        } else if (role == "tool") {
            out += fmt::format("[Unsupported {}]", type_shown(part, type));
        } else {
            fail("chat: {}.content[{}] has type '{}'; only text parts are supported", where(i), k, type);
        }
    }
    return out;
}

}  // namespace

const char* chat_variant_name(ChatVariant v) {
    return v == ChatVariant::V4 ? "v4" : "0731";
}

const char* reasoning_effort_name(ReasoningEffort e) {
    switch (e) {
        case ReasoningEffort::Low:
            return "low";
        case ReasoningEffort::High:
            return "high";
        case ReasoningEffort::Max:
            return "max";
        default:
            return "unset";
    }
}

std::string encode_messages(const OrderedJson& messages, const EncodeOptions& opts) {
    ONECARD_CHECK(!(opts.variant == ChatVariant::V4 && opts.reasoning_effort == ReasoningEffort::Low),
                  "chat: reasoning effort 'low' does not exist for the V4 encoder (use unset, high or max)");
    std::vector<Msg> full = merge_tool_messages(messages);
    sort_tool_results_by_call_order(full);

    std::string prompt = opts.add_bos ? std::string(dsv4::kBos) : std::string();
    bool drop = opts.drop_thinking;
    for (const Msg& m : full)
        if (!m.tools.is_null()) drop = false;  // tool conversations keep every reasoning block
    if (opts.thinking_mode == ThinkingMode::Thinking && drop) full = drop_thinking_messages(full);
    for (size_t i = 0; i < full.size(); ++i) prompt += render_message(i, full, opts, drop);
    return prompt;
}

ChatPrompt render_chat_request(const OrderedJson& request, ChatVariant variant) {
    ONECARD_CHECK(request.is_object(), "chat request: must be a JSON object");
    ONECARD_CHECK(request.contains("messages") && request["messages"].is_array() && !request["messages"].empty(),
                  "chat request: 'messages' must be a non-empty array");
    const OrderedJson kwargs = request.contains("chat_template_kwargs") && request["chat_template_kwargs"].is_object()
                                   ? request["chat_template_kwargs"]
                                   : OrderedJson::object();
    EncodeOptions opts;
    opts.variant = variant;
    bool thinking = true;
    if (kwargs.contains("thinking") || kwargs.contains("enable_thinking"))
        thinking = json_truthy(kwargs.value("thinking", OrderedJson())) ||
                   json_truthy(kwargs.value("enable_thinking", OrderedJson()));
    OrderedJson effort = kwargs.value("reasoning_effort", OrderedJson());
    if (!effort.is_string()) effort = request.value("reasoning_effort", OrderedJson());
    if (effort.is_string()) {
        const std::string e = effort.get<std::string>();
        if (e == "none")
            thinking = false;
        else
            opts.reasoning_effort = map_effort(e, variant);
    }
    opts.thinking_mode = thinking ? ThinkingMode::Thinking : ThinkingMode::Chat;
    if (kwargs.contains("drop_thinking")) opts.drop_thinking = json_truthy(kwargs["drop_thinking"]);

    OrderedJson messages = OrderedJson::array();
    const auto& in = request["messages"];
    for (size_t i = 0; i < in.size(); ++i) {
        ONECARD_CHECK(in[i].is_object() && in[i].contains("role") && in[i]["role"].is_string(),
                      "chat request: {} needs a string 'role'", where(i));
        OrderedJson m = in[i];
        const std::string role = m["role"].get<std::string>();
        m["content"] = flatten_content(m.value("content", OrderedJson()), role, i);
        if (!m.contains("reasoning_content") && m.contains("reasoning")) {
            m["reasoning_content"] = m["reasoning"];
            m.erase("reasoning");
        }
        if (m.contains("tool_calls") && m["tool_calls"].is_array()) {
            for (auto& tc : m["tool_calls"]) {
                if (!tc.is_object() || !tc.contains("function") || !tc["function"].is_object()) continue;
                auto& fn = tc["function"];
                if (!fn.contains("arguments"))
                    fn["arguments"] = "{}";
                else if (!fn["arguments"].is_string())
                    fn["arguments"] = py_json_dumps(fn["arguments"]);  // clients may send an object
            }
        }
        messages.push_back(std::move(m));
    }

    OrderedJson head_extra = OrderedJson::object();
    if (request.contains("tools") && json_truthy(request["tools"])) head_extra["tools"] = request["tools"];
    if (request.contains("response_format") && json_truthy(request["response_format"])) {
        const auto& rf = request["response_format"];
        ONECARD_CHECK(rf.is_object(), "chat request: response_format must be an object");
        if (type_of(rf, "response_format") != "text") head_extra["response_format"] = rf;
    }
    if (!head_extra.empty()) {
        const std::string first_role = messages[0]["role"].get<std::string>();
        if (first_role == "system" || first_role == "developer") {
            for (const auto& [k, v] : head_extra.items()) messages[0][k] = v;
        } else {
            OrderedJson sys = {{"role", "system"}, {"content", ""}};
            for (const auto& [k, v] : head_extra.items()) sys[k] = v;
            messages.insert(messages.begin(), std::move(sys));
        }
    }
    const bool continue_final =
        request.contains("continue_final_message") && json_truthy(request["continue_final_message"]);
    if (continue_final) {
        ONECARD_CHECK(messages.back()["role"] == "assistant",
                      "chat request: continue_final_message needs an assistant message last");
        messages.back()["wo_eos"] = true;
    }

    ChatPrompt out;
    out.text = encode_messages(messages, opts);
    out.options = opts;
    out.generation_in_reasoning =
        out.text.size() >= dsv4::kThinkStart.size() &&
        std::string_view(out.text).substr(out.text.size() - dsv4::kThinkStart.size()) == dsv4::kThinkStart;
    return out;
}

ChatPrompt render_chat_request_text(std::string_view request_json, ChatVariant variant) {
    // A request nested past this depth is refused while it is parsed (the parser itself is iterative),
    // so no recursive copy, render or destruction ever meets attacker-controlled depth; the server
    // refuses at a lower depth before it gets here (server/request_json.h), this guards the CLI.
    constexpr int kMaxDepth = 256;
    bool too_deep = false;
    const OrderedJson::parser_callback_t depth_guard = [&](int depth, OrderedJson::parse_event_t, OrderedJson&) {
        if (depth > kMaxDepth) too_deep = true;
        return !too_deep;
    };
    OrderedJson request;
    try {
        request = OrderedJson::parse(request_json, depth_guard, true);
    } catch (const OrderedJson::exception&) {
        ONECARD_CHECK(!too_deep, "chat request: nested deeper than the limit of {} levels", kMaxDepth);
        fail("chat request: not valid JSON");
    }
    ONECARD_CHECK(!too_deep, "chat request: nested deeper than the limit of {} levels", kMaxDepth);
    return render_chat_request(request, variant);
}

}  // namespace onecard
