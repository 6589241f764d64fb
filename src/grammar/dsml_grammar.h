// The grammar of a DeepSeek-V4 DSML tool-call block (dsv4-model.md §9.3) whose invokes name one of
// the given tools and whose parameters match that tool's `parameters` JSON Schema: what the server
// forces for tool_choice "required" or a named function. The text is the chat encoder's layout:
//
//   \n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="NAME">\n
//   <｜DSML｜parameter name="KEY" string="false">JSON</｜DSML｜parameter>\n...\n</｜DSML｜invoke>
//   [\n<｜DSML｜invoke ...>...</｜DSML｜invoke>]...\n</｜DSML｜tool_calls>
//
// Output policy, on top of json_schema.h's:
// - One parameter per property, in `properties` order; required ones mandatory, optional ones may be
//   left out. additionalProperties as in json_schema.h: absent or false, no other parameters; true or
//   a schema, extra ones after the declared (names without escapes, '"' or U+FF5C, none declared).
// - A value is written string="false" (its JSON text: compact, or with json.dumps's ", " and ": " as
//   the encoder writes it); a plain string (no bounds, format...) may also be written raw,
//   string="true", as the model was trained to, and so may the string values of a const or enum
//   (also behind local $refs).
// - Nothing in a value can end or break the markup for the server's DsmlParser: JSON strings write
//   U+FF5C "｜" as \uff5c; raw values hold no NUL, "｜DSML｜" or end-of-sentence text (dsml_grammar.cpp
//   says why this is enough). Tool and parameter names that cannot be written in a tag are refused.
// - Only the one block: the grammar is complete after </｜DSML｜tool_calls>, so EOS follows.
#pragma once

#include "grammar/grammar.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

namespace onecard::grammar {

struct DsmlTool {
    std::string name;
    // The tool's parameters schema: null (no parameters), or an object schema whose `properties` are
    // the parameters ({"type": "object"} alone: none). Anything else is a SchemaError.
    nlohmann::ordered_json parameters;
    // false: the arguments are not held to `parameters` (a non-strict tool beside strict ones under
    // tool_choice "auto"): any parameter names, string="true" or "false", any raw value text (as a
    // raw string="true" value: no DSML markup inside). The invoke's layout and the tool's name still are.
    bool constrained = true;
};

// one_call: exactly one invoke (parallel_tool_calls false); otherwise one or more. blank_line: the
// block starts with the encoder's "\n\n"; false: at "<｜DSML｜tool_calls>", for a grammar that takes
// over from free text at the DSML marker (engine/triggered_constraint.h). Throws SchemaError (naming
// the keyword) for a constrained tool's parameters schema the grammar cannot hold.
std::shared_ptr<const Grammar> compile_dsml_tool_calls(const std::vector<DsmlTool>& tools, bool one_call,
                                                       bool blank_line = true);

}  // namespace onecard::grammar
