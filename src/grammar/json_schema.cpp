#include "grammar/json_schema.h"

#include "grammar/json_fragments.h"
#include "tokenizer/chat_json.h"

#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

namespace onecard::grammar {

namespace {

using ojson = nlohmann::ordered_json;

// A schema this large is almost surely a mistake (or an attack); compiling it would cost memory.
constexpr size_t kMaxNodes = 1u << 21;

// Keywords that only annotate: accepted and ignored.
const std::set<std::string_view> kAnnotations = {
    "title",    "description",     "default",          "examples",  "$schema", "$id",
    "$comment", "deprecated",      "readOnly",         "writeOnly", "$defs",   "definitions",
    "$anchor",  "contentEncoding", "contentMediaType", "strict"};
// Assertions the grammar cannot enforce: refused (a grammar that ignored them would emit output that
// does not validate).
const std::set<std::string_view> kRefused = {"pattern",
                                             "patternProperties",
                                             "not",
                                             "if",
                                             "then",
                                             "else",
                                             "dependentRequired",
                                             "dependentSchemas",
                                             "dependencies",
                                             "propertyNames",
                                             "unevaluatedProperties",
                                             "unevaluatedItems",
                                             "contains",
                                             "minContains",
                                             "maxContains",
                                             "multipleOf",
                                             "minProperties",
                                             "maxProperties",
                                             "$dynamicRef",
                                             "$recursiveRef",
                                             "additionalItems"};

class Compiler {
public:
    explicit Compiler(const ojson& root, std::shared_ptr<Grammar> g = std::make_shared<Grammar>(),
                      RawChars raw = RawChars::kAll, Separators sep = Separators::kCompact)
        : root_(root), g_(std::move(g)), raw_(raw), sep_(sep) {}

    std::shared_ptr<const Grammar> run() {
        g_->set_root(rule_for(root_, "#"));
        try {
            g_->check_integrity();
        } catch (const SchemaError&) {
            throw;
        } catch (const Error& e) {
            // The one schema-made fault check_integrity finds is a $ref cycle that consumes nothing.
            throw SchemaError("$ref", fmt::format("'$ref' cycle that matches no text before recursing ({})", e.what()));
        }
        return g_;
    }

    // The rule of `s` (inside root_) in a grammar that embeds it (add_json_schema_rule).
    uint32_t embed(const ojson& s, const std::string& path) { return rule_for(s, path); }

private:
    [[noreturn]] void refuse(const std::string& keyword, const std::string& path, const std::string& why) const {
        throw SchemaError(keyword, fmt::format("'{}' at {}: {}", keyword, path, why));
    }

    void check_budget(const std::string& path) const {
        if (g_->n_nodes() > kMaxNodes)
            throw SchemaError("", fmt::format("schema at {} compiles to more than {} grammar nodes", path, kMaxNodes));
    }

    uint32_t rule_for(const ojson& s, const std::string& path) {
        if (auto it = memo_.find(&s); it != memo_.end()) return it->second;
        if (rule_depth_ >= kMaxSchemaRuleDepth)
            throw SchemaError(
                "", fmt::format("schema at {} nests sub-schemas (or $ref chains) deeper than the limit of {}", path,
                                kMaxSchemaRuleDepth));
        const uint32_t r = g_->add_rule(path);
        memo_[&s] = r;  // before the body, so recursive $refs find it
        ++rule_depth_;
        body(s, path, g_->rule(r).start, g_->rule(r).end);
        --rule_depth_;  // (on a throw the Compiler is discarded, so no guard is needed)
        check_budget(path);
        return r;
    }

    const ojson& resolve(const std::string& ref, const std::string& path) const {
        if (ref.empty() || ref[0] != '#')
            refuse("$ref", path, fmt::format("only local references (#...) are supported, not '{}'", ref));
        const ojson* target = find_local_ref(root_, ref);
        if (!target) refuse("$ref", path, fmt::format("'{}' does not resolve", ref));
        return *target;
    }

