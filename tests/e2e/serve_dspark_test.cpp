// DSpark through `onecard serve` on the CPU backend (issue 17): a 0731 checkpoint from
// `synth --preset small --dspark` (the real vocabulary and tokenizer, the DSpark drafter in
// mtp.0..2) serves with --speculative-config '{"method":"dspark",...}', answers a greedy completion
// exactly as without speculation, counts its drafts in vLLM's spec_decode metrics, and a
// num_speculative_tokens above dspark_block_size is refused by name before serving.
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

class ServeDSpark : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        dir_ = new test::TempDir("serve_dspark");
        const auto r = test::run_command(test::onecard_binary().string() +
                                         " synth --preset small --dspark --seed 7 --out " + model() + " --quiet 2>&1");
        ASSERT_EQ(r.rc, 0) << r.out;
    }
    static void TearDownTestSuite() {
        delete dir_;
        dir_ = nullptr;
    }
    static std::string model() { return (dir_->path() / "model").string(); }

    // Starts `onecard serve <model> <args>`, hands a client on its port (and the port) to `check`, stops
    // it. Returns what it printed.
    static std::string serve_and(const std::string& args,
                                 const std::function<void(httplib::Client&, int port)>& check) {
        return test::serve_and(dir_->path(), model() + " --device cpu --host 127.0.0.1 --port 0 " + args,
                               [&](const nlohmann::json& ready) {
                                   httplib::Client c("127.0.0.1", ready["port"].get<int>());
                                   c.set_read_timeout(120);
                                   check(c, ready["port"].get<int>());
                               });
    }
    static test::TempDir* dir_;
};
test::TempDir* ServeDSpark::dir_ = nullptr;

double metric(const std::string& text, const std::string& name) {
    const size_t p = text.find("\n" + name + "{");
    if (p == std::string::npos) return -1;
    const size_t sp = text.find("} ", p);
    return std::stod(text.substr(sp + 2, text.find('\n', sp) - sp - 2));
}

const nlohmann::json kRequest = {
    {"prompt", "The three stages of the drafter read the last layers of the target, and then"},
    {"max_tokens", 12},
    {"temperature", 0},
};

std::string complete(httplib::Client& c) {
    auto r = c.Post("/v1/completions", kRequest.dump(), "application/json");
    EXPECT_TRUE(r);
    if (!r) return "";
    EXPECT_EQ(r->status, 200) << r->body;
    return nlohmann::json::parse(r->body)["choices"][0]["text"].get<std::string>();
}

TEST_F(ServeDSpark, AnswersAsWithoutSpeculationAndCountsDrafts) {
    std::string plain, spec;
    serve_and("", [&](httplib::Client& c, int) { plain = complete(c); });
    const std::string text =
        serve_and(R"(--speculative-config '{"method":"dspark","num_speculative_tokens":3,"draft_length":"fixed"}')",
                  [&](httplib::Client& c, int) {
                      spec = complete(c);
                      auto m = c.Get("/metrics");
                      ASSERT_TRUE(m);
                      EXPECT_GT(metric(m->body, "vllm:spec_decode_num_drafts_total"), 0) << m->body;
                      EXPECT_GE(metric(m->body, "vllm:spec_decode_num_draft_tokens_total"),
                                metric(m->body, "vllm:spec_decode_num_drafts_total"));
                  });
    EXPECT_FALSE(plain.empty());
    EXPECT_EQ(spec, plain) << text;
}

// `onecard bench-serve` reports speculation as vLLM's bench serve does, from the server's spec_decode
// counters over the point: drafts, draft and accepted tokens, acceptance rate, mean acceptance length
// (1 + accepted / drafts) and the per-position rates, on stdout and in the JSON.
TEST_F(ServeDSpark, BenchServeReportsTheAcceptance) {
    const auto out = dir_->path() / "bench.json";
    serve_and(R"(--speculative-config '{"method":"dspark","num_speculative_tokens":3,"draft_length":"fixed"}')",
              [&](httplib::Client&, int port) {
                  const auto r = test::run_command(
                      "timeout 300 " + test::onecard_binary().string() +
                      " bench-serve --base-url http://127.0.0.1:" + std::to_string(port) +
                      " --num-prompts 4 --random-input-len 24 --random-output-len 10 --max-concurrency 2"
                      " --ignore-eos --temperature 0 --out " +
                      out.string() + " 2>&1");
                  ASSERT_EQ(r.rc, 0) << r.out;
                  EXPECT_NE(r.out.find("mean acceptance length"), std::string::npos) << r.out;
              });
    std::ifstream f(out);
    const nlohmann::json j = nlohmann::json::parse(f);
    ASSERT_EQ(j["points"].size(), 1u);
    const nlohmann::json& sd = j["points"][0]["spec_decode"];
    ASSERT_TRUE(sd.contains("drafts")) << j["points"][0].dump();
    const double drafts = sd["drafts"], tokens = sd["draft_tokens"], accepted = sd["accepted_tokens"];
    EXPECT_GT(drafts, 0);
    EXPECT_LE(tokens, 3 * drafts) << "at most num_speculative_tokens a draft";
    EXPECT_GE(tokens, drafts);
    EXPECT_LE(accepted, tokens);
    EXPECT_DOUBLE_EQ(sd["acceptance_rate"].get<double>(), accepted / tokens);
    EXPECT_DOUBLE_EQ(sd["mean_acceptance_length"].get<double>(), 1.0 + accepted / drafts);
    ASSERT_EQ(sd["per_position_acceptance_rate"].size(), 3u);
    double sum = 0;
    for (const auto& a : sd["per_position_acceptance_rate"]) sum += a.get<double>() * drafts;
    EXPECT_NEAR(sum, accepted, 1e-9) << "the positions' accepted tokens add up to the total";
}

TEST_F(ServeDSpark, MoreDraftsThanTheBlockAreRefusedBeforeServing) {
    const auto r = test::run_command("timeout 60 " + test::onecard_binary().string() + " serve " + model() +
                                     " --port 0 --device cpu --speculative-config "
                                     "'{\"method\":\"dspark\",\"num_speculative_tokens\":6}' 2>&1 </dev/null");
    EXPECT_NE(r.rc, 0) << r.out;
    EXPECT_NE(r.out.find("dspark_block_size"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("\"event\":\"ready\""), std::string::npos) << "must refuse before serving\n" << r.out;
}

}  // namespace
}  // namespace onecard
