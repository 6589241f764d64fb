#include "server/request_params.h"

#include "server/api_error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace onecard::server {

namespace {
const Json* field(const Json& body, const char* key) {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) return nullptr;
    return &*it;
}
}  // namespace

std::optional<int64_t> opt_int(const Json& body, const char* key, int64_t lo, int64_t hi) {
    const Json* v = field(body, key);
    if (!v) return std::nullopt;
    int64_t x = 0;
    if (v->is_number_integer()) {
        // An unsigned value above INT64_MAX is out of every range we accept.
        if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
            throw bad_request(fmt::format("'{}' must be an integer in [{}, {}]", key, lo, hi), key);
        x = v->get<int64_t>();
    } else if (v->is_number_float()) {
        const double d = v->get<double>();
        if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e15)
            throw bad_request(fmt::format("'{}' must be an integer in [{}, {}]", key, lo, hi), key);
        x = static_cast<int64_t>(d);
    } else {
        throw bad_request(fmt::format("'{}' must be an integer, got {}", key, v->type_name()), key);
    }
    if (x < lo || x > hi) throw bad_request(fmt::format("'{}' must be in [{}, {}], got {}", key, lo, hi, x), key);
    return x;
}

std::optional<double> opt_number(const Json& body, const char* key, double lo, double hi) {
    const Json* v = field(body, key);
    if (!v) return std::nullopt;
    if (!v->is_number()) throw bad_request(fmt::format("'{}' must be a number, got {}", key, v->type_name()), key);
    const double d = v->get<double>();
    if (!std::isfinite(d) || d < lo || d > hi)
        throw bad_request(fmt::format("'{}' must be in [{}, {}], got {}", key, lo, hi, d), key);
    return d;
}

std::optional<bool> opt_bool(const Json& body, const char* key) {
    const Json* v = field(body, key);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) throw bad_request(fmt::format("'{}' must be a boolean, got {}", key, v->type_name()), key);
    return v->get<bool>();
}

std::optional<std::string> opt_string(const Json& body, const char* key) {
    const Json* v = field(body, key);
    if (!v) return std::nullopt;
    if (!v->is_string()) throw bad_request(fmt::format("'{}' must be a string, got {}", key, v->type_name()), key);
    return v->get<std::string>();
}

int64_t resolve_max_tokens(const GenerationOptions& o, int64_t room) {
    const int64_t api_default = o.kind == ApiKind::Completion ? kCompletionsDefaultMaxTokens : kMaxTokensRemainingRoom;
    int64_t m = std::min(room, o.max_tokens.value_or(api_default));
    if (o.default_max_tokens) m = std::min(m, *o.default_max_tokens);
    return m;
}