    // A value's compact JSON text as the grammar writes it (see RawChars).
    std::string compact(const ojson& v) const { return json_literal(v.dump(), raw_); }

    // from --a const or enum value--> to: its compact text, or, where sep_ allows it, the text the chat
    // encoder writes (json.dumps: ", ", ": " and Python's float repr).
    void add_value_literal(uint32_t from, const ojson& v, uint32_t to) {
        const std::string c = compact(v);
        g_->add_literal(from, c, to);
        if (sep_ == Separators::kSpaceOptional)
            if (const std::string s = json_literal(py_json_dumps(v), raw_); s != c) g_->add_literal(from, s, to);
    }

    uint32_t any_rule() { return any_value_rule(*g_, any_, raw_, sep_); }

    uint32_t string_rule() {
        if (!string_) {
            string_ = g_->add_rule("string");
            add_string(*g_, g_->rule(*string_).start, g_->rule(*string_).end, 0, std::nullopt, raw_);
        }
        return *string_;
    }

    // Only annotations (and `nullable`) may sit next to a combinator or $ref.
    void check_alone(const ojson& s, const std::string& keyword, const std::string& path) const {
        for (const auto& [k, v] : s.items())
            if (k != keyword && k != "nullable" && !kAnnotations.count(k))
                refuse(keyword, path, fmt::format("'{}' next to '{}' is not supported", k, keyword));
    }

    void body(const ojson& s, const std::string& path, uint32_t from, uint32_t to) {
        if (s.is_boolean()) {
            if (!s.get<bool>()) refuse("false", path, "the schema false allows no value");
            g_->add_call(from, any_rule(), to);
            return;
        }
        if (!s.is_object()) refuse("", path, "a schema must be an object or a boolean");
        for (const auto& [k, v] : s.items()) {
            if (kRefused.count(k)) refuse(k, path, "this keyword is not supported by constrained decoding");
            if (k == "uniqueItems" && v == true) refuse(k, path, "uniqueItems: true is not supported");
        }
        if (s.contains("nullable")) {
            if (!s["nullable"].is_boolean()) refuse("nullable", path, "must be a boolean");
            if (s["nullable"] == true) g_->add_literal(from, "null", to);
        }
        if (s.contains("$ref")) {
            check_alone(s, "$ref", path);
            if (!s["$ref"].is_string()) refuse("$ref", path, "must be a string");
            const std::string ref = s["$ref"].get<std::string>();
            g_->add_call(from, rule_for(resolve(ref, path), ref), to);
            return;
        }
        if (s.contains("const")) {
            add_value_literal(from, s["const"], to);
            return;
        }
        if (s.contains("enum")) {
            const auto& e = s["enum"];
            if (!e.is_array() || e.empty()) refuse("enum", path, "must be a non-empty array");
            // With a sibling `type`, values of other types are left out (they would not validate).
            std::set<std::string> seen;
            for (const auto& v : e)
                if (enum_value_has_type(v, s) && seen.insert(compact(v)).second) add_value_literal(from, v, to);
            if (seen.empty()) refuse("enum", path, "no enum value has the schema's type");
            return;
        }
        for (const char* comb : {"anyOf", "oneOf"}) {
            if (!s.contains(comb)) continue;
            check_alone(s, comb, path);
            const auto& alts = s[comb];
            if (!alts.is_array() || alts.empty()) refuse(comb, path, "must be a non-empty array");
            for (size_t i = 0; i < alts.size(); ++i)
                g_->add_call(from, rule_for(alts[i], fmt::format("{}/{}/{}", path, comb, i)), to);
            return;
        }
        if (s.contains("allOf")) {
            check_alone(s, "allOf", path);
            const auto& all = s["allOf"];
            if (!all.is_array() || all.size() != 1)
                refuse("allOf", path, "only allOf with exactly one schema is supported");
            g_->add_call(from, rule_for(all[0], path + "/allOf/0"), to);
            return;
        }
        std::vector<std::string> types;
        if (s.contains("type")) {
            const auto& t = s["type"];
            if (t.is_string()) {
                types.push_back(t.get<std::string>());
            } else if (t.is_array() && !t.empty()) {
                for (const auto& x : t) {
                    if (!x.is_string()) refuse("type", path, "type names must be strings");
                    types.push_back(x.get<std::string>());
                }
            } else {
                refuse("type", path, "must be a type name or a non-empty array of them");
            }
        } else {
            types = inferred_types(s);
        }
        for (const auto& t : types) typed(s, t, path, from, to);
    }

