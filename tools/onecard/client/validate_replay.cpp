// Gates replay (the same greedy request cold then from the prefix cache: identical text, top-5
// logprobs within --logprob-tol) and needle (per-run nonce "needles" in filler text at a given
// length must all be recalled, and the same request again, warm, must give the same answer).
#include "validate_gates.h"

#include "stats.h"

#include "bench_dataset.h"

#include <fmt/format.h>

#include <cmath>

namespace onecard::client {

namespace {

Json user(const std::string& text) {
    return Json::array({Json{{"role", "user"}, {"content", text}}});
}

uint64_t run_nonce(const ValidateOptions& o) {
    return o.seed ? o.seed : static_cast<uint64_t>(Clock::now().time_since_epoch().count());
}

}  // namespace

GateResult gate_replay(const ValidateOptions& o) {
    HttpClient http(o.ep);
    PromptBuilder pb(http, ApiKind::Chat, o.model);
    std::mt19937_64 rng(run_nonce(o) + 17);
    bool exact = false;
    const std::string prompt =
        pb.build(rng, fmt::format("[replay {}] Continue this list: ", run_nonce(o)), o.replay_prompt_len, &exact);
    Json body = base_body(o, user(prompt), o.replay_max_tokens, false);
    body["logprobs"] = true;
    body["top_logprobs"] = 5;
    const StreamResult cold = run_counted(http, body, o.progress);
    const StreamResult warm = run_counted(http, body, o.progress);
    GateResult g;
    const bool same_text = cold.output() == warm.output();
    double max_diff = 0;
    int64_t n_token_mismatch = 0, n_top_mismatch = 0;
    const size_t n = std::min(cold.logprobs.size(), warm.logprobs.size());
    for (size_t i = 0; i < n; ++i) {
        const auto &a = cold.logprobs[i], &b = warm.logprobs[i];
        n_token_mismatch += a.token != b.token;
        max_diff = std::max(max_diff, std::fabs(a.logprob - b.logprob));
        // Compared by token: near-ties may swap order without a numeric difference worth failing.
        for (const auto& [tok, lp] : a.top) {
            auto it = std::find_if(b.top.begin(), b.top.end(), [&](const auto& e) { return e.first == tok; });
            if (it == b.top.end()) {
                ++n_top_mismatch;
                continue;
            }
            max_diff = std::max(max_diff, std::fabs(lp - it->second));
        }
    }
    const bool have_logprobs = n > 0 && cold.logprobs.size() == warm.logprobs.size();
    g.passed = cold.ok && warm.ok && same_text && have_logprobs && n_token_mismatch == 0 && n_top_mismatch == 0 &&
               max_diff <= o.logprob_tol;
    g.figures = {{"prompt_tokens", cold.prompt_tokens},
                 {"prompt_exact", exact},
                 {"cold_cached_tokens", cold.cached_tokens},
                 {"warm_cached_tokens", warm.cached_tokens},
                 {"identical_text", same_text},
                 {"positions", n},
                 {"logprobs_reported", have_logprobs},
                 {"token_mismatches", n_token_mismatch},
                 {"top5_set_mismatches", n_top_mismatch},
                 {"max_abs_logprob_diff", max_diff},
                 {"tolerance", o.logprob_tol},
                 {"cold_ttft_s", cold.ttft_s()},
                 {"warm_ttft_s", warm.ttft_s()},
                 {"errors", Json::array({cold.error, warm.error})}};
    g.summary = fmt::format("{} text, {} positions, max |dlogprob| {:.2g} (tol {:.2g}), warm cached {}",
                            same_text ? "same" : "DIFFERENT", n, max_diff, o.logprob_tol, warm.cached_tokens);
    // logprobs are optional in the OpenAI API: an endpoint that answers without them cannot be judged.
    if (cold.ok && warm.ok && cold.logprobs.empty() && warm.logprobs.empty()) {
        g.passed = false;
        g.skipped = true;
        g.summary =
            "skipped: endpoint lacks logprobs (both answers came without logprobs.content; "
            "the gate compares top-5 logprobs)";
    }
    return g;
}

GateResult gate_needle(const ValidateOptions& o) {
    const uint64_t nonce = run_nonce(o);
    std::mt19937_64 rng(nonce * 31 + 7);
    HttpClient http(o.ep);
    PromptBuilder pb(http, ApiKind::Chat, o.model);
    // Needles: a random name and a random six-digit code each, new every run (unless --seed).
    std::vector<std::pair<std::string, std::string>> needles;
    std::uniform_int_distribution<int> code(100000, 999999);
    for (int64_t i = 0; i < o.n_needles; ++i)
        needles.emplace_back(random_words(rng, 1) + "-" + std::to_string(code(rng) % 1000), std::to_string(code(rng)));
    const std::string question = fmt::format(
        "\n\nThe text above hides {} secret codes, each written as 'The secret code of NAME is CODE.' "
        "List every one as 'NAME: CODE', one per line, and nothing else.",
        o.n_needles);
    // Filler between the needles; sized once, then rescaled from the server's count.
    auto build = [&](double words_per_token) {
        std::mt19937_64 frng(nonce);
        const auto seg_words = static_cast<int64_t>(static_cast<double>(o.needle_len) * words_per_token /
                                                    static_cast<double>(o.n_needles + 1));
        std::string text = fmt::format("[needle run {}]\n", nonce);
        for (int64_t i = 0; i <= o.n_needles; ++i) {
            text += random_words(frng, std::max<int64_t>(1, seg_words)) + ".\n";
            if (i < o.n_needles)
                text += "The secret code of " + needles[static_cast<size_t>(i)].first + " is " +
                        needles[static_cast<size_t>(i)].second + ".\n";
        }
        return text + question;
    };
    double wpt = 0.8;
    std::string prompt = build(wpt);
    if (const int64_t n = pb.count(prompt); n > 0) {
        wpt *= static_cast<double>(o.needle_len) / static_cast<double>(n);
        prompt = build(wpt);
    }
    const Json body = base_body(o, user(prompt), o.needle_max_tokens, false);
    const StreamResult cold = run_counted(http, body, o.progress);
    const StreamResult warm = run_counted(http, body, o.progress);
    auto found = [&](const StreamResult& r) {
        int64_t k = 0;
        for (const auto& [name, value] : needles) k += r.output().find(value) != std::string::npos;
        return k;
    };
    const int64_t n_cold = found(cold), n_warm = found(warm);
    const bool same = cold.output() == warm.output();
    Json list = Json::array();
    for (const auto& [name, value] : needles) list.push_back({{"name", name}, {"code", value}});
    GateResult g;
    g.passed = cold.ok && warm.ok && n_cold == o.n_needles && same;
    g.figures = {{"needles", list},
                 {"target_tokens", o.needle_len},
                 {"prompt_tokens", cold.prompt_tokens},
                 {"found_cold", n_cold},
                 {"found_warm", n_warm},
                 {"same_answer_warm", same},
                 {"warm_cached_tokens", warm.cached_tokens},
                 {"cold_ttft_s", cold.ttft_s()},
                 {"warm_ttft_s", warm.ttft_s()},
                 {"answer", utf8_prefix(cold.output(), 300)},
                 {"errors", Json::array({cold.error, warm.error})}};
    g.summary = fmt::format("{}/{} needles at {} tokens, warm {} ({}/{})", n_cold, o.n_needles, cold.prompt_tokens,
                            same ? "same answer" : "DIFFERENT answer", n_warm, o.n_needles);
    return g;
}

}  // namespace onecard::client
