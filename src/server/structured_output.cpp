#include "server/structured_output.h"

#include "engine/after_token_constraint.h"
#include "engine/grammar_constraint.h"
#include "grammar/json_schema.h"
#include "server/api_error.h"
#include "server/chat_pipeline.h"
#include "tokenizer/chat_tokens.h"
#include "tokenizer/tokenizer.h"

namespace onecard::server {

namespace {

// Compiled grammars are kept per distinct schema; 256 covers a busy server's schemas.
constexpr size_t kGrammarCacheCapacity = 256;

void init_grammars(OpenAIServer::State& s) {
    std::call_once(s.grammars_once, [&s] {
        s.json_grammars = std::make_unique<grammar::GrammarCache>(grammar::TokenTrie::from_tokenizer(s.tokenizer),
                                                                  kGrammarCacheCapacity);
        s.dsml_grammars = std::make_unique<grammar::GrammarCache>(
            grammar::TokenTrie::from_tokenizer(s.tokenizer, {std::string(dsv4::kDsml)}), kGrammarCacheCapacity);
    });
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
    const bool forced = r.tool_choice == ToolChoice::Required || r.tool_choice == ToolChoice::Named;
    if (forced) {
        init_grammars(s);
        bool one_call = false;
        if (auto pt = body.find("parallel_tool_calls"); pt != body.end() && !pt->is_null()) {
            if (!pt->is_boolean()) throw bad_request("'parallel_tool_calls' must be a boolean", "parallel_tool_calls");
            one_call = !pt->get<bool>();
        }
        try {
            masks = s.dsml_grammars->dsml_tool_calls(forced_tools(body, r), one_call);
        } catch (const grammar::SchemaError& e) {
            throw bad_request(fmt::format("tool parameters cannot be enforced: {}", e.what()), "tools");
        }
    } else if (auto rf = body.find("response_format"); rf != body.end() && rf->is_object()) {
        const std::string type = rf->value("type", "text");
        if (type == "text") return {};
        init_grammars(s);
        const Json* schema = nullptr;
        if (type == "json_schema")
            if (auto js = rf->find("json_schema"); js != rf->end() && js->is_object())
                if (auto sc = js->find("schema"); sc != js->end() && !sc->is_null()) schema = &*sc;
        try {
            masks = schema ? s.json_grammars->json_schema(*schema) : s.json_grammars->json_object();
        } catch (const grammar::SchemaError& e) {
            throw bad_request(fmt::format("response_format.json_schema.schema cannot be enforced: {}", e.what()),
                              "response_format");
        }
    } else {
        return {};
    }
    int32_t gate = -1;
    if (thinking) {
        const auto id = s.tokenizer.token_to_id(dsv4::kThinkEnd);
        if (!id) throw ApiError(500, "the tokenizer has no </think> token: structured output cannot start after it");
        gate = *id;
    }
    const auto vocab = static_cast<int64_t>(s.tokenizer.vocab_size());
    return [masks, gate, vocab]() -> std::unique_ptr<TokenConstraint> {
        auto g = std::make_unique<GrammarConstraint>(masks);
        if (gate < 0) return g;
        return std::make_unique<AfterTokenConstraint>(gate, vocab, std::move(g));
    };
}

}  // namespace onecard::server
