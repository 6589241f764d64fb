// Prefix caching through `onecard serve` on the CPU backend (the small demo checkpoint, reference
// numerics): a re-sent chat or completion is served from the cache (usage.prompt_tokens_details.
// cached_tokens, vLLM's prefix-cache counters in /metrics) with the same greedy answer, and
// --no-enable-prefix-caching turns it off.
#include "support/serve_process.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

namespace onecard {
namespace {

class ServePrefixCache : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        dir_ = new test::TempDir("serve_prefix_cache");
        const auto r = test::run_command(test::onecard_binary().string() + " synth --preset small --seed 5 --out " +
                                         (dir_->path() / "model").string() + " --quiet 2>&1");
        ASSERT_EQ(r.rc, 0) << r.out;
    }
    static void TearDownTestSuite() {
        delete dir_;
        dir_ = nullptr;
    }

    // Starts `onecard serve <model> <args>`, hands a client on its port to `check`, stops it.
    // Returns what it printed.
    static std::string serve_and(const std::string& args, const std::function<void(httplib::Client&)>& check) {
        return test::serve_and(dir_->path(),
                               (dir_->path() / "model").string() + " --device cpu --host 127.0.0.1 --port 0 " + args,
                               [&](const nlohmann::json& ready) {
                                   httplib::Client c("127.0.0.1", ready["port"].get<int>());
                                   c.set_read_timeout(120);
                                   check(c);
                               });
    }
    static test::TempDir* dir_;
};
test::TempDir* ServePrefixCache::dir_ = nullptr;

// A system prompt of a few hundred tokens.
std::string long_system() {
    std::string s = "You are a careful assistant. ";
    for (int i = 0; i < 60; ++i) s += "Rule " + std::to_string(i) + ": answer briefly and exactly. ";
    return s;
}

nlohmann::json post(httplib::Client& c, const std::string& path, const nlohmann::json& body) {
    auto r = c.Post(path, body.dump(), "application/json");
    EXPECT_TRUE(r);
    if (!r) return {};
    EXPECT_EQ(r->status, 200) << r->body;
    return nlohmann::json::parse(r->body);
}

double metric(const std::string& text, const std::string& name) {
    const size_t p = text.find("\n" + name + "{");
    if (p == std::string::npos) return -1;
    const size_t sp = text.find("} ", p);
    return std::stod(text.substr(sp + 2, text.find('\n', sp) - sp - 2));
}

