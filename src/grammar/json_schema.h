// JSON Schema -> Grammar. The accepted subset is what OpenAI's strict mode allows plus what users
// commonly send; anything that would constrain output in a way the grammar cannot express is refused
// with a SchemaError naming the keyword (the server answers 400 with it).
//
// Output policy (what the grammar generates; every such document validates against the schema):
// - Compact JSON, no insignificant whitespace anywhere. A model cannot loop on whitespace (the known
//   failure of grammars that allow it), masks stay small, and the bytes are deterministic. Embedded
//   in DSML (add_json_schema_rule with Separators::kSpaceOptional), the one space Python's json.dumps
//   writes after ',' and ':' may follow them too (json_fragments.h says why).
// - Object properties in `properties` order; required ones mandatory, optional ones may be left out.
//   additionalProperties absent is read as false (as OpenAI strict mode and xgrammar do: output
//   without extra keys is valid either way). With true or a schema, extra keys come after the
//   declared ones, have no escapes and are none of the declared names (duplicates among extra keys
//   are not prevented); with no declared properties that is a map (any keys, values per the
//   schema). minProperties/maxProperties are refused, so no schema needs an extra key to validate.
// - Integers as -?(0|[1-9][0-9]*) without "-0"; numbers as JSON numbers.
// - oneOf is treated as anyOf (exclusivity is not enforced); allOf only with one schema.
// - Formats date, time, date-time (RFC 3339, upper-case T/Z) and uuid are enforced; every other
//   format is a plain string. A string with one of those formats ignores minLength/maxLength.
// - Unknown keywords are annotations (JSON Schema's rule) and ignored; known assertions the grammar
//   cannot enforce (pattern, not, if/then/else, uniqueItems, multipleOf, ...) are refused.
#pragma once

#include "core/error.h"
#include "grammar/grammar.h"
#include "grammar/json_fragments.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <string_view>

namespace onecard::grammar {

// Length and item-count bounds are unrolled into one node per counted position (each gets its own
// token-set cache entry); larger bounds are refused rather than silently dropped.
inline constexpr uint64_t kMaxUnrolledCount = 512;

// Nesting bounds, so no schema can make the compiler (or a dump of the schema) recurse deep enough to
// overflow a thread's stack: a schema document nested deeper than kMaxSchemaJsonDepth containers, and
// a chain of sub-schemas compiled inside one another (properties, items, combinators and $ref chains
// such as #/$defs/a0 -> a1 -> ... that a flat document can hold) deeper than kMaxSchemaRuleDepth, are
// refused with a SchemaError naming the limit. The server's request limit (kMaxRequestJsonDepth, 128)
// already keeps request schemas under the first; the checks here make the library safe on its own.
inline constexpr int kMaxSchemaJsonDepth = 128;
inline constexpr int kMaxSchemaRuleDepth = 256;

// The schema a local reference ("#/$defs/x", a JSON pointer after '#') names inside `root`, or nullptr
// when `ref` is not local or does not resolve.
const nlohmann::ordered_json* find_local_ref(const nlohmann::ordered_json& root, const std::string& ref);

// Throws SchemaError when `schema` opens more than kMaxSchemaJsonDepth nested containers. Iterative.
void check_schema_depth(const nlohmann::ordered_json& schema);

class SchemaError : public Error {
public:
    SchemaError(std::string keyword, const std::string& message)
        : Error("json schema: " + message), keyword_(std::move(keyword)) {}
    const std::string& keyword() const { return keyword_; }

private:
    std::string keyword_;
};

// `schema` must have been parsed as ordered_json: property order is output order.
std::shared_ptr<const Grammar> compile_json_schema(const nlohmann::ordered_json& schema);
// Embedding JSON values in other text (the DSML tool-call grammar, dsml_grammar.h): compiles `sub`
// into `g` and returns the rule matching one value of it. `sub` must be `root` or lie inside it:
// $refs resolve against `root`, and `path` names the rule in diagnostics. `raw` says which code
// points the value's strings (keys, enum and const literals included) may hold unescaped, `sep` what
// may follow ',' and ':' (in enum and const values too). Throws SchemaError. The caller sets
// the root and runs g->check_integrity() once the whole grammar is built.
uint32_t add_json_schema_rule(const std::shared_ptr<Grammar>& g, const nlohmann::ordered_json& root,
                              const nlohmann::ordered_json& sub, const std::string& path, RawChars raw,
                              Separators sep = Separators::kCompact);
// Parses `schema_text` (throws SchemaError with keyword "" when it is not JSON) and compiles it.
std::shared_ptr<const Grammar> compile_json_schema_text(std::string_view schema_text);

// Any JSON object at top level, any values inside (response_format: {"type": "json_object"}).
std::shared_ptr<const Grammar> json_object_grammar();

}  // namespace onecard::grammar
