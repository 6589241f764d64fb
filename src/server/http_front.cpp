#include "server/http_front.h"

#include "core/error.h"
#include "server/client_connection.h"
#include "server/connection_stream.h"

#include <fmt/format.h>
#include <openssl/err.h>

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace onecard::server {

namespace {

using Clock = std::chrono::steady_clock;

// After an error answer the server stops writing but keeps reading (and dropping) what the client
// still sends for this long: closing a socket with unread bytes resets it, and a reset can destroy the
// answer before the client has read it.
constexpr std::chrono::milliseconds kLinger{2000};
// How often deadlines are checked; they are kept to within this.
constexpr int kTickMs = 50;
// While accept() fails for want of descriptors, the listener rests this long.
constexpr std::chrono::milliseconds kAcceptPause{100};

const char* reason_phrase(int status) {
    switch (status) {
        case 400:
            return "Bad Request";
        case 401:
            return "Unauthorized";
        case 403:
            return "Forbidden";
        case 404:
            return "Not Found";
        case 405:
            return "Method Not Allowed";
        case 408:
            return "Request Timeout";
        case 413:
            return "Content Too Large";
        case 414:
            return "URI Too Long";
        case 415:
            return "Unsupported Media Type";
        case 431:
            return "Request Header Fields Too Large";
        case 503:
            return "Service Unavailable";
        default:
            return "Error";
    }
}

// The access log's reason for a refusal of the request reader (request_reader.h).
const char* read_refusal_reason(int status) {
    switch (status) {
        case 413:
            return "body_too_large";
        case 414:
            return "target_too_long";
        case 431:
            return "headers_too_large";
        default:
            return "malformed";
    }
}

enum class Phase {
    Handshake,  // TLS handshake in progress (the loop's)
    Reading,    // between requests or reading one (the loop's)
    Busy,       // a worker serves a complete request (the worker's: the loop does not touch it)
    Closing,    // answered with an error; dropping input until the client closes or kLinger passes
};

struct Conn {
    Conn(int f, RequestLimits limits) : fd(f), reader(limits) {}
    int fd;
    SSL* ssl = nullptr;
    Endpoints ends;
    Phase phase = Phase::Reading;
    RequestReader reader;
    std::string in;  // read, not yet consumed by `reader` (the start of a pipelined request)
    Clock::time_point deadline;
    Clock::time_point started;  // accept, then each request's first byte (the access log's duration)
    bool continue_sent = false;
    size_t counted = 0;   // body bytes counted in Impl::buffered
    uint32_t events = 0;  // registered with epoll; 0 = not registered
};

}  // namespace

struct HttpFront::Impl {
    FrontOptions opts;
    FrontHooks hooks;

    int listen_fd = -1;
    int epoll_fd = -1;
    int wake_fd = -1;
    std::atomic<bool> stop_flag{false};
    std::atomic<bool> is_running{false};
    std::atomic<size_t> n_open{0};
    size_t buffered = 0;  // sum of Conn::counted (loop thread only)
    bool listener_watched = false;
    Clock::time_point accept_resume{};

    // Loop thread only, except that a Busy connection's Conn belongs to its worker.
    std::unordered_map<int, std::unique_ptr<Conn>> conns;
    std::unique_ptr<httplib::ThreadPool> pool;

    // Connections whose request is done, handed back by the workers; `keep` = may carry another.
    std::mutex back_mu;
    std::vector<std::pair<Conn*, bool>> back;

    void watch(Conn& c, uint32_t events) {
        if (c.events == events) return;
        epoll_event ev{};
        ev.events = events;
        ev.data.fd = c.fd;
        ::epoll_ctl(epoll_fd, c.events == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, c.fd, &ev);
        c.events = events;
    }
    void unwatch(Conn& c) {
        if (c.events != 0) ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c.fd, nullptr);
        c.events = 0;
    }
    // Moves `c`'s share of the body budget to `now_held` bytes.
    void recount(Conn& c, size_t now_held) {
        buffered = buffered - c.counted + now_held;
        c.counted = now_held;
    }
    void close_conn(Conn& c) {
        recount(c, 0);
        unwatch(c);
        if (c.ssl) SSL_free(c.ssl);
        ::close(c.fd);
        const int fd = c.fd;
        conns.erase(fd);  // destroys c
        n_open.fetch_sub(1);
    }

    void accept_all();
    void on_ready(Conn& c);
    void handshake(Conn& c);
    void read_some(Conn& c);
    bool advance(Conn& c);
    void dispatch(Conn& c);
    // Reports the refusal (FrontHooks::refused) and answers it, closing the connection.
    void refuse(Conn& c, int status, const char* reason, const std::string& message);
    // Writes `answer` and closes the connection, dropping what the client still sends for kLinger.
    void answer_and_close(Conn& c, const FrontAnswer& answer);
    void expire(Conn& c);
    bool send_now(Conn& c, const std::string& data);
    void take_back();
    void sweep();
};

