// Internal: structured output for the chat pipeline (issue 18). A chat request's response_format
// (json_object, json_schema) or forced tool choice ("required", a named function) becomes a grammar
// from the server's GrammarCache and a constraint factory in its SamplingParams, so the engine can
// only sample tokens that keep the answer in the grammar, and EOS only once it is complete:
// - response_format json_object: any JSON object; json_schema: its `schema` (compact JSON, see
//   grammar/json_schema.h for the output policy); a schema the compiler refuses is a 400 naming the
//   keyword (param "response_format").
// - tool_choice "required" / named: the DSML tool-call block (grammar/dsml_grammar.h) with an invoke
//   of any tool / the named one, its parameters matching the tool's `parameters` schema; exactly one
//   invoke when parallel_tool_calls is false. A forced call wins over response_format. A refused
//   parameters schema is a 400 (param "tools").
// - tool_choice "auto" with strict tools (function.strict true; every tool whose schema the grammar
//   can hold with --strict-tools-all): the answer is free text until the DSML marker "<｜DSML｜", then
//   the DSML tool-call block (TriggeredConstraint), strict tools' arguments held to their schemas,
//   the others' free. A strict tool's refused schema is a 400 (param "tools"); a response_format
//   other than text wins (the answer is then the JSON, as before).
// - Thinking on (the prompt ends in <think>): the reasoning is free and the grammar starts after
//   </think> (AfterTokenConstraint), so the JSON can never land in the reasoning; with a tool grammar
//   the DSML marker token is refused in the reasoning (a call there would never be parsed as one).
#pragma once

#include "onecard/engine.h"
#include "server/server_state.h"

#include <functional>
#include <memory>

namespace onecard::server {

struct ChatRequest;

// The constraint factory for a parsed chat request; empty when nothing is constrained. Throws
// ApiError 400 for a schema the grammar cannot hold.
std::function<std::unique_ptr<TokenConstraint>()> chat_constraint(OpenAIServer::State& s, const Json& body,
                                                                  const ChatRequest& r, bool thinking);

}  // namespace onecard::server
