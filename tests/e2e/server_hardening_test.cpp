// Requests built to crash or confuse the server, against a real in-process server (ScriptedRunner
// model, see server_http_test.cpp): JSON nested far past the depth limit in every field of every JSON
// route, tool definitions of the wrong shape, bodies with bytes after the JSON value. Each must get a
// 400 and leave the server serving.
#include "server/request_json.h"
#include "server_test_util.h"

#include <limits>
#include <set>
#include <string>

using namespace onecard;
using namespace onecard::test;
using Json = nlohmann::json;

namespace {

Json script() {
    return {{"scripts", Json::array()}, {"default", Json{{"text", "Fine.</think>All good."}}}};
}

httplib::Result post(const TestServer& s, const std::string& path, const std::string& body) {
    auto c = s.client();
    return c.Post(path.c_str(), body, "application/json");
}

// `levels` containers of one kind, closed again: valid JSON whose only fault is its depth.
std::string nest(size_t levels, bool objects) {
    std::string out;
    out.reserve(levels * 6 + 2);
    for (size_t i = 0; i < levels; ++i) out += objects ? "{\"a\":" : "[";
    out += "1";
    for (size_t i = 0; i < levels; ++i) out += objects ? '}' : ']';
    return out;
}

// A JSON string literal holding `text` (only '"' needs escaping in what nest() makes).
std::string quoted(const std::string& text) {
    std::string out = "\"";
    for (char c : text) {
        if (c == '"') out += '\\';
        out += c;
    }
    return out + "\"";
}

const char* kUser = R"({"role": "user", "content": "hi"})";

// 400 whose message names the depth limit; `param` when the refusal is for one field.
void expect_too_deep(const httplib::Result& r, const std::string& what, const std::string& param = "") {
    ASSERT_TRUE(r) << what << ": no response (server crashed?)";
    EXPECT_EQ(r->status, 400) << what << ": " << r->body.substr(0, 300);
    const Json j = Json::parse(r->body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << what << ": " << r->body.substr(0, 300);
    const std::string msg = j["error"]["message"].get<std::string>();
    EXPECT_NE(msg.find("limit of " + std::to_string(server::kMaxRequestJsonDepth) + " levels"), std::string::npos)
        << what << ": " << msg;
    EXPECT_EQ(j["error"]["code"], "json_too_deep") << what;
    if (!param.empty()) {
        EXPECT_EQ(j["error"]["param"], param) << what;
    }
}

void expect_400(const httplib::Result& r, const std::string& what, const std::string& param = "") {
    ASSERT_TRUE(r) << what << ": no response";
    EXPECT_EQ(r->status, 400) << what << ": " << r->body.substr(0, 300);
    const Json j = Json::parse(r->body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << what << ": " << r->body.substr(0, 300);
    if (!param.empty()) {
        EXPECT_EQ(j["error"]["param"], param) << what << ": " << r->body;
    }
}

void expect_serving(const TestServer& s) {
    auto t = post(s, "/tokenize", R"({"prompt": "still here"})");
    ASSERT_TRUE(t) << "server gone";
    EXPECT_EQ(t->status, 200) << t->body;
    auto c = post(s, "/v1/chat/completions", std::string(R"({"max_tokens": 3, "messages": [)") + kUser + "]}");
    ASSERT_TRUE(c) << "server gone";
    EXPECT_EQ(c->status, 200) << c->body;
}

}  // namespace

TEST(ServerHardening, DeepJsonOnEveryRouteIsRefusedAndTheServerKeepsServing) {
    ONECARD_NEED_TOKENIZER();
    TestServer s({}, scripted(tok, script(), "deep"), tok, 4096);
    const std::string C = "/v1/chat/completions";
    for (size_t levels : {size_t{100'000}, size_t{1'000'000}}) {
        for (bool objects : {false, true}) {
            const std::string d = nest(levels, objects);
            const std::string tag = std::to_string(levels) + (objects ? " x {\"a\":" : " x [");
            const std::string user = std::string("[") + kUser + "]";
            // Chat: several fields, known and unknown.
            expect_too_deep(post(s, C,
                                 R"({"messages": )" + user +
                                     R"(, "tools": [{"type": "function", "function": )"
                                     R"({"name": "f", "parameters": )" +
                                     d + "}}]}"),
                            "chat tools parameters " + tag);
            expect_too_deep(post(s, C,
                                 R"({"messages": )" + user +
                                     R"(, "response_format": {"type": "json_schema", "json_schema": )"
                                     R"({"name": "x", "schema": )" +
                                     d + "}}}"),
                            "chat response_format " + tag);
            expect_too_deep(post(s, C, R"({"messages": )" + user + R"(, "unknown_field": )" + d + "}"),
                            "chat unknown field " + tag);
            expect_too_deep(post(s, C, R"({"messages": [{"role": "user", "content": )" + d + "}]}"),
                            "chat content " + tag);
            expect_too_deep(post(s, C, d), "chat whole body " + tag);
            // Tool-call arguments are JSON text inside a string: the body is shallow, the string is not.
            const std::string assistant_call =
                R"({"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", )"
                R"("function": {"name": "f", "arguments": )" +
                quoted(d) + "}}]}";
            expect_too_deep(post(s, C, R"({"messages": [)" + std::string(kUser) + ", " + assistant_call + "]}"),
                            "chat tool-call arguments " + tag, "messages[1].tool_calls[0].function.arguments");
            // The other JSON routes.
            expect_too_deep(post(s, "/v1/completions", R"({"prompt": )" + d + "}"), "completions prompt " + tag);
            expect_too_deep(post(s, "/v1/completions", R"({"prompt": "hi", "stop": )" + d + "}"),
                            "completions stop " + tag);
            expect_too_deep(post(s, "/tokenize", R"({"prompt": )" + d + "}"), "tokenize prompt " + tag);
            expect_too_deep(post(s, "/tokenize", R"({"messages": [{"role": "user", "content": )" + d + "}]}"),
                            "tokenize messages " + tag);
            expect_too_deep(
                post(s, "/tokenize", R"({"messages": [)" + std::string(kUser) + ", " + assistant_call + "]}"),
                "tokenize tool-call arguments " + tag, "messages[1].tool_calls[0].function.arguments");
            expect_too_deep(post(s, "/detokenize", R"({"tokens": )" + d + "}"), "detokenize tokens " + tag);
            expect_serving(s);
        }
    }
}

TEST(ServerHardening, NestingUpToTheLimitIsAccepted) {
    ONECARD_NEED_TOKENIZER();
    TestServer s({}, scripted(tok, script(), "limit"), tok, 4096);
    // The body is level 1 and the unknown field's value starts at level 2.
    const std::string at_limit = nest(server::kMaxRequestJsonDepth - 1, false);
    const std::string past_limit = nest(server::kMaxRequestJsonDepth, false);
    auto ok = post(s, "/tokenize", R"({"prompt": "hi", "extra": )" + at_limit + "}");
    ASSERT_TRUE(ok);
    EXPECT_EQ(ok->status, 200) << ok->body.substr(0, 300);
    expect_too_deep(post(s, "/tokenize", R"({"prompt": "hi", "extra": )" + past_limit + "}"), "one level past");
}

TEST(ServerHardening, ToolDefinitionsMustHaveTheDocumentedShape) {
    ONECARD_NEED_TOKENIZER();
    TestServer s({}, scripted(tok, script(), "tools"), tok, 4096);
    const std::string C = "/v1/chat/completions";
    auto with_function = [](const std::string& fn) {
        return std::string(R"({"messages": [)") + kUser + R"(], "tools": [{"type": "function", "function": )" + fn +
               "}]}";
    };
    for (const char* bad : {"5", "\"obj\"", "[]", "true"})
        expect_400(post(s, C, with_function(std::string(R"({"name": "f", "parameters": )") + bad + "}")),
                   std::string("parameters ") + bad, "tools[0].function.parameters");
    expect_400(post(s, C, with_function(R"({"name": 5})")), "numeric name", "tools[0].function.name");
    expect_400(post(s, C, with_function(R"({"parameters": {"type": "object"}})")), "no name", "tools[0].function.name");
    expect_400(post(s, C, with_function(R"({"name": "f", "description": 5})")), "numeric description",
               "tools[0].function.description");
    expect_400(post(s, C, with_function(R"({"name": "f", "description": ["a"]})")), "array description",
               "tools[0].function.description");
    expect_400(
        post(s, C,
             std::string(R"({"messages": [)") + kUser + R"(], "tools": [{"type": 7, "function": {"name": "f"}}]})"),
        "numeric type", "tools[0].type");
    // The documented shapes, including optional fields left out or null, are accepted.
    for (const char* good : {R"({"name": "f"})", R"({"name": "f", "description": null, "parameters": null})",
                             R"({"name": "f", "description": "d", "parameters": {"type": "object"}})"}) {
        auto r = post(s, C, with_function(good));
        ASSERT_TRUE(r);
        EXPECT_EQ(r->status, 200) << good << ": " << r->body;
    }
}

TEST(ServerHardening, BodyMustBeExactlyOneJsonValue) {
    ONECARD_NEED_TOKENIZER();
    TestServer s({}, scripted(tok, script(), "trailing"), tok, 4096);
    const std::string valid = std::string(R"({"max_tokens": 3, "messages": [)") + kUser + "]}";
    for (const std::string& path : {std::string("/v1/chat/completions"), std::string("/tokenize")}) {
        const std::string body = path == "/tokenize" ? std::string(R"({"prompt": "hi"})") : valid;
        expect_400(post(s, path, body + "x"), path + " trailing letter");
        expect_400(post(s, path, body + "{}"), path + " second value");
        expect_400(post(s, path, body + std::string(1, '\0')), path + " trailing NUL");
        expect_400(post(s, path, body + std::string(1, '\0') + "{\"junk\": 1}"), path + " NUL then junk");
        expect_400(post(s, path, std::string(1, '\0') + body), path + " leading NUL");
        auto ok = post(s, path, body + " \n");  // trailing whitespace is part of the JSON grammar
        ASSERT_TRUE(ok);
        EXPECT_EQ(ok->status, 200) << path << ": " << ok->body;
    }
}

namespace {

// ScriptedRunner whose logits rows turn NaN for every request whose prompt contains "POISON".
class PoisonRunner : public ModelRunner {
public:
    PoisonRunner(const Tokenizer& tok, std::unique_ptr<ModelRunner> inner) : tok_(tok), inner_(std::move(inner)) {}
    int64_t vocab_size() const override { return inner_->vocab_size(); }
    int64_t max_model_len() const override { return inner_->max_model_len(); }
    KvModelShape kv_model_shape() const override { return inner_->kv_model_shape(); }
    RunnerOutput execute(const SchedulerOutput& batch) override {
        for (const auto& r : batch.requests)
            if (r.start_pos == 0 && tok_.decode(r.token_ids).find("POISON") != std::string::npos)
                poisoned_.insert(r.id);
        RunnerOutput out = inner_->execute(batch);
        EXPECT_TRUE(out.tokens.empty()) << "the scripted runner returns logits";
        for (size_t i = 0; i < out.row_ids.size(); ++i)
            if (poisoned_.count(out.row_ids[i]))
                out.logits[i * static_cast<size_t>(out.vocab_size) + 3] = std::numeric_limits<float>::quiet_NaN();
        return out;
    }

private:
    const Tokenizer& tok_;
    std::unique_ptr<ModelRunner> inner_;
    std::set<RequestId> poisoned_;  // the engine thread is the only caller
};

}  // namespace

TEST(ServerHardening, NonFiniteLogitsFailOneRequestAndAreCounted) {
    ONECARD_NEED_TOKENIZER();
    TestServer s({}, std::make_unique<PoisonRunner>(tok, scripted(tok, script(), "nan")), tok, 4096);
    const std::string C = "/v1/chat/completions";
    auto bad = post(s, C, R"({"messages": [{"role": "user", "content": "POISON please"}]})");
    ASSERT_TRUE(bad);
    EXPECT_EQ(bad->status, 500) << bad->body;
    EXPECT_NE(bad->body.find("non-finite logits"), std::string::npos) << bad->body;
    // Streaming: the 200 is out already, so the failure is an error event before [DONE].
    auto bad_stream = post(s, C, R"({"stream": true, "messages": [{"role": "user", "content": "POISON"}]})");
    ASSERT_TRUE(bad_stream);
    EXPECT_NE(bad_stream->body.find("non-finite logits"), std::string::npos) << bad_stream->body;
    EXPECT_NE(bad_stream->body.find("[DONE]"), std::string::npos) << bad_stream->body;
    expect_serving(s);
    const std::string metrics = s.client().Get("/metrics")->body;
    EXPECT_EQ(metric_value(metrics, "onecard:nonfinite_logits_total"), 2) << metrics;
    EXPECT_NE(metrics.find("vllm:request_success_total{model_name=\"test-model\",finished_reason=\"error\"} 2"),
              std::string::npos)
        << metrics;
    EXPECT_NO_THROW(s.srv->check_integrity());
}
