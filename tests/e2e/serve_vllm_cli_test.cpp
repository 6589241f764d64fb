// `vllm serve` command lines start `onecard serve` unchanged, through the real binary on the CPU
// backend: the positional model path and vLLM's common flags, a vLLM YAML --config, one startup line
// naming the flags that change nothing here, and clear refusals for what onecard would not do.
#include "support/serve_process.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <signal.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

namespace onecard {
namespace {

class ServeVllmCli : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        dir_ = new test::TempDir("serve_vllm_cli");
        const auto r = test::run_command(test::onecard_binary().string() + " synth --preset small --seed 3 --out " +
                                         (dir_->path() / "model").string() + " --quiet 2>&1");
        ASSERT_EQ(r.rc, 0) << r.out;
    }
    static void TearDownTestSuite() {
        delete dir_;
        dir_ = nullptr;
    }
    static std::string model() { return (dir_->path() / "model").string(); }

    // `onecard serve <args>` (test::serve_and) in the suite's folder.
    static std::string serve_and(const std::string& args, const std::function<void(const nlohmann::json&)>& check) {
        return test::serve_and(dir_->path(), args, check);
    }
    static test::TempDir* dir_;
};
test::TempDir* ServeVllmCli::dir_ = nullptr;

TEST_F(ServeVllmCli, AVllmLaunchLineStartsUnchanged) {
    const std::string text = serve_and(
        model() +
            " --served-model-name ds deepseek-v4 --max-model-len 4096 --gpu-memory-utilization 0.9 "
            "--enable-prefix-caching "
            "--tool-call-parser deepseek_v4 --reasoning-parser deepseek_v4 --enable-auto-tool-choice "
            "--kv-cache-dtype fp8 --trust-remote-code --tensor-parallel-size 1 --dtype auto --disable-log-requests "
            "--max-num-seqs 4 --max-num-batched-tokens 512 --host 127.0.0.1 --port 0 --seed 0 --api-key sk-x "
            "--uvicorn-log-level info --device cpu",
        [](const nlohmann::json& ready) {
            EXPECT_EQ(ready["model"], "ds");
            EXPECT_EQ(ready["max_model_len"], 4096);
            EXPECT_EQ(ready["auth"], true);
            httplib::Client c("127.0.0.1", ready["port"].get<int>());
            c.set_read_timeout(60);
            auto m = c.Get("/v1/models/ds", {{"Authorization", "Bearer sk-x"}});
            ASSERT_TRUE(m);
            EXPECT_EQ(m->status, 200) << m->body;
            // vLLM's several served names: all listed, any accepted; the first names the model.
            auto list = c.Get("/v1/models", {{"Authorization", "Bearer sk-x"}});
            ASSERT_TRUE(list);
            const auto lj = nlohmann::json::parse(list->body);
            ASSERT_EQ(lj["data"].size(), 2u) << list->body;
            EXPECT_EQ(lj["data"][0]["id"], "ds");
            EXPECT_EQ(lj["data"][1]["id"], "deepseek-v4");
            auto alias = c.Get("/v1/models/deepseek-v4", {{"Authorization", "Bearer sk-x"}});
            ASSERT_TRUE(alias);
            EXPECT_EQ(alias->status, 200) << alias->body;
            auto tk = c.Post("/tokenize", {{"Authorization", "Bearer sk-x"}},
                             R"({"model": "deepseek-v4", "prompt": "hi"})", "application/json");
            ASSERT_TRUE(tk);
            EXPECT_EQ(tk->status, 200) << tk->body;
            auto met = c.Get("/metrics");  // open without the key, as in vLLM
            ASSERT_TRUE(met);
            EXPECT_EQ(met->status, 200);
            EXPECT_NE(met->body.find("vllm:num_requests_running{model_name=\"ds\"} 0"), std::string::npos);
        });
    // One line names every flag that changes nothing here.
    const std::string line = "serve: accepted for vLLM compatibility, no effect in onecard: ";
    const size_t p = text.find(line);
    ASSERT_NE(p, std::string::npos) << text;
    const std::string listed = text.substr(p, text.find('\n', p) - p);
    for (const char* f : {"--trust-remote-code", "--enable-auto-tool-choice", "--disable-log-requests",
                          "--kv-cache-dtype", "--tensor-parallel-size", "--dtype"})
        EXPECT_NE(listed.find(f), std::string::npos) << f << " missing from: " << listed;
    // --enable-prefix-caching is real now (the CPU backend in reference numerics caches).
    EXPECT_EQ(listed.find("--enable-prefix-caching"), std::string::npos) << listed;
    EXPECT_NE(text.find("serve: prefix caching on"), std::string::npos) << text;
    EXPECT_EQ(text.find(line, p + 1), std::string::npos) << "one line only";
    // The printed try-line asks for visible content (thinking off), not a cut-off reasoning.
    EXPECT_NE(text.find("\"chat_template_kwargs\": {\"thinking\": false}"), std::string::npos) << text;
}

