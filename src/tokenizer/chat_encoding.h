// DeepSeek-V4 prompt encoding: a C++ implementation of DeepSeek's `encoding/encoding_dsv4.py`
// (`encode_messages`, dsv4-model.md §9.2), byte-exact on tests/data/chat/*, plus the adapter that turns an
// OpenAI chat-completions request into encoder arguments the way vLLM's `deepseek_v4` renderer does.
//
// Two encoder variants exist and differ only in the reasoning-effort prefix emitted before the first message
// in thinking mode:
//   V4     (DeepSeek-V4-Flash): efforts {unset, high, max}; only max adds a prefix.
//   V40731 (DeepSeek-V4-Flash-0731): efforts {low, high, max}, unset = low; low adds nothing, high and max
//          add their own prefixes.
// The tokenizer library does not depend on the model library, so callers map ModelConfig::variant to
// ChatVariant themselves (see tools/onecard/cmd_render_chat.cpp).
#pragma once

#include "tokenizer/chat_json.h"

#include <string>
#include <string_view>

namespace onecard {

enum class ChatVariant { V4, V40731 };
enum class ThinkingMode { Chat, Thinking };
enum class ReasoningEffort { Unset, Low, High, Max };

const char* chat_variant_name(ChatVariant v);
const char* reasoning_effort_name(ReasoningEffort e);  // "unset", "low", "high", "max"

// The arguments of the official encode_messages().
struct EncodeOptions {
    ChatVariant variant = ChatVariant::V4;
    ThinkingMode thinking_mode = ThinkingMode::Thinking;
    bool drop_thinking = true;  // forced off when any message carries tools
    bool add_bos = true;
    ReasoningEffort reasoning_effort = ReasoningEffort::Unset;  // V4 rejects Low (as the official encoder does)
};

// Encoder-level API. `messages` uses the official encoder's message schema: role in {system, user, assistant,
// developer, latest_reminder, tool}; content (string or null; tool content may also be a list of text parts);
// tools / response_format on system or developer messages; tool_calls (OpenAI form) and reasoning_content on
// assistant messages; tool_call_id on tool messages; optional `task` (internal quick-instruction token) and
// `wo_eos` (assistant rendered without EOS). Throws onecard::Error naming the message on invalid input.
std::string encode_messages(const OrderedJson& messages, const EncodeOptions& opts);

// A rendered chat request.
struct ChatPrompt {
    std::string text;
    EncodeOptions options;         // what the request resolved to
    bool generation_in_reasoning;  // the prompt ends with <think>: the model's output starts as reasoning
};

// OpenAI chat request -> prompt. Reads: messages (content as string or array of text parts), tools,
// response_format (attached unless type "text"), chat_template_kwargs {thinking | enable_thinking,
// reasoning_effort, drop_thinking}, top-level reasoning_effort (used when the kwargs carry none),
// continue_final_message (the last assistant message is rendered without EOS so generation continues it).
// Defaults: thinking on; reasoning_effort "none" switches to chat mode; "max"/"xhigh" -> max; for V4 any
// other value -> high (no prefix); for 0731 "low"/"minimal"/"medium" -> low, anything else -> high.
// Request-level tools/response_format go onto a leading system/developer message, else a new empty system
// message is inserted first (the placement vLLM uses and the official golden outputs show).
ChatPrompt render_chat_request(const OrderedJson& request, ChatVariant variant);
// Same, from the request's JSON text (parsed keeping key order, which the prompt depends on).
ChatPrompt render_chat_request_text(std::string_view request_json, ChatVariant variant);

}  // namespace onecard
