// The HTTP front end (src/server/http_front.h) against a real in-process server: connections that are
// slow, idle or silent hold no thread (a thousand of them leave /health fast), limits are enforced
// while reading (431 for headers, 413 at once for Content-Length and chunked bodies, no "100 Continue"
// for a body that will be refused), the allowlist closes a refused address before reading, requests
// pipelined on one connection are all answered in order, and every deadline closes what overstays.
#include "server_test_util.h"

#include <fmt/format.h>
#include <poll.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

using namespace onecard;
using namespace onecard::test;
using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

Json script() {
    return {{"scripts", Json::array()}, {"default", Json{{"text", "Fine.</think>All good."}}}};
}

int connect_to(int port) {
    return connect_from("127.0.0.1", port);
}

bool send_all(int fd, const std::string& data) {
    size_t done = 0;
    while (done < data.size()) {
        const ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
        if (n <= 0) return false;
        done += static_cast<size_t>(n);
    }
    return true;
}

// What the server sends within `wait`, stopping early once `enough` says so or the server closes;
// `closed` tells whether it closed (EOF or reset).
std::string read_for(int fd, std::chrono::milliseconds wait, bool* closed = nullptr,
                     const std::function<bool(const std::string&)>& enough = nullptr) {
    std::string got;
    const auto end = Clock::now() + wait;
    if (closed) *closed = false;
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
        if (left <= 0) break;
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(left)) <= 0) break;
        char buf[8192];
        const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
        if (n <= 0) {
            if (closed) *closed = true;
            break;
        }
        got.append(buf, static_cast<size_t>(n));
        if (enough && enough(got)) break;
    }
    return got;
}

int status_of(const std::string& response) {
    if (response.rfind("HTTP/1.1 ", 0) != 0 || response.size() < 12) return -1;
    return std::stoi(response.substr(9, 3));
}

size_t count_of(const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + what.size())) ++n;
    return n;
}

// Milliseconds for a GET /health on a fresh connection (-1 when it fails).
double health_ms(const TestServer& s) {
    auto c = s.client();
    const auto t0 = Clock::now();
    auto r = c.Get("/health");
    if (!r || r->status != 200) return -1;
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// The median of several /health timings: one slow sample on a shared CI machine is noise, a blocked
// server makes every sample slow (seconds).
double median_health_ms(const TestServer& s, int n = 5) {
    std::vector<double> t;
    for (int i = 0; i < n; ++i) t.push_back(health_ms(s));
    std::sort(t.begin(), t.end());
    return t.front() < 0 ? -1 : t[t.size() / 2];
}

const char* kHealth = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";

std::string post_request(const std::string& path, const std::string& body, const std::string& extra = "") {
    return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + extra +
           "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// Closes every descriptor in `fds` on destruction.
struct Sockets {
    std::vector<int> fds;
    ~Sockets() {
        for (int fd : fds) ::close(fd);
    }
};

constexpr int kManyConnections = 1000;

}  // namespace

TEST(ServerFront, AThousandSlowConnectionsDoNotBlockHealth) {
    ONECARD_NEED_TOKENIZER();
    server::ServerOptions o;
    o.http_threads = 4;  // far fewer threads than connections
    TestServer s(o, scripted(tok, script(), "slow"), tok, 4096);
    Sockets socks;
    for (int i = 0; i < kManyConnections; ++i) {
        const int fd = connect_to(s.port);
        ASSERT_GE(fd, 0) << "connection " << i;
        socks.fds.push_back(fd);
        // Half a request: its headers never end.
        ASSERT_TRUE(send_all(fd, "GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: "));
    }
    const double ms = median_health_ms(s);
    EXPECT_GE(ms, 0) << "/health failed";
    EXPECT_LT(ms, 100) << "with " << kManyConnections << " slow connections open";
    // And a generation request is served too.
    auto r =
        s.client().Post("/v1/chat/completions", R"({"max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]})",
                        "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
}

