#include "tool_fixtures.h"

#include "stats.h"

#include "core/error.h"
#include "embedded_data.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace onecard::client {

namespace {

void check_fixture(const Json& fx, const Json& f, size_t i) {
    const std::string where =
        f.is_object() && f.contains("id") && f["id"].is_string() ? f["id"].get<std::string>() : fmt::format("#{}", i);
    auto need = [&](bool ok, const std::string& what) {
        if (!ok) throw Error(fmt::format("validate: fixture {}: {}", where, what));
    };
    need(f.is_object() && f.contains("id") && f["id"].is_string(), "needs a string id");
    need(f.contains("tools") && f["tools"].is_array() && !f["tools"].empty(), "needs a non-empty tools list");
    for (const auto& n : f["tools"])
        need(n.is_string() && fx["tools"].contains(n.get<std::string>()) &&
                 fx["tools"][n.get<std::string>()].contains("parameters"),
             "tool " + n.dump() + " is not defined (with parameters) in \"tools\"");
    need(f.contains("turns") && f["turns"].is_array() && !f["turns"].empty(), "needs a non-empty turns list");
    for (size_t k = 0; k < f["turns"].size(); ++k) {
        const Json& t = f["turns"][k];
        const std::string tw = fmt::format("turn {}: ", k + 1);
        need(t.is_object(), tw + "must be an object");
        need(k > 0 || t.contains("user"), tw + "the first turn needs \"user\"");
        need(!t.contains("user") || t["user"].is_string(), tw + "\"user\" must be a string");
        need(t.contains("expected") && t["expected"].is_array(), tw + "needs an \"expected\" array");
        for (const auto& c : t["expected"])
            need(c.is_object() && c.contains("name") && c["name"].is_string() && c.contains("arguments") &&
                     c["arguments"].is_object(),
                 tw + "every expected call needs a string name and an arguments object");
        need(k == 0 || !f["turns"][k - 1]["expected"].empty(), tw + "follows a turn without calls");
        need(!t.contains("tool_results") ||
                 (t["tool_results"].is_array() && std::all_of(t["tool_results"].begin(), t["tool_results"].end(),
                                                              [](const Json& r) { return r.is_string(); })),
             tw + "\"tool_results\" must be an array of strings");
        need(!t.contains("answer_contains") || t["answer_contains"].is_array(),
             tw + "\"answer_contains\" must be an array of strings");
    }
}

std::string lower_ascii(std::string s) {
    for (char& c : s)
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    return s;
}

// The arguments without the parameters that hold their schema default: omitting one and sending its
// default mean the same call.
Json without_defaults(Json args, const Json& params) {
    if (!args.is_object() || !params.is_object() || !params.contains("properties")) return args;
    for (const auto& [k, schema] : params["properties"].items())
        if (schema.is_object() && schema.contains("default") && args.contains(k) && args[k] == schema["default"])
            args.erase(k);
    return args;
}

std::string call_text(const std::string& name, const Json& args) {
    return name + args.dump();
}

}  // namespace

Json load_fixtures(const std::string& path) {
    std::string text = builtin_tool_fixtures();
    if (!path.empty()) {
        std::ifstream in(path);
        ONECARD_CHECK(in.good(), "validate: cannot open --fixtures '{}'", path);
        std::stringstream ss;
        ss << in.rdbuf();
        text = ss.str();
    }
    Json fx;
    try {
        fx = Json::parse(text);
    } catch (const std::exception& e) {
        throw Error(fmt::format("validate: fixtures are not JSON: {}", e.what()));
    }
    ONECARD_CHECK(fx.is_object() && fx.contains("tools") && fx["tools"].is_object() && fx.contains("fixtures") &&
                      fx["fixtures"].is_array(),
                  "validate: a fixture file needs a \"tools\" object and a \"fixtures\" array");
    for (size_t i = 0; i < fx["fixtures"].size(); ++i) check_fixture(fx, fx["fixtures"][i], i);
    return fx;
}

