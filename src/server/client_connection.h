// Internal: whether the client of a request being handled has hung up, for NON-streaming generation
// (a streamed request notices through its failing writes and pings, sse.h).
//
// Why this way: httplib 0.11.4 (Debian 12) gives a plain handler no view of its connection, and
// the alternative, answering through a chunked content provider that writes JSON-legal whitespace
// until the result is ready, commits the 200 status line before generation: an error found during
// generation (500 generation failed, 503 cancelled at shutdown, 500 tool_choice not followed) could
// then no longer have its status, and the body would be chunked. Instead the handler finds its own
// TCP socket: the socket of this process whose local and peer addresses are the request's (a
// connection's 4-tuple is unique, and the front end, http_front.h, keeps the socket open and leaves
// it alone until the handler returns, so the descriptor cannot be reused meanwhile; under TLS too, as
// the front end does TLS on that same socket). poll() with POLLRDHUP then tells that the peer closed
// or reset the connection without reading or writing a byte, so the response keeps its status,
// headers and exact body.
//
// A client that half-closes its side after sending the request (shutdown(SHUT_WR)) counts as gone,
// as it does in vLLM's server (uvicorn ends the request on EOF). Where the socket cannot be found
// (no /proc), gone() is always false: the request runs to its end, as before.
#pragma once

#include <httplib.h>
#include <sys/socket.h>

#include <chrono>
#include <string>

namespace onecard::server {

// How often a non-streaming request looks at its connection while it waits for the engine.
inline constexpr std::chrono::milliseconds kClientCheckInterval{100};

// An address as httplib words Request::remote_addr / local_addr (getnameinfo, numeric host), and its
// port; false for a family other than IPv4/IPv6 or an address getnameinfo refuses.
bool socket_endpoint(const sockaddr_storage& a, socklen_t len, std::string& ip, int& port);

class ClientConnection {
public:
    ClientConnection() = default;  // unknown: never gone
    // The connection `req` arrived on (valid while its handler runs).
    static ClientConnection of(const httplib::Request& req);

    bool known() const { return fd_ >= 0; }
    // True once the peer has closed (or reset) the connection.
    bool gone() const;

private:
    explicit ClientConnection(int fd) : fd_(fd) {}
    int fd_ = -1;
};

}  // namespace onecard::server
