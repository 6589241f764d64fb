// GET /v1/models, /v1/models/{id}, /version, POST /tokenize, POST /detokenize (vLLM's shapes).
#include "core/error.h"
#include "server/api_error.h"
#include "server/request_params.h"
#include "server/server_state.h"

#include <algorithm>
#include <ctime>

namespace onecard::server {

namespace {
bool serves(const OpenAIServer::State& s, const std::string& name) {
    return name == s.info.served_model_name ||
           std::find(s.info.model_aliases.begin(), s.info.model_aliases.end(), name) != s.info.model_aliases.end();
}
}  // namespace

void check_model_field(const OpenAIServer::State& s, const Json& body) {
    auto m = opt_string(body, "model");
    if (m && !serves(s, *m))
        throw ApiError(
            404, fmt::format("The model '{}' does not exist; this server serves '{}'", *m, s.info.served_model_name),
            "model", "model_not_found");
}

namespace {
Json model_card(const OpenAIServer::State& s, const std::string& name) {
    static_assert(sizeof(std::time_t) >= 8);
    return {{"id", name},
            {"object", "model"},
            {"created", static_cast<int64_t>(std::time(nullptr))},
            {"owned_by", "onecard"},
            {"root", s.info.root},
            {"parent", nullptr},
            {"max_model_len", s.info.max_model_len}};
}
}  // namespace

void handle_models(OpenAIServer::State& s, const httplib::Request&, httplib::Response& res) {
    Json data = Json::array({model_card(s, s.info.served_model_name)});
    for (const auto& alias : s.info.model_aliases) data.push_back(model_card(s, alias));
    res.set_content(dump_json(Json{{"object", "list"}, {"data", std::move(data)}}), "application/json");
}

// GET /v1/models/{id}: OpenAI's retrieve-model; the id may hold '/' ("deepseek-ai/DeepSeek-V4").
void handle_model(OpenAIServer::State& s, const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches.size() > 1 ? std::string(req.matches[1]) : std::string();
    if (!serves(s, id))
        throw ApiError(404, fmt::format("The model '{}' does not exist", id), "model", "model_not_found");
    res.set_content(dump_json(model_card(s, id)), "application/json");
}

void handle_version(OpenAIServer::State&, const httplib::Request&, httplib::Response& res) {
    res.set_content(dump_json(Json{{"version", ONECARD_VERSION}, {"server", "onecard"}}), "application/json");
}

void handle_tokenize(OpenAIServer::State& s, const httplib::Request& req, httplib::Response& res) {
    const Json body = parse_body(req.body);
    check_model_field(s, body);
    std::vector<int32_t> ids;
    if (body.contains("messages") && !body["messages"].is_null()) {
        if (!body["messages"].is_array() || body["messages"].empty())
            throw bad_request("'messages' must be a non-empty array", "messages");
        check_tool_call_arguments(body["messages"]);
        try {
            ids = s.tokenizer.encode(render_chat_request(body, s.info.chat_variant).text, true);
        } catch (const Error& e) {
            throw bad_request(e.what(), "messages");
        }
    } else {
        auto prompt = opt_string(body, "prompt");
        if (!prompt) throw bad_request("'prompt' (a string) or 'messages' is required", "prompt");
        if (opt_bool(body, "add_special_tokens").value_or(true))
            if (auto bos = s.tokenizer.token_to_id("<｜begin▁of▁sentence｜>")) ids.push_back(*bos);
        auto t = s.tokenizer.encode(*prompt, true);
        ids.insert(ids.end(), t.begin(), t.end());
    }
    Json out = {{"count", ids.size()}, {"max_model_len", s.info.max_model_len}, {"tokens", ids}};
    if (opt_bool(body, "return_token_strs").value_or(false)) {
        Json strs = Json::array();
        for (int32_t id : ids) strs.push_back(s.tokenizer.id_to_token(id));
        out["token_strs"] = std::move(strs);
    }
    res.set_content(dump_json(out), "application/json");
}

void handle_detokenize(OpenAIServer::State& s, const httplib::Request& req, httplib::Response& res) {
    const Json body = parse_body(req.body);
    check_model_field(s, body);
    auto it = body.find("tokens");
    if (it == body.end() || !it->is_array()) throw bad_request("'tokens' must be an array of token ids", "tokens");
    std::vector<int32_t> ids;
    const auto vocab = static_cast<int64_t>(s.tokenizer.vocab_size());
    for (const auto& t : *it) {
        if (!t.is_number_integer() || (t.is_number_unsigned() && t.get<uint64_t>() > INT64_MAX) ||
            t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab)
            throw bad_request(fmt::format("'tokens' holds {}, not a token id in [0, {})", t.dump(), vocab), "tokens");
        ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    res.set_content(dump_json(Json{{"prompt", s.tokenizer.decode(ids)}}), "application/json");
}

}  // namespace onecard::server
