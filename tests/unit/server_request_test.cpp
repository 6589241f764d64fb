// Request validation of the OpenAI server (every refusal names its field), generation_config.json
// defaults, and the metrics text.
#include "core/error.h"
#include "server/api_error.h"
#include "server/generation_config.h"
#include "server/metrics.h"
#include "server/request_params.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

using namespace onecard;
using namespace onecard::server;

namespace {
// The param of the ApiError that parsing `body_text` throws ("" when it does not throw).
std::string refused_param(const std::string& body_text, ApiKind kind = ApiKind::Chat) {
    try {
        (void)parse_generation_options(parse_body(body_text), kind);
    } catch (const ApiError& e) {
        EXPECT_EQ(e.status(), 400) << body_text;
        return e.param().empty() ? "(body)" : e.param();
    }
    return "";
}
}  // namespace

TEST(ServerRequest, SamplingFieldsAreRead) {
    const auto o = parse_generation_options(
        parse_body(R"({"temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "presence_penalty": 0.25,
            "frequency_penalty": -0.5, "repetition_penalty": 1.1, "seed": -3, "stop": ["a", "bc"],
            "stop_token_ids": [7, 9], "ignore_eos": true, "max_completion_tokens": 12, "max_tokens": 99,
            "logprobs": true, "top_logprobs": 3, "stream": true, "stream_options": {"include_usage": true}})"),
        ApiKind::Chat);
    EXPECT_FLOAT_EQ(o.sampling.temperature, 0.5f);
    EXPECT_FLOAT_EQ(o.sampling.top_p, 0.9f);
    EXPECT_EQ(o.sampling.top_k, 40);
    EXPECT_FLOAT_EQ(o.sampling.min_p, 0.05f);
    EXPECT_FLOAT_EQ(o.sampling.presence_penalty, 0.25f);
    EXPECT_FLOAT_EQ(o.sampling.frequency_penalty, -0.5f);
    EXPECT_FLOAT_EQ(o.sampling.repetition_penalty, 1.1f);
    ASSERT_TRUE(o.sampling.seed.has_value());
    EXPECT_EQ(*o.sampling.seed, static_cast<uint64_t>(int64_t{-3}));
    EXPECT_EQ(o.sampling.stop, (std::vector<std::string>{"a", "bc"}));
    EXPECT_EQ(o.sampling.stop_token_ids, (std::vector<int32_t>{7, 9}));
    EXPECT_TRUE(o.sampling.ignore_eos);
    EXPECT_EQ(o.max_tokens, 12);  // max_completion_tokens wins for chat
    EXPECT_TRUE(o.logprobs);
    EXPECT_EQ(o.sampling.logprobs, 3);
    EXPECT_TRUE(o.stream);
    EXPECT_TRUE(o.include_usage);
}

TEST(ServerRequest, ChoicesAndLogitBiasAreRead) {
    const auto o = parse_generation_options(
        parse_body(R"({"n": 4, "best_of": 4, "logit_bias": {"17": -100, "3": 2.5, "0": 100}})"), ApiKind::Completion);
    EXPECT_EQ(o.n, 4);
    ASSERT_EQ(o.sampling.logit_bias.size(), 3u);
    float sum = 0;
    for (const auto& b : o.sampling.logit_bias) {
        if (b.token == 17) {
            EXPECT_FLOAT_EQ(b.bias, -100.0f);
        }
        if (b.token == 3) {
            EXPECT_FLOAT_EQ(b.bias, 2.5f);
        }
        if (b.token == 0) {
            EXPECT_FLOAT_EQ(b.bias, 100.0f);
        }
        sum += static_cast<float>(b.token);
    }
    EXPECT_FLOAT_EQ(sum, 20.0f);
    EXPECT_EQ(parse_generation_options(parse_body("{}"), ApiKind::Chat).n, 1);
    EXPECT_TRUE(
        parse_generation_options(parse_body(R"({"logit_bias": {}})"), ApiKind::Chat).sampling.logit_bias.empty());
}