HttpFront::HttpFront(FrontOptions options, FrontHooks hooks) : impl_(std::make_unique<Impl>()) {
    impl_->opts = std::move(options);
    impl_->hooks = std::move(hooks);
    impl_->epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
    impl_->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    ONECARD_CHECK(impl_->epoll_fd >= 0 && impl_->wake_fd >= 0, "serve: cannot create the event loop: {}",
                  std::strerror(errno));
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = impl_->wake_fd;
    ::epoll_ctl(impl_->epoll_fd, EPOLL_CTL_ADD, impl_->wake_fd, &ev);
}

HttpFront::~HttpFront() {
    Impl& m = *impl_;
    for (auto& [fd, c] : m.conns) {
        if (c->ssl) SSL_free(c->ssl);
        ::close(fd);
    }
    if (m.listen_fd >= 0) ::close(m.listen_fd);
    ::close(m.wake_fd);
    ::close(m.epoll_fd);
}

int HttpFront::bind() {
    Impl& m = *impl_;
    rlimit lim{};
    if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
        lim.rlim_cur = lim.rlim_max;
        ::setrlimit(RLIMIT_NOFILE, &lim);
    }
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    addrinfo* res = nullptr;
    const std::string port = std::to_string(m.opts.port);
    if (::getaddrinfo(m.opts.host.c_str(), port.c_str(), &hints, &res) != 0) {
        errno = EADDRNOTAVAIL;
        return -1;
    }
    int err = 0;
    for (addrinfo* a = res; a != nullptr && m.listen_fd < 0; a = a->ai_next) {
        const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        int yes = 1;
        ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
        // A burst of clients (64 streams at once) must not overflow the accept queue.
        if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 4096) == 0) {
            m.listen_fd = fd;
        } else {
            err = errno;
            ::close(fd);
        }
    }
    ::freeaddrinfo(res);
    if (m.listen_fd < 0) {
        errno = err;
        return -1;
    }
    sockaddr_storage a{};
    socklen_t len = sizeof(a);
    std::string ip;
    int bound = -1;
    ::getsockname(m.listen_fd, reinterpret_cast<sockaddr*>(&a), &len);
    socket_endpoint(a, len, ip, bound);
    return bound;
}

void HttpFront::run() {
    Impl& m = *impl_;
    ONECARD_CHECK(m.listen_fd >= 0, "HttpFront::run before bind");
    m.pool = std::make_unique<httplib::ThreadPool>(m.opts.n_workers);
    epoll_event lev{};
    lev.events = EPOLLIN;
    lev.data.fd = m.listen_fd;
    ::epoll_ctl(m.epoll_fd, EPOLL_CTL_ADD, m.listen_fd, &lev);
    m.listener_watched = true;
    m.is_running = true;
    std::vector<epoll_event> events(512);
    auto next_sweep = Clock::now();
    while (!m.stop_flag.load()) {
        const int n = ::epoll_wait(m.epoll_fd, events.data(), static_cast<int>(events.size()), kTickMs);
        for (int i = 0; i < n; ++i) {
            const int fd = events[static_cast<size_t>(i)].data.fd;
            if (fd == m.listen_fd) {
                m.accept_all();
            } else if (fd == m.wake_fd) {
                uint64_t v = 0;
                [[maybe_unused]] const ssize_t r = ::read(m.wake_fd, &v, sizeof(v));
                m.take_back();
            } else if (auto it = m.conns.find(fd); it != m.conns.end()) {
                m.on_ready(*it->second);
            }
        }
        if (Clock::now() >= next_sweep) {
            m.sweep();
            next_sweep = Clock::now() + std::chrono::milliseconds(kTickMs);
        }
    }
    ::epoll_ctl(m.epoll_fd, EPOLL_CTL_DEL, m.listen_fd, nullptr);
    ::close(m.listen_fd);
    m.listen_fd = -1;
    // Workers finish what they serve (the caller has cancelled the engine's streams by now).
    m.pool->shutdown();
    m.take_back();
    while (!m.conns.empty()) m.close_conn(*m.conns.begin()->second);
    m.is_running = false;
}