TEST(ServerFront, AThousandIdleKeepAliveConnectionsDoNotBlockHealth) {
    ONECARD_NEED_TOKENIZER();
    server::ServerOptions o;
    o.http_threads = 4;
    o.idle_timeout = std::chrono::seconds(60);  // the idle ones must still be open when /health is timed
    TestServer s(o, scripted(tok, script(), "idle"), tok, 4096);
    Sockets socks;
    for (int i = 0; i < kManyConnections; ++i) {
        const int fd = connect_to(s.port);
        ASSERT_GE(fd, 0) << "connection " << i;
        socks.fds.push_back(fd);
        // One request answered, then the connection stays open and silent (keep-alive).
        ASSERT_TRUE(send_all(fd, kHealth));
        const std::string got = read_for(fd, std::chrono::seconds(5), nullptr, [](const std::string& g) {
            return g.find("\r\n\r\n{}") != std::string::npos;
        });
        ASSERT_EQ(status_of(got), 200) << "connection " << i << ": " << got;
    }
    const double ms = median_health_ms(s);
    EXPECT_GE(ms, 0) << "/health failed";
    EXPECT_LT(ms, 100) << "with " << kManyConnections << " idle keep-alive connections open";
    // The idle connections still work.
    ASSERT_TRUE(send_all(socks.fds.front(), kHealth));
    EXPECT_EQ(status_of(read_for(socks.fds.front(), std::chrono::seconds(5), nullptr,
                                 [](const std::string& g) { return g.find("\r\n\r\n{}") != std::string::npos; })),
              200);
}

TEST(ServerFront, SilentTlsConnectionsDoNotBlockTls) {
    ONECARD_NEED_TOKENIZER();
    if (std::system("openssl version >/dev/null 2>&1") != 0) GTEST_SKIP() << "openssl CLI not installed";
    std::signal(SIGPIPE, SIG_IGN);
    const auto dir = test_tmp_dir("front_tls");
    std::string cert, key;
    ASSERT_TRUE(make_self_signed_cert(dir, cert, key));
    server::ServerOptions o;
    o.tls_cert = cert;
    o.tls_key = key;
    o.http_threads = 4;
    TestServer s(o, scripted(tok, script(), "front_tls"), tok, 4096);
    Sockets socks;
    for (int i = 0; i < 200; ++i) {  // connections that never send a ClientHello
        const int fd = connect_to(s.port);
        ASSERT_GE(fd, 0);
        socks.fds.push_back(fd);
    }
    httplib::SSLClient c("127.0.0.1", s.port);
    c.enable_server_certificate_verification(false);
    c.set_connection_timeout(5);
    const auto t0 = Clock::now();
    auto h = c.Get("/health");
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    ASSERT_TRUE(h) << httplib::to_string(h.error());
    EXPECT_EQ(h->status, 200);
    EXPECT_LT(ms, 1000) << "a TLS request waited behind silent handshakes";
    std::filesystem::remove_all(dir);
}

