#include "server/structured_output.h"

#include "engine/after_token_constraint.h"
#include "engine/grammar_constraint.h"
#include "engine/triggered_constraint.h"
#include "grammar/json_schema.h"
#include "server/api_error.h"
#include "server/chat_pipeline.h"
#include "tokenizer/chat_tokens.h"
#include "tokenizer/tokenizer.h"

#include <vector>

namespace onecard::server {

namespace {

// Compiled grammars are kept per distinct schema; 256 covers a busy server's schemas.
constexpr size_t kGrammarCacheCapacity = 256;

void init_grammars(OpenAIServer::State& s) {
    std::call_once(s.grammars_once, [&s] {
        s.json_grammars = std::make_unique<grammar::GrammarCache>(grammar::TokenTrie::from_tokenizer(s.tokenizer),
                                                                  kGrammarCacheCapacity);
        auto dsml_trie = grammar::TokenTrie::from_tokenizer(s.tokenizer, {std::string(dsv4::kDsml)});
        s.dsml_grammars = std::make_unique<grammar::GrammarCache>(dsml_trie, kGrammarCacheCapacity);
        // The parser's marker of tool-call markup: where a strict call's grammar takes over under "auto".
        // Guarded: "｜DSML｜" may start only that marker (a stray "</｜DSML｜parameter>" would be content).
        s.dsml_trigger =
            std::make_shared<const TriggerTokens>(dsml_trie, fmt::format("<{}", dsv4::kDsml), std::string(dsv4::kDsml));
    });
}

bool parallel_calls_off(const Json& body) {
    if (auto pt = body.find("parallel_tool_calls"); pt != body.end() && !pt->is_null()) {
        if (!pt->is_boolean()) throw bad_request("'parallel_tool_calls' must be a boolean", "parallel_tool_calls");
        return !pt->get<bool>();
    }
    return false;
}

// tool_choice "auto": the tools whose arguments the grammar holds (strict: true, or every tool whose
// schema it can hold with --strict-tools-all), the others free; empty when none is held.
std::vector<grammar::DsmlTool> auto_tools(const Json& body, bool strict_all) {
    std::vector<grammar::DsmlTool> tools;
    bool any = false;
    for (const auto& t : body.at("tools")) {
        const Json& fn = t.at("function");
        grammar::DsmlTool dt{fn.at("name").get<std::string>(), nullptr, false};
        if (auto p = fn.find("parameters"); p != fn.end()) dt.parameters = *p;
        const auto st = fn.find("strict");
        dt.constrained = st != fn.end() && st->is_boolean() && st->get<bool>();
        if (!dt.constrained && strict_all) {
            // Not asked for by the client: held where the grammar can hold it, free otherwise.
            try {
                grammar::compile_dsml_tool_calls({dt}, true);
                dt.constrained = true;
            } catch (const grammar::SchemaError&) {
            }
        }
        any = any || dt.constrained;
        tools.push_back(std::move(dt));
    }
    if (!any) tools.clear();
    return tools;
}

std::vector<grammar::DsmlTool> forced_tools(const Json& body, const ChatRequest& r) {
    std::vector<grammar::DsmlTool> tools;
    for (const auto& t : body.at("tools")) {
        const Json& fn = t.at("function");
        const std::string name = fn.at("name").get<std::string>();
        if (r.tool_choice == ToolChoice::Named && name != r.named_tool) continue;
        grammar::DsmlTool dt{name, nullptr};
        if (auto p = fn.find("parameters"); p != fn.end()) dt.parameters = *p;
        tools.push_back(std::move(dt));
    }
    return tools;
}

}  // namespace

std::function<std::unique_ptr<TokenConstraint>()> chat_constraint(OpenAIServer::State& s, const Json& body,
                                                                  const ChatRequest& r, bool thinking) {
    std::shared_ptr<const grammar::TokenMasks> masks;
    std::shared_ptr<const TriggerTokens> trigger;  // set: free text until the DSML marker, then `masks`
    const bool forced = r.tool_choice == ToolChoice::Required || r.tool_choice == ToolChoice::Named;
    std::string format_type = "text";
    const auto rf = body.find("response_format");
    if (rf != body.end() && rf->is_object()) format_type = rf->value("type", "text");
    if (forced) {
        init_grammars(s);
        const bool one_call = parallel_calls_off(body);
        try {
            masks = s.dsml_grammars->dsml_tool_calls(forced_tools(body, r), one_call);
        } catch (const grammar::SchemaError& e) {
            throw bad_request(fmt::format("tool parameters cannot be enforced: {}", e.what()), "tools");
        }
    } else if (format_type != "text") {
        init_grammars(s);
        const Json* schema = nullptr;
        if (format_type == "json_schema")
            if (auto js = rf->find("json_schema"); js != rf->end() && js->is_object())
                if (auto sc = js->find("schema"); sc != js->end() && !sc->is_null()) schema = &*sc;
        try {
            masks = schema ? s.json_grammars->json_schema(*schema) : s.json_grammars->json_object();
        } catch (const grammar::SchemaError& e) {
            throw bad_request(fmt::format("response_format.json_schema.schema cannot be enforced: {}", e.what()),
                              "response_format");
        }
    } else if (r.tool_choice == ToolChoice::Auto) {
        const std::vector<grammar::DsmlTool> tools = auto_tools(body, s.opts.strict_tools_all);
        if (tools.empty()) return {};
        init_grammars(s);
        const bool one_call = parallel_calls_off(body);
        try {
            masks = s.dsml_grammars->dsml_tool_calls(tools, one_call, /*blank_line=*/false);
        } catch (const grammar::SchemaError& e) {
            throw bad_request(fmt::format("strict tool parameters cannot be enforced: {}", e.what()), "tools");
        }
        trigger = s.dsml_trigger;
    } else {
        return {};
    }
    int32_t gate = -1;
    std::vector<int32_t> reserved;  // refused in the reasoning: a tool call there is never parsed as one
    if (thinking) {
        const auto id = s.tokenizer.token_to_id(dsv4::kThinkEnd);
        if (!id) throw ApiError(500, "the tokenizer has no </think> token: structured output cannot start after it");
        gate = *id;
        const bool tool_grammar = forced || trigger != nullptr;  // the DSML block's grammar, not a JSON one
        if (const auto dsml = s.tokenizer.token_to_id(dsv4::kDsml); tool_grammar && dsml) reserved.push_back(*dsml);
    }
    const auto vocab = static_cast<int64_t>(s.tokenizer.vocab_size());
    return [masks, trigger, gate, vocab, reserved]() -> std::unique_ptr<TokenConstraint> {
        std::unique_ptr<TokenConstraint> g;
        if (trigger) {
            g = std::make_unique<TriggeredConstraint>(trigger, masks, vocab);
        } else {
            g = std::make_unique<GrammarConstraint>(masks);
        }
        if (gate < 0) return g;
        return std::make_unique<AfterTokenConstraint>(gate, vocab, std::move(g), reserved);
    };
}

}  // namespace onecard::server
