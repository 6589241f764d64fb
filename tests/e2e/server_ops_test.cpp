// Operational hardening of the server: limits refused at startup instead of silently meaning "none",
// the access log (millisecond timestamps, no body text in parse errors, abandoned streams logged as
// aborts), and the TLS profile (TLS 1.2+, ECDHE with AEAD ciphers only), checked with OpenSSL's own
// client API against an in-process server.
#include "server_test_util.h"
#include "support/test_support.h"
#include "support/time_scale.h"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <fcntl.h>
#include <poll.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

using namespace onecard;
using namespace onecard::test;
using Json = nlohmann::json;

namespace {

std::string long_text() {
    std::string t;
    for (int i = 0; i < 600; ++i) t += "z" + std::to_string(i % 10) + " ";
    return t;
}

Json script() {
    return {{"scripts", Json::array({Json{{"when", "long story"}, {"text", long_text()}}})},
            {"default", Json{{"text", "Fine.</think>All good."}}},
            {"step_delay_ms", 5}};
}

// The server constructor's verdict on `opts`: "" when it accepts them.
std::string constructor_error(const Tokenizer& tok, server::ServerOptions opts) {
    EngineConfig ec;
    ec.max_num_seqs = 4;
    ec.max_model_len = 256;
    ec.kv_cache_bytes = 16ll << 20;
    Engine engine(ec, scripted(tok, script(), "limits", 256));
    opts.host = "127.0.0.1";
    opts.port = 0;
    opts.access_log = false;
    server::ModelInfo info;
    info.served_model_name = "test-model";
    info.max_model_len = 256;
    try {
        server::OpenAIServer srv(opts, engine, tok, info);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST(ServerOps, NegativeOrAbsurdLimitsAreRefusedAtStartup) {
    ONECARD_NEED_TOKENIZER();
    server::ServerOptions o;
    o.max_body_bytes = static_cast<size_t>(-1);  // what "-1" becomes through an unsigned parse
    std::string e = constructor_error(tok, o);
    EXPECT_NE(e.find("--max-body-bytes"), std::string::npos) << e;
    EXPECT_NE(e.find("negative"), std::string::npos) << e;
    o.max_body_bytes = 0;
    EXPECT_NE(constructor_error(tok, o).find("--max-body-bytes"), std::string::npos);
    o.max_body_bytes = server::kMaxBodyBytesCeiling + 1;
    EXPECT_NE(constructor_error(tok, o).find("--max-body-bytes"), std::string::npos);
    o = {};
    o.http_threads = -4;
    EXPECT_NE(constructor_error(tok, o).find("--http-threads"), std::string::npos);
    o = {};
    o.max_queued_requests = -1;
    EXPECT_NE(constructor_error(tok, o).find("--max-queued-requests"), std::string::npos);
    // The front end's deadlines and byte limits (a deadline of 0 would close every connection at once).
    o = {};
    o.header_timeout = std::chrono::milliseconds(0);
    EXPECT_NE(constructor_error(tok, o).find("--header-timeout must be more than 0"), std::string::npos);
    o = {};
    o.handshake_timeout = std::chrono::milliseconds(-5);
    EXPECT_NE(constructor_error(tok, o).find("--tls-handshake-timeout"), std::string::npos);
    o = {};
    o.max_header_bytes = 100;
    EXPECT_NE(constructor_error(tok, o).find("--max-header-bytes"), std::string::npos);
    o = {};
    o.max_buffered_body_bytes = o.max_body_bytes - 1;
    EXPECT_NE(constructor_error(tok, o).find("--max-buffered-body-bytes"), std::string::npos);
    EXPECT_EQ(constructor_error(tok, {}), "");
}

TEST(ServerOps, CliRefusesANegativeBodyLimit) {
    if (!std::filesystem::exists(onecard_binary())) GTEST_SKIP() << "onecard binary not built";
    for (const char* flag : {"--max-body-bytes -1", "--max-body-bytes=-5"}) {
        const CommandResult r = run_command("timeout 120 " + onecard_binary().string() + " serve --demo --port 0 " +
                                            flag + " 2>&1 </dev/null");
        EXPECT_NE(r.rc, 0) << flag << ": " << r.out;
        EXPECT_NE(r.out.find("max-body-bytes"), std::string::npos) << flag << ": " << r.out;
        EXPECT_NE(r.out.find("must not be negative"), std::string::npos) << flag << ": " << r.out;
        EXPECT_EQ(r.out.find("ready"), std::string::npos) << flag << ": " << r.out;
    }
}

namespace {

// Sends this process's stderr (where the access log goes) to a file while alive.
class StderrCapture {
public:
    StderrCapture() : path_(test_tmp_dir("stderr") / "stderr.txt") {
        std::fflush(stderr);
        saved_ = ::dup(STDERR_FILENO);
        const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        ::dup2(fd, STDERR_FILENO);
        ::close(fd);
    }
    ~StderrCapture() {
        restore();
        std::filesystem::remove_all(path_.parent_path());
    }
    void restore() {
        if (saved_ < 0) return;
        std::fflush(stderr);
        ::dup2(saved_, STDERR_FILENO);
        ::close(saved_);
        saved_ = -1;
    }
    std::vector<Json> lines() const {
        std::ifstream in(path_);
        std::vector<Json> out;
        for (std::string line; std::getline(in, line);) {
            Json j = Json::parse(line, nullptr, false);
            if (j.is_object() && j.contains("path")) out.push_back(std::move(j));
        }
        return out;
    }

private:
    std::filesystem::path path_;
    int saved_ = -1;
};

// An engine and a server with the access log on (TestServer turns it off).
struct LoggingServer {
    explicit LoggingServer(const Tokenizer& tok, server::ServerOptions o = {}) {
        EngineConfig ec;
        ec.eos_token_id = 1;
        ec.max_num_seqs = 4;
        ec.max_model_len = 4096;
        ec.kv_cache_bytes = 64ll << 20;
        ec.make_text_decoder = server::make_text_decoder_factory(tok);
        engine = std::make_unique<Engine>(ec, scripted(tok, script(), "logging"));
        o.host = "127.0.0.1";
        o.port = 0;
        o.max_num_seqs = 4;
        server::ModelInfo info;
        info.served_model_name = "test-model";
        info.max_model_len = 4096;
        srv = std::make_unique<server::OpenAIServer>(o, *engine, tok, info);
        port = srv->bind();
        thread = std::thread([this] { srv->run(); });
        srv->set_ready(true);
    }
    ~LoggingServer() {
        srv->shutdown(std::chrono::milliseconds(0));
        thread.join();
    }
    std::unique_ptr<Engine> engine;
    std::unique_ptr<server::OpenAIServer> srv;
    int port = 0;
    std::thread thread;
};

}  // namespace

TEST(ServerOps, AccessLogHasMillisecondsNoBodyTextAndAborts) {
    ONECARD_NEED_TOKENIZER();
    StderrCapture cap;
    {
        LoggingServer s(tok);
        httplib::Client c("127.0.0.1", s.port);
        c.set_read_timeout(30);
        auto ok = c.Post("/tokenize", R"({"prompt": "hi"})", "application/json");
        ASSERT_TRUE(ok);
        auto bad = c.Post("/tokenize", R"({"prompt": "my-secret-prompt", oops})", "application/json");
        ASSERT_TRUE(bad);
        EXPECT_EQ(bad->status, 400);
        EXPECT_EQ(bad->body.find("my-secret-prompt"), std::string::npos) << bad->body;
        auto bad_number = c.Post("/tokenize", R"({"prompt": "x", "n": 1e99999})", "application/json");
        ASSERT_TRUE(bad_number);
        EXPECT_EQ(bad_number->body.find("99999"), std::string::npos) << bad_number->body;
        // A stream the client abandons after its first bytes: the status line said 200 already.
        const std::string body = R"({"stream": true, "messages": [{"role": "user", "content": "tell a long story"}]})";
        const std::string request =
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            "Content-Length: " +
            std::to_string(body.size()) + "\r\n\r\n" + body;
        const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in dst{};
        dst.sin_family = AF_INET;
        dst.sin_port = htons(static_cast<uint16_t>(s.port));
        inet_pton(AF_INET, "127.0.0.1", &dst.sin_addr);
        ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof(dst)), 0);
        ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
        char buf[512];
        ASSERT_GT(::recv(fd, buf, sizeof(buf), 0), 0);
        ::close(fd);
        // The server notices at its next writes; wait for the request to be released.
        for (int i = 0; i < 500 && s.srv->n_inflight() > 0; ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        EXPECT_EQ(s.srv->n_inflight(), 0);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the log line follows the release
    }
    cap.restore();
    const std::vector<Json> lines = cap.lines();
    ASSERT_GE(lines.size(), 4u);
    const std::regex iso_ms(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)");
    bool saw_abort = false;
    for (const Json& l : lines) {
        ASSERT_TRUE(l["ts"].is_string()) << l.dump();
        EXPECT_TRUE(std::regex_match(l["ts"].get<std::string>(), iso_ms)) << l.dump();
        EXPECT_EQ(l.dump().find("my-secret-prompt"), std::string::npos) << l.dump();
        EXPECT_EQ(l.dump().find("99999"), std::string::npos) << l.dump();
        if (l["path"] == "/v1/chat/completions") {
            EXPECT_EQ(l.value("finish_reason", ""), "abort") << l.dump();
            saw_abort = true;
        }
    }
    EXPECT_TRUE(saw_abort);
}

namespace {

// Sends `request` on a fresh connection and reads until the server closes (or 5 s).
void send_and_drain(int port, const std::string& request) {
    const int fd = connect_from("127.0.0.1", port);
    ASSERT_GE(fd, 0);
    timeval tv{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    char buf[4096];
    while (::recv(fd, buf, sizeof(buf), 0) > 0) {
    }
    ::close(fd);
}

}  // namespace

// Requests the front end ends by itself (on their head, past a limit, malformed, past a deadline) get
// an access-log line of the router's format with a reason, and no request text.
TEST(ServerOps, FrontEndRefusalsAreAccessLogged) {
    ONECARD_NEED_TOKENIZER();
    StderrCapture cap;
    {
        server::ServerOptions o;
        o.api_keys = {"k"};
        o.max_header_bytes = 4096;
        o.max_body_bytes = 1000;
        o.header_timeout = std::chrono::milliseconds(300);
        LoggingServer s(tok, o);
        const std::string secret = "my-secret-header-text";
        send_and_drain(s.port, "POST /tokenize?q=" + secret + " HTTP/1.1\r\nHost: x\r\nX-Big: " + secret +
                                   std::string(5000, 'a') + "\r\n\r\n");
        send_and_drain(s.port, "GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Secret: " + secret + "\r\n");  // never ends
        send_and_drain(s.port, "POST /tokenize HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + secret +
                                   "\r\nExpect: 100-continue\r\nContent-Length: 10\r\n\r\n");
        send_and_drain(s.port, "POST /tokenize HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nContent-Type: text/" +
                                   secret + "\r\nContent-Length: 10\r\n\r\n");
        send_and_drain(s.port,
                       "POST /tokenize HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\n"
                       "Content-Length: 5000\r\n\r\n");
        send_and_drain(s.port, secret + " NOT HTTP\r\n\r\n");
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    cap.restore();
    const std::vector<Json> lines = cap.lines();
    const std::regex iso_ms(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)");
    std::map<int, Json> by_status;
    for (const Json& l : lines) {
        EXPECT_EQ(l.dump().find("secret"), std::string::npos) << "request text in the log: " << l.dump();
        for (const char* key : {"ts", "remote", "method", "path", "status", "duration_ms", "bytes_in", "reason"})
            EXPECT_TRUE(l.contains(key)) << key << " missing: " << l.dump();
        EXPECT_TRUE(std::regex_match(l.value("ts", ""), iso_ms)) << l.dump();
        EXPECT_EQ(l.value("remote", ""), "127.0.0.1") << l.dump();
        by_status[l.value("status", 0)] = l;
    }
    const std::pair<int, const char*> want[] = {{431, "headers_too_large"}, {408, "header_deadline"},
                                                {401, "invalid_api_key"},   {415, "unsupported_media_type"},
                                                {413, "body_too_large"},    {400, "malformed"}};
    for (const auto& [status, reason] : want) {
        ASSERT_TRUE(by_status.count(status)) << "no line for " << status << "; lines: " << Json(lines).dump();
        EXPECT_EQ(by_status[status]["reason"], reason) << by_status[status].dump();
    }
    EXPECT_EQ(by_status[431]["path"], "/tokenize");
    EXPECT_EQ(by_status[431]["method"], "POST");
    EXPECT_EQ(by_status[408]["path"], "/v1/models");
    EXPECT_EQ(by_status[401]["path"], "/tokenize");
    EXPECT_GE(by_status[408]["duration_ms"].get<double>(), 250.0) << "timed from the request's first byte";
}

// A TLS client that never finishes its handshake is closed at --tls-handshake-timeout (not at the
// header deadline) and logged as a 408 without an answer (none can be sent before the handshake).
TEST(ServerOps, ASilentTlsHandshakeIsClosedAtItsDeadlineAndLogged) {
    ONECARD_NEED_TOKENIZER();
    if (std::system("openssl version >/dev/null 2>&1") != 0) GTEST_SKIP() << "openssl CLI not installed";
    const auto dir = test_tmp_dir("tls_deadline");
    std::string cert, key;
    ASSERT_TRUE(make_self_signed_cert(dir, cert, key));
    StderrCapture cap;
    double secs = 0;
    bool closed = false;
    {
        server::ServerOptions o;
        o.tls_cert = cert;
        o.tls_key = key;
        o.handshake_timeout = std::chrono::milliseconds(300);
        o.header_timeout = std::chrono::seconds(30);
        LoggingServer s(tok, o);
        const int fd = connect_from("127.0.0.1", s.port);
        ASSERT_GE(fd, 0);
        const auto t0 = std::chrono::steady_clock::now();
        pollfd p{fd, POLLIN, 0};
        char buf[64];
        closed = ::poll(&p, 1, 5000) == 1 && ::recv(fd, buf, sizeof(buf), 0) <= 0;
        secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        ::close(fd);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    cap.restore();
    std::filesystem::remove_all(dir);
    EXPECT_TRUE(closed);
    EXPECT_GT(secs, 0.2);
    EXPECT_LT(secs, 2.0 * time_scale());  // the 30 s header deadline stays well above it
    bool logged = false;
    for (const Json& l : cap.lines())
        if (l.value("status", 0) == 408 && l.value("reason", "") == "handshake_deadline") logged = true;
    EXPECT_TRUE(logged);
}

namespace {

struct Handshake {
    bool ok = false;
    std::string cipher;
    std::string version;
};

// One TLS handshake from a client limited to [min_version, max_version] and `ciphers` (TLS <= 1.2
// names); the client verifies nothing and allows everything its library can do (security level 0),
// so a refusal is the server's.
Handshake handshake(int port, int min_version, int max_version, const char* ciphers) {
    Handshake h;
    SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == nullptr) return h;
    SSL_CTX_set_security_level(ctx, 0);
    SSL_CTX_set_min_proto_version(ctx, min_version);
    SSL_CTX_set_max_proto_version(ctx, max_version);
    if (ciphers != nullptr && SSL_CTX_set_cipher_list(ctx, ciphers) != 1) {
        ADD_FAILURE() << "the client's OpenSSL does not know " << ciphers;
        SSL_CTX_free(ctx);
        return h;
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in dst{};
    dst.sin_family = AF_INET;
    dst.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, "127.0.0.1", &dst.sin_addr);
    timeval tv{10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof(dst)) == 0) {
        SSL* ssl = SSL_new(ctx);
        SSL_set_fd(ssl, fd);
        h.ok = SSL_connect(ssl) == 1;
        if (h.ok) {
            h.cipher = SSL_get_cipher_name(ssl);
            h.version = SSL_get_version(ssl);
            SSL_shutdown(ssl);
        }
        SSL_free(ssl);
    }
    ERR_clear_error();
    ::close(fd);
    SSL_CTX_free(ctx);
    return h;
}

}  // namespace

TEST(ServerOps, TlsProfileIsTls12PlusWithEcdheAeadOnly) {
    ONECARD_NEED_TOKENIZER();
    if (std::system("openssl version >/dev/null 2>&1") != 0) GTEST_SKIP() << "openssl CLI not installed";
    const auto dir = test_tmp_dir("tls_profile");
    std::string cert, key;
    ASSERT_TRUE(make_self_signed_cert(dir, cert, key));
    server::ServerOptions o;
    o.tls_cert = cert;
    o.tls_key = key;
    TestServer s(o, scripted(tok, script(), "tls_profile"), tok, 4096);

    // Refused: CBC suites with SHA-1 or SHA-2 MACs, RSA key exchange (no forward secrecy), TLS 1.1.
    for (const char* weak : {"ECDHE-RSA-AES128-SHA", "ECDHE-RSA-AES256-SHA", "ECDHE-RSA-AES128-SHA256",
                             "ECDHE-RSA-AES256-SHA384", "AES128-SHA", "AES128-GCM-SHA256", "AES256-GCM-SHA384"}) {
        const Handshake h = handshake(s.port, TLS1_2_VERSION, TLS1_2_VERSION, weak);
        EXPECT_FALSE(h.ok) << weak << " was accepted (" << h.cipher << ")";
    }
    EXPECT_FALSE(handshake(s.port, TLS1_VERSION, TLS1_1_VERSION, "DEFAULT:@SECLEVEL=0").ok) << "TLS 1.1 accepted";

    // Accepted: the AEAD suites over TLS 1.2, and TLS 1.3.
    for (const char* good :
         {"ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES256-GCM-SHA384", "ECDHE-RSA-CHACHA20-POLY1305"}) {
        const Handshake h = handshake(s.port, TLS1_2_VERSION, TLS1_2_VERSION, good);
        EXPECT_TRUE(h.ok) << good << " refused";
        EXPECT_EQ(h.cipher, good);
    }
    // A TLS 1.2 client offering everything gets an AEAD suite.
    const Handshake any12 = handshake(s.port, TLS1_2_VERSION, TLS1_2_VERSION, "ALL:@SECLEVEL=0");
    ASSERT_TRUE(any12.ok);
    EXPECT_TRUE(any12.cipher.find("GCM") != std::string::npos || any12.cipher.find("CHACHA20") != std::string::npos)
        << any12.cipher;
    EXPECT_EQ(any12.cipher.rfind("ECDHE-", 0), 0u) << any12.cipher;
    const Handshake h13 = handshake(s.port, TLS1_3_VERSION, TLS1_3_VERSION, nullptr);
    EXPECT_TRUE(h13.ok);
    EXPECT_EQ(h13.version, "TLSv1.3");
    std::filesystem::remove_all(dir);
}
