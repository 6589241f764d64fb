// Internal: one request's view of its connection, as httplib's router reads and writes it (http_front.h).
// The request comes from memory (the front end has read and checked all of it); the response goes
// straight to the socket (or its TLS session) from the worker thread, each write waiting at most
// `write_timeout` for the client to make room, so a stream is paced by its reader (backpressure).
#pragma once

#include <httplib.h>
#include <openssl/ssl.h>

#include <chrono>
#include <string>

namespace onecard::server {

struct Endpoints {
    std::string remote_addr, local_addr;
    int remote_port = -1, local_port = -1;
};

class ConnectionStream : public httplib::Stream {
public:
    // `fd` is non-blocking; `ssl` (may be null) is driven by this thread only while the stream lives.
    ConnectionStream(int fd, SSL* ssl, const Endpoints& ends, std::string request,
                     std::chrono::milliseconds write_timeout);

    bool is_readable() const override { return pos_ < request_.size(); }
    bool is_writable() const override;
    ssize_t read(char* ptr, size_t size) override;
    ssize_t write(const char* ptr, size_t size) override;
    void get_remote_ip_and_port(std::string& ip, int& port) const override;
    void get_local_ip_and_port(std::string& ip, int& port) const override;
    socket_t socket() const override { return fd_; }

    // Whether the response's header block (its first write) says "Connection: close": a route refused
    // the request and asked for the connection to end.
    bool response_closes() const { return closes_; }

private:
    // Waits until `events` (POLLIN / POLLOUT) or the deadline; false on timeout, error or hang-up.
    bool wait(short events, std::chrono::steady_clock::time_point deadline) const;

    int fd_;
    SSL* ssl_;
    const Endpoints& ends_;
    std::string request_;
    size_t pos_ = 0;
    std::chrono::milliseconds write_timeout_;
    bool first_write_ = true;
    bool closes_ = false;
};

}  // namespace onecard::server
