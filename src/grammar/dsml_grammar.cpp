#include "grammar/dsml_grammar.h"

#include "grammar/json_fragments.h"
#include "grammar/json_schema.h"
#include "grammar/marker_free_text.h"
#include "tokenizer/chat_tokens.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <set>

namespace onecard::grammar {

namespace {

using ojson = nlohmann::ordered_json;

// Keywords on a parameters schema the DSML layout cannot honour: refused, naming the keyword.
const std::set<std::string> kRefusedParamsKeywords = {"anyOf",
                                                      "oneOf",
                                                      "allOf",
                                                      "$ref",
                                                      "enum",
                                                      "const",
                                                      "not",
                                                      "if",
                                                      "then",
                                                      "else",
                                                      "patternProperties",
                                                      "minProperties",
                                                      "maxProperties",
                                                      "propertyNames",
                                                      "dependentRequired",
                                                      "dependentSchemas",
                                                      "dependencies",
                                                      "unevaluatedProperties"};

// How a DSML value is kept from breaking its markup. DsmlParser ends a parameter value at the first
// "｜DSML｜" (bare, or in "<｜DSML｜" / "</｜DSML｜") or end-of-sentence text; both contain U+FF5C "｜".
// - JSON values (string="false"): their strings never hold U+FF5C raw; it is written \uff5c
//   (json_fragments.h, RawChars), which is the same JSON value. No value is lost, and outside strings
//   JSON text has no such character, so no marker can form.
// - Raw values (string="true", and any value of a tool not held to a schema): any text but NUL
//   without "｜DSML｜" or the end-of-sentence text; '<' and a lone '｜' are fine. Refusing '<' as well
//   would be simpler, but would cut a raw value with HTML or a comparison in it at its first '<'.
// A value stops right before "</｜DSML｜parameter>", which starts with '<', a byte no marker has past
// its first: no marker can straddle the value's end either.
const std::vector<std::string_view> kValueMarkers = {dsv4::kDsml, dsv4::kEos};
constexpr RawChars kJsonInDsml = RawChars::kNoFullwidthBar;
// The encoder writes non-string values with json.dumps's ", " and ": " (json_fragments.h).
constexpr Separators kSepInDsml = Separators::kSpaceOptional;

// DsmlParser reads a tag (attributes included) only up to 4 KB; names from the request stay well
// below that.
constexpr size_t kMaxNameBytes = 1024;

// A tool or parameter name from the request, written into a DSML tag as name="...": the parser
// reads the attribute up to the next '"' and refuses one holding "｜DSML｜". Such a name cannot be
// written, so the tool cannot be enforced: refused, naming `keyword`.
void check_markup_name(const std::string& name, const char* keyword, const std::string& where) {
    if (name.find('"') != std::string::npos || name.find(dsv4::kDsml) != std::string::npos ||
        name.size() > kMaxNameBytes)
        throw SchemaError(keyword, fmt::format("'{}' at {}: the name '{}' cannot be written in DSML markup (it holds "
                                               "'\"' or '{}', or is longer than {} bytes)",
                                               keyword, where, name, dsv4::kDsml, kMaxNameBytes));
}

struct Param {
    std::string name;
    const ojson* schema;
    bool required;
};

struct Params {
    std::vector<Param> declared;
    const ojson* extra = nullptr;  // additionalProperties: the schema of extra parameters, or none allowed
};

Params params_of(const DsmlTool& tool, const std::string& where) {
    const ojson& p = tool.parameters;
    if (p.is_null()) return {};
    if (!p.is_object())
        throw SchemaError("parameters", fmt::format("{} must be a JSON Schema object, got {}", where, p.type_name()));
    for (const auto& [k, v] : p.items())
        if (kRefusedParamsKeywords.count(k))
            throw SchemaError(k, fmt::format("'{}' at {}: a tool's parameters must be a plain object schema "
                                             "(one DSML parameter per property)",
                                             k, where));
    if (auto t = p.find("type"); t != p.end() && !(t->is_string() && *t == "object"))
        throw SchemaError("type", fmt::format("'type' at {}: a tool's parameters must be of type \"object\"", where));
    std::set<std::string> required;
    if (auto r = p.find("required"); r != p.end()) {
        if (!r->is_array()) throw SchemaError("required", fmt::format("'required' at {} must be an array", where));
        for (const auto& n : *r) {
            if (!n.is_string()) throw SchemaError("required", fmt::format("'required' at {} must name strings", where));
            required.insert(n.get<std::string>());
        }
    }
    Params out;
    if (auto props = p.find("properties"); props != p.end()) {
        if (!props->is_object())
            throw SchemaError("properties", fmt::format("'properties' at {} must be an object", where));
        for (const auto& [k, v] : props->items()) {
            check_markup_name(k, "properties", where);
            out.declared.push_back({k, &v, required.count(k) > 0});
        }
    }
    for (const auto& n : required)
        if (std::none_of(out.declared.begin(), out.declared.end(), [&](const Param& x) { return x.name == n; }))
            throw SchemaError("required",
                              fmt::format("'required' at {} names '{}', which is not in 'properties'", where, n));
    // As in json_schema.h: absent or false, only the declared parameters; true or a schema, extra
    // ones after them (with no declared properties, a map). Nothing can require an extra one
    // (minProperties is refused above).
    if (auto ap = p.find("additionalProperties"); ap != p.end()) {
        if (!ap->is_boolean() && !ap->is_object())
            throw SchemaError("additionalProperties",
                              fmt::format("'additionalProperties' at {} must be a boolean or a schema", where));
        if (*ap != false) out.extra = &*ap;
    }
    return out;
}

// `schema` with its local $refs followed, so that a parameter whose schema is a $ref to a plain string
// or a string enum (pydantic writes enums as $defs) may be written raw like one spelled out. The JSON
// compiler has already accepted the schema (a $ref beside annotations only); a $ref left unresolved
// (not local, dangling, or a cycle past the hop limit) stays a $ref, which the raw forms refuse.
const ojson& follow_refs(const ojson& root, const ojson& schema) {
    const ojson* s = &schema;
    for (int hops = 0; hops < 64 && s->is_object(); ++hops) {
        const auto r = s->find("$ref");
        if (r == s->end() || !r->is_string()) break;
        const ojson* target = find_local_ref(root, r->get<std::string>());
        if (!target) break;
        s = target;
    }
    return *s;
}

// A property the model may write raw (string="true", its trained habit for strings): a plain string
// schema, nothing that bounds or shapes the text (those need the JSON form, where the grammar can
// count and check).
bool raw_string_ok(const ojson& schema) {
    if (schema.is_boolean()) return schema.get<bool>();  // true: any value, so any string
    if (!schema.is_object()) return false;
    const auto t = schema.find("type");
    if (t == schema.end() || !t->is_string() || *t != "string") return false;
    for (const char* k :
         {"enum", "const", "format", "minLength", "maxLength", "pattern", "$ref", "anyOf", "oneOf", "allOf", "not"})
        if (schema.contains(k)) return false;
    return true;
}

// The values of a property that only lists them (`const`, or `enum`, with no `type` or one that allows
// strings) which may also be written raw, string="true": its string values without NUL or a value
// marker. The model writes strings raw by habit, and a string enum is no reason to make it write JSON
// (told to, the demo model picked the other value of a two-value enum, having copied it right raw).
// Empty: none (the JSON form, which holds every value, stays allowed either way).
std::vector<std::string> raw_choices(const ojson& schema) {
    if (!schema.is_object()) return {};
    for (const char* k : {"$ref", "anyOf", "oneOf", "allOf", "not"})
        if (schema.contains(k)) return {};
    if (const auto t = schema.find("type"); t != schema.end()) {
        const bool strings = (t->is_string() && *t == "string") ||
                             (t->is_array() && std::find(t->begin(), t->end(), ojson("string")) != t->end());
        if (!strings) return {};
    }
    std::vector<ojson> values;
    if (const auto c = schema.find("const"); c != schema.end())
        values = {*c};
    else if (const auto e = schema.find("enum"); e != schema.end() && e->is_array())
        values.assign(e->begin(), e->end());
    std::vector<std::string> out;
    for (const auto& v : values) {
        if (!v.is_string()) continue;
        std::string text = v.get<std::string>();
        bool ok = text.find('\0') == std::string::npos;
        for (const auto marker : kValueMarkers) ok = ok && text.find(marker) == std::string::npos;
        if (ok && std::find(out.begin(), out.end(), text) == out.end()) out.push_back(std::move(text));
    }
    return out;
}

// from --raw parameter text, then its closing tag--> to.
void add_raw_value(Grammar& g, uint32_t from, uint32_t to) {
    const uint32_t end = g.add_node();
    add_marker_free_text(g, from, end, kValueMarkers, std::string_view("\0", 1));
    g.add_literal(end, fmt::format("</{}parameter>", dsv4::kDsml), to);
}

// The invoke of a tool whose arguments are not held to a schema: any parameter names and values in
// the DSML layout (a value is raw text up to its closing tag, string="true" or "false").
void add_free_invoke(const std::shared_ptr<Grammar>& g, const DsmlTool& tool, uint32_t from, uint32_t to) {
    const uint32_t a = g->add_node(), b = g->add_node(), c = g->add_node();
    g->add_literal(from, fmt::format("<{}invoke name=\"{}\">\n", dsv4::kDsml, tool.name), a);
    g->add_eps(a, c);
    g->add_literal(b, "\n", c);
    const uint32_t name0 = g->add_node(), name = g->add_node(), kind = g->add_node(), open = g->add_node();
    g->add_literal(c, fmt::format("<{}parameter name=\"", dsv4::kDsml), name0);
    // One or more bytes but NUL, '"' and '<', without "｜DSML｜" (the parser refuses a tag holding it).
    add_marker_free_text(*g, name0, name, {dsv4::kDsml}, std::string_view("\0\"<", 3), /*min_one=*/true);
    g->add_literal(name, "\" string=\"", kind);
    g->add_literal(kind, "true\">", open);
    g->add_literal(kind, "false\">", open);
    add_raw_value(*g, open, b);
    const std::string close = fmt::format("\n</{}invoke>", dsv4::kDsml);
    g->add_literal(a, close, to);
    g->add_literal(b, close, to);
}

// Parameter `name` at c: its open tag with string="false" and a JSON value of rule `value`, or (when
// `schema` allows any plain string, or lists string values) string="true" and raw text (any, or one
// of those values); then the closing tag, to `to`.
// `name_rule`, when set, writes the name instead (an extra parameter's, quotes included).
void add_parameter(const std::shared_ptr<Grammar>& g, uint32_t c, const std::string& name,
                   std::optional<uint32_t> name_rule, const ojson& schema, uint32_t value, uint32_t to) {
    uint32_t named = c;  // after `name="NAME"`
    if (name_rule) {
        const uint32_t k = g->add_node();
        named = g->add_node();
        g->add_literal(c, fmt::format("<{}parameter name=", dsv4::kDsml), k);
        g->add_call(k, *name_rule, named);
    }
    const std::string head = name_rule ? "" : fmt::format("<{}parameter name=\"{}\"", dsv4::kDsml, name);
    const uint32_t x = g->add_node(), y = g->add_node();
    g->add_literal(named, head + " string=\"false\">", x);
    g->add_call(x, value, y);
    g->add_literal(y, fmt::format("</{}parameter>", dsv4::kDsml), to);
    if (raw_string_ok(schema)) {
        const uint32_t raw = g->add_node();
        g->add_literal(named, head + " string=\"true\">", raw);
        add_raw_value(*g, raw, to);
    } else if (const auto choices = raw_choices(schema); !choices.empty()) {
        const uint32_t raw = g->add_node();
        g->add_literal(named, head + " string=\"true\">", raw);
        const std::string close = fmt::format("</{}parameter>", dsv4::kDsml);
        for (const auto& choice : choices) g->add_literal(raw, choice + close, to);
    }
}

// One tool's invoke from `from` to `to`: the name tag, its parameters joined by "\n", the closing
// tag. Position i has node a[i] (nothing written yet) and b[i] (something written); c is "about to
// write parameter i", reached from a[i] directly and from b[i] after the "\n" that separates two.
// Extra parameters (additionalProperties) follow the declared ones.
void add_invoke(const std::shared_ptr<Grammar>& g, const DsmlTool& tool, size_t index, uint32_t from, uint32_t to) {
    if (!tool.constrained) {
        add_free_invoke(g, tool, from, to);
        return;
    }
    const std::string where = fmt::format("tools[{}].function.parameters", index);
    const Params params = params_of(tool, where);
    const size_t n = params.declared.size();
    std::vector<uint32_t> a(n + 1), b(n + 1);  // [n + 1]
    for (size_t i = 0; i <= n; ++i) {
        a[i] = g->add_node();
        b[i] = g->add_node();
    }
    g->add_literal(from, fmt::format("<{}invoke name=\"{}\">\n", dsv4::kDsml, tool.name), a[0]);
    std::vector<std::string> names;
    for (size_t i = 0; i < n; ++i) {
        const Param& pr = params.declared[i];
        names.push_back(pr.name);
        const uint32_t value = add_json_schema_rule(
            g, tool.parameters, *pr.schema, fmt::format("{}/properties/{}", where, pr.name), kJsonInDsml, kSepInDsml);
        const uint32_t c = g->add_node();
        g->add_eps(a[i], c);
        g->add_literal(b[i], "\n", c);
        add_parameter(g, c, pr.name, std::nullopt, follow_refs(tool.parameters, *pr.schema), value, b[i + 1]);
        if (!pr.required) {
            g->add_eps(a[i], a[i + 1]);
            g->add_eps(b[i], b[i + 1]);
        }
    }
    const std::string close = fmt::format("\n</{}invoke>", dsv4::kDsml);
    g->add_literal(a[n], close, to);
    g->add_literal(b[n], close, to);
    if (params.extra) {
        // Names: no escapes exist in an attribute, so the same no-escape string as extra JSON keys
        // (none of the declared names; without U+FF5C, so never "｜DSML｜"). Duplicate extra names are
        // not prevented (DsmlParser keeps the first). m: after an extra parameter.
        const uint32_t name_rule = g->add_rule(where + " (extra parameter name)");
        add_string_excluding(*g, g->rule(name_rule).start, g->rule(name_rule).end, names, kJsonInDsml);
        const uint32_t value = add_json_schema_rule(g, tool.parameters, *params.extra, where + "/additionalProperties",
                                                    kJsonInDsml, kSepInDsml);
        const uint32_t c = g->add_node(), m = g->add_node();
        g->add_eps(a[n], c);
        g->add_literal(b[n], "\n", c);
        g->add_literal(m, "\n", c);
        add_parameter(g, c, "", name_rule, follow_refs(tool.parameters, *params.extra), value, m);
        g->add_literal(m, close, to);
    }
}

}  // namespace

std::shared_ptr<const Grammar> compile_dsml_tool_calls(const std::vector<DsmlTool>& tools, bool one_call,
                                                       bool blank_line) {
    if (tools.empty()) throw SchemaError("tools", "a DSML tool-call grammar needs at least one tool");
    auto g = std::make_shared<Grammar>();
    const uint32_t invoke = g->add_rule("dsml_invoke");
    for (size_t i = 0; i < tools.size(); ++i) {
        check_markup_name(tools[i].name, "name", fmt::format("tools[{}].function", i));
        add_invoke(g, tools[i], i, g->rule(invoke).start, g->rule(invoke).end);
    }

    const uint32_t root = g->add_rule("dsml_tool_calls");
    const uint32_t open = g->add_node(), after = g->add_node();
    g->add_literal(g->rule(root).start,
                   fmt::format("{}<{}{}>\n", blank_line ? "\n\n" : "", dsv4::kDsml, dsv4::kToolCallsBlock), open);
    g->add_call(open, invoke, after);
    if (!one_call) {  // further invokes, each after a "\n"
        const uint32_t sep = g->add_node();
        g->add_literal(after, "\n", sep);
        g->add_call(sep, invoke, after);
    }
    g->add_literal(after, fmt::format("\n</{}{}>", dsv4::kDsml, dsv4::kToolCallsBlock), g->rule(root).end);
    g->set_root(root);
    try {
        g->check_integrity();
    } catch (const SchemaError&) {
        throw;
    } catch (const Error& e) {
        throw SchemaError("$ref", fmt::format("'$ref' cycle that matches no text before recursing ({})", e.what()));
    }
    return g;
}

}  // namespace onecard::grammar
