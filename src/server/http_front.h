// Internal: the server's HTTP/1.1 front end. One event-loop thread (epoll) owns every connection while
// it is idle or being read: accept, the address allowlist (a refused address is closed before a byte
// is read), TLS handshakes, reading headers and bodies under limits (request_reader.h) and deadlines,
// "100 Continue", keep-alive and pipelining. Only a complete request takes a worker thread, which runs
// it through FrontHooks::serve (httplib's router in OpenAIServer) and writes the response itself, streams
// included; the connection then comes back to the loop for its next request. So a connection that
// is slow, idle or silent costs a file descriptor and a few hundred bytes, never a thread.
//
// Before a byte of a body is read, a request's head (request line and headers) is screened
// (FrontHooks::screen: API key, path, Content-Type): a refused request is answered at once, never
// sent "100 Continue", and its connection is closed (its body, if the client sends it anyway, is
// dropped unread while the answer lingers, see kLinger).
//
// Deadlines: `handshake_timeout` from accept to the end of a TLS handshake, `idle_timeout` while no
// byte of a request has come (after accept or the handshake, and between keep-alive requests),
// `header_timeout` from a request's first byte to the end of its headers, `body_timeout` from there to
// the end of its body, `write_timeout` for each write of a response (a client that stops reading). A
// connection past its deadline is closed; one inside a request first gets 408.
//
// Every request the front end ends by itself (screened out, past a limit, malformed, past a deadline)
// is reported once through FrontHooks (the server's access log).
#pragma once

#include "server/request_reader.h"

#include <httplib.h>
#include <openssl/ssl.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace onecard::server {

struct FrontOptions {
    std::string host = "127.0.0.1";
    int port = 0;  // 0 -> ephemeral
    RequestLimits limits;
    std::chrono::milliseconds handshake_timeout{10000};
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

// A request's head, complete, before "100 Continue" and before a byte of its body is read.
struct RequestHead {
    const std::string& method;
    const std::string& target;                                       // as in the request line
    const std::vector<std::pair<std::string, std::string>>& fields;  // header fields as received
    const std::string& remote_addr;
    std::chrono::steady_clock::time_point started;  // the request's first byte
};

// An answer the front end writes by itself, after which it closes the connection.
struct FrontAnswer {
    int status = 0;                                            // 0: no answer (from screen: the request goes on)
    std::vector<std::pair<std::string, std::string>> headers;  // besides Content-Type, -Length, Connection
    std::string body;                                          // JSON
};

// A request the front end ends by itself, before it was screened or served.
struct FrontRefusal {
    int status = 0;             // 400 malformed, 408 deadline, 413, 414, 431, 503 upload budget
    const char* reason = "";    // fixed words for the log ("headers_too_large", "header_deadline", ...)
    std::string message;        // for the client; quotes no request text
    const std::string& method;  // "" before the request line was read
    const std::string& target;  // as far as read
    const std::string& remote_addr;
    std::chrono::steady_clock::time_point started;  // first byte of the request (accept for a handshake)
    size_t bytes_in = 0;                            // body bytes read
    bool answered = true;                           // false: no answer can go out (the TLS handshake did not finish)
};

struct FrontHooks {
    // Whether a client address may connect ("127.0.0.1", "::1"); asked once per connection at accept.
    std::function<bool(const std::string& remote_addr)> admit;
    // Decides a request on its head (loop thread; keep it cheap): an answer with a status is sent and
    // the connection closed, status 0 lets the request go on. Reports a refusal itself (the log).
    std::function<FrontAnswer(const RequestHead& head)> screen;
    // Reports a request the front end ended by itself and returns its answer (the body; the status is
    // the refusal's). Called on the loop thread, once per such request.
    std::function<FrontAnswer(const FrontRefusal& refusal)> refused;
    // Runs one complete request on a worker thread: reads it from `stream` (in the normalized form of
    // request_reader.h) and writes the response to it. Returns whether the connection may carry
    // another request.
    std::function<bool(httplib::Stream& stream)> serve;
};

class HttpFront {
public:
    HttpFront(FrontOptions options, FrontHooks hooks);
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
