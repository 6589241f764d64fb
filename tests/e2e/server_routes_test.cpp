// Which routes answer, against a real in-process server over the TEST-ONLY scripted runner: the
// stored responses behind GET / DELETE /v1/responses/{id}.
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
