#include "http_client.h"

#include "core/error.h"

#include <httplib.h>

namespace onecard::client {

std::pair<std::string, std::string> split_base_url(const std::string& base_url) {
    const size_t scheme = base_url.find("://");
    ONECARD_CHECK(scheme != std::string::npos, "--base-url '{}' needs a scheme (http:// or https://)", base_url);
    const size_t slash = base_url.find('/', scheme + 3);
    std::string host = base_url.substr(0, slash);
    std::string prefix = slash == std::string::npos ? "" : base_url.substr(slash);
    while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
    if (prefix.size() >= 3 && prefix.compare(prefix.size() - 3, 3, "/v1") == 0) prefix.resize(prefix.size() - 3);
    return {host, prefix};
}

HttpClient::HttpClient(const Endpoint& ep) : api_key_(ep.api_key) {
    auto [host, prefix] = split_base_url(ep.base_url);
    prefix_ = prefix;
    cli_ = std::make_unique<httplib::Client>(host);
    ONECARD_CHECK(cli_->is_valid(), "--base-url '{}': cannot make a client for '{}'", ep.base_url, host);
    const auto secs = static_cast<time_t>(ep.timeout_s);
    cli_->set_connection_timeout(30);
    cli_->set_read_timeout(secs);
    cli_->set_write_timeout(secs);
    cli_->set_keep_alive(true);
}

HttpClient::~HttpClient() = default;

namespace {

httplib::Headers auth_headers(const std::string& key) {
    httplib::Headers h;
    if (!key.empty()) h.emplace("Authorization", "Bearer " + key);
    return h;
}

HttpReply to_reply(httplib::Result r) {
    HttpReply out;
    if (!r) {
        out.error = httplib::to_string(r.error());
        return out;
    }
    out.status = r->status;
    out.body = r->body;
    return out;
}

}  // namespace

HttpReply HttpClient::get(const std::string& path) {
    return to_reply(cli_->Get(prefix_ + path, auth_headers(api_key_)));
}

HttpReply HttpClient::post_json(const std::string& path, const Json& body) {
    return to_reply(cli_->Post(prefix_ + path, auth_headers(api_key_), body.dump(), "application/json"));
}

HttpReply HttpClient::post_sse(const std::string& path, const Json& body,
                               const std::function<bool(std::string_view, Clock::time_point)>& on_data) {
    httplib::Request req;
    req.method = "POST";
    req.path = prefix_ + path;
    req.headers = auth_headers(api_key_);
    req.set_header("Content-Type", "application/json");
    req.set_header("Accept", "text/event-stream");
    req.body = body.dump();
    HttpReply out;
    std::string pending;  // bytes after the last complete event
    bool stopped = false;
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
        const auto t = Clock::now();
        if (out.body.size() < 65536) out.body.append(data, std::min<size_t>(n, 65536 - out.body.size()));
        pending.append(data, n);
        // Events end with a blank line; lines may end with \r\n.
        for (;;) {
            size_t end = pending.find("\n\n");
            size_t skip = 2;
            if (const size_t crlf = pending.find("\r\n\r\n"); crlf != std::string::npos && crlf < end) {
                end = crlf;
                skip = 4;
            }
            if (end == std::string::npos) break;
            const std::string event = pending.substr(0, end);
            pending.erase(0, end + skip);
            size_t pos = 0;
            while (pos <= event.size()) {
                size_t eol = event.find('\n', pos);
                if (eol == std::string::npos) eol = event.size();
                std::string_view line(event.data() + pos, eol - pos);
                if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
                if (line.rfind("data:", 0) == 0) {
                    line.remove_prefix(5);
                    if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
                    if (!on_data(line, t)) {
                        stopped = true;
                        return false;
                    }
                }
                pos = eol + 1;
            }
        }
        return true;
    };
    auto r = cli_->send(req);
    if (!r) {
        if (stopped) out.status = 200;
        out.error = stopped ? "" : httplib::to_string(r.error());
        return out;
    }
    out.status = r->status;
    return out;
}

double prometheus_value(const std::string& text, const std::string& name) {
    size_t p = 0;
    while ((p = text.find(name, p)) != std::string::npos) {
        const bool line_start = p == 0 || text[p - 1] == '\n';
        const size_t after = p + name.size();
        if (line_start && after < text.size() && (text[after] == '{' || text[after] == ' ')) {
            size_t v = after;
            if (text[after] == '{') v = text.find('}', after) + 1;
            const size_t eol = text.find('\n', v);
            try {
                return std::stod(text.substr(v, eol == std::string::npos ? std::string::npos : eol - v));
            } catch (const std::exception&) {
                return -1;
            }
        }
        p = after;
    }
    return -1;
}

}  // namespace onecard::client
