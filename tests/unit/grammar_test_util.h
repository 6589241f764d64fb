// Helpers for the grammar tests: the schemas under test, a random generator of documents in the
// grammar's output policy (json_schema.h), an independent validator of raw JSON text against a
// schema and that policy (nlohmann::json::accept for syntax, a small tree parser written here, no
// code shared with src/grammar), and vocabularies (the real DeepSeek one when installed, else
// synthetic byte-level pieces with multi-byte UTF-8).
#pragma once

#include "grammar/token_trie.h"
#include "tokenizer/deepseek_v4_vocab.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace onecard::test {

using ojson = nlohmann::ordered_json;

struct NamedSchema {
    std::string name;
    std::string text;
};

inline std::vector<NamedSchema> grammar_test_schemas() {
    return {
        {"person",
         R"({"type":"object","properties":{"name":{"type":"string","minLength":1,"maxLength":12},
             "age":{"type":"integer","minimum":0,"maximum":150},"email":{"type":"string","format":"email"},
             "tags":{"type":"array","items":{"type":"string"},"maxItems":4},"score":{"type":"number"}},
             "required":["name","age"],"additionalProperties":false})"},
        {"enum_anyof",
         R"({"type":"object","properties":{"kind":{"enum":["a","b\u00e9",3,null,true]},
             "value":{"anyOf":[{"type":"string","maxLength":5},{"type":"integer","exclusiveMinimum":-5,"maximum":1000},
               {"type":"object","properties":{"x":{"type":"number"}},"required":["x"]}]},
             "point":{"type":"object","properties":{"lat":{"type":"number"},"lon":{"type":"number","minimum":0}},
               "required":["lat","lon"]}},"required":["kind","value"]})"},
        {"tree",
         R"({"$ref":"#/$defs/node","$defs":{"node":{"type":"object","properties":{"label":{"type":"string"},
             "children":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":3}},"required":["label"],
             "additionalProperties":false}}})"},
        {"tuple",
         R"({"type":"array","prefixItems":[{"type":"boolean"},{"type":"null"}],"items":{"type":"integer","minimum":-20},
             "minItems":3,"maxItems":6})"},
        {"formats",
         R"({"type":"object","properties":{"id":{"type":"string","format":"uuid"},
             "when":{"type":"string","format":"date-time"},"day":{"type":"string","format":"date"},
             "v":{"const":"fixed \"q\""},"maybe":{"type":["string","null"]},"n":{"type":["integer","boolean"]}},
             "required":["id","when","v"]})"},
        {"extra",
         R"({"type":"object","properties":{"a":{"type":"integer"},"ab":{"type":"string"}},
             "additionalProperties":{"type":"boolean"}})"},
        {"any", R"({"type":"object","properties":{"payload":{}},"required":["payload"]})"},
    };
}

// ---- random documents ---------------------------------------------------------------------------

class DocGen {
public:
    DocGen(const ojson& root, uint64_t seed) : root_(root), rng_(seed) {}

    std::string value(const ojson& s, int depth = 0) {
        if (s.is_boolean()) return any(depth);
        if (s.contains("$ref"))
            return value(root_.at(ojson::json_pointer(s["$ref"].get<std::string>().substr(1))), depth + 1);
        if (s.value("nullable", false) && coin(0.2)) return "null";
        if (s.contains("const")) return s["const"].dump();
        if (s.contains("enum")) return s["enum"][pick(s["enum"].size())].dump();
        for (const char* k : {"anyOf", "oneOf"})
            if (s.contains(k)) return value(s[k][pick(s[k].size())], depth + 1);
        if (s.contains("allOf")) return value(s["allOf"][0], depth + 1);
        std::string type = inferred_type(s);
        if (s.contains("type"))
            type = s["type"].is_array() ? s["type"][pick(s["type"].size())].get<std::string>()
                                        : s["type"].get<std::string>();
        if (type == "null") return "null";
        if (type == "boolean") return coin(0.5) ? "true" : "false";
        if (type == "string") return string(s);
        if (type == "integer") return integer(s);
        if (type == "number") return number(s.contains("minimum"));
        if (type == "object") return object(s, depth);
        if (type == "array") return array(s, depth);
        return any(depth);
    }

    static std::string inferred_type(const ojson& s) {
        for (const char* k : {"properties", "required", "additionalProperties"})
            if (s.contains(k)) return "object";
        for (const char* k : {"items", "prefixItems", "minItems", "maxItems"})
            if (s.contains(k)) return "array";
        for (const char* k : {"minLength", "maxLength", "format"})
            if (s.contains(k)) return "string";
        if (s.contains("minimum")) return "number";
        return "any";
    }

