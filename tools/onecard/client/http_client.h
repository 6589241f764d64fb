// A small HTTP client for OpenAI-compatible endpoints (onecard, vLLM, SGLang), shared by `onecard
// bench-serve` and `onecard validate`: JSON GET/POST and streamed (SSE) POSTs with the arrival time
// of every `data:` payload, measured on steady_clock.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace httplib {
class Client;
}

namespace onecard::client {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Endpoint {
    std::string base_url;  // scheme://host[:port][/prefix]; a trailing "/v1" is accepted and dropped
    std::string api_key;   // sent as "Authorization: Bearer KEY" when set
    double timeout_s = 1800;
};

struct HttpReply {
    int status = -1;    // -1: no answer (the transport failed; see `error`)
    std::string body;   // for a stream: the raw bytes received (at most the first 64 KiB)
    std::string error;  // transport error text
    bool ok() const { return status == 200; }
};

// One connection per object: a cpp-httplib client is not shared between threads, so every worker
// thread makes its own. Throws onecard::Error on an unparsable base URL.
class HttpClient {
public:
    explicit HttpClient(const Endpoint& ep);
    ~HttpClient();
    HttpClient(const HttpClient&) = delete;
    HttpClient& operator=(const HttpClient&) = delete;

    HttpReply get(const std::string& path);
    HttpReply post_json(const std::string& path, const Json& body);
    // POSTs `body` and hands each SSE `data:` payload ("[DONE]" included) to `on_data` with the time
    // it arrived; `on_data` returning false closes the stream.
    HttpReply post_sse(const std::string& path, const Json& body,
                       const std::function<bool(std::string_view data, Clock::time_point t)>& on_data);

private:
    std::unique_ptr<httplib::Client> cli_;
    std::string prefix_;  // path prefix of the base URL ("" or "/something")
    std::string api_key_;
};

// The scheme://host:port and the path prefix of a base URL ("http://h:8000/v1" -> "http://h:8000", "").
std::pair<std::string, std::string> split_base_url(const std::string& base_url);

// Value of a Prometheus counter/gauge line `name{...} value` or `name value`; -1 when absent.
double prometheus_value(const std::string& text, const std::string& name);

}  // namespace onecard::client
