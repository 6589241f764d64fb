// One streamed generation request (chat or completions) and what came back: the text, reasoning and
// tool calls as they were streamed (every chunk kept, for the leak checks of `validate`), the
// arrival time of each chunk that carried generated text, usage (prompt, completion and cached
// tokens, from stream_options.include_usage) and logprobs.
#pragma once

#include "http_client.h"

#include <string>
#include <vector>

namespace onecard::client {

enum class ApiKind { Chat, Completions };

ApiKind api_kind_of(const std::string& endpoint_path);  // "/v1/chat/completions" -> Chat, ...

struct ToolCallOut {
    std::string id, name, arguments;  // arguments: the concatenated streamed JSON text
};

struct TokenLogprob {
    std::string token;
    double logprob = 0;
    std::vector<std::pair<std::string, double>> top;  // the top alternatives, as sent
};

struct StreamResult {
    bool ok = false;
    std::string error;  // transport, HTTP status or in-stream error; empty when ok
    Clock::time_point t_send, t_end;
    std::vector<Clock::time_point> token_times;  // arrival of each chunk that carried generated text
    std::string content, reasoning, text;        // chat content / reasoning; completions text
    std::vector<std::string> content_chunks, reasoning_chunks, args_chunks;
    std::vector<ToolCallOut> tool_calls;
    std::vector<TokenLogprob> logprobs;
    std::string finish_reason;
    int64_t prompt_tokens = -1, completion_tokens = -1, cached_tokens = -1;  // -1: not reported

    double ttft_s() const;  // send to first generated text; -1 when none came
    double e2e_s() const;   // send to end of stream
    std::string output() const { return text + content; }
};

// Sends `body` (stream, stream_options.include_usage are set here) and reads the whole stream.
// `on_token` (optional) is called on the reading thread after each chunk that carried generated text.
StreamResult run_stream(HttpClient& http, const std::string& path, Json body,
                        const std::function<void(const StreamResult&)>& on_token = {});

}  // namespace onecard::client