void HttpFront::stop() {
    impl_->stop_flag = true;
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t r = ::write(impl_->wake_fd, &one, sizeof(one));
}

bool HttpFront::running() const {
    return impl_->is_running.load();
}

size_t HttpFront::n_connections() const {
    return impl_->n_open.load();
}

void HttpFront::check_integrity() const {
    // n_open is written by the loop only; the map is the loop's, so this is exact only from the loop
    // thread or after run() returned, and a bound otherwise.
    const Impl& m = *impl_;
    ONECARD_CHECK(m.n_open.load() < (size_t{1} << 40), "HttpFront: connection count underflowed");
    if (!m.is_running.load()) {
        ONECARD_CHECK(m.conns.size() == m.n_open.load(), "HttpFront: {} connections tracked, {} counted",
                      m.conns.size(), m.n_open.load());
        size_t held = 0;
        for (const auto& [fd, c] : m.conns) held += c->counted;
        ONECARD_CHECK(held == m.buffered, "HttpFront: bodies hold {} bytes, the budget counts {}", held, m.buffered);
    }
}

void HttpFront::Impl::accept_all() {
    for (;;) {
        sockaddr_storage a{};
        socklen_t len = sizeof(a);
        const int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&a), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                // The pending connection stays queued; a level-triggered listener would spin meanwhile.
                ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, listen_fd, nullptr);
                listener_watched = false;
                accept_resume = Clock::now() + kAcceptPause;
            }
            return;
        }
        auto c = std::make_unique<Conn>(fd, opts.limits);
        // The allowlist is the first thing a client meets: not one byte is read from a refused address.
        if (!socket_endpoint(a, len, c->ends.remote_addr, c->ends.remote_port) ||
            (hooks.admit && !hooks.admit(c->ends.remote_addr))) {
            ::close(fd);
            continue;
        }
        sockaddr_storage l{};
        socklen_t llen = sizeof(l);
        if (::getsockname(fd, reinterpret_cast<sockaddr*>(&l), &llen) == 0)
            socket_endpoint(l, llen, c->ends.local_addr, c->ends.local_port);
        int yes = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
        Conn& conn = *c;
        conn.started = Clock::now();
        conns.emplace(fd, std::move(c));
        n_open.fetch_add(1);
        if (opts.tls != nullptr) {
            conn.ssl = SSL_new(opts.tls);
            if (conn.ssl == nullptr || SSL_set_fd(conn.ssl, fd) != 1) {
                close_conn(conn);
                continue;
            }
            SSL_set_accept_state(conn.ssl);
            conn.phase = Phase::Handshake;
            conn.deadline = Clock::now() + opts.handshake_timeout;
        } else {
            conn.phase = Phase::Reading;
            conn.deadline = Clock::now() + opts.idle_timeout;
        }
        watch(conn, EPOLLIN);
    }
}

void HttpFront::Impl::on_ready(Conn& c) {
    switch (c.phase) {
        case Phase::Handshake:
            handshake(c);
            return;
        case Phase::Reading:
            read_some(c);
            return;
        case Phase::Closing: {
            std::array<char, 16384> buf{};
            for (;;) {
                const ssize_t n = ::recv(c.fd, buf.data(), buf.size(), 0);
                if (n > 0) continue;
                if (n < 0 && errno == EINTR) continue;
                if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
                close_conn(c);
                return;
            }
        }
        case Phase::Busy:
            return;
    }
}