    // One string character as JSON text, drawn from a palette with escapes and multi-byte UTF-8.
    std::string character() {
        static const std::vector<std::string> palette = {"a",
                                                         "Z",
                                                         "7",
                                                         " ",
                                                         "_",
                                                         "\\\"",
                                                         "\\\\",
                                                         "\\/",
                                                         "\\n",
                                                         "\\t",
                                                         "\\u0001",
                                                         "\\u00e9",
                                                         "\\uD83D\\uDE00",
                                                         "\xc3\xa9",
                                                         "\xe2\x82\xac",
                                                         "\xf0\x9f\x98\x80",
                                                         "\xe4\xb8\xad",
                                                         "'",
                                                         "{",
                                                         "]",
                                                         ":",
                                                         ",",
                                                         "\x7f"};
        return palette[pick(palette.size())];
    }

    std::string string(const ojson& s) {
        if (s.contains("format")) {
            const std::string f = s["format"];
            auto d = [&](int n) {
                std::string o;
                for (int i = 0; i < n; ++i) o += static_cast<char>('0' + pick(10));
                return o;
            };
            auto two = [&](int hi) { return fmt::format("{:02d}", static_cast<int>(pick(hi + 1))); };
            const std::string date = d(4) + "-" + fmt::format("{:02d}", 1 + static_cast<int>(pick(12))) + "-" +
                                     fmt::format("{:02d}", 1 + static_cast<int>(pick(31)));
            const std::string time = two(23) + ":" + two(59) + ":" + two(59) + (coin(0.5) ? "." + d(3) : "") +
                                     (coin(0.5) ? "Z" : "+" + two(23) + ":" + two(59));
            if (f == "date") return "\"" + date + "\"";
            if (f == "date-time") return "\"" + date + "T" + time + "\"";
            if (f == "uuid") {
                std::string o = "\"";
                for (int g : {8, 4, 4, 4, 12}) {
                    for (int i = 0; i < g; ++i) o += "0123456789abcdefABCDEF"[pick(22)];
                    o += g == 12 ? "\"" : "-";
                }
                return o;
            }
        }
        const uint64_t lo = s.value("minLength", 0u);
        const uint64_t hi = s.value("maxLength", lo + 8);
        const uint64_t n = lo + pick(hi - lo + 1);
        std::string o = "\"";
        for (uint64_t i = 0; i < n; ++i) o += character();
        return o + "\"";
    }

    std::string integer(const ojson& s) {
        int64_t lo = -100000, hi = 100000;
        if (s.contains("minimum")) lo = s["minimum"].get<int64_t>();
        if (s.contains("exclusiveMinimum")) lo = s["exclusiveMinimum"].get<int64_t>() + 1;
        if (s.contains("maximum")) hi = s["maximum"].get<int64_t>();
        if (!s.contains("maximum") && lo > -100000) hi = lo + 100000;
        const int64_t v = lo + static_cast<int64_t>(pick(static_cast<uint64_t>(hi - lo + 1)));
        return std::to_string(v);
    }

    std::string number(bool non_negative) {
        std::string o;
        if (!non_negative && coin(0.4)) o += "-";
        o += coin(0.2) ? "0" : std::to_string(1 + pick(99999));
        if (coin(0.5)) o += "." + std::to_string(pick(1000));
        if (coin(0.3)) o += std::string(coin(0.5) ? "e" : "E") + (coin(0.5) ? "-" : "+") + std::to_string(pick(30));
        return o;
    }

    std::string object(const ojson& s, int depth) {
        std::string o = "{";
        bool first = true;
        std::set<std::string> req;
        if (s.contains("required"))
            for (const auto& r : s["required"]) req.insert(r.get<std::string>());
        if (s.contains("properties")) {
            for (const auto& [k, v] : s["properties"].items()) {
                if (!req.count(k) && (depth > 3 || coin(0.4))) continue;
                o += (first ? "" : ",") + ojson(k).dump() + ":" + value(v, depth + 1);
                first = false;
            }
        }
        if (s.contains("additionalProperties") && s["additionalProperties"] != false) {
            const int n = depth > 3 ? 0 : static_cast<int>(pick(3));
            for (int i = 0; i < n; ++i) {
                const std::string key = std::vector<std::string>{"x", "a1", "abc", "\xc3\xa9t\xc3\xa9", "b"}[pick(5)];
                if (s.contains("properties") && s["properties"].contains(key)) continue;
                o += (first ? "" : ",") + ojson(key).dump() + ":" + value(s["additionalProperties"], depth + 1);
                first = false;
            }
        }
        return o + "}";
    }

