// Raw HTTP against a real in-process server (engine thread, scheduler, KV manager, sampler,
// detokenizer, parsers, httplib) on an ephemeral loopback port. The model is the TEST-ONLY
// ScriptedRunner (src/testing/scripted_runner.h), so exact outputs can be asserted; the load test in
// server_load_test.cpp runs the real CPU model.
#include "server_test_util.h"

#include <atomic>
#include <cstdlib>

using namespace onecard;
using namespace onecard::test;
using Json = nlohmann::json;

namespace {

const char* kThinkText = "Weighing the options.</think>Hello there, friend!";
const char* kToolText =
    "Need the weather.</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
    "<｜DSML｜parameter name=\"city\" string=\"true\">Paris, \"France\"</｜DSML｜parameter>\n"
    "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";

Json script() {
    return {{"scripts", Json::array({Json{{"when", "in Paris"}, {"text", kToolText}},
                                     Json{{"when", "Once upon"}, {"text", " there was a tiny server."}}})},
            {"default", Json{{"text", kThinkText}}}};
}

Json chat_body(const std::string& user, Json extra = Json::object()) {
    Json b = {{"model", "test-model"}, {"messages", Json::array({Json{{"role", "user"}, {"content", user}}})}};
    for (auto& [k, v] : extra.items()) b[k] = v;
    return b;
}

Json weather_tools() {
    return Json::array(
        {Json{{"type", "function"},
              {"function",
               {{"name", "get_weather"},
                {"description", "Weather forecast"},
                {"parameters",
                 {{"type", "object"},
                  {"properties", {{"city", {{"type", "string"}}}, {"days", {{"type", "integer"}}}}},
                  {"required", {"city"}}}}}}},
         Json{{"type", "function"}, {"function", {{"name", "get_time"}, {"parameters", {{"type", "object"}}}}}}});
}

httplib::Result post(const TestServer& s, const std::string& path, const std::string& body,
                     const httplib::Headers& h = {}) {
    auto c = s.client();
    return c.Post(path.c_str(), h, body, "application/json");
}

// Status, and the error object's param when the body is an error.
void expect_error(const httplib::Result& r, int status, const std::string& param = "") {
    ASSERT_TRUE(r) << "no response";
    EXPECT_EQ(r->status, status) << r->body;
    Json j = Json::parse(r->body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << r->body;
    EXPECT_TRUE(j["error"]["message"].is_string());
    EXPECT_TRUE(j["error"]["type"].is_string());
    if (!param.empty()) {
        EXPECT_EQ(j["error"]["param"], param) << r->body;
    }
}

}  // namespace

TEST(ServerHttp, ProbesModelsAndRouting) {
    ONECARD_NEED_TOKENIZER();
    TestServer s({}, scripted(tok, script(), "probes"), tok, 4096);
    auto c = s.client();
    auto h = c.Get("/health");
    ASSERT_TRUE(h);
    EXPECT_EQ(h->status, 200);
    EXPECT_EQ(c.Get("/ready")->status, 200);
    auto m = c.Get("/v1/models");
    ASSERT_EQ(m->status, 200);
    const Json mj = Json::parse(m->body);
    EXPECT_EQ(mj["object"], "list");
    EXPECT_EQ(mj["data"][0]["id"], "test-model");
    EXPECT_EQ(mj["data"][0]["max_model_len"], 4096);
    expect_error(c.Get("/v1/nothing"), 404);
    expect_error(c.Get("/v1/models/../../etc/passwd"), 404);
    expect_error(c.Get("/v1/chat/completions"), 405);
    expect_error(c.Post("/v1/models", "{}", "application/json"), 405);
    s.srv->set_ready(false);
    auto nr = c.Get("/ready");
    expect_error(nr, 503);
    auto busy = c.Post("/v1/chat/completions", chat_body("hi").dump(), "application/json");
    expect_error(busy, 503);
    EXPECT_TRUE(busy->has_header("Retry-After"));
}

TEST(ServerHttp, ChatSplitsReasoningAndCountsUsage) {
    ONECARD_NEED_TOKENIZER();
    TestServer s({}, scripted(tok, script(), "chat"), tok, 4096);
    auto r = post(s, "/v1/chat/completions", chat_body("Say hello", {{"temperature", 0.7}, {"seed", 5}}).dump());
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const Json j = Json::parse(r->body);
    EXPECT_EQ(j["object"], "chat.completion");
    EXPECT_EQ(j["model"], "test-model");
    EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
    const Json& msg = j["choices"][0]["message"];
    EXPECT_EQ(msg["role"], "assistant");
    EXPECT_EQ(msg["reasoning_content"], "Weighing the options.");
    EXPECT_EQ(msg["content"], "Hello there, friend!");
    EXPECT_FALSE(msg.contains("tool_calls"));
    EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
    const auto n_script = static_cast<int64_t>(tok.encode(kThinkText, true).size());
    EXPECT_EQ(j["usage"]["completion_tokens"], n_script + 1);  // + EOS
    EXPECT_GT(j["usage"]["prompt_tokens"].get<int64_t>(), 3);
    EXPECT_EQ(j["usage"]["total_tokens"], j["usage"]["prompt_tokens"].get<int64_t>() + n_script + 1);
    EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 0);

