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

    // Starts `onecard serve <model> <args>`, hands a client on its port to `check`, stops it.
    // Returns what it printed.
    static std::string serve_and(const std::string& args, const std::function<void(httplib::Client&)>& check) {
        return test::serve_and(dir_->path(), model() + " --device cpu --host 127.0.0.1 --port 0 " + args,
                               [&](const nlohmann::json& ready) {
                                   httplib::Client c("127.0.0.1", ready["port"].get<int>());
                                   c.set_read_timeout(120);
                                   check(c);
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
    serve_and("", [&](httplib::Client& c) { plain = complete(c); });
    const std::string text =
        serve_and(R"(--speculative-config '{"method":"dspark","num_speculative_tokens":3,"draft_length":"fixed"}')",
                  [&](httplib::Client& c) {
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
