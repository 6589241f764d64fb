// JSON text exactly as Python's `json.dumps(value, ensure_ascii=False)` writes it. The official DeepSeek chat
// encoder embeds tool schemas, response formats and non-string tool arguments through that call, so a
// byte-exact prompt needs its separators (", " and ": "), its string escapes and its float repr.
// Objects keep their insertion order, hence nlohmann::ordered_json throughout the chat layer.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace onecard {

using OrderedJson = nlohmann::ordered_json;

// Deepest nesting py_json_dumps writes. Serialising recurses once per level and the values come from
// requests (tool schemas, response formats, tool-call arguments), so a value nested deeper is refused
// with onecard::Error instead of running the thread out of stack. Above the server's own request limit
// (server/request_json.h, 128), so it only matters for callers that did not check.
inline constexpr int kPyJsonMaxDepth = 256;

// json.dumps(v, ensure_ascii=False). Does not modify v. Throws onecard::Error past kPyJsonMaxDepth.
std::string py_json_dumps(const OrderedJson& v);
void py_json_dump_to(std::string& out, const OrderedJson& v);

// Appends `s` as a JSON string literal: quotes, backslash and control characters escaped the way Python does
// (\n \r \t \b \f, others as \u00xx lowercase); everything else, non-ASCII included, is copied verbatim.
void py_json_append_string(std::string& out, std::string_view s);

// Python's repr(float) for a finite double: shortest round-trip digits, fixed notation when the decimal
// exponent is in [-4, 16), scientific otherwise ("1e+16", "1.5e-05"); always has '.' or 'e'.
std::string py_float_repr(double d);

// Python truthiness of a JSON value (null, false, 0, "", [] and {} are false).
bool json_truthy(const OrderedJson& v);

}  // namespace onecard
