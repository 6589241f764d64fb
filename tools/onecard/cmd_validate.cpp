// `onecard validate`: the deployment gates against any OpenAI-compatible endpoint (onecard, vLLM,
// SGLang): tool-call fixtures, no raw DSML, reasoning split, capacity, cold-vs-cached replay, mixed
// load, needle recall. Each gate reports its figures and pass/fail (or skipped, with the reason, when
// the endpoint lacks an optional feature the gate needs); a table goes to the terminal, --out writes
// a JSON report, and the exit status is the number of failed gates. The gates live in
// tools/onecard/client/validate_*.cpp.
#include "commands.h"
#include "core/error.h"

#include <fmt/format.h>

#include "progress.h"
#include "run_method.h"
#include "stats.h"
#include "validate_gates.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace onecard::cli {
namespace {

using client::Json;

struct ValidateArgs {
    client::ValidateOptions o;
    std::string gates, out;
    bool no_progress = false;
};

const char* verdict(const client::GateResult& r) {
    return r.skipped ? "SKIP" : r.passed ? "PASS" : "FAIL";
}

void run(ValidateArgs& a) {
    client::HttpClient http(a.o.ep);
    Json method = client::run_method(http, a.o.ep);
    ONECARD_CHECK(!method["models"].is_null() || !a.o.model.empty(),
                  "validate: {} did not answer /v1/models; is it up? (pass --model to skip the lookup)",
                  a.o.ep.base_url);
    if (a.o.model.empty()) a.o.model = client::first_model_id(method["models"]);
    std::vector<std::string> gates;
    std::stringstream ss(a.gates);
    for (std::string g; std::getline(ss, g, ',');)
        if (!g.empty()) gates.push_back(g);
    if (gates.empty()) gates = client::gate_names();
    std::vector<client::GateResult> results;
    {
        client::Progress progress(client::stderr_is_tty() && !a.no_progress);
        a.o.progress = &progress;
        for (size_t i = 0; i < gates.size(); ++i) {
            const std::string step = fmt::format("[{}/{}] {}", i + 1, gates.size(), gates[i]);
            progress.note(fmt::format("validate: {} ...", step));
            progress.begin("validate " + step, 0);
            results.push_back(client::run_gate(gates[i], a.o));
            progress.end();
            const auto& r = results.back();
            progress.note(fmt::format("validate: [{}/{}] {} {} in {:.1f} s: {}", i + 1, gates.size(), r.name,
                                      verdict(r), r.seconds, r.summary));
        }
        a.o.progress = nullptr;
    }
    int n_failed = 0, n_skipped = 0;
    std::vector<std::vector<std::string>> rows = {{"gate", "result", "seconds", "figures"}};
    Json report = {{"method", method}, {"gates", Json::array()}};
    for (const auto& r : results) {
        n_failed += !r.passed && !r.skipped;
        n_skipped += r.skipped;
        rows.push_back({r.name, verdict(r), client::fmt_num(r.seconds, 1), r.summary});
        report["gates"].push_back({{"name", r.name},
                                   {"passed", r.passed},
                                   {"skipped", r.skipped},
                                   {"seconds", r.seconds},
                                   {"summary", r.summary},
                                   {"figures", r.figures}});
    }
    report["method"]["model"] = a.o.model;
    report["failed"] = n_failed;
    report["skipped"] = n_skipped;
    report["passed"] = static_cast<int>(results.size()) - n_failed - n_skipped;
    std::printf("%s%d of %zu gates failed%s\n", client::format_table(rows).c_str(), n_failed, results.size(),
                n_skipped ? fmt::format(", {} skipped", n_skipped).c_str() : "");
    if (!a.out.empty())
        client::write_file(a.out, report.dump(2, ' ', false, client::Json::error_handler_t::replace) + "\n");
    std::fflush(stdout);
    std::fflush(stderr);
    // The exit status is the number of failed gates (a CLI11 callback cannot return one); a skipped
    // gate is not a failure.
    if (n_failed) std::exit(std::min(n_failed, 100));
}

}  // namespace