std::vector<FixtureTurn> fixture_turns(const Json& fx, const Json& base) {
    std::vector<FixtureTurn> out;
    for (const auto& f : fx.at("fixtures")) {
        Json tools = Json::array(), params = Json::object();
        for (const auto& name : f.at("tools")) {
            const Json& def = fx.at("tools").at(name.get<std::string>());
            tools.push_back({{"type", "function"},
                             {"function",
                              {{"name", name},
                               {"description", def.value("description", "")},
                               {"parameters", def.at("parameters")}}}});
            params[name.get<std::string>()] = def.at("parameters");
        }
        Json messages = Json::array();
        const auto& turns = f.at("turns");
        for (size_t it = 0; it < turns.size(); ++it) {
            const Json& t = turns[it];
            // A turn without a user message is the reply to the previous turn's tool results.
            if (t.contains("user")) messages.push_back({{"role", "user"}, {"content", t["user"]}});
            FixtureTurn ft{f.at("id").get<std::string>(), it, base, t.at("expected"), {}, params};
            ft.body["messages"] = messages;
            ft.body["tools"] = tools;
            if (t.contains("answer_contains"))
                for (const auto& s : t["answer_contains"]) ft.answer_contains.push_back(s.get<std::string>());
            out.push_back(std::move(ft));
            // History for the next turn: the expected calls and their results.
            const Json& exp = t.at("expected");
            if (exp.empty()) continue;  // only a last turn may call nothing (load_fixtures checks)
            Json calls = Json::array();
            for (size_t k = 0; k < exp.size(); ++k)
                calls.push_back({{"id", "call_" + std::to_string(it) + "_" + std::to_string(k)},
                                 {"type", "function"},
                                 {"function", {{"name", exp[k]["name"]}, {"arguments", exp[k]["arguments"].dump()}}}});
            messages.push_back({{"role", "assistant"}, {"content", ""}, {"tool_calls", calls}});
            for (size_t k = 0; k < exp.size(); ++k) {
                const std::string res = t.contains("tool_results") && k < t["tool_results"].size()
                                            ? t["tool_results"][k].get<std::string>()
                                            : "{}";
                messages.push_back({{"role", "tool"},
                                    {"tool_call_id", "call_" + std::to_string(it) + "_" + std::to_string(k)},
                                    {"content", res}});
            }
        }
    }
    return out;
}

bool turn_matches(const StreamResult& r, const FixtureTurn& t, std::string* why) {
    if (!r.ok) return *why = r.error, false;
    const Json& expected = t.expected;
    if (r.tool_calls.size() != expected.size()) {
        *why = fmt::format("{} calls, expected {}", r.tool_calls.size(), expected.size());
        if (!r.tool_calls.empty())
            *why += ": " + utf8_prefix(call_text(r.tool_calls[0].name, r.tool_calls[0].arguments), 200);
        return false;
    }
    std::vector<Json> got;
    for (size_t k = 0; k < r.tool_calls.size(); ++k) {
        try {
            got.push_back(Json::parse(r.tool_calls[k].arguments));
        } catch (const std::exception&) {
            return *why =
                       fmt::format("call {}: arguments not JSON: {}", k, utf8_prefix(r.tool_calls[k].arguments, 200)),
                   false;
        }
        if (!got.back().is_object())
            return *why =
                       fmt::format("call {}: arguments are not an object: {}", k, utf8_prefix(got.back().dump(), 200)),
                   false;
    }
    // Normalised equality is an equivalence, so taking the first unused equal call finds a matching
    // whenever one exists.
    std::vector<bool> used(got.size(), false);
    for (const auto& e : expected) {
        const std::string name = e["name"].get<std::string>();
        const Json& params = t.tool_params.contains(name) ? t.tool_params[name] : Json();
        const Json want = without_defaults(e["arguments"], params);
        bool found = false;
        for (size_t k = 0; k < got.size() && !found; ++k)
            if (!used[k] && r.tool_calls[k].name == name && without_defaults(got[k], params) == want)
                used[k] = found = true;
        if (!found) {
            *why = "no call matches " + utf8_prefix(call_text(name, e["arguments"]), 200) + "; got";
            for (size_t k = 0; k < got.size(); ++k)
                *why += " " + utf8_prefix(call_text(r.tool_calls[k].name, got[k]), 200);
            return false;
        }
    }
    const std::string content = lower_ascii(r.content);
    for (const auto& s : t.answer_contains)
        if (content.find(lower_ascii(s)) == std::string::npos)
            return *why = fmt::format("the answer lacks '{}': {}", s, utf8_prefix(r.content, 200)), false;
    return true;
}

}  // namespace onecard::client