    std::string array(const ojson& s, int depth) {
        const size_t n_prefix = s.contains("prefixItems") ? s["prefixItems"].size() : 0;
        const uint64_t lo = s.value("minItems", 0u);
        uint64_t hi = s.value("maxItems", lo + 4);
        if (s.contains("items") && s["items"] == false) hi = std::min<uint64_t>(hi, n_prefix);
        const uint64_t n = depth > 3 ? lo : lo + pick(hi - lo + 1);
        std::string o = "[";
        for (uint64_t i = 0; i < n; ++i) {
            if (i) o += ",";
            o += i < n_prefix ? value(s["prefixItems"][i], depth + 1)
                              : value(s.contains("items") ? s["items"] : ojson(true), depth + 1);
        }
        return o + "]";
    }

    std::string any(int depth) {
        const uint64_t k = pick(depth > 2 ? 5 : 7);
        switch (k) {
            case 0:
                return "null";
            case 1:
                return coin(0.5) ? "true" : "false";
            case 2:
                return number(false);
            case 3:
            case 4:
                return string(ojson::object());
            case 5: {
                std::string o = "[";
                for (uint64_t i = 0, n = pick(4); i < n; ++i) o += (i ? "," : "") + any(depth + 1);
                return o + "]";
            }
            default: {
                std::string o = "{";
                for (uint64_t i = 0, n = pick(4); i < n; ++i)
                    o += (i ? "," : "") + string(ojson::object()) + ":" + any(depth + 1);
                return o + "}";
            }
        }
    }

    uint64_t pick(uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng_); }
    bool coin(double p) { return std::bernoulli_distribution(p)(rng_); }
    std::mt19937_64& rng() { return rng_; }

private:
    const ojson& root_;
    std::mt19937_64 rng_;
};

// ---- independent validator --------------------------------------------------------------------

struct RawMember;
// (members is a vector of a named struct, not of std::pair<RawVal, RawVal>: a pair of an incomplete
// type is ill-formed, which clang with libstdc++ rejects; vector of an incomplete type is allowed.)
struct RawVal {
    enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
    std::string raw;                 // the value's exact text
    std::string str;                 // decoded (String)
    std::vector<RawVal> items;       // Array
    std::vector<RawMember> members;  // Object, in text order, duplicates kept
};
struct RawMember {
    RawVal key;
    RawVal value;
};

// Parses text nlohmann::json::accept has already accepted (so no error handling).
class RawParser {
public:
    explicit RawParser(std::string_view s) : s_(s) {}
    RawVal parse() { return value(); }

private:
    RawVal value() {
        const size_t start = i_;
        RawVal v;
        const char c = s_[i_];
        if (c == '{') {
            v.kind = RawVal::Object;
            ++i_;
            while (s_[i_] != '}') {
                if (s_[i_] == ',') ++i_;
                RawVal k = value();
                ++i_;  // ':'
                RawVal x = value();
                v.members.push_back(RawMember{std::move(k), std::move(x)});
            }
            ++i_;
        } else if (c == '[') {
            v.kind = RawVal::Array;
            ++i_;
            while (s_[i_] != ']') {
                if (s_[i_] == ',') ++i_;
                v.items.push_back(value());
            }
            ++i_;
        } else if (c == '"') {
            v.kind = RawVal::String;
            ++i_;
            while (s_[i_] != '"') i_ += s_[i_] == '\\' ? 2 : 1;
            ++i_;
            v.str = nlohmann::json::parse(s_.substr(start, i_ - start)).get<std::string>();
        } else if (c == 't' || c == 'f') {
            v.kind = RawVal::Bool;
            i_ += c == 't' ? 4 : 5;
        } else if (c == 'n') {
            i_ += 4;
        } else {
            v.kind = RawVal::Number;
            while (i_ < s_.size() && std::string_view("+-.eE0123456789").find(s_[i_]) != std::string_view::npos) ++i_;
        }
        v.raw = std::string(s_.substr(start, i_ - start));
        return v;
    }
    std::string_view s_;
    size_t i_ = 0;
};

class PolicyValidator {
public:
    explicit PolicyValidator(const ojson& root) : root_(root) {}