    // max_tokens cuts the script: finish_reason length, still in the reasoning part.
    auto cut = post(s, "/v1/chat/completions", chat_body("Say hello", {{"max_tokens", 2}}).dump());
    const Json cj = Json::parse(cut->body);
    EXPECT_EQ(cj["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(cj["usage"]["completion_tokens"], 2);
    EXPECT_EQ(cj["choices"][0]["message"]["content"], "");

    // Chat mode (thinking off): the script's "</think>" is not a marker any more, so it is content.
    auto chat_mode = post(s, "/v1/chat/completions",
                          chat_body("Say hello", {{"chat_template_kwargs", {{"thinking", false}}}}).dump());
    const Json mj = Json::parse(chat_mode->body);
    EXPECT_TRUE(mj["choices"][0]["message"]["reasoning_content"].is_null()) << chat_mode->body;

    // Stop string: ends before it, not included.
    auto stopped = post(s, "/v1/chat/completions", chat_body("Say hello", {{"stop", "friend"}}).dump());
    const Json sj = Json::parse(stopped->body);
    EXPECT_EQ(sj["choices"][0]["message"]["content"], "Hello there, ");
    EXPECT_EQ(sj["choices"][0]["finish_reason"], "stop");

    // Logprobs: one entry per generated token (the EOS that ends the request is not a token).
    auto lp = post(s, "/v1/chat/completions", chat_body("Say hello", {{"logprobs", true}, {"top_logprobs", 2}}).dump());
    const Json lj = Json::parse(lp->body);
    const Json& content = lj["choices"][0]["logprobs"]["content"];
    ASSERT_EQ(static_cast<int64_t>(content.size()), n_script) << lp->body.substr(0, 500);
    std::string joined;
    for (const auto& e : content) {
        ASSERT_EQ(e["top_logprobs"].size(), 2u);
        EXPECT_LE(e["logprob"].get<double>(), 0.0);
        EXPECT_EQ(e["top_logprobs"][0]["token"], e["token"]);  // the scripted token dominates
        joined += e["token"].get<std::string>();
    }
    EXPECT_EQ(joined, kThinkText);
}

TEST(ServerHttp, ChatStreamingDeltasReassemble) {
    ONECARD_NEED_TOKENIZER();
    TestServer s({}, scripted(tok, script(), "stream"), tok, 4096);
    auto r = post(s, "/v1/chat/completions",
                  chat_body("Say hello", {{"stream", true}, {"stream_options", {{"include_usage", true}}}}).dump());
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200);
    EXPECT_NE(r->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
    const auto events = sse_data(r->body);
    ASSERT_GE(events.size(), 4u);
    EXPECT_EQ(events.back(), "[DONE]");
    std::string content, reasoning, finish;
    Json usage;
    for (size_t i = 0; i + 1 < events.size(); ++i) {
        const Json c = Json::parse(events[i]);
        EXPECT_EQ(c["object"], "chat.completion.chunk");
        if (i == 0) {
            EXPECT_EQ(c["choices"][0]["delta"]["role"], "assistant");
        }
        if (!c["usage"].is_null()) {
            usage = c["usage"];
            EXPECT_TRUE(c["choices"].empty());
            continue;
        }
        const Json& d = c["choices"][0]["delta"];
        if (d.contains("content")) content += d["content"].get<std::string>();
        if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
        if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
    }
    EXPECT_EQ(reasoning, "Weighing the options.");
    EXPECT_EQ(content, "Hello there, friend!");
    EXPECT_EQ(finish, "stop");
    ASSERT_TRUE(usage.is_object());
    EXPECT_EQ(usage["completion_tokens"], static_cast<int64_t>(tok.encode(kThinkText, true).size()) + 1);
    EXPECT_EQ(usage["prompt_tokens_details"]["cached_tokens"], 0);
}

TEST(ServerHttp, ToolCallsStreamedAndWhole) {
    ONECARD_NEED_TOKENIZER();
    TestServer s({}, scripted(tok, script(), "tools"), tok, 4096);
    const Json want_args = {{"city", "Paris, \"France\""}, {"days", 3}};
    auto whole =
        post(s, "/v1/chat/completions", chat_body("What's the weather in Paris?", {{"tools", weather_tools()}}).dump());
    ASSERT_EQ(whole->status, 200) << whole->body;
    const Json wj = Json::parse(whole->body);
    const Json& msg = wj["choices"][0]["message"];
    EXPECT_EQ(wj["choices"][0]["finish_reason"], "tool_calls");
    EXPECT_TRUE(msg["content"].is_null());
    EXPECT_EQ(msg["reasoning_content"], "Need the weather.");
    ASSERT_EQ(msg["tool_calls"].size(), 1u);
    EXPECT_EQ(msg["tool_calls"][0]["type"], "function");
    EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get_weather");
    const std::string args = msg["tool_calls"][0]["function"]["arguments"];
    EXPECT_EQ(Json::parse(args), want_args);

    auto streamed =
        post(s, "/v1/chat/completions",
             chat_body("What's the weather in Paris?", {{"tools", weather_tools()}, {"stream", true}}).dump());
    std::string sargs, name, id;
    for (const auto& e : sse_data(streamed->body)) {
        if (e == "[DONE]") break;
        const Json c = Json::parse(e);
        const Json& d = c["choices"][0]["delta"];
        if (!d.contains("tool_calls")) continue;
        for (const auto& tc : d["tool_calls"]) {
            EXPECT_EQ(tc["index"], 0);
            if (tc.contains("id")) id = tc["id"];
            if (tc.contains("function") && tc["function"].contains("name")) name = tc["function"]["name"];
            if (tc.contains("function") && tc["function"].contains("arguments"))
                sargs += tc["function"]["arguments"].get<std::string>();
        }
    }
    EXPECT_EQ(name, "get_weather");
    EXPECT_FALSE(id.empty());
    EXPECT_EQ(sargs, args);  // byte-exact reassembly

    // tool_choice none: tools left out of the prompt, no calls returned.
    auto none =
        post(s, "/v1/chat/completions",
             chat_body("What's the weather in Paris?", {{"tools", weather_tools()}, {"tool_choice", "none"}}).dump());
    const Json nj = Json::parse(none->body);
    EXPECT_FALSE(nj["choices"][0]["message"].contains("tool_calls"));
    EXPECT_EQ(nj["choices"][0]["finish_reason"], "stop");
    // Named: the call matches; required without a call in the output is reported, never silently passed.
    auto named = post(s, "/v1/chat/completions",
                      chat_body("What's the weather in Paris?",
                                {{"tools", weather_tools()},
                                 {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}})
                          .dump());
    EXPECT_EQ(named->status, 200) << named->body;
    // Forced calls are held by the grammar while generating (server/structured_output.h): a named
    // tool the script does not call is still the one called, and "required" on a prompt the script
    // answers in text gives a call or runs out of tokens inside one: never free text, never a 500
    // after generation.
    auto wrong_name = post(s, "/v1/chat/completions",
                           chat_body("What's the weather in Paris?",
                                     {{"tools", weather_tools()},
                                      {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_time"}}}}},
                                      {"max_tokens", 128}})
                               .dump());
    ASSERT_EQ(wrong_name->status, 200) << wrong_name->body;
    const Json wn = Json::parse(wrong_name->body);
    if (wn["choices"][0]["finish_reason"] == "tool_calls") {
        ASSERT_FALSE(wn["choices"][0]["message"]["tool_calls"].empty()) << wrong_name->body;
        for (const Json& c : wn["choices"][0]["message"]["tool_calls"]) EXPECT_EQ(c["function"]["name"], "get_time");
    } else {
        EXPECT_EQ(wn["choices"][0]["finish_reason"], "length") << wrong_name->body;
    }
    auto required = post(
        s, "/v1/chat/completions",
        chat_body("Say hello", {{"tools", weather_tools()}, {"tool_choice", "required"}, {"max_tokens", 64}}).dump());
    ASSERT_EQ(required->status, 200) << required->body;
    const Json rj = Json::parse(required->body);
    const Json& rfinish = rj["choices"][0]["finish_reason"];
    EXPECT_TRUE(rfinish == "tool_calls" || rfinish == "length") << required->body;
    // A call that finished leaves no text beside it (a cut one may leave its unfinished markup).
    const Json& rcontent = rj["choices"][0]["message"]["content"];
    if (rfinish == "tool_calls") {
        EXPECT_TRUE(rcontent.is_null() || rcontent == "") << "free text under tool_choice required: " << required->body;
    }
    expect_error(post(s, "/v1/chat/completions", chat_body("x", {{"tool_choice", "required"}}).dump()), 400,
                 "tool_choice");
    expect_error(post(s, "/v1/chat/completions",
                      chat_body("x", {{"tools", weather_tools()},
                                      {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}})
                          .dump()),
                 400, "tool_choice");
    expect_error(post(s, "/v1/chat/completions", chat_body("x", {{"tools", Json::array({1})}}).dump()), 400,
                 "tools[0]");
}

TEST(ServerHttp, CompletionsTextTokensStreamAndLogprobs) {
    ONECARD_NEED_TOKENIZER();
    TestServer s({}, scripted(tok, script(), "completions"), tok, 4096);
    const std::string want = " there was a tiny server.";
    auto r = post(s, "/v1/completions", Json{{"prompt", "Once upon a time"}, {"max_tokens", 64}}.dump());
    ASSERT_EQ(r->status, 200) << r->body;
    Json j = Json::parse(r->body);
    EXPECT_EQ(j["object"], "text_completion");
    EXPECT_EQ(j["choices"][0]["text"], want);
    EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
    const auto ids = tok.encode("Once upon a time", true);
    auto by_ids = post(s, "/v1/completions", Json{{"prompt", ids}, {"max_tokens", 64}}.dump());
    Json ij = Json::parse(by_ids->body);
    EXPECT_EQ(ij["choices"][0]["text"], want);
    EXPECT_EQ(ij["usage"]["prompt_tokens"], ids.size());
    // Default max_tokens is 16 (OpenAI's legacy default); the script is shorter.
    auto lp = post(s, "/v1/completions", Json{{"prompt", Json::array({"Once upon a time"})}, {"logprobs", 1}}.dump());
    Json lj = Json::parse(lp->body);
    ASSERT_TRUE(lj["choices"][0]["logprobs"].is_object()) << lp->body;
    std::string joined;
    for (const auto& t : lj["choices"][0]["logprobs"]["tokens"]) joined += t.get<std::string>();
    EXPECT_EQ(joined, want);
    EXPECT_EQ(lj["choices"][0]["logprobs"]["text_offset"][0], 0);
    auto st = post(s, "/v1/completions", Json{{"prompt", "Once upon a time"}, {"stream", true}}.dump());
    std::string text;
    const auto events = sse_data(st->body);
    EXPECT_EQ(events.back(), "[DONE]");
    for (const auto& e : events)
        if (e != "[DONE]") text += Json::parse(e)["choices"][0]["text"].get<std::string>();
    EXPECT_EQ(text, want);
    // Tokenize / detokenize round trip.
    auto t = post(s, "/tokenize", Json{{"prompt", "Once upon a time"}, {"add_special_tokens", false}}.dump());
    Json tj = Json::parse(t->body);
    EXPECT_EQ(tj["tokens"], ids);
    EXPECT_EQ(tj["count"], ids.size());
    auto d = post(s, "/detokenize", Json{{"tokens", ids}}.dump());
    EXPECT_EQ(Json::parse(d->body)["prompt"], "Once upon a time");
    expect_error(post(s, "/detokenize", Json{{"tokens", {-1}}}.dump()), 400, "tokens");
    expect_error(post(s, "/v1/completions", Json{{"prompt", {999999999}}}.dump()), 400, "prompt");
    expect_error(post(s, "/v1/completions", Json{{"prompt", Json::array()}}.dump()), 400, "prompt");
    expect_error(post(s, "/v1/completions", Json{{"prompt", Json::array({"a", Json::array({5})})}}.dump()), 400,
                 "prompt");  // a batch mixing text and token ids
    expect_error(post(s, "/v1/completions", Json{{"max_tokens", 5}}.dump()), 400, "prompt");
}

// response_format, reasoning effort and thinking reach the prompt renderer (seen through /tokenize,
// which renders chat requests exactly as /v1/chat/completions does).
TEST(ServerHttp, PromptOptionsReachTheRenderer) {
    ONECARD_NEED_TOKENIZER();
    TestServer s({}, scripted(tok, script(), "render"), tok, 4096);
    auto count = [&](Json extra) {
        Json b = chat_body("Give me a JSON answer", std::move(extra));
        auto r = post(s, "/tokenize", b.dump());
        EXPECT_EQ(r->status, 200) << r->body;
        return Json::parse(r->body)["count"].get<int64_t>();
    };
    const int64_t plain = count(Json::object());
    const Json schema = {
        {"type", "json_schema"},
        {"json_schema",
         {{"name", "answer"}, {"schema", {{"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}}}}}}};
    EXPECT_GT(count({{"response_format", schema}}), plain + 10);
    EXPECT_GT(count({{"response_format", {{"type", "json_object"}}}}), plain);
    EXPECT_EQ(count({{"response_format", {{"type", "text"}}}}), plain);
    EXPECT_GT(count({{"reasoning_effort", "max"}}), plain);  // V4: max adds a prefix
    EXPECT_EQ(count({{"chat_template_kwargs", {{"reasoning_effort", "max"}}}}), count({{"reasoning_effort", "max"}}));
    EXPECT_GT(count({{"tools", weather_tools()}}), plain + 20);
    // Thinking off ends the prompt with </think> instead of <think>: same length, other last token.
    auto ids = [&](Json extra) {
        return Json::parse(post(s, "/tokenize", chat_body("hi", std::move(extra)).dump())->body)["tokens"];
    };
    const Json think = ids(Json::object()), chat = ids({{"chat_template_kwargs", {{"thinking", false}}}});
    ASSERT_EQ(think.size(), chat.size());
    EXPECT_NE(think.back(), chat.back());
    EXPECT_EQ(think.back(), *tok.token_to_id("<think>"));
    EXPECT_EQ(chat.back(), *tok.token_to_id("</think>"));
}

TEST(ServerHttp, EveryInputErrorIsA4xxNamingTheField) {
    ONECARD_NEED_TOKENIZER();
    server::ServerOptions o;
    o.max_body_bytes = 8192;
    TestServer s(o, scripted(tok, script(), "errors", 64), tok, 64);
    const std::string P = "/v1/chat/completions";
    expect_error(post(s, P, "{\"messages\": [}"), 400);
    expect_error(post(s, P, "[1,2,3]"), 400);
    expect_error(post(s, P, ""), 400);
    expect_error(post(s, P, std::string("{\"messages\": [{\"role\": \"user\", \"content\": \"\xc3\x28\"}]}")), 400);
    expect_error(post(s, P, chat_body("hi", {{"temperature", "hot"}}).dump()), 400, "temperature");
    expect_error(post(s, P, R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1e308})"), 400,
                 "max_tokens");
    expect_error(
        post(s, P, R"({"messages": [{"role": "user", "content": "hi"}], "seed": 123456789012345678901234567890})"), 400,
        "seed");
    expect_error(post(s, P, chat_body("hi", {{"n", 17}}).dump()), 400, "n");
    expect_error(post(s, P, chat_body("hi", {{"max_tokens", 1000}}).dump()), 400, "max_tokens");
    expect_error(post(s, P, Json{{"messages", "hi"}}.dump()), 400, "messages");
    expect_error(post(s, P, Json{{"temperature", 1}}.dump()), 400, "messages");
    expect_error(post(s, P, Json{{"messages", {{{"role", "wizard"}, {"content", "x"}}}}}.dump()), 400,
                 "messages[0].role");
    expect_error(post(s, P, Json{{"messages", {{{"role", "user"}, {"content", 5}}}}}.dump()), 400,
                 "messages[0].content");
    expect_error(post(s, P, chat_body("hi", {{"response_format", {{"type", "xml"}}}}).dump()), 400,
                 "response_format.type");
    expect_error(post(s, P, chat_body("hi", {{"model", "gpt-4"}}).dump()), 404, "model");
    // Longer than max_model_len (64 tokens).
    std::string longer;
    for (int i = 0; i < 80; ++i) longer += "word ";
    expect_error(post(s, P, chat_body(longer).dump()), 400, "messages");
    expect_error(post(s, "/v1/completions", Json{{"prompt", longer}}.dump()), 400, "prompt");
    // Body over --max-body-bytes.
    auto big = post(s, P, chat_body(std::string(20000, 'a')).dump());
    expect_error(big, 413);
    // The server is still healthy and serves a valid request after all that.
    auto ok = post(s, P, chat_body("hi", {{"max_tokens", 4}}).dump());
    EXPECT_EQ(ok->status, 200) << ok->body;
    const std::string metrics = s.client().Get("/metrics")->body;
    EXPECT_EQ(metrics.find("status=\"500\""), std::string::npos) << metrics;
}

TEST(ServerHttp, ApiKeysGuardEverythingButProbes) {
    ONECARD_NEED_TOKENIZER();
    server::ServerOptions o;
    o.api_keys = {"sk-test-1", "sk-test-2"};
    TestServer s(o, scripted(tok, script(), "auth"), tok, 4096);
    const std::string body = chat_body("hi", {{"max_tokens", 2}}).dump();
    auto none = post(s, "/v1/chat/completions", body);
    expect_error(none, 401);
    EXPECT_EQ(none->get_header_value("WWW-Authenticate"), "Bearer");
    expect_error(post(s, "/v1/chat/completions", body, {{"Authorization", "Bearer sk-test-3"}}), 401);
    expect_error(post(s, "/v1/chat/completions", body, {{"Authorization", "sk-test-1"}}), 401);
    EXPECT_EQ(post(s, "/v1/chat/completions", body, {{"Authorization", "Bearer sk-test-1"}})->status, 200);
    EXPECT_EQ(post(s, "/v1/chat/completions", body, {{"Authorization", "Bearer sk-test-2"}})->status, 200);
    auto c = s.client();
    expect_error(c.Get("/v1/models"), 401);
    EXPECT_EQ(c.Get("/metrics")->status, 200);  // open, as in vLLM, unless --metrics-require-auth
    EXPECT_EQ(c.Get("/health")->status, 200);
    EXPECT_EQ(c.Get("/ready")->status, 200);
    c.set_bearer_token_auth("sk-test-2");
    EXPECT_EQ(c.Get("/v1/models")->status, 200);
}

TEST(ServerHttp, AllowlistIsCheckedBeforeAnythingElse) {
    ONECARD_NEED_TOKENIZER();
    server::ServerOptions o;
    o.allow_cidrs = {"127.0.0.2/32", "::1/128"};
    TestServer s(o, scripted(tok, script(), "allow"), tok, 4096);
    const std::string get = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    // A disallowed address is closed at accept: no answer at all, so it learns nothing, not even
    // which paths exist or that keys are asked for.
    std::string resp = "unset";
    EXPECT_EQ(raw_request_status("127.0.0.1", s.port, get, &resp), -1) << resp;
    EXPECT_EQ(resp, "");
    EXPECT_EQ(raw_request_status("127.0.0.2", s.port, get), 200);
    EXPECT_EQ(raw_request_status("127.0.0.1", s.port, "GET /secret HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
              -1);
    const std::string body = chat_body("hi", {{"max_tokens", 2}}).dump();
    const std::string post_req =
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: "
        "application/json\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
    EXPECT_EQ(raw_request_status("127.0.0.1", s.port, post_req), -1);
    EXPECT_EQ(raw_request_status("127.0.0.2", s.port, post_req), 200);
}

TEST(ServerHttp, FullQueueGets429WithRetryAfter) {
    ONECARD_NEED_TOKENIZER();
    server::ServerOptions o;
    o.max_queued_requests = 0;
    Json slow = script();
    slow["step_delay_ms"] = 20;
    TestServer s(o, scripted(tok, slow, "queue"), tok, 4096, /*max_num_seqs=*/1);
    std::atomic<int> first_status{0};
    std::thread first([&] {
        auto r =
            post(s, "/v1/chat/completions", chat_body("Say hello", {{"max_tokens", 30}, {"ignore_eos", true}}).dump());
        first_status = r ? r->status : -1;
    });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (s.srv->n_inflight() == 0 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    auto second = post(s, "/v1/chat/completions", chat_body("hi").dump());
    expect_error(second, 429);
    EXPECT_EQ(second->get_header_value("Retry-After"), "1");
    first.join();
    EXPECT_EQ(first_status.load(), 200);
}

TEST(ServerHttp, ClientDisconnectCancelsAndFreesKv) {
    ONECARD_NEED_TOKENIZER();
    Json slow = script();
    slow["step_delay_ms"] = 10;
    TestServer s({}, scripted(tok, slow, "disconnect"), tok, 4096);
    const EngineStats base = s.engine->stats();
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/chat/completions";
    req.set_header("Content-Type", "application/json");
    req.body = chat_body("Say hello", {{"stream", true}, {"max_tokens", 2000}, {"ignore_eos", true}}).dump();
    int n_chunks = 0;
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++n_chunks < 5; };
    auto c = s.client();
    auto r = c.send(req);
    EXPECT_FALSE(r);  // we hung up
    EXPECT_EQ(n_chunks, 5);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    EngineStats st = s.engine->stats();
    while ((s.srv->n_inflight() != 0 || st.n_running != 0 || st.n_free_kv_blocks != base.n_free_kv_blocks) &&
           std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        st = s.engine->stats();
    }
    EXPECT_EQ(s.srv->n_inflight(), 0);
    EXPECT_EQ(st.n_running, 0);
    EXPECT_EQ(st.n_waiting, 0);
    EXPECT_EQ(st.n_free_kv_blocks, base.n_free_kv_blocks);
    EXPECT_NO_THROW(s.srv->check_integrity());
    const std::string metrics = s.client().Get("/metrics")->body;
    EXPECT_NE(metrics.find("finished_reason=\"abort\"} 1"), std::string::npos) << metrics;
}

// A streamed request still waiting for a sequence slot produces no tokens; the server's SSE pings
// notice that its client left and cancel it while the running request carries on.
TEST(ServerHttp, QueuedStreamWhoseClientLeftIsCancelled) {
    ONECARD_NEED_TOKENIZER();
    Json slow = script();
    slow["step_delay_ms"] = 20;
    TestServer s({}, scripted(tok, slow, "queued_disconnect"), tok, 4096, /*max_num_seqs=*/1);
    std::atomic<int> a_status{0};
    std::thread a([&] {
        auto r =
            post(s, "/v1/chat/completions", chat_body("Say hello", {{"max_tokens", 150}, {"ignore_eos", true}}).dump());
        a_status = r ? r->status : -1;
    });
    auto wait_for = [&](auto pred, double seconds) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
        while (!pred() && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        return pred();
    };
    ASSERT_TRUE(wait_for([&] { return s.engine->stats().n_running == 1; }, 10));
    std::thread b([&] {
        httplib::Request req;
        req.method = "POST";
        req.path = "/v1/chat/completions";
        req.set_header("Content-Type", "application/json");
        req.body = chat_body("Say hello", {{"stream", true}}).dump();
        req.content_receiver = [](const char*, size_t, uint64_t, uint64_t) { return false; };  // leave at once
        auto c = s.client();
        (void)c.send(req);
    });
    ASSERT_TRUE(wait_for([&] { return s.srv->n_inflight() == 2; }, 10));
    b.join();
    // Cancelled within a couple of ping intervals, long before the running request ends (~3 s).
    EXPECT_TRUE(wait_for([&] { return s.srv->n_inflight() == 1 && s.engine->stats().n_waiting == 0; }, 2.0));
    EXPECT_EQ(s.engine->stats().n_running, 1);
    a.join();
    EXPECT_EQ(a_status.load(), 200);
    EXPECT_NO_THROW(s.srv->check_integrity());
}

TEST(ServerHttp, TlsWithASelfSignedCertificate) {
    ONECARD_NEED_TOKENIZER();
    if (std::system("openssl version >/dev/null 2>&1") != 0) GTEST_SKIP() << "openssl CLI not installed";
    const auto dir = test_tmp_dir("tls");
    std::string cert, key;
    ASSERT_TRUE(make_self_signed_cert(dir, cert, key));
    server::ServerOptions o;
    o.tls_cert = cert;
    o.tls_key = key;
    TestServer s(o, scripted(tok, script(), "tls"), tok, 4096);
    EXPECT_TRUE(s.srv->is_tls());
    httplib::SSLClient c("127.0.0.1", s.port);
    c.set_ca_cert_path(cert.c_str());
    c.enable_server_certificate_verification(true);
    c.set_read_timeout(30);
    auto h = c.Get("/health");
    ASSERT_TRUE(h) << httplib::to_string(h.error());
    EXPECT_EQ(h->status, 200);
    auto r = c.Post("/v1/chat/completions", chat_body("Say hello").dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(Json::parse(r->body)["choices"][0]["message"]["content"], "Hello there, friend!");
    // Plain HTTP to the TLS port gets no HTTP answer.
    auto plain = s.client().Get("/health");
    EXPECT_TRUE(!plain || plain->status != 200);
    // A client that does not trust the certificate is refused by its own verification.
    httplib::SSLClient untrusting("127.0.0.1", s.port);
    untrusting.enable_server_certificate_verification(true);
    untrusting.set_ca_cert_path((dir / "missing.pem").string().c_str());
    EXPECT_FALSE(untrusting.Get("/health"));
    std::filesystem::remove_all(dir);
}
