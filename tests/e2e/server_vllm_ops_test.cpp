// What a vLLM user meets first, against a real in-process server over the TEST-ONLY scripted runner:
// vLLM's metric names (token counters moving per token, not at the end), /version, /v1/models/{id},
// usage.completion_tokens_details.reasoning_tokens, string error codes, 415 for non-JSON bodies,
// reasoning_effort validation, CORS, open /metrics.
#include "server_test_util.h"

#include <chrono>
#include <thread>

using namespace onecard;
using namespace onecard::test;
using Json = nlohmann::json;

namespace {

const char* kThinkText = "Weighing the options.</think>Hello there, friend!";

Json script(int step_delay_ms = 0) {
    return {{"step_delay_ms", step_delay_ms}, {"default", Json{{"text", kThinkText}}}};
}

Json chat_body(Json extra = Json::object()) {
    Json b = {{"model", "test-model"}, {"messages", Json::array({Json{{"role", "user"}, {"content", "Say hello"}}})}};
    for (auto& [k, v] : extra.items()) b[k] = v;
    return b;
}

httplib::Result post_json(const TestServer& s, const Json& body, const httplib::Headers& h = {}) {
    auto c = s.client();
    return c.Post("/v1/chat/completions", h, body.dump(), "application/json");
}

// The reasoning part of kThinkText in tokens, as the server sees them ("</think>" included).
int64_t reasoning_tokens_of(const Tokenizer& tok) {
    return static_cast<int64_t>(tok.encode("Weighing the options.</think>", true).size());
}

}  // namespace