TEST_F(ServePrefixCache, ResentChatAndCompletionHit) {
    const std::string text = serve_and("", [](httplib::Client& c) {
        const nlohmann::json chat = {
            {"messages", {{{"role", "system"}, {"content", long_system()}}, {{"role", "user"}, {"content", "Hi!"}}}},
            {"max_tokens", 4},
            {"temperature", 0},
            {"chat_template_kwargs", {{"thinking", false}}}};
        const auto a = post(c, "/v1/chat/completions", chat);
        const auto b = post(c, "/v1/chat/completions", chat);
        const int64_t n_prompt = a["usage"]["prompt_tokens"];
        ASSERT_GT(n_prompt, 256);
        EXPECT_EQ(a["usage"]["prompt_tokens_details"]["cached_tokens"], 0) << a.dump();
        // Served from the last 128-token boundary below the prompt's end.
        EXPECT_EQ(b["usage"]["prompt_tokens_details"]["cached_tokens"], (n_prompt - 1) / 128 * 128) << b.dump();
        EXPECT_EQ(a["choices"][0]["message"], b["choices"][0]["message"]);
        // Another user turn after the same system prompt hits the system prompt's blocks.
        nlohmann::json other = chat;
        other["messages"][1]["content"] = "Tell me something else entirely, please.";
        const auto o = post(c, "/v1/chat/completions", other);
        EXPECT_GE(o["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), 128) << o.dump();

        const nlohmann::json comp = {{"prompt", long_system()}, {"max_tokens", 3}, {"temperature", 0}};
        const auto c1 = post(c, "/v1/completions", comp);
        const auto c2 = post(c, "/v1/completions", comp);
        EXPECT_GT(c2["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), 0) << c2.dump();
        EXPECT_EQ(c1["choices"][0]["text"], c2["choices"][0]["text"]);

        auto m = c.Get("/metrics");
        ASSERT_TRUE(m);
        EXPECT_GT(metric(m->body, "vllm:prefix_cache_hits_total"), 0) << m->body;
        EXPECT_GT(metric(m->body, "vllm:prefix_cache_queries_total"), metric(m->body, "vllm:prefix_cache_hits_total"));
    });
    EXPECT_NE(text.find("serve: prefix caching on"), std::string::npos) << text;
}

TEST_F(ServePrefixCache, NoEnablePrefixCachingTurnsItOff) {
    const std::string text = serve_and("--no-enable-prefix-caching", [](httplib::Client& c) {
        const nlohmann::json comp = {{"prompt", long_system()}, {"max_tokens", 2}, {"temperature", 0}};
        post(c, "/v1/completions", comp);
        const auto b = post(c, "/v1/completions", comp);
        EXPECT_EQ(b["usage"]["prompt_tokens_details"]["cached_tokens"], 0) << b.dump();
        auto m = c.Get("/metrics");
        ASSERT_TRUE(m);
        EXPECT_EQ(metric(m->body, "vllm:prefix_cache_queries_total"), 0) << m->body;
    });
    EXPECT_NE(text.find("serve: prefix caching off"), std::string::npos) << text;
}

// The host and disk tiers through serve, with the disk tier in /dev/shm (so a restarted server can
// reuse it): a crashed process's torn write there is removed at start and the startup report says so;
// a tiny KV pool pushes a prompt's blocks out to host RAM and disk, and a restarted server serves the
// prompt from the disk tier with the same answer.
TEST_F(ServePrefixCache, HostAndDiskTiersSurviveARestartAndCleanUpACrash) {
    const std::filesystem::path shm = "/dev/shm";
    if (!std::filesystem::is_directory(shm)) GTEST_SKIP() << "no /dev/shm on this machine";
    test::TempDir tier_parent("onecard_kv_tier_e2e");
    const std::filesystem::path tier = shm / ("onecard-e2e-" + std::to_string(::getpid()));
    std::filesystem::remove_all(tier);
    std::filesystem::create_directories(tier);
    std::ofstream(tier / "0-0123456789abcdef.kv.tmp") << "torn";  // what a writer killed mid-entry leaves
    // A pool of a few dozen blocks, a host tier of 3 and 3 snapshots: evictions go device -> host -> disk.
    const std::string args =
        "--max-num-seqs 2 --max-model-len 1024 --kv-cache-memory-bytes 620000 --kv-offload-bytes 40000 "
        "--prefix-snapshot-bytes 250000 --kv-disk-dir " +
        tier.string() + " --kv-disk-bytes 100000000";
    const nlohmann::json first = {{"prompt", long_system()}, {"max_tokens", 3}, {"temperature", 0}};
    nlohmann::json answer;
    const std::string text1 = serve_and(args, [&](httplib::Client& c) {
        answer = post(c, "/v1/completions", first);
        for (int i = 0; i < 6; ++i) {  // other long prompts push the first one's KV out of RAM
            nlohmann::json other = first;
            other["prompt"] = std::to_string(i) + " other words " + long_system();
            post(c, "/v1/completions", other);
        }
    });
    EXPECT_NE(text1.find("removed 1 torn writes of a crashed process"), std::string::npos) << text1;
    EXPECT_FALSE(std::filesystem::exists(tier / "0-0123456789abcdef.kv.tmp"));
    const std::string text2 = serve_and(args, [&](httplib::Client& c) {
        const auto again = post(c, "/v1/completions", first);
        EXPECT_GE(again["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), 128) << again.dump();
        EXPECT_EQ(again["choices"][0]["text"], answer["choices"][0]["text"]);
        auto m = c.Get("/metrics");
        ASSERT_TRUE(m);
        EXPECT_GT(metric(m->body, "vllm:external_prefix_cache_hits_total"), 0) << m->body;
        EXPECT_GT(metric(m->body, "onecard:kv_disk_tier_entries"), 0) << m->body;
    });
    EXPECT_EQ(text2.find("reused 0 entries"), std::string::npos) << text2;
    std::filesystem::remove_all(tier);
}

}  // namespace
}  // namespace onecard