TEST(ServerFront, RefusedAddressIsClosedBeforeAnyByteIsRead) {
    ONECARD_NEED_TOKENIZER();
    server::ServerOptions o;
    o.allow_cidrs = {"127.0.0.2/32"};
    TestServer s(o, scripted(tok, script(), "cidr"), tok, 4096);
    // Nothing sent: the server closes the connection by itself, at once.
    const int fd = connect_from("127.0.0.1", s.port);
    ASSERT_GE(fd, 0);
    bool closed = false;
    const std::string got = read_for(fd, std::chrono::seconds(3), &closed);
    EXPECT_TRUE(closed) << "a refused address kept its connection";
    EXPECT_EQ(got, "");
    ::close(fd);
    // An allowed address is served on the same port.
    EXPECT_EQ(raw_request_status("127.0.0.2", s.port, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
              200);
}

TEST(ServerFront, OversizedHeadersGet431) {
    ONECARD_NEED_TOKENIZER();
    server::ServerOptions o;
    o.max_header_bytes = 16 * 1024;
    TestServer s(o, scripted(tok, script(), "h431"), tok, 4096);
    std::string many = "GET /health HTTP/1.1\r\nHost: x\r\n";
    for (int i = 0; i < 400; ++i) many += "X-Filler-" + std::to_string(i) + ": " + std::string(40, 'a') + "\r\n";
    many += "\r\n";
    std::string resp;
    EXPECT_EQ(raw_request_status("127.0.0.1", s.port, many, &resp), 431) << resp;
    EXPECT_NE(resp.find("\"error\""), std::string::npos) << resp;
    // One header line past 8 KiB, under the total.
    EXPECT_EQ(raw_request_status("127.0.0.1", s.port,
                                 "GET /health HTTP/1.1\r\nHost: x\r\nX-Long: " + std::string(9000, 'b') + "\r\n\r\n"),
              431);
    // Refused before the headers end: the server does not wait for the rest.
    const int fd = connect_to(s.port);
    ASSERT_TRUE(send_all(fd, "GET /health HTTP/1.1\r\nX-Big: " + std::string(20000, 'c')));
    EXPECT_EQ(status_of(read_for(fd, std::chrono::seconds(3))), 431);
    ::close(fd);
    EXPECT_EQ(raw_request_status("127.0.0.1", s.port, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
              200);
}

TEST(ServerFront, OversizedContentLengthGets413AtOnceAndNo100Continue) {
    ONECARD_NEED_TOKENIZER();
    server::ServerOptions o;
    o.max_body_bytes = 4096;
    TestServer s(o, scripted(tok, script(), "cl413"), tok, 4096);
    for (const std::string expect : {"", "Expect: 100-continue\r\n"}) {
        const int fd = connect_to(s.port);
        ASSERT_GE(fd, 0);
        // Only the headers: the body would be a gigabyte.
        ASSERT_TRUE(send_all(fd, "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + expect +
                                     "Content-Length: 1000000000\r\n\r\n"));
        const auto t0 = Clock::now();
        const std::string got = read_for(fd, std::chrono::seconds(5), nullptr,
                                         [](const std::string& g) { return g.find("}") != std::string::npos; });
        EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 2.0) << expect;
        EXPECT_EQ(status_of(got), 413) << expect << got;
        EXPECT_EQ(got.find("100 Continue"), std::string::npos) << got;
        EXPECT_NE(got.find("exceeds the limit of 4096 bytes"), std::string::npos) << got;
        ::close(fd);
    }
    // A body within the limit is asked for with "100 Continue" and served.
    const int fd = connect_to(s.port);
    const std::string body = R"({"prompt": "hello"})";
    ASSERT_TRUE(send_all(fd,
                         "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         "Expect: 100-continue\r\nContent-Length: " +
                             std::to_string(body.size()) + "\r\n\r\n"));
    EXPECT_EQ(read_for(fd, std::chrono::seconds(3), nullptr,
                       [](const std::string& g) { return g.find("\r\n\r\n") != std::string::npos; }),
              "HTTP/1.1 100 Continue\r\n\r\n");
    ASSERT_TRUE(send_all(fd, body));
    const std::string got = read_for(fd, std::chrono::seconds(5), nullptr,
                                     [](const std::string& g) { return g.find("\"tokens\"") != std::string::npos; });
    EXPECT_EQ(status_of(got), 200) << got;
    ::close(fd);
}

TEST(ServerFront, ChunkedBodiesAreHeldToTheLimit) {
    ONECARD_NEED_TOKENIZER();
    server::ServerOptions o;
    o.max_body_bytes = 4096;
    TestServer s(o, scripted(tok, script(), "chunk413"), tok, 4096);
    const std::string head =
        "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    // Within the limit: decoded and served.
    const std::string body = R"({"prompt": "hello there"})";
    const std::string a = body.substr(0, 10), b = body.substr(10);
    std::string ok_req = head + fmt::format("{:x}\r\n{}\r\n{:x}\r\n{}\r\n0\r\n\r\n", a.size(), a, b.size(), b);
    std::string resp;
    EXPECT_EQ(raw_request_status("127.0.0.1", s.port, ok_req, &resp), 200) << resp;
    // Past the limit: 413 (not 400) on the chunk that crosses it, without waiting for the end.
    const int fd = connect_to(s.port);
    ASSERT_TRUE(send_all(fd, head));
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(send_all(fd, fmt::format("{:x}\r\n{}\r\n", 1024, std::string(1024, ' '))));
    const std::string got = read_for(fd, std::chrono::seconds(3), nullptr,
                                     [](const std::string& g) { return g.find("}") != std::string::npos; });
    EXPECT_EQ(status_of(got), 413) << got;
    ::close(fd);
}

TEST(ServerFront, PipelinedRequestsAreAllAnsweredInOrder) {
    ONECARD_NEED_TOKENIZER();
    TestServer s({}, scripted(tok, script(), "pipe"), tok, 4096);
    const int fd = connect_to(s.port);
    ASSERT_GE(fd, 0);
    const std::string reqs = std::string(kHealth) + post_request("/tokenize", R"({"prompt": "one"})") +
                             "GET /version HTTP/1.1\r\nHost: x\r\n\r\n" +
                             post_request("/detokenize", R"({"tokens": [1]})") +
                             "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    ASSERT_TRUE(send_all(fd, reqs));  // one write: all five arrive together
    bool closed = false;
    const std::string got = read_for(fd, std::chrono::seconds(10), &closed);
    ::close(fd);
    EXPECT_TRUE(closed) << "the last request asked for a close";
    EXPECT_EQ(count_of(got, "HTTP/1.1 200 "), 5u) << got;
    const size_t tokens = got.find("\"tokens\""), version = got.find("\"version\""), prompt = got.find("\"prompt\"");
    EXPECT_NE(tokens, std::string::npos) << got;
    EXPECT_NE(version, std::string::npos) << got;
    EXPECT_NE(prompt, std::string::npos) << got;
    EXPECT_LT(tokens, version);
    EXPECT_LT(version, prompt);
}

TEST(ServerFront, MalformedRequestIsAnsweredAndClosedAtOnce) {
    ONECARD_NEED_TOKENIZER();
    TestServer s({}, scripted(tok, script(), "bad"), tok, 4096);
    const int fd = connect_to(s.port);
    ASSERT_TRUE(send_all(fd, "THIS IS NOT HTTP\r\n\r\n"));
    bool closed = false;
    const auto t0 = Clock::now();
    const std::string got = read_for(fd, std::chrono::seconds(5), &closed);
    ::close(fd);
    EXPECT_EQ(status_of(got), 400) << got;
    EXPECT_TRUE(closed);
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 1.0);
}

