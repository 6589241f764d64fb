#include "server/connection_stream.h"

#include <openssl/err.h>
#include <poll.h>
#include <strings.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace onecard::server {

namespace {

// Whether an HTTP header block has the line "Connection: close" (any case).
bool says_close(const char* ptr, size_t size) {
    const std::string head(ptr, size);
    const size_t end = std::min(head.find("\r\n\r\n"), head.size());
    size_t pos = head.find("\r\n");
    while (pos != std::string::npos && pos < end) {
        const size_t next = head.find("\r\n", pos + 2);
        const std::string line = head.substr(pos + 2, (next == std::string::npos ? head.size() : next) - pos - 2);
        if (::strncasecmp(line.c_str(), "connection:", 11) == 0) {
            std::string v = line.substr(11);
            v.erase(0, v.find_first_not_of(" \t"));
            if (::strncasecmp(v.c_str(), "close", 5) == 0) return true;
        }
        pos = next;
    }
    return false;
}

}  // namespace

ConnectionStream::ConnectionStream(int fd, SSL* ssl, const Endpoints& ends, std::string request,
                                   std::chrono::milliseconds write_timeout)
    : fd_(fd), ssl_(ssl), ends_(ends), request_(std::move(request)), write_timeout_(write_timeout) {}

bool ConnectionStream::wait(short events, std::chrono::steady_clock::time_point deadline) const {
    for (;;) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) return false;
        pollfd p{fd_, events, 0};
        const int r = ::poll(&p, 1, static_cast<int>(left.count()));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        return (p.revents & (POLLERR | POLLHUP | POLLNVAL)) == 0 || (p.revents & events) != 0;
    }
}

bool ConnectionStream::is_writable() const {
    pollfd p{fd_, POLLOUT, 0};
    const int r = ::poll(&p, 1, static_cast<int>(write_timeout_.count()));
    return r > 0 && (p.revents & (POLLERR | POLLHUP | POLLNVAL)) == 0;
}

ssize_t ConnectionStream::read(char* ptr, size_t size) {
    const size_t n = std::min(size, request_.size() - pos_);
    std::memcpy(ptr, request_.data() + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
}

ssize_t ConnectionStream::write(const char* ptr, size_t size) {
    if (first_write_) {
        first_write_ = false;
        closes_ = says_close(ptr, size);
    }
    const auto deadline = std::chrono::steady_clock::now() + write_timeout_;
    size_t done = 0;
    while (done < size) {
        if (ssl_ != nullptr) {
            ERR_clear_error();
            const int r = SSL_write(ssl_, ptr + done, static_cast<int>(std::min<size_t>(size - done, 1 << 30)));
            if (r > 0) {
                done += static_cast<size_t>(r);
                continue;
            }
            const int e = SSL_get_error(ssl_, r);
            if (e == SSL_ERROR_WANT_WRITE  ? !wait(POLLOUT, deadline)
                : e == SSL_ERROR_WANT_READ ? !wait(POLLIN, deadline)
                                           : true)
                return -1;
        } else {
            const ssize_t r = ::send(fd_, ptr + done, size - done, MSG_NOSIGNAL);
            if (r > 0) {
                done += static_cast<size_t>(r);
            } else if (r < 0 && errno == EINTR) {
                continue;
            } else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                if (!wait(POLLOUT, deadline)) return -1;
            } else {
                return -1;
            }
        }
    }
    return static_cast<ssize_t>(size);
}

void ConnectionStream::get_remote_ip_and_port(std::string& ip, int& port) const {
    ip = ends_.remote_addr;
    port = ends_.remote_port;
}

void ConnectionStream::get_local_ip_and_port(std::string& ip, int& port) const {
    ip = ends_.local_addr;
    port = ends_.local_port;
}

}  // namespace onecard::server
