// The tool-call fixtures of `onecard validate` (data/tool_fixtures.json, written by
// data/gen_tool_fixtures.py): loading, one chat request per fixture turn, and the exact-match rules a
// turn's answer is scored by. Pure apart from reading a --fixtures file, so the rules are unit-tested.
//
// Matching rules (also in the JSON's "about"): the same number of calls, matched in any order (a
// parallel turn's calls have no meaningful order), each with the same name and JSON-equal arguments:
// numbers compare as numbers (22 == 22.0), no string/number coercion, object keys in any order, arrays
// in order. A top-level parameter with a schema "default" may be omitted or sent with that value; any
// other parameter the fixture leaves out must be absent. `expected: []` wants no call. Strings in
// `answer_contains` must occur in the text content, ASCII case-insensitively.
#pragma once

#include "stream_request.h"

#include <string>
#include <vector>

namespace onecard::client {

struct FixtureTurn {
    std::string fixture_id;
    size_t i_turn = 0;
    Json body;                                 // the chat request: `base` plus messages and tools
    Json expected;                             // [{"name", "arguments"}]
    std::vector<std::string> answer_contains;  // in the reply's content
    Json tool_params = Json::object();         // tool name -> its "parameters" schema
};

// The fixture file at `path` ("": the built-in set), parsed and checked for the fields the gate
// reads. Throws onecard::Error naming the fixture and field.
Json load_fixtures(const std::string& path);

// Every turn of every fixture as its own request, built on `base` (model, sampling, max_tokens): a
// later turn carries the earlier turns' expected calls and tool results as history, so each turn is
// scored on its own.
std::vector<FixtureTurn> fixture_turns(const Json& fixtures, const Json& base);

// Whether `r` answers `t` under the rules above; `why` says what differed when it does not.
bool turn_matches(const StreamResult& r, const FixtureTurn& t, std::string* why);

}  // namespace onecard::client