void add_cmd_validate(CLI::App& app) {
    auto a = std::make_shared<ValidateArgs>();
    auto& o = a->o;
    auto* cmd = app.add_subcommand("validate",
                                   "validation gates against an OpenAI-compatible endpoint "
                                   "(exit status = number of failed gates)");
    cmd->add_option("--base-url", o.ep.base_url, "server to validate, e.g. http://127.0.0.1:8000")->required();
    cmd->add_option("--api-key", o.ep.api_key, "bearer token (default: $OPENAI_API_KEY)");
    cmd->add_option("--model", o.model, "model name to send (default: the first of /v1/models)");
    cmd->add_option("--gates", a->gates,
                    "comma-separated subset of tool_calls,no_dsml,reasoning,capacity,replay,mixed_load,needle "
                    "(default: all)");
    cmd->add_option("--out", a->out, "write the JSON report");
    cmd->add_flag("--no-progress", a->no_progress,
                  "no live progress line (it is drawn only when stderr is a terminal)");
    cmd->add_option("--seed", o.seed, "fixes the per-run nonces (needles, prompts); 0: new each run")
        ->capture_default_str();
    cmd->add_option("--timeout", o.ep.timeout_s, "per-request read timeout in seconds")->capture_default_str();
    cmd->add_option("--fixtures", o.fixtures_path, "tool-call fixture file (default: the built-in set)");
    cmd->add_option("--tool-concurrency", o.tool_concurrency, "concurrent fixture requests")->capture_default_str();
    cmd->add_option("--tool-min-accuracy", o.tool_min_accuracy, "share of fixture turns that must be exact")
        ->capture_default_str();
    cmd->add_flag("--tool-thinking", o.tool_thinking, "send the fixtures with thinking on");
    cmd->add_option("--tool-max-tokens", o.tool_max_tokens, "max_tokens of a fixture request")->capture_default_str();
    cmd->add_option("--reasoning-max-tokens", o.reasoning_max_tokens, "max_tokens of a reasoning request")
        ->capture_default_str();
    cmd->add_option("--capacity-streams", o.capacity_streams, "concurrent streams of the capacity gate")
        ->capture_default_str();
    cmd->add_option("--capacity-max-tokens", o.capacity_max_tokens, "tokens per capacity stream")
        ->capture_default_str();
    cmd->add_option("--replay-prompt-len", o.replay_prompt_len, "prompt tokens of the replay request")
        ->capture_default_str();
    cmd->add_option("--replay-max-tokens", o.replay_max_tokens, "tokens compared by the replay gate")
        ->capture_default_str();
    cmd->add_option("--logprob-tol", o.logprob_tol, "replay: largest allowed top-5 logprob difference")
        ->capture_default_str();
    cmd->add_option("--mixed-prefill-len", o.mixed_prefill_len, "prompt tokens of the long cold request")
        ->capture_default_str();
    cmd->add_option("--mixed-running", o.mixed_running, "streams decoding while the long prefill runs")
        ->capture_default_str();
    cmd->add_option("--mixed-decode-tokens", o.mixed_decode_tokens, "tokens each running stream generates")
        ->capture_default_str();
    cmd->add_option("--mixed-late", o.mixed_late_s, "seconds between the long request and the short one")
        ->capture_default_str();
    cmd->add_option("--mixed-max-ttft", o.mixed_max_ttft_s, "largest allowed TTFT of the short request (s)")
        ->capture_default_str();
    cmd->add_option("--mixed-max-gap", o.mixed_max_gap_s, "largest allowed inter-token gap of running streams (s)")
        ->capture_default_str();
    cmd->add_option("--needle-len", o.needle_len, "prompt tokens of the needle request")->capture_default_str();
    cmd->add_option("--needles", o.n_needles, "needles hidden in the prompt")->capture_default_str();
    cmd->add_option("--needle-max-tokens", o.needle_max_tokens, "max_tokens of the needle answer")
        ->capture_default_str();
    cmd->callback([a] {
        if (a->o.ep.api_key.empty())
            if (const char* k = std::getenv("OPENAI_API_KEY")) a->o.ep.api_key = k;
        run(*a);
    });
}

}  // namespace onecard::cli
