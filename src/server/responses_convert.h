// Internal: the OpenAI Responses API (POST /v1/responses) as a mapping onto the chat pipeline
// (chat_pipeline.h). A Responses body becomes an OpenAI chat-completions body:
//   instructions                      -> a leading system message (this request's only; not stored)
//   input: a string                   -> one user message
//   input items: message (role user / assistant / system / developer; content a string or
//     input_text / output_text parts) -> chat messages
//   function_call {call_id, name, arguments}   -> tool_calls of an assistant message (consecutive calls,
//                                                 or calls after an assistant message, share it)
//   function_call_output {call_id, output}     -> a tool message
//   reasoning {content | summary}              -> reasoning_content of the next assistant message
//   previous_response_id              -> the stored conversation (response_store.h) goes first
//   tools (type function), tool_choice, max_output_tokens, temperature, top_p,
//   reasoning.effort (as chat's reasoning_effort), text.format (as response_format) -> chat fields
// and the generation maps back to output items: a `reasoning` item (DeepSeek's reasoning as
// content [{type: reasoning_text}]; summary stays empty: there is no separate summary), `message`
// items (output_text) and `function_call` items, in the order the model wrote them, with usage
// (input/output tokens, reasoning tokens). The same ResponseBuilder makes the stream's events and the
// final object, so a streamed and a plain response cannot differ. Pure functions: unit-tested directly.
#pragma once

#include "onecard/engine.h"
#include "server/request_json.h"
#include "server/sse_event.h"
#include "tokenizer/dsml_parser.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace onecard::server {

struct ResponsesRequest {
    Json chat_body;     // an OpenAI chat-completions body for prepare_chat
    Json conversation;  // chat messages without the instructions: previous + this input (what is stored)
    Json echo;          // the request fields a response object repeats (instructions, tools, ...)
    bool stream = false;
    bool store = true;
};

// The stored conversation of a previous response; nullopt when none is kept under that id.
using ConversationLookup = std::function<std::optional<Json>(const std::string& id)>;

// Throws ApiError 400 naming the Responses field (input[2].call_id, tools[0].type, reasoning.effort,
// previous_response_id when it is not (or no longer) stored, ...).
ResponsesRequest responses_to_chat(const Json& body, const ConversationLookup& lookup);

// The assistant turn a completion adds to the conversation (content, reasoning_content, tool_calls).
Json assistant_turn(const ParsedCompletion& pc);

// {input_tokens, input_tokens_details{cached_tokens}, output_tokens, output_tokens_details
// {reasoning_tokens}, total_tokens}.
Json responses_usage(const Usage& u, int64_t reasoning_tokens);

// Builds a response's output items from the parse events of its generation, and the Responses stream
// events on the way: response.created / response.in_progress (start), then per item
// output_item.added, content_part.added, output_text.delta | reasoning_text.delta |
// function_call_arguments.delta, their .done events, content_part.done, output_item.done, and at the end
// response.completed (response.incomplete after max_output_tokens, response.failed on an error). Every
// event has its sequence_number (0, 1, ...). An item opens on the first event of its kind and closes
// when another kind starts; empty text opens nothing.
class ResponseBuilder {
public:
    // `id` ("resp_..."): also the base of the item ids; `echo` from ResponsesRequest.
    ResponseBuilder(std::string id, int64_t created_at, std::string model, Json echo);

    std::vector<SseEvent> start();
    std::vector<SseEvent> push(const std::vector<ParseEvent>& events);
    // Closes the open item; the final event. `last` is the generation's final engine event.
    std::vector<SseEvent> finish(const EngineEvent& last, int64_t reasoning_tokens);
    std::vector<SseEvent> fail(const std::string& message);

    // The response object now (status in_progress before finish).
    const Json& response() const { return response_; }
    // Throws onecard::Error when the bookkeeping is inconsistent (an item open after the end, output
    // indices that skipped).
    void check_integrity() const;

private:
    enum class Item { None, Reasoning, Message, FunctionCall };
    SseEvent event(const char* type, Json fields);
    void open(Item kind, Json item, std::vector<SseEvent>& out);
    void close(std::vector<SseEvent>& out);

    std::string id_;
    Json response_;
    Item open_ = Item::None;
    Json item_;         // the open item as it will be when done
    std::string text_;  // the open item's text or arguments so far
    int64_t sequence_ = 0;
    int n_messages_ = 0, n_reasoning_ = 0;
    bool ended_ = false;
};

}  // namespace onecard::server
