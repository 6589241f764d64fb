#include "bench_dataset.h"

#include "core/error.h"
#include "embedded_data.h"

#include <fstream>
#include <sstream>

namespace onecard::client {

namespace {

constexpr const char* kWords[] = {
    "river",  "stone",   "garden",  "window",  "silver",  "market",  "engine",   "planet", "forest",    "letter",
    "winter", "candle",  "bridge",  "mirror",  "harbor",  "pencil",  "valley",   "rocket", "thunder",   "meadow",
    "copper", "island",  "lantern", "orchard", "signal",  "canvas",  "marble",   "summit", "velvet",    "anchor",
    "cactus", "dragon",  "falcon",  "glacier", "hammer",  "jungle",  "kettle",   "ladder", "magnet",    "needle",
    "oyster", "pepper",  "quartz",  "ribbon",  "saddle",  "tunnel",  "umbrella", "violin", "walnut",    "yellow",
    "zebra",  "amber",   "basket",  "cotton",  "desert",  "feather", "goblet",   "helmet", "igloo",     "jacket",
    "kernel", "lemon",   "mango",   "nickel",  "olive",   "parrot",  "quiver",   "raven",  "spiral",    "tiger",
    "urban",  "vessel",  "wagon",   "yonder",  "zephyr",  "atlas",   "beacon",   "cipher", "dune",      "ember",
    "fjord",  "granite", "horizon", "ivory",   "jasmine", "kiln",    "lotus",    "mosaic", "nebula",    "onyx",
    "prism",  "quill",   "reef",    "sphinx",  "tundra",  "utopia",  "vortex",   "willow", "xylophone", "yarn",
    "zinc",   "blue",    "quick",   "seven",   "under",   "across",  "gentle",   "bright", "hollow",    "ancient",
    "narrow"};

}  // namespace

std::string random_words(std::mt19937_64& rng, int64_t n_words) {
    std::uniform_int_distribution<size_t> pick(0, std::size(kWords) - 1);
    std::string out;
    for (int64_t i = 0; i < n_words; ++i) {
        if (i) out += ' ';
        out += kWords[pick(rng)];
    }
    return out;
}

PromptBuilder::PromptBuilder(HttpClient& http, ApiKind kind, std::string model)
    : http_(http), kind_(kind), model_(std::move(model)) {
    const HttpReply r = http_.post_json("/tokenize", tokenize_body(""));
    if (r.ok()) {
        try {
            overhead_ = Json::parse(r.body).at("count").get<int64_t>();
            has_tokenize_ = true;
        } catch (const std::exception&) {
            no_tokenize_reason_ = "its /tokenize answer has no count";
        }
    } else {
        no_tokenize_reason_ =
            r.status < 0 ? "/tokenize: transport: " + r.error : "/tokenize: HTTP " + std::to_string(r.status);
    }
}

Json PromptBuilder::tokenize_body(const std::string& user_text) const {
    Json b;
    if (!model_.empty()) b["model"] = model_;
    if (kind_ == ApiKind::Chat)
        b["messages"] = Json::array({Json{{"role", "user"}, {"content", user_text}}});
    else
        b["prompt"] = user_text;
    return b;
}

int64_t PromptBuilder::count(const std::string& user_text) {
    if (!has_tokenize_) return -1;
    const HttpReply r = http_.post_json("/tokenize", tokenize_body(user_text));
    if (!r.ok()) return -1;
    return Json::parse(r.body).at("count").get<int64_t>();
}

std::string PromptBuilder::build(std::mt19937_64& rng, const std::string& prefix, int64_t n_tokens, bool* exact) {
    *exact = false;
    const int64_t want = std::max<int64_t>(1, n_tokens - overhead_);
    if (!has_tokenize_) return prefix + random_words(rng, std::max<int64_t>(1, want * 3 / 4));
    // Tokenise generous text once (its ids alone: no BOS), then cut the ids to the length and
    // detokenise; a cut can merge differently when re-tokenised, so adjust a few times.
    std::string text = prefix + random_words(rng, want + 16);
    Json tb = {{"prompt", text}, {"add_special_tokens", false}};
    if (!model_.empty()) tb["model"] = model_;
    const HttpReply tr = http_.post_json("/tokenize", tb);
    if (!tr.ok()) return text;
    std::vector<int64_t> ids = Json::parse(tr.body).at("tokens").get<std::vector<int64_t>>();
    int64_t n_keep = std::min<int64_t>(want, static_cast<int64_t>(ids.size()));
    for (int attempt = 0; attempt < 6; ++attempt) {
        Json db = {{"tokens", std::vector<int64_t>(ids.begin(), ids.begin() + n_keep)}};
        if (!model_.empty()) db["model"] = model_;
        const HttpReply dr = http_.post_json("/detokenize", db);
        if (!dr.ok()) return text;
        text = Json::parse(dr.body).at("prompt").get<std::string>();
        const int64_t got = count(text);
        if (got == n_tokens) {
            *exact = true;
            return text;
        }
        n_keep = std::clamp<int64_t>(n_keep + (n_tokens - got), 1, static_cast<int64_t>(ids.size()));
    }
    return text;
}

namespace {

std::vector<Session> read_jsonl(const DatasetOptions& o) {
    std::ifstream in(o.path);
    ONECARD_CHECK(in.good(), "bench-serve: cannot open --dataset-path '{}'", o.path);
    std::vector<Session> out;
    std::string line;
    for (int64_t no = 1; std::getline(in, line); ++no) {
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        Json j;
        try {
            j = Json::parse(line);
        } catch (const std::exception& e) {
            throw Error(fmt::format("bench-serve: {}:{}: not JSON: {}", o.path, no, e.what()));
        }
        Session s;
        const std::string key = j.contains("prompt") ? "prompt" : "text";
        ONECARD_CHECK(j.contains(key) && j[key].is_string(), "bench-serve: {}:{}: needs \"prompt\" (a string)", o.path,
                      no);
        s.user_turns.push_back(j[key].get<std::string>());
        s.max_tokens = j.value("output_len", j.value("max_tokens", o.output_len));
        out.push_back(std::move(s));
    }
    ONECARD_CHECK(!out.empty(), "bench-serve: --dataset-path '{}' holds no prompts", o.path);
    return out;
}

std::vector<Session> read_trace(const DatasetOptions& o) {
    std::string text = builtin_agent_trace();
    if (!o.path.empty()) {
        std::ifstream in(o.path);
        ONECARD_CHECK(in.good(), "bench-serve: cannot open --dataset-path '{}'", o.path);
        std::stringstream ss;
        ss << in.rdbuf();
        text = ss.str();
    }
    const Json j = Json::parse(text);
    std::vector<Session> out;
    for (const auto& c : j.at("conversations")) {
        Session s;
        s.system = c.value("system", "");
        for (const auto& t : c.at("turns")) s.user_turns.push_back(t.get<std::string>());
        s.max_tokens = c.value("max_tokens", o.output_len);
        out.push_back(std::move(s));
    }
    ONECARD_CHECK(!out.empty(), "bench-serve: the agent trace holds no conversations");
    return out;
}

}  // namespace

std::vector<Session> make_sessions(const DatasetOptions& o, PromptBuilder& pb, uint64_t salt) {
    std::vector<Session> out;
    if (o.name == "random") {
        std::mt19937_64 rng(o.seed * 1000003 + salt);
        for (int64_t i = 0; i < o.num_prompts; ++i) {
            Session s;
            bool exact = false;
            const std::string prefix = "Request " + std::to_string(salt) + "-" + std::to_string(i) + ": ";
            s.user_turns.push_back(pb.build(rng, prefix, o.input_len, &exact));
            s.expected_prompt_tokens = exact ? o.input_len : -1;
            s.max_tokens = o.output_len;
            out.push_back(std::move(s));
        }
        return out;
    }
    ONECARD_CHECK(o.name == "jsonl" || o.name == "agent-trace",
                  "bench-serve: --dataset-name '{}' is not random, jsonl or agent-trace", o.name);
    ONECARD_CHECK(o.name != "jsonl" || !o.path.empty(), "bench-serve: --dataset-name jsonl needs --dataset-path");
    const std::vector<Session> base = o.name == "jsonl" ? read_jsonl(o) : read_trace(o);
    // Cycle through the file; a session tag keeps repeated and per-point copies distinct.
    for (int64_t i = 0; i < o.num_prompts; ++i) {
        Session s = base[static_cast<size_t>(i) % base.size()];
        const std::string tag = "[session " + std::to_string(salt) + "-" + std::to_string(i) + "] ";
        if (!s.system.empty())
            s.system = tag + s.system;
        else
            s.user_turns.front() = tag + s.user_turns.front();
        out.push_back(std::move(s));
    }
    return out;
}

Json session_body(const Session& s, size_t i_turn, const std::vector<std::string>& replies, ApiKind kind,
                  const std::string& model) {
    Json b = {{"max_tokens", s.max_tokens}};
    if (!model.empty()) b["model"] = model;
    if (kind == ApiKind::Chat) {
        Json msgs = Json::array();
        if (!s.system.empty()) msgs.push_back({{"role", "system"}, {"content", s.system}});
        for (size_t i = 0; i <= i_turn; ++i) {
            msgs.push_back({{"role", "user"}, {"content", s.user_turns[i]}});
            if (i < i_turn) msgs.push_back({{"role", "assistant"}, {"content", i < replies.size() ? replies[i] : ""}});
        }
        b["messages"] = std::move(msgs);
    } else {
        // A plain-text transcript: the same prefix-growth pattern as chat.
        std::string p = s.system.empty() ? "" : s.system + "\n\n";
        for (size_t i = 0; i <= i_turn; ++i) {
            if (s.user_turns.size() > 1 || !s.system.empty()) p += "User: ";
            p += s.user_turns[i];
            if (s.user_turns.size() > 1 || !s.system.empty()) p += "\nAssistant:";
            if (i < i_turn) p += (i < replies.size() ? replies[i] : "") + "\n";
        }
        b["prompt"] = std::move(p);
    }
    return b;
}

}  // namespace onecard::client
