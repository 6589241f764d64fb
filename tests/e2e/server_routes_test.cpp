// Which routes answer, against a real in-process server over the TEST-ONLY scripted runner:
// --allow-path (a path outside it is a 404 like a path with no route, before the API key is asked
// for) and the stored responses behind GET / DELETE /v1/responses/{id}.
#include "server_test_util.h"

using namespace onecard;
using namespace onecard::test;
using Json = nlohmann::json;

namespace {

Json script() {
    return {{"default", Json{{"text", "Weighing.</think>Hello there!"}}}};
}

void expect_openai_error(const httplib::Result& r, int status, const std::string& code) {
    ASSERT_TRUE(r) << "no response";
    EXPECT_EQ(r->status, status) << r->body;
    const Json j = Json::parse(r->body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << r->body;
    EXPECT_EQ(j["error"]["code"], code) << r->body;
    EXPECT_TRUE(j["error"]["message"].is_string());
}

}  // namespace

TEST(ServerRoutes, AllowPathHidesEveryOtherRouteBeforeAuth) {
    ONECARD_NEED_TOKENIZER();
    server::ServerOptions o;
    o.api_keys = {"sk-k"};
    // The seed deployment's proxy: the API routes, /health and /metrics.
    o.allow_paths = {"/v1/*", "/health", "/metrics"};
    TestServer s(o, scripted(tok, script(), "allow_path"), tok, 4096);
    auto c = s.client();
    const httplib::Headers auth = {{"Authorization", "Bearer sk-k"}};
    EXPECT_EQ(c.Get("/health")->status, 200);
    EXPECT_EQ(c.Get("/metrics")->status, 200);
    EXPECT_EQ(c.Get("/v1/models", auth)->status, 200);
    EXPECT_EQ(c.Get("/v1/models")->status, 401);  // allowed, so the key is asked for
    auto chat = c.Post("/v1/chat/completions", auth,
                       R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})", "application/json");
    ASSERT_TRUE(chat);
    EXPECT_EQ(chat->status, 200) << chat->body;
    // Outside the list: 404 as for a route that does not exist, with or without a key, any method.
    for (const char* hidden : {"/ready", "/version", "/tokenize", "/detokenize"}) {
        SCOPED_TRACE(hidden);
        expect_openai_error(c.Get(hidden), 404, "not_found");
        expect_openai_error(c.Post(hidden, auth, "{}", "application/json"), 404, "not_found");
        EXPECT_NE(c.Get(hidden)->body.find(std::string("no route for ") + hidden), std::string::npos);
    }
}

TEST(ServerRoutes, AllowPathsThatReachNoRouteAreRefused) {
    ONECARD_NEED_TOKENIZER();
    for (const std::string bad : {"/v1/chat/completion", "v1/*", "/v1/*/x", "/nothing*"}) {
        server::ServerOptions o;
        o.allow_paths = {"/health", bad};
        try {
            server::OpenAIServer srv(o, tok, server::ModelInfo{});
            ADD_FAILURE() << bad << " was accepted";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
        }
    }
    // Exact ids under a prefix route, and prefixes inside one, reach it.
    for (const std::string good : {"/v1/models/test-model", "/v1/models/t*", "/v1/responses/*", "/*"}) {
        server::ServerOptions o;
        o.allow_paths = {good};
        EXPECT_NO_THROW({ server::OpenAIServer srv(o, tok, server::ModelInfo{}); }) << good;
    }
}

TEST(ServerRoutes, StoredResponsesCanBeRetrievedAndDeleted) {
    ONECARD_NEED_TOKENIZER();
    TestServer s({}, scripted(tok, script(), "responses_store"), tok, 4096);
    auto c = s.client();
    auto created = c.Post("/v1/responses", R"({"input": "hi", "instructions": "Be brief."})", "application/json");
    ASSERT_TRUE(created);
    ASSERT_EQ(created->status, 200) << created->body;
    const Json r = Json::parse(created->body);
    const std::string id = r["id"];

    // GET returns the response object exactly as its creation did.
    auto got = c.Get(("/v1/responses/" + id).c_str());
    ASSERT_TRUE(got);
    ASSERT_EQ(got->status, 200) << got->body;
    EXPECT_EQ(Json::parse(got->body), r);
    EXPECT_EQ(Json::parse(got->body)["output"][1]["content"][0]["text"], "Hello there!");

    // DELETE answers OpenAI's shape; afterwards the id is unknown to GET, DELETE and previous_response_id.
    auto del = c.Delete(("/v1/responses/" + id).c_str());
    ASSERT_TRUE(del);
    ASSERT_EQ(del->status, 200) << del->body;
    EXPECT_EQ(Json::parse(del->body), (Json{{"id", id}, {"object", "response"}, {"deleted", true}}));
    expect_openai_error(c.Get(("/v1/responses/" + id).c_str()), 404, "not_found");
    expect_openai_error(c.Delete(("/v1/responses/" + id).c_str()), 404, "not_found");
    auto follow =
        c.Post("/v1/responses", Json{{"input", "again"}, {"previous_response_id", id}}.dump(), "application/json");
    ASSERT_TRUE(follow);
    EXPECT_EQ(follow->status, 400) << follow->body;

    // store: false is never kept; an unknown id is a 404 naming it; POST is not a method of the route.
    auto unstored = c.Post("/v1/responses", R"({"input": "hi", "store": false})", "application/json");
    const std::string unstored_id = Json::parse(unstored->body)["id"];
    expect_openai_error(c.Get(("/v1/responses/" + unstored_id).c_str()), 404, "not_found");
    auto unknown = c.Get("/v1/responses/resp_nope");
    expect_openai_error(unknown, 404, "not_found");
    EXPECT_NE(unknown->body.find("resp_nope"), std::string::npos) << unknown->body;
    auto post = c.Post(("/v1/responses/" + unstored_id).c_str(), "{}", "application/json");
    expect_openai_error(post, 405, "method_not_allowed");
    EXPECT_EQ(post->get_header_value("Allow"), "GET, DELETE");
    EXPECT_NO_THROW(s.srv->check_integrity());
}
