// Parsing of request JSON, the one place every route goes through. nlohmann::json parses iteratively,
// but copying, dumping and comparing a value recurse once per nesting level, so a body of a few
// hundred thousand `[` (well under the body-size limit) would overflow an HTTP thread's stack
// long after the parse succeeded. Every request body, and every JSON text embedded in one (tool-call
// argument strings), is therefore refused past kMaxRequestJsonDepth levels while it is parsed.
//
// 128 levels: a request's own skeleton takes about 6 (body -> tools -> [i] -> function -> parameters
// -> schema) and each nested JSON-schema object about 2 more, so real tool schemas (pydantic and
// OpenAI's own examples stay under ~20 schema levels) fit with a wide margin, while the recursion
// that follows stays a few kilobytes of stack.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace onecard::server {

// Ordered: the chat prompt depends on the key order of tool schemas and response formats.
using Json = nlohmann::ordered_json;

inline constexpr int kMaxRequestJsonDepth = 128;

// The body as JSON: exactly one JSON object and nothing after it. Throws ApiError 400 for malformed
// JSON (including invalid UTF-8, which the JSON grammar forbids, and a raw NUL byte anywhere, which
// nlohmann would take for the end of the input), trailing bytes, nesting deeper than `max_depth`
// (code "json_too_deep", the message names the limit) or another top-level type. Messages give the
// error class and byte offset only, never body text: they reach the access log.
Json parse_body(std::string_view body, int max_depth = kMaxRequestJsonDepth);

// Whether `text`, read as JSON, opens more than `max_depth` nested containers before it ends or
// stops being valid JSON. Builds nothing and does not recurse. For JSON held in string fields.
bool json_text_exceeds_depth(std::string_view text, int max_depth = kMaxRequestJsonDepth);

// Chat messages carry tool-call arguments as JSON text (messages[i].tool_calls[j].function.arguments)
// that the prompt renderer parses and re-serialises: refuses, with ApiError 400 naming that field and
// the limit, any such string nested deeper than kMaxRequestJsonDepth. Other shapes are left to the
// renderer's own checks.
void check_tool_call_arguments(const Json& messages);

// JSON text safe to send whatever the strings hold (invalid UTF-8 replaced by U+FFFD).
std::string dump_json(const Json& j);

}  // namespace onecard::server