    static bool enum_value_has_type(const ojson& v, const ojson& s) {
        if (!s.contains("type")) return true;
        std::vector<std::string> types;
        if (s["type"].is_string()) types.push_back(s["type"].get<std::string>());
        if (s["type"].is_array())
            for (const auto& t : s["type"])
                if (t.is_string()) types.push_back(t.get<std::string>());
        for (const auto& t : types) {
            if ((t == "string" && v.is_string()) || (t == "number" && v.is_number()) ||
                (t == "integer" && v.is_number_integer()) || (t == "boolean" && v.is_boolean()) ||
                (t == "null" && v.is_null()) || (t == "object" && v.is_object()) || (t == "array" && v.is_array()))
                return true;
        }
        return false;
    }

    static std::vector<std::string> inferred_types(const ojson& s) {
        for (const char* k : {"properties", "required", "additionalProperties"})
            if (s.contains(k)) return {"object"};
        for (const char* k : {"items", "prefixItems", "minItems", "maxItems"})
            if (s.contains(k)) return {"array"};
        for (const char* k : {"minLength", "maxLength", "format"})
            if (s.contains(k)) return {"string"};
        for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
            if (s.contains(k)) return {"number"};
        return {"any"};
    }

    void typed(const ojson& s, const std::string& type, const std::string& path, uint32_t from, uint32_t to) {
        if (type == "any") {
            g_->add_call(from, any_rule(), to);
        } else if (type == "null") {
            g_->add_literal(from, "null", to);
        } else if (type == "boolean") {
            g_->add_literal(from, "true", to);
            g_->add_literal(from, "false", to);
        } else if (type == "string") {
            string_schema(s, path, from, to);
        } else if (type == "integer") {
            integer_schema(s, path, from, to);
        } else if (type == "number") {
            number_schema(s, path, from, to);
        } else if (type == "object") {
            object_schema(s, path, from, to);
        } else if (type == "array") {
            array_schema(s, path, from, to);
        } else {
            refuse("type", path, fmt::format("unknown type '{}'", type));
        }
    }

    std::optional<uint64_t> count(const ojson& s, const char* k, const std::string& path) const {
        if (!s.contains(k)) return std::nullopt;
        const auto& v = s[k];
        if (!v.is_number_integer() || v.get<int64_t>() < 0) refuse(k, path, "must be a non-negative integer");
        const auto n = v.get<uint64_t>();
        if (n > kMaxUnrolledCount)
            refuse(k, path, fmt::format("{} is above the {} that constrained decoding supports", n, kMaxUnrolledCount));
        return n;
    }

    void string_schema(const ojson& s, const std::string& path, uint32_t from, uint32_t to) {
        if (s.contains("format")) {
            if (!s["format"].is_string()) refuse("format", path, "must be a string");
            if (add_string_format(*g_, from, to, s["format"].get<std::string>())) return;
        }
        const uint64_t lo = count(s, "minLength", path).value_or(0);
        const std::optional<uint64_t> hi = count(s, "maxLength", path);
        if (hi && *hi < lo) refuse("maxLength", path, "maxLength is below minLength");
        if (lo == 0 && !hi) {
            g_->add_call(from, string_rule(), to);  // one shared rule: its token sets are cached once
            return;
        }
        const uint32_t r = g_->add_rule(path + " (bounded string)");
        add_string(*g_, g_->rule(r).start, g_->rule(r).end, lo, hi, raw_);
        g_->add_call(from, r, to);
    }

