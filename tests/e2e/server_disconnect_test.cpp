// A NON-streaming generation request whose client hangs up is cancelled at once (its KV freed, the
// metrics counting an abort), on every generation route and over TLS, instead of running on to
// max_tokens; a client that stays gets its answer unchanged. The scripted runner makes the
// generation long (a 1,500-word script at 10 ms a token: 15 s) so "at once" is measurable.
#include "server_test_util.h"

#include <csignal>
#include <cstdlib>
#include <functional>

using namespace onecard;
using namespace onecard::test;
using Json = nlohmann::json;

namespace {

constexpr const char* kLongPrompt = "Tell a long story";

Json long_script() {
    std::string story;
    for (int i = 0; i < 1500; ++i) story += " word";
    return {{"step_delay_ms", 10},
            {"scripts", Json::array({Json{{"when", kLongPrompt}, {"text", story}}})},
            {"default", Json{{"text", "Done.</think>Short answer."}}}};
}

Json user_messages(const std::string& text) {
    return Json::array({Json{{"role", "user"}, {"content", text}}});
}

// One non-streaming request per generation route, each long enough to run for seconds.
std::vector<std::pair<std::string, Json>> long_requests() {
    return {{"/v1/chat/completions", {{"messages", user_messages(kLongPrompt)}, {"max_tokens", 2000}}},
            {"/v1/completions", {{"prompt", kLongPrompt}, {"max_tokens", 2000}}},
            {"/v1/responses", {{"input", kLongPrompt}, {"max_output_tokens", 2000}}},
            {"/v1/messages", {{"messages", user_messages(kLongPrompt)}, {"max_tokens", 2000}}}};
}

bool wait_for(const std::function<bool()>& pred, double seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!pred() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return pred();
}

// Opens a plain TCP connection to the server and sends one POST; returns the socket (-1 on failure).
int send_post(int port, const std::string& path, const std::string& body) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in dst{};
    dst.sin_family = AF_INET;
    dst.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, "127.0.0.1", &dst.sin_addr);
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof(dst)) != 0) return -1;
    const std::string req = "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
                            "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) return -1;
    return fd;
}

// Waits until the request runs, then for the server to have released it after the client left;
// returns the seconds from the hang-up to the release (< 0: not released in 5 s).
double seconds_to_release(TestServer& s, const std::function<void()>& hang_up) {
    EXPECT_TRUE(wait_for([&] { return s.engine->stats().n_running == 1; }, 10)) << "the request never ran";
    // Some tokens first: the request is well into its decode when the client leaves.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const auto t0 = std::chrono::steady_clock::now();
    hang_up();
    const bool released = wait_for([&] { return s.srv->n_inflight() == 0 && s.engine->stats().n_running == 0; }, 5.0);
    return released ? std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() : -1.0;
}

// vllm:request_success_total{finished_reason="abort"} in a /metrics text (-1: missing).
double aborts(const httplib::Result& metrics) {
    if (!metrics) return -1;
    const std::string& m = metrics->body;
    const std::string key = "vllm:request_success_total{model_name=\"test-model\",finished_reason=\"abort\"} ";
    const size_t p = m.find(key);
    return p == std::string::npos ? -1 : std::stod(m.substr(p + key.size()));
}

}  // namespace

TEST(ServerDisconnect, NonStreamingRequestsOfAClientThatLeftAreCancelled) {
    ONECARD_NEED_TOKENIZER();
    TestServer s({}, scripted(tok, long_script(), "nonstream_disconnect"), tok, 4096);
    const EngineStats base = s.engine->stats();
    double n_aborted = 0;
    for (const auto& [path, body] : long_requests()) {
        SCOPED_TRACE(path);
        const int fd = send_post(s.port, path, body.dump());
        ASSERT_GE(fd, 0);
        const double dt = seconds_to_release(s, [fd] { ::close(fd); });
        // The check runs every kClientCheckInterval (100 ms) and the cancel within an engine step;
        // without it the request would run for ~15 s more.
        EXPECT_GE(dt, 0.0) << "still running 5 s after the client left";
        EXPECT_LT(dt, 2.0);
        EXPECT_EQ(s.engine->stats().n_free_kv_blocks, base.n_free_kv_blocks);
        EXPECT_EQ(aborts(s.client().Get("/metrics")), ++n_aborted);
        EXPECT_NO_THROW(s.srv->check_integrity());
    }
    // A client that stays gets its whole answer: watching the connection cancels nothing else.
    auto r =
        s.client().Post("/v1/chat/completions", Json{{"messages", user_messages("hi")}}.dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(Json::parse(r->body)["choices"][0]["message"]["content"], "Short answer.");
    EXPECT_EQ(aborts(s.client().Get("/metrics")), n_aborted);
}

// Under TLS the handler's socket comes from the TLS session; a client that gives up (its read
// timeout) and closes the connection cancels the request the same way.
TEST(ServerDisconnect, TlsClientThatGaveUpIsCancelled) {
    ONECARD_NEED_TOKENIZER();
    if (std::system("openssl version >/dev/null 2>&1") != 0) GTEST_SKIP() << "openssl CLI not installed";
    // OpenSSL writes the 503 to the closed socket with a plain write(): ignore SIGPIPE, as `serve` does.
    std::signal(SIGPIPE, SIG_IGN);
    const auto dir = test_tmp_dir("tls_disconnect");
    std::string cert, key;
    ASSERT_TRUE(make_self_signed_cert(dir, cert, key));
    server::ServerOptions o;
    o.tls_cert = cert;
    o.tls_key = key;
    TestServer s(o, scripted(tok, long_script(), "tls_disconnect"), tok, 4096);
    auto c = std::make_unique<httplib::SSLClient>("127.0.0.1", s.port);
    c->enable_server_certificate_verification(false);
    c->set_read_timeout(std::chrono::milliseconds(600));
    std::thread t([&] {
        auto r = c->Post("/v1/chat/completions", long_requests()[0].second.dump(), "application/json");
        EXPECT_FALSE(r);  // timed out
        c.reset();        // and closed its connection
    });
    const double dt = seconds_to_release(s, [&] { t.join(); });
    EXPECT_GE(dt, 0.0) << "still running 5 s after the client left";
    EXPECT_LT(dt, 2.0);
    httplib::SSLClient probe("127.0.0.1", s.port);
    probe.enable_server_certificate_verification(false);
    EXPECT_EQ(aborts(probe.Get("/metrics")), 1);
    std::filesystem::remove_all(dir);
}
