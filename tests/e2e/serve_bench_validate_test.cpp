// `onecard validate` and `onecard bench-serve` against a real `onecard serve` on the CPU: the TEST-ONLY
// scripted runner answers every tool-call fixture turn exactly (pass path) or wrongly (fail path:
// altered arguments, a call where none is wanted), the random demo model fails the quality gates cleanly (exit status =
// failed gates), and bench-serve's token counts agree exactly with the server's /metrics counters.
#include "support/serve_process.h"
#include "support/test_support.h"
#include "support/time_scale.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

namespace onecard {
namespace {

using Json = nlohmann::json;

using test::slurp;

// Starts `onecard serve <args>` (env prefix `env`, a cache folder of its own), hands its base URL to
// `check`, stops it.
void serve_and(const test::TempDir& dir, const std::string& env, const std::string& args,
               const std::function<void(const std::string& url, int port)>& check) {
    test::serve_and(
        dir.path(), "--host 127.0.0.1 --port 0 --no-access-log " + args,
        [&](const Json& ready) {
            const int port = ready["port"].get<int>();
            check("http://127.0.0.1:" + std::to_string(port), port);
        },
        env + " XDG_CACHE_HOME=" + dir.path().string(), 300);
}

int exit_status(const test::CommandResult& r) {
    return WIFEXITED(r.rc) ? WEXITSTATUS(r.rc) : -1;
}

// A DSML tool-call block for the expected calls of one fixture turn (`corrupt`: wrong arguments).
std::string dsml_calls(const Json& expected, bool corrupt) {
    std::string s = "<｜DSML｜tool_calls>\n";
    for (const auto& call : expected) {
        s += "<｜DSML｜invoke name=\"" + call["name"].get<std::string>() + "\">\n";
        bool first = true;
        for (const auto& [k, v] : call["arguments"].items()) {
            const bool str = v.is_string();
            std::string val = str ? v.get<std::string>() : v.dump();
            if (corrupt && first) val = str ? val + "x" : "[0]";
            first = false;
            s += "<｜DSML｜parameter name=\"" + k + "\" string=\"" + (str ? "true" : "false") + "\">" + val +
                 "</｜DSML｜parameter>\n";
        }
        s += "</｜DSML｜invoke>\n";
    }
    return s + "</｜DSML｜tool_calls>";
}

Json builtin_fixtures() {
    return Json::parse(slurp(std::filesystem::path(ONECARD_SOURCE_DIR) / "tools/onecard/data/tool_fixtures.json"));
}

// A scripted-runner script answering every fixture turn, each keyed on a text only its own prompts
// hold (gen_tool_fixtures.py checks that): its user message, or for a reply to tool results the last
// result. Later turns come first, since their prompts also hold the first turn's text. A turn that
// wants no call gets its answer_contains strings (`corrupt`: a call instead); thinking-on prompts
// get reasoning then an answer; the rest an answer.
std::string fixture_script(bool corrupt) {
    const Json fx = builtin_fixtures();
    Json later = Json::array(), first = Json::array();
    for (const auto& f : fx["fixtures"])
        for (size_t i = 0; i < f["turns"].size(); ++i) {
            const Json& t = f["turns"][i];
            const std::string key = t.contains("user") ? t["user"].get<std::string>()
                                                       : f["turns"][i - 1]["tool_results"].back().get<std::string>();
            std::string text;
            if (!t["expected"].empty()) {
                text = dsml_calls(t["expected"], corrupt);
            } else if (corrupt) {
                text = dsml_calls(Json::array({Json{{"name", f["tools"][0]}, {"arguments", Json::object()}}}), false);
            } else {
                text = "Done:";
                for (const auto& s : t.value("answer_contains", Json::array())) text += " " + s.get<std::string>();
            }
            (i ? later : first).push_back({{"when", key}, {"text", text}});
        }
    Json scripts = later;
    for (const auto& s : first) scripts.push_back(s);
    scripts.push_back({{"when", "<｜Assistant｜><think>"}, {"text", "Adding the numbers.</think>The answer is 42."}});
    return Json{{"step_delay_ms", 2}, {"scripts", scripts}, {"default", {{"text", "The answer is 42."}}}}.dump();
}

// Small gates, so the runs take seconds on the CPU.
const std::string kSmall =
    " --capacity-streams 4 --mixed-prefill-len 400 --replay-prompt-len 200 --needle-len 300"
    " --reasoning-max-tokens 32 --seed 7";
const std::string kScriptedLens = " --capacity-max-tokens 8 --mixed-decode-tokens 200 --tool-max-tokens 200";

TEST(ServeValidate, ScriptedFixturesPassAndFail) {
    test::TempDir dir("serve_validate_scripted");
    for (bool corrupt : {false, true}) {
        std::ofstream(dir / "script.json") << fixture_script(corrupt);
        serve_and(dir, "ONECARD_TEST_MODE=1", "--test-script " + (dir / "script.json").string(),
                  [&](const std::string& url, int) {
                      const auto report = dir / "report.json";
                      const std::string gates =
                          corrupt ? "tool_calls,needle" : "tool_calls,no_dsml,reasoning,capacity,replay,mixed_load";
                      const auto r = test::run_command(test::timeout_prefix(120) + test::onecard_binary().string() +
                                                       " validate --base-url " + url + " --gates " + gates + kSmall +
                                                       kScriptedLens + " --out " + report.string() + " 2>&1");
                      const Json j = Json::parse(slurp(report));
                      EXPECT_EQ(exit_status(r), corrupt ? 2 : 0) << r.out;
                      EXPECT_EQ(j["failed"], corrupt ? 2 : 0) << j.dump(1);
                      const Json& tc = j["gates"][0];
                      int64_t n_turns = 0, n_second = 0, n_parallel = 0, n_none = 0;
                      const Json fx = builtin_fixtures();
                      for (const auto& f : fx["fixtures"])
                          for (size_t i = 0; i < f["turns"].size(); ++i) {
                              const size_t n_calls = f["turns"][i]["expected"].size();
                              n_turns += 1, n_second += i > 0, n_parallel += n_calls > 1, n_none += n_calls == 0;
                          }
                      EXPECT_EQ(tc["name"], "tool_calls");
                      EXPECT_EQ(tc["passed"], !corrupt);
                      EXPECT_EQ(tc["figures"]["turns"], n_turns);
                      EXPECT_EQ(tc["figures"]["exact"], corrupt ? 0 : n_turns) << tc.dump(1);
                      EXPECT_EQ(tc["figures"]["second_turns"], n_second);
                      EXPECT_EQ(tc["figures"]["second_turns_exact"], corrupt ? 0 : n_second);
                      EXPECT_EQ(tc["figures"]["parallel_call_turns_exact"], corrupt ? 0 : n_parallel);
                      EXPECT_EQ(tc["figures"]["no_call_turns_exact"], corrupt ? 0 : n_none);
                      EXPECT_EQ(r.out.find('\r'), std::string::npos) << "no progress line off a terminal";
                      EXPECT_EQ(j["method"]["models"]["data"][0]["id"], "onecard-demo");
                      EXPECT_NE(r.out.find(corrupt ? "2 of 2 gates failed" : "0 of 6 gates failed"), std::string::npos)
                          << r.out;
                  });
    }
}

TEST(ServeValidate, RandomModelFailsQualityGatesCleanly) {
    test::TempDir dir("serve_validate_random");
    const auto r0 = test::run_command(test::onecard_binary().string() + " synth --preset small --seed 5 --out " +
                                      (dir / "model").string() + " --quiet 2>&1");
    ASSERT_EQ(r0.rc, 0) << r0.out;
    // Every 8th fixture through --fixtures: each kind of turn, at a cost the CPU model runs in seconds.
    Json fx = builtin_fixtures(), some = Json::array();
    for (size_t i = 0; i < fx["fixtures"].size(); i += 8) some.push_back(fx["fixtures"][i]);
    fx["fixtures"] = some;
    std::ofstream(dir / "fixtures.json") << fx.dump();
    serve_and(dir, "", (dir / "model").string() + " --device cpu", [&](const std::string& url, int) {
        const auto report = dir / "report.json";
        const auto r = test::run_command("timeout 240 " + test::onecard_binary().string() + " validate --base-url " +
                                         url + kSmall +
                                         " --tool-max-tokens 8 --needle-max-tokens 4 --capacity-max-tokens 2"
                                         " --mixed-decode-tokens 4 --fixtures " +
                                         (dir / "fixtures.json").string() + " --out " + report.string() + " 2>&1");
        EXPECT_EQ(r.out.find("internal error"), std::string::npos) << r.out;
        const Json j = Json::parse(slurp(report));
        EXPECT_EQ(j["gates"].size(), 7u);
        EXPECT_EQ(exit_status(r), j["failed"].get<int>()) << r.out;
        for (const auto& g : j["gates"])
            if (g["name"] == "tool_calls" || g["name"] == "needle") {
                EXPECT_FALSE(g["passed"]) << g.dump(1);
                EXPECT_FALSE(g["figures"].empty());
            }
        EXPECT_EQ(j["gates"][0]["figures"]["fixtures"], some.size());
    });
}

double metric(httplib::Client& c, const std::string& name) {
    auto m = c.Get("/metrics");
    if (!m) return -1;
    const size_t p = m->body.find("\n" + name + "{");
    if (p == std::string::npos) return -1;
    const size_t sp = m->body.find("} ", p);
    return std::stod(m->body.substr(sp + 2, m->body.find('\n', sp) - sp - 2));
}

TEST(ServeBenchServe, TokenCountsAgreeWithServerMetrics) {
    test::TempDir dir("serve_bench_serve");
    std::ofstream(dir / "script.json") << Json{{"step_delay_ms", 1}, {"default", {{"text", "Hello!"}}}}.dump();
    serve_and(dir, "ONECARD_TEST_MODE=1", "--test-script " + (dir / "script.json").string(),
              [&](const std::string& url, int port) {
                  httplib::Client c("127.0.0.1", port);
                  const double p0 = metric(c, "vllm:prompt_tokens_total");
                  const double g0 = metric(c, "vllm:generation_tokens_total");
                  const auto out = dir / "bench.json", svg = dir / "bench.svg";
                  for (const char* endpoint : {"/v1/completions", "/v1/chat/completions"}) {
                      const auto r = test::run_command(
                          "timeout 120 " + test::onecard_binary().string() + " bench-serve --base-url " + url +
                          " --num-prompts 8 --random-input-len 48 --random-output-len 12 --max-concurrency 1,4"
                          " --ignore-eos --endpoint " +
                          endpoint + " --out " + out.string() + " --plot " + svg.string() + " 2>&1");
                      ASSERT_EQ(r.rc, 0) << r.out;
                      EXPECT_NE(r.out.find("TTFT p50"), std::string::npos) << r.out;
                  }
                  // The last run (chat) is in the JSON; the counters cover both runs.
                  const Json j = Json::parse(slurp(out));
                  ASSERT_EQ(j["points"].size(), 2u);
                  EXPECT_EQ(j["method"]["models"]["data"][0]["id"], "onecard-demo");
                  EXPECT_FALSE(j["method"]["command"].get<std::string>().empty());
                  EXPECT_EQ(j["method"]["dataset"]["prompt_lengths"], "exact (/tokenize)");
                  for (const auto& p : j["points"]) {
                      EXPECT_EQ(p["completed"], 8);
                      EXPECT_EQ(p["errors"], 0);
                      EXPECT_EQ(p["total_input_tokens"], 8 * 48) << "prompts are cut to the length through /tokenize";
                      EXPECT_EQ(p["prompt_len_mismatches"], 0);
                      EXPECT_EQ(p["total_output_tokens"], 8 * 12);
                      EXPECT_EQ(p["server_metrics"]["vllm:prompt_tokens_total:delta"], 8 * 48);
                      EXPECT_EQ(p["server_metrics"]["vllm:generation_tokens_total:delta"], 8 * 12);
                      EXPECT_GT(p["ttft_ms"]["p50"].get<double>(), 0);
                      EXPECT_GE(p["ttft_ms"]["p99"].get<double>(), p["ttft_ms"]["p50"].get<double>());
                      EXPECT_GT(p["output_throughput"].get<double>(), 0);
                  }
                  EXPECT_EQ(metric(c, "vllm:prompt_tokens_total") - p0, 2 * 2 * 8 * 48);
                  EXPECT_EQ(metric(c, "vllm:generation_tokens_total") - g0, 2 * 2 * 8 * 12);
                  const std::string s = slurp(svg);
                  EXPECT_EQ(s.rfind("<?xml", 0), 0u);
                  EXPECT_NE(s.find("<svg xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
                  EXPECT_NE(s.find("</svg>"), std::string::npos);
                  EXPECT_EQ(std::count(s.begin(), s.end(), '<'), std::count(s.begin(), s.end(), '>'));
              });
}

}  // namespace
}  // namespace onecard
