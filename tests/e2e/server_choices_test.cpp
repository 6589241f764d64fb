// Several choices per request (n), batched /v1/completions prompts, echo and logit_bias, against a
// real in-process server over the TEST-ONLY scripted runner: indices, usage (the prompt counted once
// per prompt, completions summed), streamed choices interleaved by index, and the bounds.
#include "server_test_util.h"

#include <map>

using namespace onecard;
using namespace onecard::test;
using Json = nlohmann::json;

namespace {

const std::string kTale = " there was a tiny server.";
const std::string kPlain = "Plain answer.";

Json script() {
    return {{"scripts", Json::array({Json{{"when", "Once upon"}, {"text", kTale}}})},
            {"default", Json{{"text", kPlain}}}};
}

Json chat_body(const std::string& user, Json extra = Json::object()) {
    Json b = {{"messages", Json::array({Json{{"role", "user"}, {"content", user}}})},
              {"chat_template_kwargs", {{"thinking", false}}}};
    for (auto& [k, v] : extra.items()) b[k] = v;
    return b;
}

httplib::Result post(const TestServer& s, const std::string& path, const Json& body) {
    auto c = s.client();
    return c.Post(path.c_str(), body.dump(), "application/json");
}

void expect_400(const httplib::Result& r, const std::string& param) {
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << r->body;
    EXPECT_EQ(Json::parse(r->body)["error"]["param"], param) << r->body;
}

// Text per choice index, and the finish reasons, from a streamed completions/chat body.
struct StreamedChoices {
    std::map<int, std::string> text;
    std::map<int, std::string> finish;
    Json usage;
    bool done = false;
};
StreamedChoices read_stream(const std::string& body, bool chat) {
    StreamedChoices out;
    for (const auto& e : sse_data(body)) {
        if (e == "[DONE]") {
            out.done = true;
            continue;
        }
        const Json j = Json::parse(e);
        if (j.contains("usage") && !j["usage"].is_null()) out.usage = j["usage"];
        for (const auto& c : j["choices"]) {
            const int i = c["index"].get<int>();
            // value() on the const chunk: a delta without "content" (the role or finish chunk) is no
            // text, where operator[] on a missing key of a const json asserts in builds with assertions.
            const Json& src = chat ? c.value("delta", Json::object()) : c;
            const Json t = src.value(chat ? "content" : "text", Json());
            if (t.is_string()) out.text[i] += t.get<std::string>();
            const Json fin = c.value("finish_reason", Json());
            if (fin.is_string()) out.finish[i] = fin.get<std::string>();
        }
    }
    return out;
}

}  // namespace