TEST(ServerRequest, CompletionsLogprobsIsAnInteger) {
    const auto o =
        parse_generation_options(parse_body(R"({"logprobs": 2, "max_tokens": 5, "stop": "x"})"), ApiKind::Completion);
    EXPECT_TRUE(o.logprobs);
    EXPECT_EQ(o.sampling.logprobs, 2);
    EXPECT_EQ(o.max_tokens, 5);
    EXPECT_EQ(o.sampling.stop, std::vector<std::string>{"x"});
    EXPECT_EQ(refused_param(R"({"logprobs": true})", ApiKind::Completion), "logprobs");
}

TEST(ServerRequest, EveryBadFieldIsNamed) {
    EXPECT_EQ(refused_param(R"({"temperature": "hot"})"), "temperature");
    EXPECT_EQ(refused_param(R"({"temperature": -1})"), "temperature");
    EXPECT_EQ(refused_param(R"({"top_p": 0})"), "top_p");
    EXPECT_EQ(refused_param(R"({"top_p": 1.5})"), "top_p");
    EXPECT_EQ(refused_param(R"({"top_k": 1.5})"), "top_k");
    EXPECT_EQ(refused_param(R"({"top_k": true})"), "top_k");
    EXPECT_EQ(refused_param(R"({"max_tokens": 0})"), "max_tokens");
    EXPECT_EQ(refused_param(R"({"max_tokens": "10"})"), "max_tokens");
    EXPECT_EQ(refused_param(R"({"max_tokens": 1e300})"), "max_tokens");
    EXPECT_EQ(refused_param(R"({"max_tokens": 99999999999999999999})"), "max_tokens");
    EXPECT_EQ(refused_param(R"({"max_completion_tokens": -5})"), "max_completion_tokens");
    EXPECT_EQ(refused_param(R"({"n": 17})"), "n");  // at most kMaxChoices
    EXPECT_EQ(refused_param(R"({"n": 0})"), "n");
    EXPECT_EQ(refused_param(R"({"n": 2, "best_of": 3})"), "best_of");
    EXPECT_EQ(refused_param(R"({"n": "1"})"), "n");
    EXPECT_EQ(refused_param(R"({"seed": 1.5})"), "seed");
    EXPECT_EQ(refused_param(R"({"stop": 5})"), "stop");
    EXPECT_EQ(refused_param(R"({"stop": [""]})"), "stop");
    EXPECT_EQ(refused_param(R"({"stop_token_ids": [-1]})"), "stop_token_ids");
    EXPECT_EQ(refused_param(R"({"presence_penalty": 3})"), "presence_penalty");
    EXPECT_EQ(refused_param(R"({"repetition_penalty": 0})"), "repetition_penalty");
    EXPECT_EQ(refused_param(R"({"top_logprobs": 3})"), "top_logprobs");  // needs logprobs: true
    EXPECT_EQ(refused_param(R"({"logprobs": true, "top_logprobs": 21})"), "top_logprobs");
    EXPECT_EQ(refused_param(R"({"stream_options": {"include_usage": true}})"), "stream_options");
    EXPECT_EQ(refused_param(R"({"stream": "yes"})"), "stream");
    EXPECT_EQ(refused_param(R"({"logit_bias": {"5": 101}})"), "logit_bias");
    EXPECT_EQ(refused_param(R"({"logit_bias": {"-5": 1}})"), "logit_bias");
    EXPECT_EQ(refused_param(R"({"logit_bias": {"abc": 1}})"), "logit_bias");
    EXPECT_EQ(refused_param(R"({"logit_bias": {"5": "1"}})"), "logit_bias");
    EXPECT_EQ(refused_param(R"({"logit_bias": [1]})"), "logit_bias");
    EXPECT_EQ(refused_param(R"({"n": 1, "temperature": 0, "max_tokens": 2.0})"), "");  // integral float is an integer
}

TEST(ServerRequest, BodiesThatAreNotJsonObjects) {
    EXPECT_THROW(parse_body("{\"a\": "), ApiError);
    EXPECT_THROW(parse_body("[1, 2]"), ApiError);
    EXPECT_THROW(parse_body(""), ApiError);
    EXPECT_THROW(parse_body("{\"content\": \"\xff\xfe\"}"), ApiError);  // invalid UTF-8 inside a string
    EXPECT_THROW(parse_body("{\"x\": 1e99999}"), ApiError);             // number overflow
    EXPECT_NO_THROW(parse_body("{\"content\": \"caf\xc3\xa9\"}"));
}

