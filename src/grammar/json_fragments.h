// Building blocks of JSON grammars: the lexical pieces (one string character, bounded strings,
// numbers, integers in a range, string formats, the any-value rule) added to a Grammar between two
// nodes. No insignificant whitespace anywhere but, where Separators allows it, the one space after
// ',' and ':' (see json_schema.h).
#pragma once

#include "grammar/grammar.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace onecard::grammar {

// Which code points a JSON string may hold unescaped (any of them may always be written \uXXXX).
enum class RawChars : uint8_t {
    kAll,  // every code point JSON allows raw
    // All but U+FF5C "｜": JSON written inside DSML markup (dsml_grammar.h), where that character
    // begins every marker the server's DsmlParser ends a value at ("｜DSML｜", "<｜end▁of▁sentence｜>");
    // written \uff5c instead, the value is the same and the markup stays whole.
    kNoFullwidthBar,
};

// What may follow the ',' and ':' between JSON tokens.
enum class Separators : uint8_t {
    kCompact,  // nothing: compact JSON
    // One optional space: compact JSON or Python's json.dumps separators (", " and ": "), which the
    // official chat encoder writes non-string DSML tool arguments with (dsv4-model.md §9.3). A model
    // trained on those expects to write them: held to the compact form, the demo model wrote
    // ["converted",", "] for ["converted", "wholly"] (the space it wanted after the comma was refused,
    // so it opened the next string at once). One space at most, so no output can loop on whitespace.
    kSpaceOptional,
};

// from --`c` (',' or ':') and, with kSpaceOptional, an optional ' '--> to.
void add_separator(Grammar& g, uint32_t from, uint32_t to, char c, Separators sep);

// from --one JSON string character--> to: an unescaped code point as valid UTF-8 (no overlongs or
// surrogates; '"', '\\' and controls below 0x20 excluded), or an escape (\" \\ \/ \b \f \n \r \t,
// \uXXXX with surrogates only as a high+low pair). `no_escapes` leaves escapes out (extra object keys
// use it so a key cannot spell a declared name in escapes).
void add_string_char(Grammar& g, uint32_t from, uint32_t to, bool no_escapes = false, RawChars raw = RawChars::kAll);

// A quoted string of min_len..max_len characters (code points; an escape is one). max_len empty:
// unbounded. Characters are unrolled one node chain per counted position.
void add_string(Grammar& g, uint32_t from, uint32_t to, uint64_t min_len, std::optional<uint64_t> max_len,
                RawChars raw = RawChars::kAll);

// A quoted string (no escapes) whose content is none of `excluded` (byte-wise). With
// kNoFullwidthBar it cannot hold U+FF5C at all (no escapes), nor spell an excluded name holding it.
void add_string_excluding(Grammar& g, uint32_t from, uint32_t to, const std::vector<std::string>& excluded,
                          RawChars raw = RawChars::kAll);

// Digit limits on generated numbers: every number the grammar allows is a finite double (a JSON
// parser such as nlohmann's refuses 1E400 as an overflow, and a model looping on digits ends).
inline constexpr int kMaxIntegerDigits = 20;  // integer part; uint64 has 20 digits
inline constexpr int kMaxExponentDigits = 2;  // so |value| < 1e120

// JSON number: -?(0|[1-9][0-9]{0,19})(\.[0-9]+)?([eE][+-]?[0-9]{1,2})?. non_negative: no leading '-'.
void add_number(Grammar& g, uint32_t from, uint32_t to, bool non_negative);

// A JSON integer (-?(0|[1-9][0-9]{0,19}), "-0" excluded) in [lo, hi] (either bound may be absent).
// Throws onecard::Error when lo > hi.
void add_integer(Grammar& g, uint32_t from, uint32_t to, std::optional<int64_t> lo, std::optional<int64_t> hi);

// Quoted strings of a format: "date" (YYYY-MM-DD, month 01-12, day 01-31), "time"
// (HH:MM:SS[.frac](Z|+HH:MM|-HH:MM)), "date-time" (date 'T' time, RFC 3339), "uuid" (8-4-4-4-12 hex).
// Returns false (adding nothing) for any other format.
bool add_string_format(Grammar& g, uint32_t from, uint32_t to, std::string_view format);

// The rule for any JSON value (objects with any string keys, arrays, strings, numbers, literals).
// Creates it on first use; `cached` holds its id between calls (one `raw` and `sep` per `cached`).
uint32_t any_value_rule(Grammar& g, std::optional<uint32_t>& cached, RawChars raw = RawChars::kAll,
                        Separators sep = Separators::kCompact);

// `json_text` (valid JSON) with every U+FF5C written \uff5c when `raw` is kNoFullwidthBar: the
// same value, as a literal the grammar may emit. (In JSON text that character occurs only inside
// strings, so replacing its bytes everywhere is exact.)
std::string json_literal(std::string json_text, RawChars raw);

}  // namespace onecard::grammar