void HttpFront::Impl::handshake(Conn& c) {
    ERR_clear_error();
    const int r = SSL_accept(c.ssl);
    if (r == 1) {
        c.phase = Phase::Reading;
        c.deadline = Clock::now() + opts.idle_timeout;
        watch(c, EPOLLIN);
        if (SSL_pending(c.ssl) > 0) read_some(c);
        return;
    }
    const int e = SSL_get_error(c.ssl, r);
    if (e == SSL_ERROR_WANT_READ)
        watch(c, EPOLLIN);
    else if (e == SSL_ERROR_WANT_WRITE)
        watch(c, EPOLLOUT);
    else
        close_conn(c);
}

void HttpFront::Impl::read_some(Conn& c) {
    std::array<char, 16384> buf{};
    do {
        ssize_t n = 0;
        if (c.ssl != nullptr) {
            ERR_clear_error();
            const int r = SSL_read(c.ssl, buf.data(), static_cast<int>(buf.size()));
            if (r <= 0) {
                const int e = SSL_get_error(c.ssl, r);
                if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return;
                close_conn(c);
                return;
            }
            n = r;
        } else {
            n = ::recv(c.fd, buf.data(), buf.size(), 0);
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
            if (n <= 0) {
                close_conn(c);
                return;
            }
        }
        c.in.append(buf.data(), static_cast<size_t>(n));
        if (!advance(c)) return;
    } while (c.ssl != nullptr && SSL_pending(c.ssl) > 0);
}

// Feeds what was read to the request reader; false once `c` is no longer the loop's to touch (handed to
// a worker, or closed).
bool HttpFront::Impl::advance(Conn& c) {
    for (;;) {
        const ReadState before = c.reader.state();
        const size_t used = c.reader.feed(c.in.data(), c.in.size());
        c.in.erase(0, used);
        const ReadState now = c.reader.state();
        if (before == ReadState::Idle && now != ReadState::Idle) {
            c.started = Clock::now();
            c.deadline = c.started + opts.header_timeout;
        }
        if (now == ReadState::Refused) {
            refuse(c, c.reader.refusal_status(), read_refusal_reason(c.reader.refusal_status()),
                   c.reader.refusal_reason());
            return false;
        }
        if (now != ReadState::Head) break;
        // The headers are complete and not a byte of the body is read: a request the head alone
        // refuses (API key, path, Content-Type) is answered now, without "100 Continue".
        if (hooks.screen) {
            const FrontAnswer a = hooks.screen(
                RequestHead{c.reader.method(), c.reader.target(), c.reader.fields(), c.ends.remote_addr, c.started});
            if (a.status != 0) {
                answer_and_close(c, a);
                return false;
            }
        }
        c.reader.proceed();
        c.deadline = Clock::now() + opts.body_timeout;
    }
    const ReadState now = c.reader.state();
    if (now == ReadState::Body) {
        recount(c, c.reader.body_bytes());
        if (buffered > opts.max_buffered_bytes) {
            refuse(c, 503, "upload_budget", "the server holds too many request bodies being uploaded; retry shortly");
            return false;
        }
    }
    if (now == ReadState::Complete) {
        dispatch(c);
        return false;
    }
    // Only a body within the limit, of a request its head did not refuse, is asked for.
    if (c.reader.expects_continue() && !c.continue_sent) {
        c.continue_sent = true;
        if (!send_now(c, "HTTP/1.1 100 Continue\r\n\r\n")) {
            close_conn(c);
            return false;
        }
    }
    return true;
}

void HttpFront::Impl::dispatch(Conn& c) {
    unwatch(c);
    recount(c, c.reader.body_bytes());  // held until the request is served
    c.phase = Phase::Busy;
    Conn* conn = &c;
    std::string request = c.reader.normalized();
    const bool keep_alive = c.reader.keep_alive();
    pool->enqueue([this, conn, request = std::move(request), keep_alive]() mutable {
        bool keep = false;
        try {
            ConnectionStream stream(conn->fd, conn->ssl, conn->ends, std::move(request), opts.write_timeout);
            keep = hooks.serve(stream) && keep_alive && !stream.response_closes();
        } catch (...) {
            keep = false;  // the router answers its own errors; anything else ends the connection
        }
        {
            std::lock_guard lk(back_mu);
            back.emplace_back(conn, keep);
        }
        const uint64_t one = 1;
        [[maybe_unused]] const ssize_t r = ::write(wake_fd, &one, sizeof(one));
    });
}