TEST(ServerChoices, ChatNChoicesWholeAndStreamed) {
    ONECARD_NEED_TOKENIZER();
    TestServer s({}, scripted(tok, script(), "chat_n"), tok, 4096);
    auto one = post(s, "/v1/chat/completions", chat_body("hi"));
    ASSERT_EQ(one->status, 200) << one->body;
    const Json oj = Json::parse(one->body);
    auto r = post(s, "/v1/chat/completions", chat_body("hi", {{"n", 3}, {"seed", 7}}));
    ASSERT_EQ(r->status, 200) << r->body;
    const Json j = Json::parse(r->body);
    ASSERT_EQ(j["choices"].size(), 3u);
    for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(j["choices"][i]["index"], i);
        EXPECT_EQ(j["choices"][i]["message"]["content"], kPlain);
        EXPECT_EQ(j["choices"][i]["finish_reason"], "stop");
    }
    // The prompt counted once, the completions summed.
    EXPECT_EQ(j["usage"]["prompt_tokens"], oj["usage"]["prompt_tokens"]);
    EXPECT_EQ(j["usage"]["completion_tokens"], 3 * oj["usage"]["completion_tokens"].get<int>());
    EXPECT_EQ(j["usage"]["total_tokens"],
              j["usage"]["prompt_tokens"].get<int>() + j["usage"]["completion_tokens"].get<int>());

    auto st = post(s, "/v1/chat/completions",
                   chat_body("hi", {{"n", 3}, {"stream", true}, {"stream_options", {{"include_usage", true}}}}));
    ASSERT_EQ(st->status, 200);
    const StreamedChoices sc = read_stream(st->body, true);
    EXPECT_TRUE(sc.done);
    ASSERT_EQ(sc.text.size(), 3u) << st->body;
    for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(sc.text.at(i), kPlain) << i;
        EXPECT_EQ(sc.finish.at(i), "stop") << i;
    }
    EXPECT_EQ(sc.usage["completion_tokens"], j["usage"]["completion_tokens"]);
    EXPECT_EQ(sc.usage["prompt_tokens"], j["usage"]["prompt_tokens"]);
    // Bounds: at most 16, and no more than --max-num-seqs (8 here) can run together.
    expect_400(post(s, "/v1/chat/completions", chat_body("hi", {{"n", 17}})), "n");
    expect_400(post(s, "/v1/chat/completions", chat_body("hi", {{"n", 9}})), "n");
    expect_400(post(s, "/v1/chat/completions", chat_body("hi", {{"n", 2}, {"best_of", 3}})), "best_of");
    // Every choice's KV is back once the requests are done.
    s.engine->wait_idle();
    const EngineStats es = s.engine->stats();
    EXPECT_EQ(es.n_free_kv_blocks, es.n_total_kv_blocks);
}

TEST(ServerChoices, CompletionsBatchesNAndEcho) {
    ONECARD_NEED_TOKENIZER();
    TestServer s({}, scripted(tok, script(), "completions_n"), tok, 4096);
    const std::vector<std::string> prompts = {"Once upon a time", "Say something"};
    // A batch of two prompts, n = 2: choices [p0 c0, p0 c1, p1 c0, p1 c1].
    auto r = post(s, "/v1/completions", Json{{"prompt", prompts}, {"n", 2}, {"max_tokens", 32}});
    ASSERT_EQ(r->status, 200) << r->body;
    const Json j = Json::parse(r->body);
    ASSERT_EQ(j["choices"].size(), 4u) << r->body;
    for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(j["choices"][i]["index"], i);
        EXPECT_EQ(j["choices"][i]["text"], i < 2 ? kTale : kPlain) << i;
    }
    // Each prompt counted once (with its BOS), every choice's tokens summed.
    const int64_t p0 = static_cast<int64_t>(tok.encode(prompts[0], true).size()) + 1;
    const int64_t p1 = static_cast<int64_t>(tok.encode(prompts[1], true).size()) + 1;
    EXPECT_EQ(j["usage"]["prompt_tokens"], p0 + p1);
    const int64_t c0 = static_cast<int64_t>(tok.encode(kTale, true).size()) + 1;  // + EOS
    const int64_t c1 = static_cast<int64_t>(tok.encode(kPlain, true).size()) + 1;
    EXPECT_EQ(j["usage"]["completion_tokens"], 2 * c0 + 2 * c1);
    // A batch of token-id prompts, streamed.
    Json id_batch = Json::array({tok.encode(prompts[0], true), tok.encode(prompts[1], true)});
    auto st = post(s, "/v1/completions", Json{{"prompt", id_batch}, {"max_tokens", 32}, {"stream", true}});
    const StreamedChoices sc = read_stream(st->body, false);
    ASSERT_EQ(sc.text.size(), 2u) << st->body;
    EXPECT_EQ(sc.text.at(0), kTale);
    EXPECT_EQ(sc.text.at(1), kPlain);
    EXPECT_EQ(sc.finish.at(0), "stop");
    EXPECT_TRUE(sc.done);
    // echo: the prompt, then its completion; streamed, the prompt comes first.
    auto e = post(s, "/v1/completions", Json{{"prompt", prompts[0]}, {"echo", true}, {"max_tokens", 32}});
    ASSERT_EQ(e->status, 200) << e->body;
    EXPECT_EQ(Json::parse(e->body)["choices"][0]["text"], prompts[0] + kTale);
    auto es = post(s, "/v1/completions",
                   Json{{"prompt", Json::array({tok.encode(prompts[1], true)})}, {"echo", true}, {"stream", true}});
    const StreamedChoices ec = read_stream(es->body, false);
    EXPECT_EQ(ec.text.at(0), prompts[1] + kPlain);
    expect_400(post(s, "/v1/completions", Json{{"prompt", prompts[0]}, {"echo", true}, {"logprobs", 1}}), "echo");
    // 5 prompts x n = 2 is more than the 8 sequences that can run at once.
    expect_400(post(s, "/v1/completions", Json{{"prompt", Json::array({"a", "b", "c", "d", "e"})}, {"n", 2}}), "n");
}

