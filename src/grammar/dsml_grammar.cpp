#include "grammar/dsml_grammar.h"

#include "grammar/json_schema.h"
#include "tokenizer/chat_tokens.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

namespace onecard::grammar {

namespace {

using ojson = nlohmann::ordered_json;

// Keywords on a parameters schema the DSML layout cannot honour: refused, naming the keyword.
const std::set<std::string> kRefusedParamsKeywords = {
    "anyOf", "oneOf", "allOf", "$ref", "enum", "const", "not", "if", "then", "else", "patternProperties",
    "minProperties", "maxProperties", "propertyNames", "dependentRequired", "dependentSchemas", "dependencies",
    "unevaluatedProperties"};

struct Param {
    std::string name;
    const ojson* schema;
    bool required;
};

std::vector<Param> params_of(const DsmlTool& tool, const std::string& where) {
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
    std::vector<Param> out;
    if (auto props = p.find("properties"); props != p.end()) {
        if (!props->is_object())
            throw SchemaError("properties", fmt::format("'properties' at {} must be an object", where));
        for (const auto& [k, v] : props->items()) out.push_back({k, &v, required.count(k) > 0});
    }
    for (const auto& n : required)
        if (std::none_of(out.begin(), out.end(), [&](const Param& x) { return x.name == n; }))
            throw SchemaError("required", fmt::format("'required' at {} names '{}', which is not in 'properties'",
                                                      where, n));
    return out;
}

// A property the model may write raw (string="true", its trained habit for strings): a plain string
// schema, nothing that bounds or shapes the text (those need the JSON form, where the grammar can
// count and check).
bool raw_string_ok(const ojson& schema) {
    if (!schema.is_object()) return false;
    const auto t = schema.find("type");
    if (t == schema.end() || !t->is_string() || *t != "string") return false;
    for (const char* k : {"enum", "const", "format", "minLength", "maxLength", "pattern", "$ref", "anyOf", "oneOf",
                          "allOf", "not"})
        if (schema.contains(k)) return false;
    return true;
}

// Raw parameter text: any bytes but NUL and '<' (so the closing tag is the only way out; a raw value
// cannot contain '<' — the JSON form can), zero or more.
uint32_t add_raw_text(const std::shared_ptr<Grammar>& g) {
    const uint32_t r = g->add_node();
    g->add_bytes(r, 0x01, 0x3B, r);
    g->add_bytes(r, 0x3D, 0xFF, r);
    return r;
}

// Any bytes but NUL up to and including `close`, which cannot occur before it: the KMP automaton of
// `close` (state j = its first j bytes just written), each state's byte edges grouped into ranges.
void add_text_until(const std::shared_ptr<Grammar>& g, uint32_t from, std::string_view close, uint32_t to) {
    const size_t m = close.size();
    std::vector<size_t> fail(m + 1, 0);  // KMP failure function of `close`
    for (size_t i = 1, k = 0; i < m; ++i) {
        while (k > 0 && close[i] != close[k]) k = fail[k];
        if (close[i] == close[k]) ++k;
        fail[i + 1] = k;
    }
    auto next = [&](size_t j, uint8_t b) {
        while (j > 0 && static_cast<uint8_t>(close[j]) != b) j = fail[j];
        return static_cast<uint8_t>(close[j]) == b ? j + 1 : 0;
    };
    std::vector<uint32_t> state(m);
    state[0] = from;
    for (size_t j = 1; j < m; ++j) state[j] = g->add_node();
    for (size_t j = 0; j < m; ++j) {
        uint32_t lo = 1;
        size_t target = next(j, 1);
        for (uint32_t b = 2; b <= 256; ++b) {
            const size_t t = b < 256 ? next(j, static_cast<uint8_t>(b)) : m + 1;  // 256: flush the last range
            if (t == target) continue;
            g->add_bytes(state[j], static_cast<uint8_t>(lo), static_cast<uint8_t>(b - 1), target == m ? to : state[target]);
            lo = b;
            target = t;
        }
    }
}

// The invoke of a tool whose arguments are not held to a schema: any parameter names and values in
// the DSML layout (a value is any text up to its closing tag, string="true" or "false").
void add_free_invoke(const std::shared_ptr<Grammar>& g, const DsmlTool& tool, uint32_t from, uint32_t to) {
    const uint32_t a = g->add_node(), b = g->add_node(), c = g->add_node();
    g->add_literal(from, fmt::format("<{}invoke name=\"{}\">\n", dsv4::kDsml, tool.name), a);
    g->add_eps(a, c);
    g->add_literal(b, "\n", c);
    const uint32_t name0 = g->add_node(), name = g->add_node(), kind = g->add_node(), open = g->add_node();
    g->add_literal(c, fmt::format("<{}parameter name=\"", dsv4::kDsml), name0);
    for (uint32_t n : {name0, name}) {  // one or more bytes but NUL, '"' and '<'
        g->add_bytes(n, 0x01, 0x21, name);
        g->add_bytes(n, 0x23, 0x3B, name);
        g->add_bytes(n, 0x3D, 0xFF, name);
    }
    g->add_literal(name, "\" string=\"", kind);
    g->add_literal(kind, "true\">", open);
    g->add_literal(kind, "false\">", open);
    add_text_until(g, open, fmt::format("</{}parameter>", dsv4::kDsml), b);
    const std::string close = fmt::format("\n</{}invoke>", dsv4::kDsml);
    g->add_literal(a, close, to);
    g->add_literal(b, close, to);
}

// One tool's invoke from `from` to `to`: the name tag, its parameters joined by "\n", the closing
// tag. Position i has node a[i] (nothing written yet) and b[i] (something written); c[i] is "about to
// write parameter i", reached from a[i] directly and from b[i] after the "\n" that separates two.
void add_invoke(const std::shared_ptr<Grammar>& g, const DsmlTool& tool, size_t index, uint32_t from, uint32_t to) {
    if (!tool.constrained) {
        add_free_invoke(g, tool, from, to);
        return;
    }
    const std::string where = fmt::format("tools[{}].function.parameters", index);
    const std::vector<Param> params = params_of(tool, where);
    const size_t n = params.size();
    std::vector<uint32_t> a(n + 1), b(n + 1);
    for (size_t i = 0; i <= n; ++i) {
        a[i] = g->add_node();
        b[i] = g->add_node();
    }
    g->add_literal(from, fmt::format("<{}invoke name=\"{}\">\n", dsv4::kDsml, tool.name), a[0]);
    for (size_t i = 0; i < n; ++i) {
        const Param& pr = params[i];
        const uint32_t value = add_json_schema_rule(g, tool.parameters, *pr.schema,
                                                    fmt::format("{}/properties/{}", where, pr.name));
        const uint32_t c = g->add_node(), x = g->add_node(), y = g->add_node();
        g->add_eps(a[i], c);
        g->add_literal(b[i], "\n", c);
        g->add_literal(c, fmt::format("<{}parameter name=\"{}\" string=\"false\">", dsv4::kDsml, pr.name), x);
        g->add_call(x, value, y);
        g->add_literal(y, fmt::format("</{}parameter>", dsv4::kDsml), b[i + 1]);
        if (raw_string_ok(*pr.schema)) {
            const uint32_t raw = add_raw_text(g);
            g->add_literal(c, fmt::format("<{}parameter name=\"{}\" string=\"true\">", dsv4::kDsml, pr.name), raw);
            g->add_literal(raw, fmt::format("</{}parameter>", dsv4::kDsml), b[i + 1]);
        }
        if (!pr.required) {
            g->add_eps(a[i], a[i + 1]);
            g->add_eps(b[i], b[i + 1]);
        }
    }
    const std::string close = fmt::format("\n</{}invoke>", dsv4::kDsml);
    g->add_literal(a[n], close, to);
    g->add_literal(b[n], close, to);
}

}  // namespace

std::shared_ptr<const Grammar> compile_dsml_tool_calls(const std::vector<DsmlTool>& tools, bool one_call,
                                                       bool blank_line) {
    if (tools.empty()) throw SchemaError("tools", "a DSML tool-call grammar needs at least one tool");
    auto g = std::make_shared<Grammar>();
    const uint32_t invoke = g->add_rule("dsml_invoke");
    for (size_t i = 0; i < tools.size(); ++i) add_invoke(g, tools[i], i, g->rule(invoke).start, g->rule(invoke).end);

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