TEST(ServerVllmOps, MetricsUseVllmNamesAndTokenCountersMovePerToken) {
    ONECARD_NEED_TOKENIZER();
    TestServer s({}, scripted(tok, script(40), "vllm_metrics"), tok, 4096);
    Json body = chat_body({{"stream", true}});
    std::atomic<bool> done{false};
    std::thread t([&] {
        auto r = post_json(s, body);
        EXPECT_TRUE(r && r->status == 200);
        done = true;
    });
    // While the (slow, 40 ms per token) request runs, generation tokens already show.
    double mid = -1;
    for (int i = 0; i < 200 && !done; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        const double g = metric_value(s.client().Get("/metrics")->body, "vllm:generation_tokens_total");
        if (g >= 3) {
            mid = g;
            break;
        }
    }
    const bool finished_before = done.load();
    t.join();
    ASSERT_FALSE(finished_before) << "the request ended before tokens were seen mid-generation";
    EXPECT_GE(mid, 3);
    // The HTTP layer counts a response after writing it, and the engine retires the sequence (its
    // running count, its KV blocks) on the step after the last token went out, so the client can see
    // the body first: wait (bounded) for both before reading the rest.
    std::string m = s.client().Get("/metrics")->body;
    const std::string http_line =
        "onecard:http_requests_total{model_name=\"test-model\",route=\"/v1/chat/completions\",status=\"200\"} 1";
    const auto settled = [&] {
        return m.find(http_line) != std::string::npos && metric_value(m, "vllm:num_requests_running") == 0 &&
               metric_value(m, "vllm:kv_cache_usage_perc") == 0;
    };
    for (int i = 0; i < 200 && !settled(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        m = s.client().Get("/metrics")->body;
    }
    const auto n_script = static_cast<double>(tok.encode(kThinkText, true).size());
    EXPECT_EQ(metric_value(m, "vllm:generation_tokens_total"), n_script + 1) << m;  // + EOS
    EXPECT_GT(metric_value(m, "vllm:prompt_tokens_total"), 3);
    EXPECT_EQ(metric_value(m, "vllm:num_requests_running"), 0);
    EXPECT_EQ(metric_value(m, "vllm:num_requests_waiting"), 0);
    EXPECT_EQ(metric_value(m, "vllm:kv_cache_usage_perc"), 0);
    for (const char* name :
         {"vllm:request_success_total{model_name=\"test-model\",finished_reason=\"stop\"} 1",
          "vllm:time_to_first_token_seconds_count{model_name=\"test-model\"} 1",
          "vllm:inter_token_latency_seconds_bucket{model_name=\"test-model\",le=\"+Inf\"}",
          "vllm:e2e_request_latency_seconds_count{model_name=\"test-model\"} 1",
          "vllm:request_prefill_time_seconds_count{model_name=\"test-model\"} 1",
          "vllm:request_queue_time_seconds_count{model_name=\"test-model\"} 1",
          "vllm:request_decode_time_seconds_count{model_name=\"test-model\"} 1",
          "vllm:request_prompt_tokens_count{model_name=\"test-model\"} 1",
          "vllm:request_generation_tokens_bucket{model_name=\"test-model\",le=\"1\"} 0",
          "vllm:request_generation_tokens_count{model_name=\"test-model\"} 1",
          "onecard:http_requests_total{model_name=\"test-model\",route=\"/v1/chat/completions\",status=\"200\"} 1",
          "onecard:kv_cache_free_blocks{model_name=\"test-model\"}"})
        EXPECT_NE(m.find(name), std::string::npos) << name << "\n" << m;
    EXPECT_EQ(m.find("onecard:num_requests_running"), std::string::npos) << "vLLM's metrics live under vllm:";
}

// vllm:request_queue_time_seconds: from the engine taking a request in to its first schedule. With
// one sequence slot, the second of two requests waits for the whole first one (~12 tokens at 40 ms).
TEST(ServerVllmOps, QueueTimeIsTheWaitForASequenceSlot) {
    ONECARD_NEED_TOKENIZER();
    TestServer s({}, scripted(tok, script(40), "vllm_queue_time"), tok, 4096, /*max_num_seqs=*/1);
    std::thread first([&] {
        auto r = post_json(s, chat_body());
        EXPECT_TRUE(r && r->status == 200);
    });
    for (int i = 0; i < 500 && s.engine->stats().n_running == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const auto t0 = std::chrono::steady_clock::now();
    auto second = post_json(s, chat_body());  // queued behind the first, then run
    EXPECT_TRUE(second && second->status == 200);
    const double second_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    first.join();
    const std::string m = s.client().Get("/metrics")->body;
    EXPECT_EQ(metric_value(m, "vllm:request_queue_time_seconds_count"), 2) << m;
    const double queued = metric_value(m, "vllm:request_queue_time_seconds_sum");
    // The second waited for most of the first's generation; the first hardly waited. Neither can
    // have waited longer than the second request took from its send to its answer.
    EXPECT_GT(queued, 0.2) << m;
    EXPECT_LT(queued, second_s) << m;
    EXPECT_NE(m.find("vllm:request_queue_time_seconds_bucket{model_name=\"test-model\",le=\"0.3\"} 1"),
              std::string::npos)
        << m;
}

TEST(ServerVllmOps, MetricsAndHealthAreOpenUnlessAsked) {
    ONECARD_NEED_TOKENIZER();
    server::ServerOptions o;
    o.api_keys = {"sk-test"};
    {
        TestServer s(o, scripted(tok, script(), "vllm_open"), tok, 4096);
        auto c = s.client();
        EXPECT_EQ(c.Get("/metrics")->status, 200);
        EXPECT_EQ(c.Get("/health")->status, 200);
        EXPECT_EQ(c.Get("/version")->status, 200);
        EXPECT_EQ(c.Get("/v1/models")->status, 401);
    }
    o.metrics_require_auth = true;
    TestServer s(o, scripted(tok, script(), "vllm_closed"), tok, 4096);
    auto c = s.client();
    EXPECT_EQ(c.Get("/metrics")->status, 401);
    EXPECT_EQ(c.Get("/metrics", {{"Authorization", "Bearer sk-test"}})->status, 200);
    EXPECT_EQ(c.Get("/health")->status, 200);
}

TEST(ServerVllmOps, VersionAndRetrieveModel) {
    ONECARD_NEED_TOKENIZER();
    TestServer s({}, scripted(tok, script(), "vllm_version"), tok, 4096);
    auto c = s.client();
    auto v = c.Get("/version");
    ASSERT_EQ(v->status, 200);
    const Json vj = Json::parse(v->body);
    EXPECT_TRUE(vj["version"].is_string());
    EXPECT_FALSE(vj["version"].get<std::string>().empty());
    auto m = c.Get("/v1/models/test-model");
    ASSERT_EQ(m->status, 200) << m->body;
    EXPECT_EQ(Json::parse(m->body)["id"], "test-model");
    EXPECT_EQ(Json::parse(m->body)["object"], "model");
    auto missing = c.Get("/v1/models/other-model");
    ASSERT_EQ(missing->status, 404);
    const Json e = Json::parse(missing->body)["error"];
    EXPECT_EQ(e["code"], "model_not_found");
    EXPECT_EQ(e["type"], "not_found_error");
    EXPECT_TRUE(e["message"].is_string());
}

TEST(ServerVllmOps, ReasoningTokensInUsageWholeAndStreamed) {
    ONECARD_NEED_TOKENIZER();
    TestServer s({}, scripted(tok, script(), "vllm_reasoning"), tok, 4096);
    const int64_t want = reasoning_tokens_of(tok);
    auto r = post_json(s, chat_body());
    ASSERT_EQ(r->status, 200) << r->body;
    const Json j = Json::parse(r->body);
    EXPECT_EQ(j["usage"]["completion_tokens_details"]["reasoning_tokens"], want) << r->body;

    auto st = post_json(s, chat_body({{"stream", true}, {"stream_options", {{"include_usage", true}}}}));
    ASSERT_EQ(st->status, 200);
    Json usage;
    for (const auto& d : sse_data(st->body)) {
        if (d == "[DONE]") continue;
        const Json c = Json::parse(d);
        if (c.contains("usage") && c["usage"].is_object()) usage = c["usage"];
    }
    ASSERT_TRUE(usage.is_object()) << st->body;
    EXPECT_EQ(usage["completion_tokens_details"]["reasoning_tokens"], want);

    // Thinking off: no reasoning at all.
    auto off = post_json(s, chat_body({{"chat_template_kwargs", {{"thinking", false}}}}));
    EXPECT_EQ(Json::parse(off->body)["usage"]["completion_tokens_details"]["reasoning_tokens"], 0);
}

TEST(ServerVllmOps, ErrorCodesAreAlwaysStrings) {
    ONECARD_NEED_TOKENIZER();
    TestServer s({}, scripted(tok, script(), "vllm_codes"), tok, 4096);
    auto c = s.client();
    auto string_code = [](const httplib::Result& r) {
        ASSERT_TRUE(r);
        const Json e = Json::parse(r->body)["error"];
        EXPECT_TRUE(e["code"].is_string()) << r->body;
    };
    string_code(post_json(s, chat_body({{"temperature", "hot"}})));
    string_code(c.Get("/nothing"));
    string_code(c.Post("/v1/chat/completions", "{not json", "application/json"));
    string_code(c.Get("/v1/chat/completions"));
    EXPECT_EQ(Json::parse(post_json(s, chat_body({{"temperature", "hot"}}))->body)["error"]["code"], "invalid_request");
}

TEST(ServerVllmOps, NonJsonContentTypeIs415) {
    ONECARD_NEED_TOKENIZER();
    TestServer s({}, scripted(tok, script(), "vllm_415"), tok, 4096);
    auto c = s.client();
    const std::string body = chat_body({{"max_tokens", 3}}).dump();
    auto form = c.Post("/v1/chat/completions", body, "application/x-www-form-urlencoded");
    ASSERT_EQ(form->status, 415) << form->body;
    EXPECT_EQ(Json::parse(form->body)["error"]["code"], "unsupported_media_type");
    EXPECT_EQ(c.Post("/v1/chat/completions", body, "text/plain")->status, 415);
    EXPECT_EQ(c.Post("/v1/chat/completions", body, "application/json; charset=utf-8")->status, 200);
    EXPECT_EQ(c.Post("/v1/chat/completions", body, "Application/JSON")->status, 200);
    EXPECT_EQ(c.Post("/tokenize", "{\"prompt\": \"hi\"}", "text/plain")->status, 415);
}

TEST(ServerVllmOps, UnknownReasoningEffortIs400ListingTheAccepted) {
    ONECARD_NEED_TOKENIZER();
    TestServer s({}, scripted(tok, script(), "vllm_effort"), tok, 4096);
    auto bad = post_json(s, chat_body({{"reasoning_effort", "extreme"}}));
    ASSERT_EQ(bad->status, 400);
    const Json e = Json::parse(bad->body)["error"];
    EXPECT_EQ(e["param"], "reasoning_effort");
    EXPECT_NE(e["message"].get<std::string>().find("none, minimal, low, medium, high, xhigh, max"), std::string::npos);
    auto kw = post_json(s, chat_body({{"chat_template_kwargs", {{"reasoning_effort", "ultra"}}}}));
    EXPECT_EQ(kw->status, 400);
    for (const char* ok : {"none", "low", "medium", "high", "max"})
        EXPECT_EQ(post_json(s, chat_body({{"reasoning_effort", ok}, {"max_tokens", 2}}))->status, 200) << ok;
}

// min_tokens reaches the engine (tests/unit/engine_min_tokens_test.cpp checks what it does there);
// a value above max_tokens is a 400 naming the field.
TEST(ServerVllmOps, MinTokensIsAcceptedAndBounded) {
    ONECARD_NEED_TOKENIZER();
    TestServer s({}, scripted(tok, script(), "vllm_min_tokens"), tok, 4096);
    EXPECT_EQ(post_json(s, chat_body({{"min_tokens", 2}, {"max_tokens", 4}}))->status, 200);
    EXPECT_EQ(post_json(s, chat_body({{"min_tokens", 0}, {"max_tokens", 2}}))->status, 200);
    auto r = post_json(s, chat_body({{"min_tokens", 9}, {"max_tokens", 4}}));
    EXPECT_EQ(r->status, 400);
    EXPECT_NE(r->body.find("min_tokens"), std::string::npos) << r->body;
}

TEST(ServerVllmOps, CorsPreflightAndAllowOrigin) {
    ONECARD_NEED_TOKENIZER();
    server::ServerOptions o;
    o.api_keys = {"sk-test"};
    o.allowed_origins = {"https://app.example"};
    TestServer s(o, scripted(tok, script(), "vllm_cors"), tok, 4096);
    auto c = s.client();
    auto pre = c.Options("/v1/chat/completions", {{"Origin", "https://app.example"},
                                                  {"Access-Control-Request-Method", "POST"},
                                                  {"Access-Control-Request-Headers", "authorization, content-type"}});
    ASSERT_TRUE(pre);
    EXPECT_EQ(pre->status, 204) << pre->body;
    EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Origin"), "https://app.example");
    EXPECT_NE(pre->get_header_value("Access-Control-Allow-Methods").find("POST"), std::string::npos);
    EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Headers"), "authorization, content-type");
    auto r = c.Post("/v1/chat/completions", {{"Origin", "https://app.example"}, {"Authorization", "Bearer sk-test"}},
                    chat_body({{"max_tokens", 2}}).dump(), "application/json");
    ASSERT_EQ(r->status, 200);
    EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "https://app.example");
    // Another origin gets no CORS headers (the browser then refuses the response).
    auto other = c.Get("/health", {{"Origin", "https://evil.example"}});
    EXPECT_FALSE(other->has_header("Access-Control-Allow-Origin"));
}

// One keep-alive connection carries many requests (httplib's default closes it after 5; clients and
// vLLM expect no cap): 12 requests in turn on one socket, each answered, none announcing a close.
TEST(ServerVllmOps, KeepAliveCarriesManyRequestsOnOneConnection) {
    ONECARD_NEED_TOKENIZER();
    TestServer s(server::ServerOptions{}, scripted(tok, script(), "vllm_keepalive"), tok, 4096);
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in dst{};
    dst.sin_family = AF_INET;
    dst.sin_port = htons(static_cast<uint16_t>(s.port));
    inet_pton(AF_INET, "127.0.0.1", &dst.sin_addr);
    timeval tv{10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof(dst)), 0);
    int answered = 0, closes = 0;
    for (int i = 0; i < 12; ++i) {
        const std::string req = "GET /version HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n";
        ASSERT_EQ(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()))
            << "request " << i;
        // Read one whole response: headers, then Content-Length bytes of body.
        std::string got;
        char buf[4096];
        size_t need = std::string::npos;
        while (need == std::string::npos || got.size() < need) {
            const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
            if (n <= 0) break;
            got.append(buf, static_cast<size_t>(n));
            const size_t end = got.find("\r\n\r\n");
            if (need == std::string::npos && end != std::string::npos) {
                const size_t cl = got.find("Content-Length: ");
                ASSERT_NE(cl, std::string::npos) << got;
                need = end + 4 + std::stoul(got.substr(cl + 16));
            }
        }
        ASSERT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << "request " << i << " on the same connection: " << got;
        ++answered;
        closes += got.find("Connection: close") != std::string::npos;
    }
    ::close(fd);
    EXPECT_EQ(answered, 12);
    EXPECT_EQ(closes, 0);
}