TEST(ServerRequest, ErrorBodyHasTheOpenAIShape) {
    const auto b = error_body(bad_request("'n' must be 1", "n"));
    EXPECT_EQ(b["error"]["message"], "'n' must be 1");
    EXPECT_EQ(b["error"]["type"], "invalid_request_error");
    EXPECT_EQ(b["error"]["param"], "n");
    EXPECT_EQ(error_body(401, "no key")["error"]["type"], "authentication_error");
    EXPECT_TRUE(error_body(404, "x")["error"]["param"].is_null());
    EXPECT_EQ(error_type_for_status(429), std::string("rate_limit_error"));
    // Invalid UTF-8 echoed back from a request still gives valid JSON text.
    const std::string text = dump_json(Json{{"m", std::string("bad \xff byte")}});
    EXPECT_TRUE(Json::parse(text).is_object());
}

TEST(ServerMetrics, HistogramBucketsAreCumulativeAndCountersAdd) {
    ServerMetrics m("demo \"model\"");
    m.record_ttft(0.003);
    m.record_ttft(0.05);
    m.record_ttft(5000.0);
    m.record_prompt_tokens(10);
    m.record_generation_tokens(5);
    m.record_prompt_tokens(7);
    m.record_generation_tokens(1);
    m.record_finished("stop", 10, 5, 0, {0.4, 0.1, 0.2, 0.35});
    m.record_finished("abort", 7, 1, 0, {0.1, -1, 0});  // never scheduled: no queue time
    m.record_http("/v1/chat/completions", 200);
    m.record_http("/v1/chat/completions", 400);
    m.record_http("/v1/chat/completions", 400);
    EngineStats es;
    es.n_running = 3;
    es.n_waiting = 2;
    es.n_total_kv_blocks = 100;
    es.n_free_kv_blocks = 75;
    const std::string t = m.render(es, 5);
    auto has = [&](const std::string& line) { return t.find(line + "\n") != std::string::npos; };
    const std::string L = "model_name=\"demo \\\"model\\\"\"";
    EXPECT_TRUE(has("vllm:num_requests_running{" + L + "} 3")) << t;
    EXPECT_TRUE(has("vllm:num_requests_waiting{" + L + "} 2"));
    EXPECT_TRUE(has("vllm:kv_cache_usage_perc{" + L + "} 0.25"));
    EXPECT_TRUE(has("vllm:prompt_tokens_total{" + L + "} 17"));
    EXPECT_TRUE(has("vllm:generation_tokens_total{" + L + "} 6"));
    EXPECT_TRUE(has("vllm:request_success_total{" + L + ",finished_reason=\"stop\"} 1"));
    EXPECT_TRUE(has("vllm:request_success_total{" + L + ",finished_reason=\"abort\"} 1"));
    EXPECT_TRUE(has("onecard:http_requests_total{" + L + ",route=\"/v1/chat/completions\",status=\"400\"} 2"));
    EXPECT_TRUE(has("vllm:time_to_first_token_seconds_bucket{" + L + ",le=\"0.001\"} 0"));
    EXPECT_TRUE(has("vllm:time_to_first_token_seconds_bucket{" + L + ",le=\"0.005\"} 1"));
    EXPECT_TRUE(has("vllm:time_to_first_token_seconds_bucket{" + L + ",le=\"0.06\"} 2"));
    EXPECT_TRUE(has("vllm:time_to_first_token_seconds_bucket{" + L + ",le=\"2560\"} 2"));
    EXPECT_TRUE(has("vllm:time_to_first_token_seconds_bucket{" + L + ",le=\"+Inf\"} 3"));
    EXPECT_TRUE(has("vllm:time_to_first_token_seconds_count{" + L + "} 3"));
    EXPECT_TRUE(has("vllm:e2e_request_latency_seconds_count{" + L + "} 2"));
    EXPECT_TRUE(has("vllm:request_prefill_time_seconds_count{" + L + "} 1"));  // the abort had no token
    EXPECT_TRUE(has("vllm:request_queue_time_seconds_count{" + L + "} 1"));
    EXPECT_TRUE(has("vllm:request_queue_time_seconds_bucket{" + L + ",le=\"0.3\"} 0"));
    EXPECT_TRUE(has("vllm:request_queue_time_seconds_bucket{" + L + ",le=\"0.5\"} 1"));
    EXPECT_TRUE(has("vllm:request_prompt_tokens_bucket{" + L + ",le=\"10\"} 2"));
    EXPECT_TRUE(has("vllm:request_prompt_tokens_bucket{" + L + ",le=\"5\"} 0"));
}