void HttpFront::Impl::take_back() {
    std::vector<std::pair<Conn*, bool>> done;
    {
        std::lock_guard lk(back_mu);
        done.swap(back);
    }
    for (auto [c, keep] : done) {
        if (!keep || stop_flag.load()) {
            close_conn(*c);
            continue;
        }
        c->phase = Phase::Reading;
        recount(*c, 0);
        c->reader.reset();
        c->continue_sent = false;
        c->deadline = Clock::now() + opts.idle_timeout;
        watch(*c, EPOLLIN);
        // A pipelined request that came with the last one is served now, in order.
        if (!c->in.empty()) advance(*c);
    }
}

bool HttpFront::Impl::send_now(Conn& c, const std::string& data) {
    // Small answers only (a status line, an error object): they fit the socket's send buffer, so a
    // non-blocking write either takes them whole or the client is not reading and loses nothing.
    if (c.ssl != nullptr) {
        ERR_clear_error();
        return SSL_write(c.ssl, data.data(), static_cast<int>(data.size())) == static_cast<int>(data.size());
    }
    size_t done = 0;
    while (done < data.size()) {
        const ssize_t r = ::send(c.fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        done += static_cast<size_t>(r);
    }
    return true;
}

void HttpFront::Impl::refuse(Conn& c, int status, const char* reason, const std::string& message) {
    FrontRefusal r{status,
                   reason,
                   message,
                   c.reader.method(),
                   c.reader.target(),
                   c.ends.remote_addr,
                   c.started,
                   c.reader.body_bytes(),
                   true};
    FrontAnswer a = hooks.refused ? hooks.refused(r) : FrontAnswer{};
    a.status = status;
    if (status == 503) a.headers.emplace_back("Retry-After", "1");
    answer_and_close(c, a);
}

void HttpFront::Impl::answer_and_close(Conn& c, const FrontAnswer& answer) {
    std::string head = fmt::format("HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
                                   answer.status, reason_phrase(answer.status), answer.body.size());
    for (const auto& [name, value] : answer.headers) head += name + ": " + value + "\r\n";
    head += "Connection: close\r\n\r\n";
    if (!send_now(c, head + answer.body)) {
        close_conn(c);
        return;
    }
    if (c.ssl != nullptr) SSL_shutdown(c.ssl);
    ::shutdown(c.fd, SHUT_WR);
    recount(c, 0);
    c.phase = Phase::Closing;
    c.deadline = Clock::now() + kLinger;
    c.in.clear();
    watch(c, EPOLLIN);
}

// A connection past its deadline: inside a request it is answered 408 (and reported); idle or
// lingering it is only closed.
void HttpFront::Impl::expire(Conn& c) {
    if (c.phase == Phase::Handshake) {
        if (hooks.refused)
            hooks.refused(FrontRefusal{408, "handshake_deadline", "the TLS handshake took too long", c.reader.method(),
                                       c.reader.target(), c.ends.remote_addr, c.started, 0, false});
        close_conn(c);
        return;
    }
    const ReadState st = c.reader.state();
    if (c.phase == Phase::Reading && st == ReadState::Header) {
        refuse(c, 408, "header_deadline", "the request's headers took too long");
        return;
    }
    if (c.phase == Phase::Reading && st == ReadState::Body) {
        refuse(c, 408, "body_deadline", "the request's body took too long");
        return;
    }
    close_conn(c);
}

void HttpFront::Impl::sweep() {
    const auto now = Clock::now();
    if (!listener_watched && now >= accept_resume && listen_fd >= 0) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.fd = listen_fd;
        ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, listen_fd, &ev);
        listener_watched = true;
    }
    std::vector<Conn*> expired;
    for (auto& [fd, c] : conns)
        if (c->phase != Phase::Busy && now >= c->deadline) expired.push_back(c.get());
    for (Conn* c : expired) expire(*c);
}

}  // namespace onecard::server
