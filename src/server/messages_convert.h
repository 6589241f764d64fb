// Internal: the Anthropic Messages API (POST /v1/messages, /v1/messages/count_tokens) as a mapping onto
// the chat pipeline (chat_pipeline.h). A Messages body becomes an OpenAI chat-completions body:
//   system (string or text blocks)            -> a leading system message
//   user text blocks                          -> user messages (content parts)
//   user tool_result blocks                   -> tool messages (tool_call_id = tool_use_id; content a
//                                                string or text blocks; is_error prefixes "Error: ")
//   assistant text / thinking / tool_use      -> content / reasoning_content / tool_calls (input as JSON)
//   a final assistant message                 -> continued (continue_final_message), Anthropic's prefill
//   tools {name, description, input_schema}   -> function tools; tool_choice auto/any/tool/none ->
//                                                auto/required/named/none
//   max_tokens (required), stop_sequences, temperature, top_p, top_k -> the chat sampling fields
//   thinking {type: enabled, budget_tokens}   -> DeepSeek thinking mode; absent or disabled -> chat mode
//                                                (thinking is opt-in in Anthropic's API). DeepSeek has no
//                                                thinking budget: budget_tokens is checked as Anthropic
//                                                does (>= 1024, < max_tokens) but not enforced; thinking
//                                                counts against max_tokens, as in Anthropic's API.
// and the outcome maps back to a message with thinking (with an opaque signature), text and tool_use
// blocks, stop_reason end_turn / max_tokens / stop_sequence / tool_use, and usage. The functions here
// are pure (no server state), so the unit tests drive them directly.
#pragma once

#include "onecard/engine.h"
#include "server/request_json.h"
#include "server/sse_event.h"
#include "tokenizer/dsml_parser.h"

#include <cstdint>
#include <string>
#include <vector>

namespace onecard::server {

struct MessagesRequest {
    Json chat_body;  // an OpenAI chat-completions body for prepare_chat (no "stream": streaming is ours)
    bool stream = false;
    bool thinking = false;
};

enum class MessagesRoute { Create, CountTokens };

// Throws ApiError 400 naming the Anthropic field (messages[1].content[0].tool_use_id, max_tokens, ...).
// CountTokens takes no max_tokens, stop_sequences, sampling or stream fields.
MessagesRequest messages_to_chat(const Json& body, MessagesRoute route);

// end_turn, max_tokens, stop_sequence (then `stop_sequence` is set) or tool_use.
struct StopReason {
    std::string reason;
    std::string stop_sequence;  // the matched stop string for stop_sequence, else empty
};
StopReason anthropic_stop_reason(const EngineEvent& last, const ParsedCompletion& pc);

// Anthropic's usage: input_tokens excludes the prompt tokens read from the prefix cache, which are
// cache_read_input_tokens.
Json anthropic_usage(const Usage& u);

// An opaque signature for a thinking block (a hash of its text: clients only hand it back).
std::string thinking_signature(const std::string& thinking);

// The whole (non-streamed) message object.
Json messages_response(const std::string& id, const std::string& model, const ParsedCompletion& pc,
                       const StopReason& stop, const Usage& usage);

// Turns the parse events of a generation into Anthropic's stream: message_start, then per block
// content_block_start, content_block_delta (thinking_delta, signature_delta at the end of a thinking
// block, text_delta, input_json_delta), content_block_stop, then message_delta (stop_reason, usage)
// and message_stop. A block opens on the first event of its kind and closes when another kind starts.
// Empty text opens nothing.
class MessagesStreamEncoder {
public:
    MessagesStreamEncoder(std::string id, std::string model, int64_t n_prompt_tokens);

    std::vector<SseEvent> start();
    std::vector<SseEvent> push(const std::vector<ParseEvent>& events);
    // Closes the open block; message_delta and message_stop.
    std::vector<SseEvent> finish(const StopReason& stop, const Usage& usage);
    // Throws onecard::Error when the block bookkeeping is inconsistent (a block open after finish, an
    // index that skipped).
    void check_integrity() const;

private:
    enum class Block { None, Thinking, Text, ToolUse };
    void open(Block kind, Json content_block, std::vector<SseEvent>& out);
    void close(std::vector<SseEvent>& out);

    std::string id_, model_;
    int64_t n_prompt_;
    Block open_ = Block::None;
    int n_blocks_ = 0;      // blocks started so far; the open block's index is n_blocks_ - 1
    std::string thinking_;  // the open thinking block's text (its signature is sent at its end)
    bool started_ = false, finished_ = false;
};

}  // namespace onecard::server