    // A numeric bound of `k` as a double, or nullopt. Draft-4 boolean exclusive forms are folded by the caller.
    std::optional<double> bound(const ojson& s, const char* k, const std::string& path) const {
        if (!s.contains(k)) return std::nullopt;
        if (s[k].is_boolean()) return std::nullopt;
        if (!s[k].is_number()) refuse(k, path, "must be a number");
        return s[k].get<double>();
    }

    void integer_schema(const ojson& s, const std::string& path, uint32_t from, uint32_t to) {
        std::optional<double> lo = bound(s, "minimum", path), hi = bound(s, "maximum", path);
        const bool draft4_xmin = s.contains("exclusiveMinimum") && s["exclusiveMinimum"] == true;
        const bool draft4_xmax = s.contains("exclusiveMaximum") && s["exclusiveMaximum"] == true;
        std::optional<int64_t> ilo, ihi;
        auto to_int = [&](double v, const char* k) {
            if (!(v > -9.2e18 && v < 9.2e18)) refuse(k, path, "bound outside the 64-bit integer range");
            return static_cast<int64_t>(v);
        };
        if (lo) ilo = to_int(draft4_xmin ? std::floor(*lo) + 1 : std::ceil(*lo), "minimum");
        if (hi) ihi = to_int(draft4_xmax ? std::ceil(*hi) - 1 : std::floor(*hi), "maximum");
        if (auto x = bound(s, "exclusiveMinimum", path)) {
            const int64_t v = to_int(std::floor(*x) + 1, "exclusiveMinimum");
            ilo = ilo ? std::max(*ilo, v) : v;
        }
        if (auto x = bound(s, "exclusiveMaximum", path)) {
            const int64_t v = to_int(std::ceil(*x) - 1, "exclusiveMaximum");
            ihi = ihi ? std::min(*ihi, v) : v;
        }
        if (ilo && ihi && *ilo > *ihi) refuse("minimum", path, fmt::format("no integer in [{}, {}]", *ilo, *ihi));
        add_integer(*g_, from, to, ilo, ihi);
    }

    void number_schema(const ojson& s, const std::string& path, uint32_t from, uint32_t to) {
        // Only "non-negative" is cheap to enforce on arbitrary JSON numbers; other bounds would need
        // decimal comparison across fractions and exponents.
        for (const char* k : {"maximum", "exclusiveMinimum", "exclusiveMaximum"})
            if (s.contains(k)) refuse(k, path, "bounds on type number are not supported (use integer, or minimum: 0)");
        bool non_negative = false;
        if (auto lo = bound(s, "minimum", path)) {
            if (*lo != 0.0) refuse("minimum", path, "on type number only minimum: 0 is supported");
            non_negative = true;
        }
        if (non_negative) {
            // "-0" would be >= 0 too, but leaving out every '-' is simpler and still valid.
            add_number(*g_, from, to, true);
            return;
        }
        if (!number_) {
            number_ = g_->add_rule("number");
            add_number(*g_, g_->rule(*number_).start, g_->rule(*number_).end, false);
        }
        g_->add_call(from, *number_, to);
    }