TEST(GenerationConfig, ReadAsVllmReadsIt) {
    const auto dir = std::filesystem::temp_directory_path() / ("onecard_genconfig_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    EXPECT_TRUE(read_generation_config(dir.string()).empty());  // no file: no defaults
    std::ofstream(dir / "generation_config.json")
        << R"({"temperature": 0.6, "top_p": 0.95, "top_k": 20, "min_p": null, "max_new_tokens": 64,
              "eos_token_id": [1, 2], "do_sample": true, "bos_token_id": 0})";
    const SamplingDefaults d = read_generation_config(dir.string());
    EXPECT_FLOAT_EQ(d.temperature.value(), 0.6f);
    EXPECT_FLOAT_EQ(d.top_p.value(), 0.95f);
    EXPECT_EQ(d.top_k.value(), 20);
    EXPECT_FALSE(d.min_p.has_value());
    EXPECT_FALSE(d.repetition_penalty.has_value());
    EXPECT_EQ(d.max_tokens.value(), 64);
    EXPECT_EQ(d.describe(), "temperature=0.6, top_p=0.95, top_k=20, max_tokens=64");
    // auto reads the model directory, vllm ignores it, a folder must hold the file.
    EXPECT_EQ(resolve_generation_config("auto", dir.string()).max_tokens, 64);
    EXPECT_TRUE(resolve_generation_config("vllm", dir.string()).empty());
    EXPECT_EQ(resolve_generation_config(dir.string(), "/nowhere").top_k, 20);
    EXPECT_THROW(resolve_generation_config("/nowhere", dir.string()), Error);

    // Defaults replace the neutral values of fields the request leaves out; the request's own win.
    const GenerationOptions o = parse_generation_options(parse_body(R"({"top_k": 5})"), ApiKind::Chat, d);
    EXPECT_FLOAT_EQ(o.sampling.temperature, 0.6f);
    EXPECT_FLOAT_EQ(o.sampling.top_p, 0.95f);
    EXPECT_EQ(o.sampling.top_k, 5);
    EXPECT_FLOAT_EQ(
        parse_generation_options(parse_body(R"({"temperature": 0})"), ApiKind::Chat, d).sampling.temperature, 0.0f);
    // max_tokens: the smallest of the context left, the request's and max_new_tokens (vLLM's rule).
    EXPECT_EQ(resolve_max_tokens(o, 1000), 64);
    EXPECT_EQ(resolve_max_tokens(o, 30), 30);
    EXPECT_EQ(
        resolve_max_tokens(parse_generation_options(parse_body(R"({"max_tokens": 100})"), ApiKind::Chat, d), 1000), 64);
    EXPECT_EQ(resolve_max_tokens(parse_generation_options(parse_body(R"({"max_tokens": 10})"), ApiKind::Chat, d), 1000),
              10);
    EXPECT_EQ(resolve_max_tokens(parse_generation_options(parse_body("{}"), ApiKind::Completion, d), 1000), 16);
    EXPECT_EQ(resolve_max_tokens(parse_generation_options(parse_body("{}"), ApiKind::Chat), 1000), 1000);

    for (const char* bad :
         {R"({"temperature": "hot"})", R"({"top_p": 0})", R"({"max_new_tokens": 2.5})", "[1]", "{not json"}) {
        std::ofstream(dir / "generation_config.json") << bad;
        EXPECT_THROW(read_generation_config(dir.string()), Error) << bad;
    }
    std::filesystem::remove_all(dir);
}
