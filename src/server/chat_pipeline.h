// Internal: the chat pipeline every chat-shaped API runs on. /v1/chat/completions uses it directly;
// /v1/responses and /v1/messages convert their requests into a chat-completions body first
// (responses_convert.h, messages_convert.h), run it here, and map the outcome back. So there is one
// validation of the chat fields, one prompt renderer and one generation loop (engine events through the
// reasoning and DSML parsers) for all three.
#pragma once

#include "server/generation.h"
#include "server/request_params.h"
#include "server/server_state.h"
#include "tokenizer/chat_encoding.h"
#include "tokenizer/reasoning_parser.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace onecard::server {

// tool_choice: "auto" (default with tools) renders the tools and parses calls; "none" leaves the tools
// out of the prompt, and any DSML call the model still writes is dropped (not returned as text);
// "required" and a named function are enforced during generation by the DSML tool-call grammar
// (structured_output.h; named: only that tool is rendered and allowed); tool_choice_violation stays as
// a backstop.
enum class ToolChoice { None, Auto, Required, Named };

struct ChatRequest {
    Json render_body;  // what the prompt renderer reads (tools filtered by tool_choice)
    GenerationOptions gen;
    ToolChoice tool_choice = ToolChoice::None;
    std::string named_tool;
    bool parse_tools = false;
};

// Validates an OpenAI chat-completions body (messages, tools, tool_choice, response_format,
// reasoning_effort, sampling fields). Throws ApiError 400 naming the field, 404 for another model.
ChatRequest parse_chat_request(const OpenAIServer::State& s, const Json& body);

struct PreparedChat {
    ChatRequest chat;
    ChatPrompt prompt;
    std::vector<int32_t> ids;  // the rendered prompt's tokens
    SamplingParams sampling;   // max_tokens resolved against the context left
};

// parse_chat_request, then render and tokenise, and set the sampling's constraint factory for
// response_format and a forced tool choice (structured_output.h: 400 for a schema it cannot enforce); refuses a prompt
// (or max_tokens) the context cannot hold. `max_tokens_param` is the field named when max_tokens does not fit (each API
// has its own name). Records prompt_tokens (and the prompt text when logging it) in the access log. Admits nothing.
PreparedChat prepare_chat(OpenAIServer::State& s, const Json& body, const std::string& max_tokens_param = {});

// The call the tool_choice demands is missing: the empty string when the completion conforms.
std::string tool_choice_violation(const ChatRequest& r, const ParsedCompletion& pc);

// How one generation went, after its last engine event.
struct ChatOutcome {
    ParsedCompletion completion;      // tool_calls cleared when the request does not parse tools
    std::optional<EngineEvent> last;  // the final event; nullopt when the stream ended without one
    int64_t reasoning_tokens = 0;
    // The client hung up (on_events or a ping failed, or a watched connection closed): cancelled.
    bool client_gone = false;

    // The error to report ("" when it finished normally): an engine error, a shutdown cancel or a
    // client that hung up.
    std::string failure() const;
};

// One choice's generation as it goes: its reasoning/DSML parser, reasoning-token count and outcome.
// run_chat_generation drives one; a request with n > 1 choices drives n of them, interleaved.
class ChatChoiceState {
public:
    ChatChoiceState(const ReasoningParserOptions& popts, bool parse_tools);
    // Parses one engine event (the final one also flushes the parser) into the outcome; returns its
    // parse events, DSML calls left out when the request does not parse tools. Keeps the final event.
    std::vector<ParseEvent> push(const EngineEvent& ev);
    // Ends the choice (flushing the parser if no final event came) and hands over the outcome.
    ChatOutcome finish();

private:
    bool keep(const ParseEvent& pe) const;
    ReasoningParser parser_;
    ReasoningTokenCount reasoning_;
    ChatOutcome out_;
    bool parse_tools_;
    bool flushed_ = false;
};

// Called with the parse events of each engine event (the final one's include the parser's tail), in
// order; returns false when the client is gone.
using ChatEventSink = std::function<bool(const std::vector<ParseEvent>&, const EngineEvent&)>;
// Called while nothing was generated for kSsePingInterval; returns false when the client is gone.
using ChatPing = std::function<bool()>;

// Drives an admitted request to its end through a ReasoningParser with `popts`. Without a ping the
// events are awaited without timeout (non-streaming responses). Cancels the request when the client
// is gone, and logs the finish reason "abort" then.
ChatOutcome run_chat_generation(ActiveRequest& ar, const ReasoningParserOptions& popts, bool parse_tools,
                                const ChatEventSink& on_events, const ChatPing& ping = {});

// The parser options for a prepared request: reasoning first when the prompt ends in <think>, tool-call
// ids "<id_prefix><n>".
ReasoningParserOptions parser_options(const PreparedChat& p, const std::string& id_prefix);

}  // namespace onecard::server
