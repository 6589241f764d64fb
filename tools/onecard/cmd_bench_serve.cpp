// `onecard bench-serve`: a serving benchmark against any OpenAI-compatible endpoint (onecard, vLLM,
// SGLang), with `vllm bench serve`'s flag names. Sweeps --max-concurrency (and --request-rate)
// lists; per point: TTFT, TPOT, ITL, e2e (mean/p50/p90/p99), request and token throughput,
// per-stream decode rate, the share of prompt tokens served from the prefix cache, errors.
// Writes a terminal table, --out JSON (the method and one object per point) and --plot SVG
// (latency against throughput). The workload code lives in tools/onecard/client/.
#include "commands.h"
#include "core/error.h"

#include <fmt/format.h>

#include "bench_run.h"
#include "progress.h"
#include "run_method.h"
#include "svg_plot.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>

namespace onecard::cli {
namespace {

using client::Json;

struct BenchServeArgs {
    client::Endpoint ep;
    std::string model, endpoint = "/v1/completions", out, plot;
    client::DatasetOptions data;
    std::string max_concurrency, request_rate = "inf";
    std::optional<double> temperature, top_p;
    bool ignore_eos = false, no_progress = false;
};

std::vector<std::string> split_list(const std::string& s) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    for (std::string item; std::getline(ss, item, ',');)
        if (!item.empty()) out.push_back(item);
    return out;
}

std::vector<double> parse_rates(const std::string& s) {
    std::vector<double> out;
    for (const auto& r : split_list(s)) {
        if (r == "inf") {
            out.push_back(std::numeric_limits<double>::infinity());
            continue;
        }
        try {
            out.push_back(std::stod(r));
        } catch (const std::exception&) {
            throw Error(fmt::format("bench-serve: --request-rate '{}' is not a number or inf", r));
        }
        ONECARD_CHECK(out.back() > 0, "bench-serve: --request-rate must be > 0 (or inf)");
    }
    ONECARD_CHECK(!out.empty(), "bench-serve: --request-rate is empty");
    return out;
}

std::vector<int64_t> parse_concurrency(const std::string& s, int64_t num_prompts) {
    std::vector<int64_t> out;
    for (const auto& c : split_list(s)) {
        try {
            out.push_back(std::stoll(c));
        } catch (const std::exception&) {
            throw Error(fmt::format("bench-serve: --max-concurrency '{}' is not an integer", c));
        }
        ONECARD_CHECK(out.back() > 0, "bench-serve: --max-concurrency must be > 0");
    }
    if (out.empty()) out.push_back(num_prompts);  // vLLM's default: no limit
    return out;
}

std::string rate_label(double r) {
    return std::isfinite(r) ? client::fmt_num(r, 2) : "inf";
}

void print_table(const std::vector<client::PointResult>& pts) {
    std::vector<std::vector<std::string>> rows = {{"conc", "rate", "ok", "err", "req/s", "out tok/s", "TTFT p50",
                                                   "TTFT p99", "TPOT p50", "TPOT p99", "ITL p50", "ITL p99", "e2e p50",
                                                   "tok/s/stream", "cached"}};
    using client::fmt_num;
    for (const auto& p : pts)
        rows.push_back({std::to_string(p.spec.concurrency), rate_label(p.spec.request_rate), std::to_string(p.n_ok),
                        std::to_string(p.n_errors), fmt_num(p.request_throughput, 2), fmt_num(p.output_throughput, 1),
                        fmt_num(p.ttft_ms.p50, 1), fmt_num(p.ttft_ms.p99, 1), fmt_num(p.tpot_ms.p50, 2),
                        fmt_num(p.tpot_ms.p99, 2), fmt_num(p.itl_ms.p50, 2), fmt_num(p.itl_ms.p99, 2),
                        fmt_num(p.e2e_ms.p50, 1), fmt_num(p.decode_tok_s.p50, 1),
                        fmt_num(100.0 * p.cached_share, 1) + "%"});
    std::printf("%s(latencies in ms)\n", client::format_table(rows).c_str());
    // Speculative decoding, as vLLM's bench serve reports it (from the server's spec_decode counters).
    for (const auto& p : pts) {
        const client::Json sd = client::spec_summary(p.server_metrics);
        if (sd.empty()) continue;
        std::string per_pos;
        for (const auto& a : sd["per_position_acceptance_rate"])
            per_pos += (per_pos.empty() ? "" : " / ") + fmt_num(a.get<double>(), 2);
        std::printf(
            "speculative decoding at concurrency %lld: %.0f drafts, %.0f draft tokens, %.0f accepted; "
            "acceptance rate %.1f%%, mean acceptance length %.2f, per position %s\n",
            static_cast<long long>(p.spec.concurrency), sd["drafts"].get<double>(), sd["draft_tokens"].get<double>(),
            sd["accepted_tokens"].get<double>(), 100.0 * sd["acceptance_rate"].get<double>(),
            sd["mean_acceptance_length"].get<double>(), per_pos.c_str());
    }
    for (const auto& p : pts)
        for (const auto& e : p.error_samples)
            std::fprintf(stderr, "bench-serve: error at concurrency %lld: %s\n",
                         static_cast<long long>(p.spec.concurrency), e.c_str());
}

std::string make_plot(const std::vector<client::PointResult>& pts, const std::string& model) {
    client::PlotSeries ttft50{"TTFT p50", {}, {}, {}}, ttft99{"TTFT p99", {}, {}, {}};
    client::PlotSeries tpot50{"TPOT p50", {}, {}, {}}, tpot99{"TPOT p99", {}, {}, {}};
    for (const auto& p : pts) {
        const double x = p.output_throughput;
        const std::string label = "c" + std::to_string(p.spec.concurrency) +
                                  (std::isfinite(p.spec.request_rate) ? " r" + rate_label(p.spec.request_rate) : "");
        for (auto* s : {&ttft50, &ttft99, &tpot50, &tpot99}) {
            s->x.push_back(x);
            s->labels.push_back(s == &ttft50 || s == &tpot50 ? label : "");
        }
        ttft50.y.push_back(p.ttft_ms.p50);
        ttft99.y.push_back(p.ttft_ms.p99);
        tpot50.y.push_back(p.tpot_ms.p50);
        tpot99.y.push_back(p.tpot_ms.p99);
    }
    const std::vector<client::PlotPanel> panels = {
        {"Time to first token", "output throughput (tokens/s)", "TTFT (ms)", {ttft50, ttft99}},
        {"Time per output token", "output throughput (tokens/s)", "TPOT (ms)", {tpot50, tpot99}}};
    return client::render_svg("onecard bench-serve: " + model, panels);
}

bool ends_with(const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

void run(const BenchServeArgs& a) {
    // Checked before a long sweep rather than after it. PNG would need a rasteriser with fonts (cairo
    // or similar), which onecard does not depend on; any SVG converter makes one.
    ONECARD_CHECK(!ends_with(a.plot, ".png") && !ends_with(a.plot, ".PNG"),
                  "bench-serve: --plot writes SVG only; use --plot {}.svg (convert it with e.g. "
                  "`rsvg-convert -o {} {}.svg`)",
                  a.plot.substr(0, a.plot.size() - 4), a.plot, a.plot.substr(0, a.plot.size() - 4));
    client::HttpClient http(a.ep);
    Json method = client::run_method(http, a.ep);
    const std::string model = a.model.empty() ? client::first_model_id(method["models"]) : a.model;
    ONECARD_CHECK(!method["models"].is_null() || !a.model.empty(),
                  "bench-serve: {} did not answer /v1/models; is it up? (pass --model to skip the lookup)",
                  a.ep.base_url);
    const auto concurrency = parse_concurrency(a.max_concurrency, a.data.num_prompts);
    const auto rates = parse_rates(a.request_rate);

    client::PointSpec base;
    base.endpoint = a.endpoint;
    base.model = model;
    base.seed = a.data.seed;
    base.extra = Json::object();
    if (a.temperature) base.extra["temperature"] = *a.temperature;
    if (a.top_p) base.extra["top_p"] = *a.top_p;
    if (a.ignore_eos) base.extra["ignore_eos"] = true;
    client::PromptBuilder pb(http, client::api_kind_of(a.endpoint), model);
    // Random prompts are cut to the exact length through /tokenize; a plain OpenAI endpoint has none,
    // so the lengths are approximate and the server's prompt_tokens are what gets reported.
    const std::string prompt_lengths = a.data.name != "random" ? "as given (" + a.data.name + ")"
                                       : pb.has_tokenize()     ? "exact (/tokenize)"
                                                               : "approximate (no usable " + pb.no_tokenize_reason() +
                                                                 "; totals are the server's usage.prompt_tokens)";
    if (a.data.name == "random" && !pb.has_tokenize())
        std::fprintf(stderr,
                     "bench-serve: prompt lengths are approximate: the endpoint has no usable /tokenize (%s); "
                     "the server's prompt_tokens are reported\n",
                     pb.no_tokenize_reason().c_str());

    std::vector<client::PointResult> points;
    {
        client::Progress progress(client::stderr_is_tty() && !a.no_progress);
        const size_t n_points = rates.size() * concurrency.size();
        uint64_t salt = 0;
        for (double rate : rates)
            for (int64_t c : concurrency) {
                client::PointSpec spec = base;
                spec.concurrency = c;
                spec.request_rate = rate;
                // Fresh prompts per point, so no point is served from an earlier point's cache.
                const auto sessions = client::make_sessions(a.data, pb, ++salt);
                progress.note(fmt::format("bench-serve: concurrency {}, rate {}: {} sessions ...", c, rate_label(rate),
                                          sessions.size()));
                progress.begin(fmt::format("bench-serve [{}/{}] c={} rate={}", salt, n_points, c, rate_label(rate)), 0);
                points.push_back(client::run_point(a.ep, spec, sessions, &progress));
                progress.end();
                const auto& p = points.back();
                progress.note(fmt::format("bench-serve:   {} ok, {} errors in {:.2f} s ({:.1f} output tok/s)", p.n_ok,
                                          p.n_errors, p.duration_s, p.output_throughput));
            }
    }
    print_table(points);

    method["model"] = model;
    method["endpoint"] = a.endpoint;
    method["dataset"] = {{"name", a.data.name},
                         {"path", a.data.path},
                         {"num_prompts", a.data.num_prompts},
                         {"random_input_len", a.data.input_len},
                         {"random_output_len", a.data.output_len},
                         {"seed", a.data.seed},
                         {"tokenize_exact", pb.has_tokenize()},
                         {"prompt_lengths", prompt_lengths}};
    method["sampling"] = base.extra;
    Json out = {{"method", method}, {"points", Json::array()}};
    for (const auto& p : points) out["points"].push_back(client::to_json(p));
    if (!a.out.empty())
        client::write_file(a.out, out.dump(2, ' ', false, client::Json::error_handler_t::replace) + "\n");
    if (!a.plot.empty()) client::write_file(a.plot, make_plot(points, model));
}

}  // namespace

void add_cmd_bench_serve(CLI::App& app) {
    auto a = std::make_shared<BenchServeArgs>();
    auto* cmd = app.add_subcommand("bench-serve",
                                   "serving benchmark against an OpenAI-compatible endpoint "
                                   "(vllm bench serve's flags; table, JSON, SVG plot)");
    cmd->add_option("--base-url", a->ep.base_url, "server to measure, e.g. http://127.0.0.1:8000")->required();
    cmd->add_option("--api-key", a->ep.api_key, "bearer token (default: $OPENAI_API_KEY)");
    cmd->add_option("--model", a->model, "model name to send (default: the first of /v1/models)");
    cmd->add_option("--endpoint", a->endpoint, "/v1/completions or /v1/chat/completions")
        ->check(CLI::IsMember({"/v1/completions", "/v1/chat/completions"}))
        ->capture_default_str();
    cmd->add_option("--dataset-name", a->data.name, "random | jsonl | agent-trace")
        ->check(CLI::IsMember({"random", "jsonl", "agent-trace"}))
        ->capture_default_str();
    cmd->add_option("--dataset-path", a->data.path,
                    "jsonl: one {\"prompt\", \"output_len\"?} per line; agent-trace: a trace file "
                    "(default: the built-in trace)");
    cmd->add_option("--num-prompts", a->data.num_prompts, "requests (agent-trace: conversations) per point")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    cmd->add_option("--random-input-len", a->data.input_len, "prompt tokens (random dataset)")->capture_default_str();
    cmd->add_option("--random-output-len", a->data.output_len, "max_tokens (random dataset, agent-trace default)")
        ->capture_default_str();
    cmd->add_option("--max-concurrency", a->max_concurrency,
                    "concurrent requests; a comma-separated list sweeps (default: --num-prompts)");
    cmd->add_option("--request-rate", a->request_rate,
                    "requests/s with Poisson arrivals, or inf (all at once); a list sweeps")
        ->capture_default_str();
    cmd->add_option("--temperature", a->temperature, "sampling temperature (default: the server's)");
    cmd->add_option("--top-p", a->top_p, "nucleus sampling (default: the server's)");
    cmd->add_option("--seed", a->data.seed, "seed of prompts and arrivals")->capture_default_str();
    cmd->add_flag("--ignore-eos", a->ignore_eos, "send ignore_eos so every request generates max_tokens");
    cmd->add_option("--out", a->out, "write the results as JSON");
    cmd->add_option("--plot", a->plot, "write latency against throughput as SVG (FILE.svg; PNG is not supported)");
    cmd->add_flag("--no-progress", a->no_progress,
                  "no live progress line (it is drawn only when stderr is a terminal)");
    cmd->add_option("--timeout", a->ep.timeout_s, "per-request read timeout in seconds")->capture_default_str();
    cmd->callback([a] {
        if (a->ep.api_key.empty())
            if (const char* k = std::getenv("OPENAI_API_KEY")) a->ep.api_key = k;
        run(*a);
    });
}

}  // namespace onecard::cli