GenerationOptions parse_generation_options(const Json& b, ApiKind kind, const SamplingDefaults& defaults) {
    GenerationOptions o;
    o.kind = kind;
    SamplingParams& sp = o.sampling;
    if (defaults.temperature) sp.temperature = *defaults.temperature;
    if (defaults.top_p) sp.top_p = *defaults.top_p;
    if (defaults.top_k) sp.top_k = *defaults.top_k;
    if (defaults.min_p) sp.min_p = *defaults.min_p;
    if (defaults.repetition_penalty) sp.repetition_penalty = *defaults.repetition_penalty;
    o.default_max_tokens = defaults.max_tokens;
    constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();
    if (auto n = opt_int(b, "n", 1, kMaxInt)) {
        if (*n > kMaxChoices)
            throw bad_request(fmt::format("'n' is {}; at most {} choices per request", *n, kMaxChoices), "n");
        o.n = *n;
    }
    // best_of = n needs no ranking: the same as n alone. A larger best_of would rank sequences by
    // their cumulative logprob, which onecard does not do (vLLM's V1 engine dropped it too).
    if (auto n = opt_int(b, "best_of", 1, kMaxInt); n && *n != o.n)
        throw bad_request(fmt::format("best_of must equal n ({}); ranking extra sequences is not supported", o.n),
                          "best_of");
    // logit_bias: {"<token id>": bias in [-100, 100]} (OpenAI's shape); the engine checks the ids
    // against the vocabulary.
    if (const Json* lb = field(b, "logit_bias")) {
        if (!lb->is_object())
            throw bad_request("'logit_bias' must be an object mapping token ids to biases", "logit_bias");
        for (const auto& [key, v] : lb->items()) {
            int64_t token = -1;
            const bool digits =
                !key.empty() && key.size() <= 10 && key.find_first_not_of("0123456789") == std::string::npos;
            if (digits) token = std::stoll(key);
            if (!digits || token > kMaxInt)
                throw bad_request(fmt::format("'logit_bias' key '{}' is not a token id", key), "logit_bias");
            if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < -100.0 ||
                v.get<double>() > 100.0)
                throw bad_request(fmt::format("'logit_bias' for token {} must be a number in [-100, 100]", key),
                                  "logit_bias");
            sp.logit_bias.push_back({static_cast<int32_t>(token), static_cast<float>(v.get<double>())});
        }
    }

    o.max_tokens = opt_int(b, "max_tokens", 1, std::numeric_limits<int64_t>::max());
    if (kind == ApiKind::Chat)
        if (auto m = opt_int(b, "max_completion_tokens", 1, std::numeric_limits<int64_t>::max())) o.max_tokens = m;

    if (auto t = opt_number(b, "temperature", 0.0, 100.0)) sp.temperature = static_cast<float>(*t);
    if (auto t = opt_number(b, "top_p", 0.0, 1.0)) {
        if (*t <= 0.0) throw bad_request("'top_p' must be in (0, 1]", "top_p");
        sp.top_p = static_cast<float>(*t);
    }
    if (auto k = opt_int(b, "top_k", -1, kMaxInt)) sp.top_k = *k <= 0 ? 0 : static_cast<int32_t>(*k);
    if (auto m = opt_number(b, "min_p", 0.0, 1.0)) sp.min_p = static_cast<float>(*m);
    if (auto p = opt_number(b, "presence_penalty", -2.0, 2.0)) sp.presence_penalty = static_cast<float>(*p);
    if (auto p = opt_number(b, "frequency_penalty", -2.0, 2.0)) sp.frequency_penalty = static_cast<float>(*p);
    if (auto p = opt_number(b, "repetition_penalty", 0.0, 10.0)) {
        if (*p <= 0.0) throw bad_request("'repetition_penalty' must be > 0", "repetition_penalty");
        sp.repetition_penalty = static_cast<float>(*p);
    }
    if (auto s = opt_int(b, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()))
        sp.seed = static_cast<uint64_t>(*s);
    if (const Json* st = field(b, "stop")) {
        if (st->is_string()) {
            sp.stop.push_back(st->get<std::string>());
        } else if (st->is_array()) {
            if (st->size() > 16) throw bad_request("'stop' may hold at most 16 strings", "stop");
            for (const auto& s : *st) {
                if (!s.is_string()) throw bad_request("'stop' must be a string or an array of strings", "stop");
                sp.stop.push_back(s.get<std::string>());
            }
        } else {
            throw bad_request("'stop' must be a string or an array of strings", "stop");
        }
        for (const auto& s : sp.stop)
            if (s.empty()) throw bad_request("'stop' strings must not be empty", "stop");
    }
    if (const Json* ids = field(b, "stop_token_ids")) {
        if (!ids->is_array()) throw bad_request("'stop_token_ids' must be an array of integers", "stop_token_ids");
        for (const auto& t : *ids) {
            if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > kMaxInt)
                throw bad_request("'stop_token_ids' must be an array of token ids", "stop_token_ids");
            sp.stop_token_ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
        }
    }
    // min_tokens: the engine masks EOS and the stop ids until this many tokens are out (vLLM's meaning).
    if (auto m = opt_int(b, "min_tokens", 0, std::numeric_limits<int64_t>::max()); m) sp.min_tokens = *m;
    sp.ignore_eos = opt_bool(b, "ignore_eos").value_or(false);
    sp.include_stop_str_in_output = opt_bool(b, "include_stop_str_in_output").value_or(false);

    if (kind == ApiKind::Chat) {
        o.logprobs = opt_bool(b, "logprobs").value_or(false);
        if (auto t = opt_int(b, "top_logprobs", 0, 20)) {
            if (!o.logprobs && *t > 0) throw bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs");
            o.top_logprobs = static_cast<int32_t>(*t);
        }
    } else if (auto n = opt_int(b, "logprobs", 0, 20)) {
        o.logprobs = true;
        o.top_logprobs = static_cast<int32_t>(*n);
    }
    if (o.logprobs) sp.logprobs = o.top_logprobs;

    o.stream = opt_bool(b, "stream").value_or(false);
    if (const Json* so = field(b, "stream_options")) {
        if (!so->is_object()) throw bad_request("'stream_options' must be an object", "stream_options");
        if (!o.stream) throw bad_request("'stream_options' is only allowed when 'stream' is true", "stream_options");
        o.include_usage = opt_bool(*so, "include_usage").value_or(false);
    }
    return o;
}

}  // namespace onecard::server
