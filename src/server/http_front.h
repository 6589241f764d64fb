// Internal: the server's HTTP/1.1 front end. One event-loop thread (epoll) owns every connection while
// it is idle or being read: accept, the address allowlist (a refused address is closed before a byte
// is read), TLS handshakes, reading headers and bodies under limits (request_reader.h) and deadlines,
// "100 Continue", keep-alive and pipelining. Only a complete request takes a worker thread, which runs
// it through `Serve` (httplib's router in OpenAIServer) and writes the response itself, streams
// included; the connection then comes back to the loop for its next request. So a connection that
// is slow, idle or silent costs a file descriptor and a few hundred bytes, never a thread.
//
// Deadlines: `idle_timeout` while no byte of a request has come (after accept or between keep-alive
// requests), `header_timeout` from a request's first byte (from accept under TLS: the handshake counts)
// to the end of its headers, `body_timeout` from there to the end of its body, `write_timeout` for
// each write of a response (a client that stops reading). A connection past its deadline is closed.
#pragma once

#include "server/request_reader.h"

#include <httplib.h>
#include <openssl/ssl.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace onecard::server {

struct FrontOptions {
    std::string host = "127.0.0.1";
    int port = 0;  // 0 -> ephemeral
    RequestLimits limits;
    std::chrono::milliseconds idle_timeout{5000};
    std::chrono::milliseconds header_timeout{10000};
    std::chrono::milliseconds body_timeout{30000};
    std::chrono::milliseconds write_timeout{30000};
    // Request bodies held by connections still reading them, all together: a body that would pass it
    // is refused with 503 (Retry-After), so many slow uploads cannot exhaust memory.
    size_t max_buffered_bytes = size_t{512} << 20;
    size_t n_workers = 16;   // requests served at once (streams hold theirs to the end)
    SSL_CTX* tls = nullptr;  // not owned; set -> every connection is TLS
};

class HttpFront {
public:
    // Whether a client address may connect ("127.0.0.1", "::1"); asked once per connection at accept.
    using Admit = std::function<bool(const std::string& remote_addr)>;
    // The body (JSON) of an error the front end answers by itself (400, 413, 414, 431, 503).
    using ErrorBody = std::function<std::string(int status, const std::string& message)>;
    // Runs one complete request on a worker thread: reads it from `stream` (in the normalized form of
    // request_reader.h) and writes the response to it. Returns whether the connection may carry
    // another request.
    using Serve = std::function<bool(httplib::Stream& stream)>;

    HttpFront(FrontOptions options, Admit admit, ErrorBody error_body, Serve serve);
    ~HttpFront();
    HttpFront(const HttpFront&) = delete;
    HttpFront& operator=(const HttpFront&) = delete;

    // Creates the listening socket; returns its port, or -1 with errno set. Also raises this process's
    // soft open-file limit to its hard limit: every connection is a descriptor.
    int bind();
    // Serves until stop(); call once, from one thread, after bind(). Returns after the workers finished.
    void run();
    // Any thread, any time (also before run()).
    void stop();
    bool running() const;
    // Connections open now (idle, reading or served).
    size_t n_connections() const;
    // Throws onecard::Error when the connection bookkeeping is inconsistent.
    void check_integrity() const;

    struct Impl;

private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace onecard::server
