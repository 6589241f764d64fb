// Internal: Server-Sent Events over an httplib chunked response, with client-disconnect detection.
#pragma once

#include "server/request_params.h"

#include <httplib.h>

#include <chrono>
#include <string>

namespace onecard::server {

// While a streamed request produces nothing (queued, long prefill) the server pings this often, so a
// client that hung up is noticed and its request cancelled without waiting for the first token.
inline constexpr std::chrono::milliseconds kSsePingInterval{500};

class SseWriter {
public:
    explicit SseWriter(httplib::DataSink& sink) : sink_(sink) {}
    // False once the client is gone (a write failed or the socket is no longer writable).
    bool send(const nlohmann::json& data) {
        return send_raw("data: " + data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n\n");
    }
    bool send(const Json& data) { return send_raw("data: " + dump_json(data) + "\n\n"); }
    // A named event ("event: <name>" then its data), as the Anthropic and Responses streams send them.
    bool send_event(const char* event, const Json& data) {
        return send_raw(std::string("event: ") + event + "\ndata: " + dump_json(data) + "\n\n");
    }
    // Ends a stream that has no [DONE] sentinel (Anthropic, Responses): their last event says it.
    bool end() {
        if (ok_) sink_.done();
        return ok_;
    }
    bool done() {
        const bool ok = send_raw("data: [DONE]\n\n");
        if (ok) sink_.done();
        return ok;
    }
    // An SSE comment line: clients ignore it; a failed write tells us the client is gone.
    bool ping() { return send_raw(": ping\n\n"); }
    bool ok() const { return ok_; }

private:
    bool send_raw(const std::string& s) {
        if (!ok_) return false;
        if ((sink_.is_writable && !sink_.is_writable()) || !sink_.write(s.data(), s.size())) ok_ = false;
        return ok_;
    }
    httplib::DataSink& sink_;
    bool ok_ = true;
};

}  // namespace onecard::server