TEST(ServerFront, DeadlinesCloseWhatOverstays) {
    ONECARD_NEED_TOKENIZER();
    server::ServerOptions o;
    o.idle_timeout = std::chrono::milliseconds(300);
    o.header_timeout = std::chrono::milliseconds(600);
    o.body_timeout = std::chrono::milliseconds(600);
    TestServer s(o, scripted(tok, script(), "deadlines"), tok, 4096);
    auto closes_within = [&](const std::string& sent, double max_s) {
        const int fd = connect_to(s.port);
        EXPECT_GE(fd, 0);
        if (!sent.empty()) {
            EXPECT_TRUE(send_all(fd, sent));
        }
        bool closed = false;
        const auto t0 = Clock::now();
        read_for(fd, std::chrono::seconds(5), &closed);
        const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
        ::close(fd);
        return closed && dt < max_s;
    };
    EXPECT_TRUE(closes_within("", 1.5)) << "idle connection";
    EXPECT_TRUE(closes_within("GET /health HTTP/1.1\r\nHost: x\r\n", 1.5)) << "headers never end";
    EXPECT_TRUE(closes_within("POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{", 1.5))
        << "body never ends";
    // A slow client that keeps sending header bytes is still held to the header deadline.
    const int fd = connect_to(s.port);
    ASSERT_TRUE(send_all(fd, "GET /health HTTP/1.1\r\n"));
    const auto t0 = Clock::now();
    bool open = true;
    while (open && Clock::now() - t0 < std::chrono::seconds(3)) {
        open = send_all(fd, "X-A: b\r\n");
        bool closed = false;
        read_for(fd, std::chrono::milliseconds(100), &closed);
        open = open && !closed;
    }
    ::close(fd);
    EXPECT_FALSE(open) << "a trickle of header bytes kept the connection";
}

