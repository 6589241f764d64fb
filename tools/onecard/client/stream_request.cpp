#include "stream_request.h"

#include "stats.h"

namespace onecard::client {

ApiKind api_kind_of(const std::string& endpoint_path) {
    return endpoint_path.find("chat") != std::string::npos ? ApiKind::Chat : ApiKind::Completions;
}

double StreamResult::ttft_s() const {
    if (token_times.empty()) return -1;
    return std::chrono::duration<double>(token_times.front() - t_send).count();
}

double StreamResult::e2e_s() const {
    return std::chrono::duration<double>(t_end - t_send).count();
}

namespace {

std::string str_or_empty(const Json& j, const char* key) {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

void read_usage(StreamResult& r, const Json& u) {
    if (!u.is_object()) return;
    if (u.contains("prompt_tokens")) r.prompt_tokens = u["prompt_tokens"].get<int64_t>();
    if (u.contains("completion_tokens")) r.completion_tokens = u["completion_tokens"].get<int64_t>();
    auto d = u.find("prompt_tokens_details");
    if (d != u.end() && d->is_object() && d->contains("cached_tokens") && (*d)["cached_tokens"].is_number())
        r.cached_tokens = (*d)["cached_tokens"].get<int64_t>();
}

// Chat: {"content": [{"token", "logprob", "top_logprobs": [{"token", "logprob"}]}]}.
void read_chat_logprobs(StreamResult& r, const Json& lp) {
    if (!lp.is_object() || !lp.contains("content") || !lp["content"].is_array()) return;
    for (const auto& e : lp["content"]) {
        TokenLogprob t{str_or_empty(e, "token"), e.value("logprob", 0.0), {}};
        if (e.contains("top_logprobs") && e["top_logprobs"].is_array())
            for (const auto& a : e["top_logprobs"])
                t.top.emplace_back(str_or_empty(a, "token"), a.value("logprob", 0.0));
        r.logprobs.push_back(std::move(t));
    }
}

// Completions: {"tokens": [...], "token_logprobs": [...], "top_logprobs": [{tok: lp}, ...]}.
void read_completion_logprobs(StreamResult& r, const Json& lp) {
    if (!lp.is_object() || !lp.contains("tokens")) return;
    const auto& toks = lp["tokens"];
    for (size_t i = 0; i < toks.size(); ++i) {
        TokenLogprob t{toks[i].get<std::string>(), 0, {}};
        if (lp.contains("token_logprobs") && i < lp["token_logprobs"].size() && lp["token_logprobs"][i].is_number())
            t.logprob = lp["token_logprobs"][i].get<double>();
        if (lp.contains("top_logprobs") && i < lp["top_logprobs"].size() && lp["top_logprobs"][i].is_object())
            for (const auto& [k, v] : lp["top_logprobs"][i].items()) t.top.emplace_back(k, v.get<double>());
        r.logprobs.push_back(std::move(t));
    }
}

void read_chunk(StreamResult& r, const Json& c, Clock::time_point t) {
    if (c.contains("error")) {
        const Json& e = c["error"];
        r.error = e.is_object() ? e.value("message", e.dump()) : e.dump();
        return;
    }
    if (c.contains("usage")) read_usage(r, c["usage"]);
    if (!c.contains("choices") || !c["choices"].is_array()) return;
    bool generated = false;
    for (const auto& ch : c["choices"]) {
        if (ch.contains("finish_reason") && ch["finish_reason"].is_string()) r.finish_reason = ch["finish_reason"];
        if (ch.contains("text")) {  // completions
            const std::string s = str_or_empty(ch, "text");
            r.text += s;
            generated |= !s.empty();
            if (ch.contains("logprobs")) read_completion_logprobs(r, ch["logprobs"]);
            continue;
        }
        if (ch.contains("logprobs")) read_chat_logprobs(r, ch["logprobs"]);
        if (!ch.contains("delta") || !ch["delta"].is_object()) continue;
        const Json& d = ch["delta"];
        if (std::string s = str_or_empty(d, "content"); !s.empty()) {
            r.content += s;
            r.content_chunks.push_back(s);
            generated = true;
        }
        // vLLM and onecard say reasoning_content; newer vLLM also says reasoning.
        for (const char* key : {"reasoning_content", "reasoning"})
            if (std::string s = str_or_empty(d, key); !s.empty()) {
                r.reasoning += s;
                r.reasoning_chunks.push_back(s);
                generated = true;
            }
        if (d.contains("tool_calls") && d["tool_calls"].is_array())
            for (const auto& tc : d["tool_calls"]) {
                const size_t idx = tc.value("index", static_cast<size_t>(r.tool_calls.size()));
                if (r.tool_calls.size() <= idx) r.tool_calls.resize(idx + 1);
                ToolCallOut& out = r.tool_calls[idx];
                if (std::string id = str_or_empty(tc, "id"); !id.empty()) out.id = id;
                if (tc.contains("function") && tc["function"].is_object()) {
                    const Json& f = tc["function"];
                    out.name += str_or_empty(f, "name");
                    if (std::string a = str_or_empty(f, "arguments"); !a.empty()) {
                        out.arguments += a;
                        r.args_chunks.push_back(a);
                    }
                }
                generated = true;
            }
    }
    if (generated) r.token_times.push_back(t);
}

}  // namespace

StreamResult run_stream(HttpClient& http, const std::string& path, Json body,
                        const std::function<void(const StreamResult&)>& on_token) {
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
    StreamResult r;
    bool done = false;
    r.t_send = Clock::now();
    const HttpReply reply = http.post_sse(path, body, [&](std::string_view data, Clock::time_point t) {
        if (data == "[DONE]") {
            done = true;
            return true;
        }
        try {
            const size_t n_before = r.token_times.size();
            read_chunk(r, Json::parse(data), t);
            if (on_token && r.token_times.size() > n_before) on_token(r);
        } catch (const std::exception& e) {
            r.error = std::string("unparsable chunk: ") + e.what();
        }
        return r.error.empty();
    });
    r.t_end = Clock::now();
    if (r.error.empty()) {
        if (reply.status != 200)
            r.error = reply.status < 0 ? "transport: " + reply.error
                                       : "HTTP " + std::to_string(reply.status) + ": " + utf8_prefix(reply.body, 300);
        else if (!done)
            r.error = "stream ended without [DONE]";
    }
    r.ok = r.error.empty();
    return r;
}

}  // namespace onecard::client