    void object_schema(const ojson& s, const std::string& path, uint32_t from, uint32_t to) {
        const ojson empty = ojson::object();
        const ojson& props = s.contains("properties") ? s["properties"] : empty;
        if (!props.is_object()) refuse("properties", path, "must be an object");
        std::set<std::string> required;
        if (s.contains("required")) {
            if (!s["required"].is_array()) refuse("required", path, "must be an array of names");
            for (const auto& r : s["required"]) {
                if (!r.is_string()) refuse("required", path, "must be an array of names");
                if (!props.contains(r.get<std::string>()))
                    refuse("required", path,
                           fmt::format("required property '{}' is not in properties", r.get<std::string>()));
                required.insert(r.get<std::string>());
            }
        }
        const ojson* extra = nullptr;  // schema of additional properties, or none allowed
        if (s.contains("additionalProperties")) {
            const auto& ap = s["additionalProperties"];
            if (!ap.is_boolean() && !ap.is_object())
                refuse("additionalProperties", path, "must be a boolean or a schema");
            if (!(ap.is_boolean() && ap == false)) extra = &ap;
        }
        // a[i]: before property i with nothing written yet; b[i]: before property i after a member
        // (so the next member needs a comma).
        const size_t n = props.size();
        std::vector<uint32_t> a(n + 1), b(n + 1);  // [n + 1]
        for (size_t i = 0; i <= n; ++i) {
            a[i] = g_->add_node();
            b[i] = g_->add_node();
        }
        g_->add_literal(from, "{", a[0]);
        size_t i = 0;
        std::vector<std::string> names;
        for (const auto& [name, sub] : props.items()) {
            names.push_back(name);
            const uint32_t value = rule_for(sub, path + "/properties/" + name);
            const std::string key = compact(ojson(name));
            // a[i] --key--> k; b[i] --,--> comma --key--> k; k --:--> v --value--> b[i + 1]
            const uint32_t comma = g_->add_node(), k = g_->add_node(), v = g_->add_node();
            add_separator(*g_, b[i], comma, ',', sep_);
            g_->add_literal(a[i], key, k);
            g_->add_literal(comma, key, k);
            add_separator(*g_, k, v, ':', sep_);
            g_->add_call(v, value, b[i + 1]);
            if (!required.count(name)) {
                g_->add_eps(a[i], a[i + 1]);
                g_->add_eps(b[i], b[i + 1]);
            }
            ++i;
        }
        const uint32_t close = g_->add_node();
        g_->add_eps(a[n], close);
        g_->add_eps(b[n], close);
        g_->add_literal(close, "}", to);
        if (extra) {
            const uint32_t value = rule_for(*extra, path + "/additionalProperties");
            const uint32_t key_rule = g_->add_rule(path + " (extra key)");
            add_string_excluding(*g_, g_->rule(key_rule).start, g_->rule(key_rule).end, names, raw_);
            // a[n] --key:value--> m; b[n] --,key:value--> m; m --,key:value--> m; m --}--> to
            const uint32_t m = g_->add_node(), k1 = g_->add_node(), c1 = g_->add_node(), comma = g_->add_node();
            g_->add_call(a[n], key_rule, k1);
            add_separator(*g_, b[n], comma, ',', sep_);
            add_separator(*g_, m, comma, ',', sep_);
            g_->add_call(comma, key_rule, k1);
            add_separator(*g_, k1, c1, ':', sep_);
            g_->add_call(c1, value, m);
            g_->add_literal(m, "}", to);
        }
    }