TEST(ServerFront, BodiesBeingUploadedShareOneMemoryBudget) {
    ONECARD_NEED_TOKENIZER();
    server::ServerOptions o;
    o.max_body_bytes = 4096;
    o.max_buffered_body_bytes = 8192;
    TestServer s(o, scripted(tok, script(), "budget"), tok, 4096);
    Sockets socks;
    const std::string head =
        "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Content-Length: 4000\r\n\r\n";
    std::string last;
    for (int i = 0; i < 3; ++i) {  // 3 x 3000 bytes held > 8192
        const int fd = connect_to(s.port);
        ASSERT_GE(fd, 0);
        socks.fds.push_back(fd);
        ASSERT_TRUE(send_all(fd, head + std::string(3000, ' ')));
        last = read_for(fd, std::chrono::milliseconds(500));
        if (i < 2) {
            EXPECT_EQ(last, "") << "upload " << i << " within the budget";
        }
    }
    EXPECT_EQ(status_of(last), 503) << last;
    EXPECT_NE(last.find("Retry-After: 1"), std::string::npos) << last;
    // Finishing an upload serves it, and frees its share.
    ASSERT_TRUE(send_all(socks.fds[0], R"({"prompt": "hi"})" + std::string(1000 - 16, ' ')));
    EXPECT_EQ(status_of(read_for(socks.fds[0], std::chrono::seconds(5), nullptr,
                                 [](const std::string& g) { return g.find("\"tokens\"") != std::string::npos; })),
              200);
    EXPECT_NO_THROW(s.srv->check_integrity());
}

namespace {

// Sends only the head of a POST with `Expect: 100-continue` and a body promised but never sent, then
// reads what comes back within `wait`; `closed` tells whether the server closed the connection.
std::string head_only(int port, const std::string& path, const std::string& headers, bool* closed,
                      std::chrono::milliseconds wait = std::chrono::seconds(3)) {
    const int fd = connect_from("127.0.0.1", port);
    if (fd < 0) return "connect failed";
    send_all(fd, "POST " + path + " HTTP/1.1\r\nHost: x\r\n" + headers +
                     "Expect: 100-continue\r\nContent-Length: 100000\r\n\r\n");
    const std::string got = read_for(fd, wait, closed);
    ::close(fd);
    return got;
}

}  // namespace

