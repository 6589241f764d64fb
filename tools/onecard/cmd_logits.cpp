// `onecard logits` and `onecard generate`: run the CPU forward pass (the oracle) on a checkpoint.
// logits writes float32 NPY [T, vocab]; --chunk and --decode-from exercise the incremental paths,
// which give the same logits as one plain prefill. --mtp-out also writes the MTP block's logits [T-1, vocab]:
// row t is its guess for token t+2 from the main streams at t and token t+1 (one plain prefill only).
#include "commands.h"
#include "core/error.h"
#include "core/npy.h"
#include "engine/cpu_model_runner.h"
#include "loader/checkpoint.h"
#include "model/config.h"
#include "model/deepseek_v4.h"
#include "model/weights.h"
#include "onecard/engine.h"
#include "server/request_params.h"
#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace onecard::cli {
namespace {

// Parses "0,17,5" / "0 17 5" / one id per line.
std::vector<int32_t> parse_token_list(const std::string& text, const std::string& what) {
    std::vector<int32_t> ids;
    std::string cur;
    auto flush = [&] {
        if (cur.empty()) return;
        size_t used = 0;
        long long v = 0;
        try {
            v = std::stoll(cur, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        ONECARD_CHECK(used == cur.size() && v >= 0 && v <= INT32_MAX, "{}: '{}' is not a token id", what, cur);
        ids.push_back(static_cast<int32_t>(v));
        cur.clear();
    };
    for (char c : text) {
        if (c == ',' || c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '[' || c == ']') {
            flush();
        } else {
            cur.push_back(c);
        }
    }
    flush();
    ONECARD_CHECK(!ids.empty(), "{}: no token ids", what);
    return ids;
}

std::vector<int32_t> read_tokens_file(const std::string& path) {
    if (path.size() > 4 && path.substr(path.size() - 4) == ".npy") {
        auto arr = npy_read_i32(path);
        ONECARD_CHECK(!arr.data.empty(), "{}: no token ids", path);
        return arr.data;
    }
    std::ifstream in(path);
    ONECARD_CHECK(in.good(), "--tokens-file {}: cannot open", path);
    std::stringstream ss;
    ss << in.rdbuf();
    return parse_token_list(ss.str(), path);
}

Numerics parse_numerics(const std::string& s) {
    return s == "exact" ? Numerics::Exact : Numerics::Reference;
}

// A checkpoint opened, bound and expanded for the CPU forward pass.
struct LoadedModel {
    ModelConfig cfg;
    std::unique_ptr<DeepSeekV4> model;
};

LoadedModel load_model(const std::string& dir, Numerics numerics) {
    LoadedModel m;
    m.cfg = load_config(std::filesystem::path(dir) / "config.json");
    Checkpoint ckpt = Checkpoint::open(dir);
    ModelWeights w = bind_weights(m.cfg, ckpt);
    // The model keeps fp32 copies, so the mapped checkpoint can be released right after.
    m.model = std::make_unique<DeepSeekV4>(m.cfg, w, numerics);
    return m;
}

struct LogitsArgs {
    std::string model, tokens, tokens_file, out, mtp_out, numerics = "reference";
    int64_t chunk = 0;
    int64_t decode_from = -1;
};

void run_logits(const LogitsArgs& a) {
    ONECARD_CHECK(a.tokens.empty() != a.tokens_file.empty(), "logits: give exactly one of --tokens and --tokens-file");
    ONECARD_CHECK(a.chunk == 0 || a.decode_from < 0, "logits: --chunk and --decode-from are exclusive");
    ONECARD_CHECK(a.mtp_out.empty() || (a.chunk == 0 && a.decode_from < 0),
                  "logits: --mtp-out needs one plain prefill (no --chunk / --decode-from)");
    std::vector<int32_t> tokens =
        a.tokens.empty() ? read_tokens_file(a.tokens_file) : parse_token_list(a.tokens, "--tokens");
    const auto t0 = std::chrono::steady_clock::now();
    LoadedModel m = load_model(a.model, parse_numerics(a.numerics));
    const int64_t T = static_cast<int64_t>(tokens.size()), V = m.cfg.vocab_size;
    ONECARD_CHECK(a.decode_from < 0 || (a.decode_from >= 1 && a.decode_from <= T),
                  "logits: --decode-from {} must be in [1, {}]", a.decode_from, T);
    const auto t1 = std::chrono::steady_clock::now();

    // Feeding plan: one prefill, fixed-size chunks, or a prefill of K then one token at a time.
    std::vector<int64_t> sizes;
    if (a.decode_from >= 1) {
        sizes.push_back(a.decode_from);
        sizes.insert(sizes.end(), static_cast<size_t>(T - a.decode_from), 1);
    } else {
        const int64_t c = a.chunk > 0 ? a.chunk : T;
        for (int64_t i = 0; i < T; i += c) sizes.push_back(std::min(c, T - i));
    }
    SequenceState state = m.model->new_sequence();
    std::vector<float> logits;
    logits.reserve(static_cast<size_t>(T * V));
    int64_t pos = 0;
    if (!a.mtp_out.empty()) {
        ONECARD_CHECK(m.model->has_mtp(), "logits: --mtp-out: the checkpoint has no MTP block");
        ONECARD_CHECK(T >= 2, "logits: --mtp-out needs at least 2 tokens");
        ForwardOutput fo = m.model->forward_with_streams(state, tokens);
        const int64_t per = m.cfg.hc_mult * m.cfg.hidden_size;
        // Streams at 0..T-2 with the tokens at 1..T-1.
        std::vector<float> mtp =
            m.model->forward_mtp(state, std::span<const float>(fo.streams.data(), static_cast<size_t>((T - 1) * per)),
                                 std::span<const int32_t>(tokens.data() + 1, static_cast<size_t>(T - 1)));
        npy_write_f32(a.mtp_out, mtp, {T - 1, V});
        logits = std::move(fo.logits);
        sizes.clear();
    }
    for (int64_t n : sizes) {
        auto l = m.model->forward(state, std::span<const int32_t>(tokens.data() + pos, static_cast<size_t>(n)));
        logits.insert(logits.end(), l.begin(), l.end());
        pos += n;
    }
    state.check_integrity();
    npy_write_f32(a.out, logits, {T, V});
    const auto t2 = std::chrono::steady_clock::now();
    std::fprintf(stderr, "logits: %lld tokens (%zu calls, %s numerics) -> %s [%lld, %lld]; load %.2fs, forward %.2fs\n",
                 static_cast<long long>(T), sizes.size(), numerics_name(m.model->numerics()), a.out.c_str(),
                 static_cast<long long>(T), static_cast<long long>(V), std::chrono::duration<double>(t1 - t0).count(),
                 std::chrono::duration<double>(t2 - t1).count());
}

struct GenerateArgs {
    std::string model, prompt_tokens, prompt_text, numerics = "reference";
    int64_t max_tokens = server::kCompletionsDefaultMaxTokens;  // a completion: /v1/completions' default
    double temperature = 0.0;
    double top_p = 1.0;
    uint64_t seed = 0;
    bool ignore_eos = false;
};

// Runs through the engine (scheduler, KV manager, sampler) with the CPU model as its runner, so this
// command exercises the same path as the server. Greedy ties go to the lower id, like torch.argmax.
void run_generate(const GenerateArgs& a) {
    ONECARD_CHECK(a.prompt_text.empty() != a.prompt_tokens.empty(),
                  "generate: give exactly one of --prompt, --prompt-tokens");
    ONECARD_CHECK(a.max_tokens >= 1, "generate: --max-tokens must be >= 1");
    ONECARD_CHECK(a.top_p > 0.0 && a.top_p <= 1.0, "generate: --top-p must be in (0, 1]");
    LoadedModel m = load_model(a.model, parse_numerics(a.numerics));
    // A text prompt is a raw completion prompt: BOS + the text's ids (special tokens recognised), as
    // /v1/completions does; the output then carries the decoded text too.
    std::optional<Tokenizer> tok;
    std::vector<int32_t> prompt;
    if (!a.prompt_text.empty()) {
        tok = Tokenizer::from_file(std::filesystem::path(a.model) / "tokenizer.json");
        prompt.push_back(static_cast<int32_t>(m.cfg.bos_token_id));
        const std::vector<int32_t> ids = tok->encode(a.prompt_text);
        prompt.insert(prompt.end(), ids.begin(), ids.end());
    } else {
        prompt = parse_token_list(a.prompt_tokens, "--prompt-tokens");
    }
    EngineConfig ec;
    ec.eos_token_id = static_cast<int32_t>(m.cfg.eos_token_id);
    ec.max_num_seqs = 1;
    ec.max_model_len = static_cast<int64_t>(prompt.size()) + a.max_tokens;
    ec.kv_cache_bytes = 1LL << 30;
    Engine engine(ec, std::make_unique<CpuModelRunner>(*m.model, ec.max_model_len));
    SamplingParams sp;
    sp.temperature = static_cast<float>(a.temperature);
    sp.top_p = static_cast<float>(a.top_p);
    sp.seed = a.seed;
    sp.max_tokens = a.max_tokens;
    sp.ignore_eos = a.ignore_eos;
    auto stream = engine.submit({std::move(prompt), sp});
    std::vector<int32_t> out;
    std::string finish = "length";
    while (auto ev = stream->next()) {
        out.insert(out.end(), ev->token_ids.begin(), ev->token_ids.end());
        if (!ev->finished()) continue;
        ONECARD_CHECK(ev->finish_reason != FinishReason::Error, "generate: {}", ev->error);
        if (ev->stop_token) {
            out.push_back(*ev->stop_token);  // the engine does not emit the EOS token; this output lists it
            finish = "eos";
        }
    }
    nlohmann::ordered_json j = {{"tokens", out}, {"finish_reason", finish}};
    if (tok) j["text"] = tok->decode(std::span<const int32_t>(out.data(), out.size() - (finish == "eos" ? 1 : 0)));
    // replace: random-weight models emit byte pieces that need not form valid UTF-8 on their own.
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

}  // namespace

void add_cmd_logits(CLI::App& app) {
    auto la = std::make_shared<LogitsArgs>();
    CLI::App* lc = app.add_subcommand("logits", "CPU forward pass: float32 NPY [T, vocab] of logits at every position");
    lc->add_option("--model", la->model, "checkpoint directory")->required();
    lc->add_option("--tokens", la->tokens, "token ids, e.g. 0,17,5");
    lc->add_option("--tokens-file", la->tokens_file,
                   "file of token ids (text: comma/space/newline separated; or int32 .npy)");
    lc->add_option("--numerics", la->numerics,
                   "reference (DeepSeek QAT simulations) | exact (fp32, what transformers computes)")
        ->check(CLI::IsMember({"reference", "exact"}));
    lc->add_option("--chunk", la->chunk, "feed the tokens N at a time (0 = one prefill)");
    lc->add_option("--decode-from", la->decode_from, "prefill K tokens, then feed the rest one at a time");
    lc->add_option("--out", la->out, "output .npy")->required();
    lc->add_option("--mtp-out", la->mtp_out, "also write the MTP block's logits [T-1, vocab] (token t+2 at row t)");
    lc->callback([la]() { run_logits(*la); });

    auto ga = std::make_shared<GenerateArgs>();
    CLI::App* gc = app.add_subcommand(
        "generate", "continue a prompt through the engine (CPU model); prints {\"tokens\": [...], ...} as JSON");
    gc->add_option("--model", ga->model, "checkpoint directory")->required();
    gc->add_option("--prompt-tokens", ga->prompt_tokens, "prompt token ids, e.g. 0,17,5");
    gc->add_option("--prompt", ga->prompt_text, "prompt text (uses DIR/tokenizer.json; BOS is prepended)");
    gc->add_option("--max-tokens", ga->max_tokens, "tokens to generate (/v1/completions' default)")
        ->capture_default_str();
    gc->add_option("--temperature", ga->temperature, "0 = greedy (default)");
    gc->add_option("--top-p", ga->top_p, "nucleus mass (default 1.0)");
    gc->add_option("--seed", ga->seed, "sampling seed");
    gc->add_option("--numerics", ga->numerics, "reference | exact")->check(CLI::IsMember({"reference", "exact"}));
    gc->add_flag("--ignore-eos", ga->ignore_eos, "do not stop at eos_token_id");
    gc->callback([ga]() { run_generate(*ga); });
}

}  // namespace onecard::cli