    bool validate_text(std::string_view text) const {
        if (!nlohmann::json::accept(text)) return false;
        bool in_str = false;
        for (size_t i = 0; i < text.size(); ++i) {  // compact: no whitespace outside strings
            const char c = text[i];
            if (in_str) {
                if (c == '\\')
                    ++i;
                else if (c == '"')
                    in_str = false;
            } else if (c == '"') {
                in_str = true;
            } else if (c == ' ' || c == '\n' || c == '\r' || c == '\t') {
                return false;
            }
        }
        return valid(RawParser(text).parse(), root_);
    }

    // Every number in v within the digit limits of json_fragments.h: what the grammar generates where
    // it writes numbers itself (typed numbers, any-values). An enum or const value is the schema's own
    // literal, written as the schema's text has it (1e+100 or a 30-digit integer included), so it is
    // held to its text, not to these limits (json_schema_fuzz found the difference).
    static bool numbers_in_policy(const RawVal& v) {
        static const std::regex number("-?(0|[1-9][0-9]{0,19})(\\.[0-9]+)?([eE][+-]?[0-9]{1,2})?");
        if (v.kind == RawVal::Number && !std::regex_match(v.raw, number)) return false;
        for (const auto& x : v.items)
            if (!numbers_in_policy(x)) return false;
        for (const auto& [k, x] : v.members)
            if (!numbers_in_policy(x)) return false;
        return true;
    }

    bool valid(const RawVal& v, const ojson& s) const {
        if (s.is_boolean()) return s.get<bool>() && numbers_in_policy(v);
        if (s.contains("$ref")) return valid(v, root_.at(ojson::json_pointer(s["$ref"].get<std::string>().substr(1))));
        if (s.value("nullable", false) && v.kind == RawVal::Null) return true;
        if (s.contains("const")) return v.raw == s["const"].dump();
        if (s.contains("enum")) {
            for (const auto& e : s["enum"])
                if (v.raw == e.dump()) return true;
            return false;
        }
        for (const char* k : {"anyOf", "oneOf"})
            if (s.contains(k)) {
                for (const auto& alt : s[k])
                    if (valid(v, alt)) return true;
                return false;
            }
        if (s.contains("allOf")) return valid(v, s["allOf"][0]);
        std::vector<std::string> types;
        if (s.contains("type")) {
            if (s["type"].is_array()) {
                for (const auto& t : s["type"]) types.push_back(t);
            } else {
                types.push_back(s["type"]);
            }
        } else {
            types.push_back(DocGen::inferred_type(s));
        }
        for (const auto& t : types)
            if (typed(v, s, t)) return true;
        return false;
    }

private:
    static size_t code_points(const std::string& u) {
        size_t n = 0;
        for (const unsigned char c : u) n += (c & 0xC0) != 0x80;
        return n;
    }

