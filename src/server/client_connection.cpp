#include "server/client_connection.h"

#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>

#include <array>
#include <cstdlib>
#include <string>

namespace onecard::server {

bool socket_endpoint(const sockaddr_storage& a, socklen_t len, std::string& ip, int& port) {
    if (a.ss_family == AF_INET)
        port = ntohs(reinterpret_cast<const sockaddr_in*>(&a)->sin_port);
    else if (a.ss_family == AF_INET6)
        port = ntohs(reinterpret_cast<const sockaddr_in6*>(&a)->sin6_port);
    else
        return false;
    std::array<char, NI_MAXHOST> host{};
    if (::getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, host.data(), static_cast<socklen_t>(host.size()),
                      nullptr, 0, NI_NUMERICHOST) != 0)
        return false;
    ip = host.data();
    return true;
}

namespace {

// Whether `fd` is the server side of the request's TCP connection.
bool is_connection_of(int fd, const httplib::Request& req) {
    sockaddr_storage a{};
    socklen_t len = sizeof(a);
    std::string ip;
    int port = -1;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0 || !socket_endpoint(a, len, ip, port) ||
        port != req.local_port || ip != req.local_addr)
        return false;
    len = sizeof(a);
    return ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0 && socket_endpoint(a, len, ip, port) &&
           port == req.remote_port && ip == req.remote_addr;
}

}  // namespace

ClientConnection ClientConnection::of(const httplib::Request& req) {
    if (req.ssl != nullptr) return ClientConnection(SSL_get_fd(req.ssl));
    if (req.remote_port < 0 || req.local_port < 0) return {};
    DIR* dir = ::opendir("/proc/self/fd");
    if (dir == nullptr) return {};
    int found = -1;
    while (const dirent* e = ::readdir(dir)) {
        char* end = nullptr;
        const long fd = std::strtol(e->d_name, &end, 10);
        if (end == e->d_name || *end != '\0' || fd == ::dirfd(dir)) continue;
        if (is_connection_of(static_cast<int>(fd), req)) {
            found = static_cast<int>(fd);
            break;
        }
    }
    ::closedir(dir);
    return ClientConnection(found);
}

bool ClientConnection::gone() const {
    if (fd_ < 0) return false;
    pollfd p{fd_, POLLRDHUP, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

}  // namespace onecard::server