TEST_F(ServeVllmCli, AVllmYamlConfigStarts) {
    const auto cfg = dir_->path() / "vllm.yaml";
    std::ofstream(cfg) << "model: " << model() << "\n"
                       << "served-model-name: from-yaml\n"
                       << "max_model_len: 2048\n"
                       << "enable-prefix-caching: true\n"
                       << "trust-remote-code: false\n"
                       << "port: 0\n"
                       << "device: cpu\n"
                       // The seed deployment's reverse proxy: only the API, /health and /metrics.
                       << "allow-path:\n  - /v1/*\n  - /health\n  - /metrics\n";
    const std::string text = serve_and("--config " + cfg.string(), [](const nlohmann::json& ready) {
        EXPECT_EQ(ready["model"], "from-yaml");
        EXPECT_EQ(ready["max_model_len"], 2048);
        EXPECT_EQ(ready["allow_path"], nlohmann::json::array({"/v1/*", "/health", "/metrics"}));
        httplib::Client c("127.0.0.1", ready["port"].get<int>());
        c.set_read_timeout(60);
        for (const char* open : {"/v1/models", "/health", "/metrics"}) {
            auto r = c.Get(open);
            ASSERT_TRUE(r) << open;
            EXPECT_EQ(r->status, 200) << open;
        }
        for (const char* hidden : {"/version", "/ready"}) {
            auto r = c.Get(hidden);
            ASSERT_TRUE(r) << hidden;
            EXPECT_EQ(r->status, 404) << hidden;
        }
    });
    EXPECT_NE(text.find("serve: prefix caching on"), std::string::npos) << text;
    // max_model_len was given: no default is chosen or reported.
    EXPECT_EQ(text.find("no --max-model-len"), std::string::npos) << text;
}

// Without --max-model-len the CPU backend takes min(the model's maximum, 8192) and says so; the
// synthesised model's maximum is vLLM's 1,048,576.
TEST_F(ServeVllmCli, TheDefaultMaxModelLenIsChosenAndExplained) {
    const std::string text = serve_and(model() + " --port 0 --device cpu", [](const nlohmann::json& ready) {
        EXPECT_EQ(ready["max_model_len"], 8192);
        httplib::Client c("127.0.0.1", ready["port"].get<int>());
        auto m = c.Get("/v1/models");
        ASSERT_TRUE(m);
        EXPECT_EQ(nlohmann::json::parse(m->body)["data"][0]["max_model_len"], 8192);
    });
    EXPECT_NE(text.find("serve: max_model_len 8192 (no --max-model-len): the CPU backend's default, min(the "
                        "model's 1048576, 8192)"),
              std::string::npos)
        << text;
}

TEST_F(ServeVllmCli, WhatOnecardWouldNotDoIsRefusedBeforeServing) {
    for (const std::string flags : {"--tensor-parallel-size 2", "--kv-cache-dtype fp8_e5m2", "--dtype float16",
                                    "--tool-call-parser hermes", "--chat-template /tmp/x.jinja"}) {
        const auto r = test::run_command("timeout 60 " + test::onecard_binary().string() + " serve " + model() +
                                         " --port 0 --device cpu " + flags + " 2>&1 </dev/null");
        EXPECT_NE(r.rc, 0) << flags << "\n" << r.out;
        EXPECT_NE(r.out.find(flags.substr(0, flags.find(' '))), std::string::npos) << r.out;
        EXPECT_EQ(r.out.find("ready"), std::string::npos) << flags << ": must refuse before serving\n" << r.out;
    }
}

}  // namespace
}  // namespace onecard