    void array_schema(const ojson& s, const std::string& path, uint32_t from, uint32_t to) {
        std::vector<const ojson*> prefix;
        if (s.contains("prefixItems")) {
            if (!s["prefixItems"].is_array()) refuse("prefixItems", path, "must be an array of schemas");
            for (const auto& p : s["prefixItems"]) prefix.push_back(&p);
        }
        const ojson any = true;
        const ojson* items = &any;  // absent items: any value
        bool more = true;           // items beyond the prefix allowed
        if (s.contains("items")) {
            const auto& it = s["items"];
            if (it.is_array())
                refuse("items", path, "items as an array (draft 4 tuples) is not supported; use prefixItems");
            if (it.is_boolean() && it == false) more = false;
            items = &it;
        }
        const uint64_t lo = count(s, "minItems", path).value_or(0);
        std::optional<uint64_t> hi = count(s, "maxItems", path);
        if (!more) hi = hi ? std::min<uint64_t>(*hi, prefix.size()) : prefix.size();
        if (hi && *hi < lo)
            refuse(s.contains("maxItems") ? "maxItems" : "minItems", path, "no array length satisfies the bounds");
        if (prefix.size() > kMaxUnrolledCount) refuse("prefixItems", path, "too many prefix items");
        auto element = [&](uint64_t i) -> uint32_t {
            if (i < prefix.size()) return rule_for(*prefix[i], fmt::format("{}/prefixItems/{}", path, i));
            if (items == &any) return any_rule();  // `any` is a local: never a memo key
            return rule_for(*items, path + "/items");
        };
        // p[i]: after i elements. Unrolled up to the largest count that changes what may follow.
        const uint64_t k = hi ? *hi : std::max<uint64_t>({lo, prefix.size(), 1});
        std::vector<uint32_t> p(k + 1);  // [k + 1]
        for (auto& v : p) v = g_->add_node();
        g_->add_literal(from, "[", p[0]);
        for (uint64_t i = 0; i <= k; ++i) {
            if (i >= lo) g_->add_literal(p[i], "]", to);
            if (i < k) {
                uint32_t at = p[i];
                if (i > 0) {
                    at = g_->add_node();
                    add_separator(*g_, p[i], at, ',', sep_);
                }
                g_->add_call(at, element(i), p[i + 1]);
            }
        }
        if (!hi) {
            const uint32_t comma = g_->add_node();
            add_separator(*g_, p[k], comma, ',', sep_);
            g_->add_call(comma, element(k), p[k]);
        }
    }

    const ojson& root_;
    std::shared_ptr<Grammar> g_;
    RawChars raw_;
    Separators sep_;
    std::map<const ojson*, uint32_t> memo_;  // sub-schema (by address in root_) -> its rule
    int rule_depth_ = 0;                     // rule_for calls open on the stack
    std::optional<uint32_t> any_, string_, number_;
};

}  // namespace

const nlohmann::ordered_json* find_local_ref(const nlohmann::ordered_json& root, const std::string& ref) {
    if (ref.empty() || ref[0] != '#') return nullptr;
    try {
        return &root.at(ojson::json_pointer(ref.substr(1)));
    } catch (const std::exception&) {
        return nullptr;
    }
}

void check_schema_depth(const nlohmann::ordered_json& schema) {
    std::vector<std::pair<const ojson*, int>> todo = {{&schema, 0}};  // (value, containers around it)
    while (!todo.empty()) {
        const auto [v, depth] = todo.back();
        todo.pop_back();
        if (!v->is_structured()) continue;
        if (depth + 1 > kMaxSchemaJsonDepth)
            throw SchemaError("",
                              fmt::format("schema is nested deeper than the limit of {} levels", kMaxSchemaJsonDepth));
        for (const auto& child : *v) todo.emplace_back(&child, depth + 1);
    }
}

std::shared_ptr<const Grammar> compile_json_schema(const nlohmann::ordered_json& schema) {
    check_schema_depth(schema);
    return Compiler(schema).run();
}

uint32_t add_json_schema_rule(const std::shared_ptr<Grammar>& g, const nlohmann::ordered_json& root,
                              const nlohmann::ordered_json& sub, const std::string& path, RawChars raw,
                              Separators sep) {
    check_schema_depth(root);  // `sub` lies inside `root`; $refs may reach any part of it
    return Compiler(root, g, raw, sep).embed(sub, path);
}

std::shared_ptr<const Grammar> compile_json_schema_text(std::string_view schema_text) {
    ojson schema;
    try {
        schema = ojson::parse(schema_text);
    } catch (const std::exception& e) {
        throw SchemaError("", fmt::format("not valid JSON: {}", e.what()));
    }
    return compile_json_schema(schema);
}

std::shared_ptr<const Grammar> json_object_grammar() {
    auto g = std::make_shared<Grammar>();
    std::optional<uint32_t> any;
    any_value_rule(*g, any);
    // The any-value rule creates "object" right after "string" and "number"; find it by name.
    for (uint32_t r = 0; r < g->n_rules(); ++r)
        if (g->rule(r).name == "object") g->set_root(r);
    g->check_integrity();
    return g;
}

}  // namespace onecard::grammar