    bool typed(const RawVal& v, const ojson& s, const std::string& t) const {
        if (t == "any") return numbers_in_policy(v);
        if (t == "null") return v.kind == RawVal::Null;
        if (t == "boolean") return v.kind == RawVal::Bool;
        if (t == "string") {
            if (v.kind != RawVal::String) return false;
            if (s.contains("format")) {
                const std::string f = s["format"];
                const std::string date = "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])";
                const std::string time =
                    "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
                const std::string body = v.raw.substr(1, v.raw.size() - 2);
                if (f == "date") return std::regex_match(body, std::regex(date));
                if (f == "date-time") return std::regex_match(body, std::regex(date + "T" + time));
                if (f == "uuid")
                    return std::regex_match(
                        body,
                        std::regex("[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"));
            }
            const size_t n = code_points(v.str);
            return n >= s.value("minLength", 0u) && n <= s.value("maxLength", SIZE_MAX);
        }
        if (t == "integer") {
            if (v.kind != RawVal::Number || !std::regex_match(v.raw, std::regex("-?(0|[1-9][0-9]{0,19})")) ||
                v.raw == "-0")
                return false;
            const long double x = std::stold(v.raw);
            if (s.contains("minimum") && x < s["minimum"].get<long double>()) return false;
            if (s.contains("maximum") && x > s["maximum"].get<long double>()) return false;
            if (s.contains("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<long double>()) return false;
            if (s.contains("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<long double>()) return false;
            return true;
        }
        if (t == "number")
            return v.kind == RawVal::Number && numbers_in_policy(v) && !(s.contains("minimum") && v.raw[0] == '-');
        if (t == "object") {
            if (v.kind != RawVal::Object) return false;
            const ojson props = s.value("properties", ojson::object());
            const ojson* extra = s.contains("additionalProperties") && s["additionalProperties"] != false
                                     ? &s["additionalProperties"]
                                     : nullptr;
            std::vector<std::string> names;
            for (const auto& [k, x] : props.items()) names.push_back(k);
            int last = -1;
            bool in_extra = false;
            std::set<std::string> seen;
            for (const auto& [k, x] : v.members) {
                const auto it = std::find(names.begin(), names.end(), k.str);
                if (it != names.end()) {
                    const int idx = static_cast<int>(it - names.begin());
                    if (in_extra || idx <= last) return false;  // declared order, extras after
                    last = idx;
                    if (!valid(x, props[k.str])) return false;
                } else {
                    if (!extra || k.raw.find('\\') != std::string::npos) return false;
                    in_extra = true;
                    if (!valid(x, *extra)) return false;
                }
                seen.insert(k.str);
            }
            if (s.contains("required"))
                for (const auto& r : s["required"])
                    if (!seen.count(r.get<std::string>())) return false;
            return true;
        }
        if (t == "array") {
            if (v.kind != RawVal::Array) return false;
            const size_t n_prefix = s.contains("prefixItems") ? s["prefixItems"].size() : 0;
            if (v.items.size() < s.value("minItems", 0u) || v.items.size() > s.value("maxItems", SIZE_MAX))
                return false;
            for (size_t i = 0; i < v.items.size(); ++i) {
                if (i < n_prefix) {
                    if (!valid(v.items[i], s["prefixItems"][i])) return false;
                } else if (s.contains("items")) {
                    if (!valid(v.items[i], s["items"])) return false;
                } else if (!numbers_in_policy(v.items[i])) {  // no "items": an any-value
                    return false;
                }
            }
            return true;
        }
        return false;
    }

    const ojson& root_;
};

// ---- vocabularies -----------------------------------------------------------------------------

// ~`n` byte strings: all 256 single bytes, then random joins of JSON-ish fragments (quotes, braces,
// digits, escapes, keywords, whole and split multi-byte UTF-8 characters).
inline std::vector<std::string> synthetic_vocab(size_t n, uint64_t seed) {
    static const std::vector<std::string> frag = {"{",
                                                  "}",
                                                  "[",
                                                  "]",
                                                  ",",
                                                  ":",
                                                  "\"",
                                                  "\\",
                                                  "\\\"",
                                                  "\\u",
                                                  "00",
                                                  "e9",
                                                  "D83D",
                                                  "true",
                                                  "false",
                                                  "null",
                                                  "-",
                                                  "0",
                                                  "1",
                                                  "12",
                                                  "345",
                                                  ".",
                                                  "e",
                                                  "E",
                                                  "+",
                                                  "a",
                                                  "ab",
                                                  "name",
                                                  "age",
                                                  "label",
                                                  "children",
                                                  "kind",
                                                  "value",
                                                  " ",
                                                  "\n",
                                                  "\xc3",
                                                  "\xa9",
                                                  "\xc3\xa9",
                                                  "\xe2\x82",
                                                  "\xac",
                                                  "\xe2\x82\xac",
                                                  "\xf0\x9f",
                                                  "\x98\x80",
                                                  "T",
                                                  "Z",
                                                  "-0",
                                                  "ff",
                                                  "x",
                                                  "é\"",
                                                  "\":",
                                                  "\",\"",
                                                  "\"}",
                                                  "}]",
                                                  "[{"};
    std::vector<std::string> v;
    for (int b = 0; b < 256; ++b) v.emplace_back(1, static_cast<char>(b));
    std::mt19937_64 rng(seed);
    while (v.size() < n) {
        std::string s;
        const int k = 1 + static_cast<int>(rng() % 4);
        for (int i = 0; i < k; ++i) s += frag[rng() % frag.size()];
        v.push_back(s);
    }
    v[1] = "";  // an id with no bytes (like a special token)
    return v;
}

// The DeepSeek-V4 vocabulary (129,280 ids) when the V3 tokenizer.json is installed, else nullptr.
inline std::shared_ptr<const grammar::TokenTrie> real_trie() {
    const auto path = v3_tokenizer_path();
    if (path.empty()) return nullptr;
    std::ifstream in(path);
    const auto tok = Tokenizer::from_json(make_v4_tokenizer_json(nlohmann::json::parse(in)));
    return grammar::TokenTrie::from_tokenizer(tok);
}

}  // namespace onecard::test