TEST(ServerFront, HeadsRefusedByKeyPathOrContentTypeAreAnsweredBeforeTheBody) {
    ONECARD_NEED_TOKENIZER();
    server::ServerOptions o;
    o.api_keys = {"sekret"};
    o.allow_paths = {"/v1/*", "/health"};
    TestServer s(o, scripted(tok, script(), "screen"), tok, 4096);
    struct Case {
        const char* what;
        std::string path, headers;
        int status;
        std::string says;
    };
    const std::string json = "Content-Type: application/json\r\n";
    const std::string key = "Authorization: Bearer sekret\r\n";
    const std::vector<Case> cases = {
        {"no key", "/v1/chat/completions", json, 401, "missing API key"},
        {"wrong key", "/v1/chat/completions", json + "Authorization: Bearer nope\r\n", 401, "incorrect API key"},
        {"no key, Anthropic route", "/v1/messages", json, 401, "\"type\":\"error\""},
        {"path not allowed", "/tokenize", json + key, 404, "no route for /tokenize"},
        {"path with no route", "/v1/nothing", json + key, 404, "no route for /v1/nothing"},
        {"not JSON", "/v1/chat/completions", "Content-Type: text/plain\r\n" + key, 415, "not supported"},
    };
    for (const Case& c : cases) {
        bool closed = false;
        const auto t0 = Clock::now();
        const std::string got = head_only(s.port, c.path, c.headers, &closed);
        const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
        EXPECT_EQ(status_of(got), c.status) << c.what << ": " << got;
        EXPECT_EQ(got.find("100 Continue"), std::string::npos) << c.what << ": " << got;
        EXPECT_NE(got.find(c.says), std::string::npos) << c.what << ": " << got;
        EXPECT_NE(got.find("Connection: close"), std::string::npos) << c.what << ": " << got;
        // Answered on the head: closed at once, not after waiting for 100000 body bytes.
        EXPECT_TRUE(closed) << c.what;
        EXPECT_LT(secs, 2.0) << c.what;
        if (c.status == 401) {
            EXPECT_NE(got.find("WWW-Authenticate: Bearer"), std::string::npos) << got;
        }
    }
    // The same request with the key and JSON is asked for its body with "100 Continue" and served.
    const int fd = connect_from("127.0.0.1", s.port);
    ASSERT_GE(fd, 0);
    const std::string body = R"({"max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]})";
    ASSERT_TRUE(send_all(fd, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + json + key +
                                 "Expect: 100-continue\r\nContent-Length: " + std::to_string(body.size()) +
                                 "\r\n\r\n"));
    EXPECT_EQ(read_for(fd, std::chrono::seconds(3), nullptr,
                       [](const std::string& g) { return g.find("\r\n\r\n") != std::string::npos; }),
              "HTTP/1.1 100 Continue\r\n\r\n");
    ASSERT_TRUE(send_all(fd, body));
    const std::string got = read_for(fd, std::chrono::seconds(10), nullptr,
                                     [](const std::string& g) { return g.find("\"usage\"") != std::string::npos; });
    EXPECT_EQ(status_of(got), 200) << got;
    ::close(fd);
    // A request whose body came along with its head (no Expect) is refused the same way, and the
    // probes stay open without a key.
    std::string resp;
    EXPECT_EQ(raw_request_status("127.0.0.1", s.port, post_request("/v1/completions", R"({"prompt": "x"})"), &resp),
              401)
        << resp;
    EXPECT_EQ(raw_request_status("127.0.0.1", s.port, "GET /hea%6Cth HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
              200)
        << "an escaped path is judged as httplib decodes it";
    EXPECT_NO_THROW(s.srv->check_integrity());
}

TEST(ServerFront, ASlowHeaderOrBodyGets408AtItsDeadline) {
    ONECARD_NEED_TOKENIZER();
    server::ServerOptions o;
    o.header_timeout = std::chrono::milliseconds(400);
    o.body_timeout = std::chrono::milliseconds(400);
    TestServer s(o, scripted(tok, script(), "d408"), tok, 4096);
    for (const std::string& sent : {std::string("GET /health HTTP/1.1\r\nHost: x\r\n"),
                                    post_request("/tokenize", std::string(100, ' ')).substr(0, 120)}) {
        const int fd = connect_to(s.port);
        ASSERT_GE(fd, 0);
        ASSERT_TRUE(send_all(fd, sent));
        bool closed = false;
        const auto t0 = Clock::now();
        const std::string got = read_for(fd, std::chrono::seconds(5), &closed);
        const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
        ::close(fd);
        EXPECT_EQ(status_of(got), 408) << got;
        EXPECT_TRUE(closed);
        EXPECT_GT(secs, 0.3) << "not before the deadline";
        EXPECT_LT(secs, 1.5);
    }
}