TEST(ServerChoices, LogitBiasSteersTheSampler) {
    ONECARD_NEED_TOKENIZER();
    TestServer s({}, scripted(tok, script(), "logit_bias"), tok, 4096);
    // The scripted runner puts its token at logit 40 and every other at 0: +100 on another token wins.
    const std::vector<int32_t> x = tok.encode("X", true);
    ASSERT_EQ(x.size(), 1u);
    auto r = post(s, "/v1/completions",
                  Json{{"prompt", "Say something"},
                       {"max_tokens", 4},
                       {"temperature", 0},
                       {"logit_bias", {{std::to_string(x[0]), 100}}}});
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(Json::parse(r->body)["choices"][0]["text"], "XXXX");
    // -100 on the script's first token: greedy picks the next best (token 0 among the zeros).
    const std::vector<int32_t> first = tok.encode(kPlain, true);
    auto b = post(s, "/v1/completions",
                  Json{{"prompt", "Say something"},
                       {"max_tokens", 1},
                       {"temperature", 0},
                       {"logprobs", 0},
                       {"logit_bias", {{std::to_string(first[0]), -100}}}});
    ASSERT_EQ(b->status, 200) << b->body;
    const Json bj = Json::parse(b->body);
    const std::vector<int32_t> zero{0};
    EXPECT_EQ(bj["choices"][0]["logprobs"]["tokens"][0], tok.decode(zero)) << b->body;
    // A token outside the vocabulary is refused, naming logit_bias.
    auto bad = post(s, "/v1/chat/completions", chat_body("hi", {{"logit_bias", {{"99999999", 5}}}}));
    ASSERT_TRUE(bad);
    EXPECT_EQ(bad->status, 400) << bad->body;
    EXPECT_NE(bad->body.find("logit_bias"), std::string::npos) << bad->body;
    expect_400(post(s, "/v1/chat/completions", chat_body("hi", {{"logit_bias", {{"5", 500}}}})), "logit_bias");
}

TEST(ServerChoices, GenerationConfigBoundsMaxTokens) {
    ONECARD_NEED_TOKENIZER();
    server::ServerOptions o;
    o.sampling_defaults.max_tokens = 3;  // generation_config.json's max_new_tokens
    o.sampling_defaults.temperature = 0.0f;
    TestServer s(o, scripted(tok, script(), "genconfig"), tok, 4096);
    for (const Json& extra : {Json::object(), Json{{"max_tokens", 10}}}) {
        auto r = post(s, "/v1/chat/completions", chat_body("hi", extra));
        ASSERT_EQ(r->status, 200) << r->body;
        const Json j = Json::parse(r->body);
        EXPECT_EQ(j["usage"]["completion_tokens"], 3) << extra.dump();
        EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
    }
    auto c = post(s, "/v1/completions", Json{{"prompt", "Once upon"}, {"max_tokens", 2}});
    EXPECT_EQ(Json::parse(c->body)["usage"]["completion_tokens"], 2);  // the request's smaller bound stands
}
