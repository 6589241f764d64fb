// `onecard serve` checks the operator's settings before it binds the port or reads a weight: a bad
// --allow-cidr, TLS certificate or key, API key file, or a tokenizer / config.json that disagree on
// the vocabulary fail at once (exit 1, one line naming the flag or file) instead of after the load.
// Driven through the real binary with the TEST-ONLY scripted runner and a 60 s "load": a check that
// ran after the load would take a minute, so each test bounds the time and asserts that the port was
// never even bound. The HTTP front end's deadline and budget flags are refused unless positive, and
// honoured when given. Also: a second SIGTERM during the graceful drain cancels the streams at once.
#include "support/test_support.h"

#include "tokenizer/deepseek_v4_vocab.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace onecard {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string slurp(const std::filesystem::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// A model folder for test mode: the demo tokenizer and `config` as config.json (no weights: the
// scripted runner replaces the model).
std::filesystem::path model_dir(const test::TempDir& dir, const Json& config) {
    const auto m = dir / "model";
    write_demo_tokenizer(m);
    std::ofstream(m / "config.json") << config.dump(2);
    return m;
}

// The serve command line in test mode; the scripted runner's constructor sleeps `load_ms`.
std::string serve_command(const test::TempDir& dir, int64_t load_ms, const Json& script_extra,
                          const std::string& args) {
    const auto script = dir / "script.json";
    Json s = {{"load_delay_ms", load_ms}, {"default", {{"text", "Loaded and ready."}}}};
    s.update(script_extra);
    std::ofstream(script) << s.dump();
    return "env ONECARD_TEST_MODE=1 XDG_CACHE_HOME=" + dir.path().string() + " " + test::onecard_binary().string() +
           " serve --test-script " + script.string() + " --host 127.0.0.1 --port 0 --no-access-log " + args;
}

// Runs serve with `args` (and a 60 s load) and expects the quick refusal: exit status 1, no port
// bound, well under the load time, and the output naming every string of `needles`.
void expect_refused(const test::TempDir& dir, const std::string& args, const std::vector<std::string>& needles) {
    const auto t0 = Clock::now();
    const auto r =
        test::run_command("timeout 120 " + serve_command(dir, 60000, Json::object(), args) + " 2>&1 </dev/null");
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    ASSERT_TRUE(WIFEXITED(r.rc)) << r.out;
    EXPECT_EQ(WEXITSTATUS(r.rc), 1) << r.out;
    EXPECT_LT(secs, 30.0) << "the check must run before the model loads\n" << r.out;
    EXPECT_EQ(r.out.find("\"event\":\"listening\""), std::string::npos) << "checked only after bind\n" << r.out;
    for (const auto& n : needles) EXPECT_NE(r.out.find(n), std::string::npos) << "missing '" << n << "'\n" << r.out;
    // One line: "error: ..." (stderr may carry the tokenizer-writing note before it).
    EXPECT_NE(r.out.find("error: "), std::string::npos) << r.out;
}

TEST(ServeStartupChecks, AnAllowCidrWithHostBitsIsRefused) {
    test::TempDir dir("serve_check_cidr");
    expect_refused(dir, "--allow-cidr 10.0.0.0/8 --allow-cidr 10.0.0.1/8", {"--allow-cidr", "10.0.0.1/8"});
    expect_refused(dir, "--allow-cidr 300.1.2.3", {"--allow-cidr", "not an IPv4 or IPv6 address"});
}

TEST(ServeStartupChecks, AMissingCertificateFileIsRefused) {
    test::TempDir dir("serve_check_tls_missing");
    std::ofstream(dir / "key.pem") << "x";
    expect_refused(dir,
                   "--ssl-certfile " + (dir / "nope.pem").string() + " --ssl-keyfile " + (dir / "key.pem").string(),
                   {"--ssl-certfile", "nope.pem", "no such file"});
}

TEST(ServeStartupChecks, ACertificateWithoutItsKeyIsRefused) {
    test::TempDir dir("serve_check_tls_alone");
    std::ofstream(dir / "cert.pem") << "x";
    expect_refused(dir, "--ssl-certfile " + (dir / "cert.pem").string(), {"--ssl-certfile", "needs --ssl-keyfile"});
}

// Generates a self-signed certificate and key named `stem`.{crt,key} in `dir` with the openssl CLI.
bool make_cert(const test::TempDir& dir, const std::string& stem) {
    const std::string cmd = "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost -keyout " +
                            (dir / (stem + ".key")).string() + " -out " + (dir / (stem + ".crt")).string() +
                            " >/dev/null 2>&1";
    return std::system(cmd.c_str()) == 0;
}

TEST(ServeStartupChecks, FilesThatAreNotPemAreRefused) {
    test::TempDir dir("serve_check_tls_pem");
    if (!make_cert(dir, "a")) GTEST_SKIP() << "openssl CLI not installed";
    std::ofstream(dir / "junk.pem") << "this is not a certificate\n";
    const std::string crt = (dir / "a.crt").string(), key = (dir / "a.key").string(),
                      junk = (dir / "junk.pem").string();
    expect_refused(dir, "--ssl-certfile " + junk + " --ssl-keyfile " + key,
                   {"--ssl-certfile", "junk.pem", "not a PEM certificate"});
    expect_refused(dir, "--ssl-certfile " + crt + " --ssl-keyfile " + junk,
                   {"--ssl-keyfile", "junk.pem", "not an unencrypted PEM private key"});
    // The certificate given as the key: a PEM file, but no private key in it.
    expect_refused(dir, "--ssl-certfile " + crt + " --ssl-keyfile " + crt, {"--ssl-keyfile", "private key"});
}

TEST(ServeStartupChecks, AKeyThatIsNotTheCertificatesIsRefused) {
    test::TempDir dir("serve_check_tls_mismatch");
    if (!make_cert(dir, "a") || !make_cert(dir, "b")) GTEST_SKIP() << "openssl CLI not installed";
    expect_refused(dir, "--ssl-certfile " + (dir / "a.crt").string() + " --ssl-keyfile " + (dir / "b.key").string(),
                   {"--ssl-keyfile", "b.key", "is not the private key of --ssl-certfile", "a.crt"});
}

TEST(ServeStartupChecks, AnUnreadableKeyFileIsRefused) {
    if (::geteuid() == 0) GTEST_SKIP() << "root reads files whatever their mode";
    test::TempDir dir("serve_check_tls_unreadable");
    if (!make_cert(dir, "a")) GTEST_SKIP() << "openssl CLI not installed";
    const auto key = dir / "a.key";
    std::filesystem::permissions(key, std::filesystem::perms::none);
    expect_refused(dir, "--ssl-certfile " + (dir / "a.crt").string() + " --ssl-keyfile " + key.string(),
                   {"--ssl-keyfile", "cannot be read"});
}

TEST(ServeStartupChecks, AnApiKeyFileMissingOrWithoutKeysIsRefused) {
    test::TempDir dir("serve_check_keys");
    expect_refused(dir, "--api-key-file " + (dir / "keys.txt").string(),
                   {"--api-key-file", "keys.txt", "no such file"});
    std::ofstream(dir / "keys.txt") << "# only a comment\n\n   \n";
    expect_refused(dir, "--api-key-file " + (dir / "keys.txt").string(), {"--api-key-file", "keys.txt", "no key"});
    expect_refused(dir, "--api-key-file " + dir.path().string(), {"--api-key-file", "not a regular file"});
}

TEST(ServeStartupChecks, ATokenizerWithIdsBeyondTheEmbeddingIsRefused) {
    test::TempDir dir("serve_check_vocab");
    Json cfg = test::flash_official_config_json();
    cfg["vocab_size"] = 1000;  // the demo tokenizer defines ~128k ids
    const auto m = model_dir(dir, cfg);
    expect_refused(dir, "--model " + m.string(), {"tokenizer.json", "config.json", "vocab_size 1000", "embedding row"});
}

TEST(ServeStartupChecks, SpecialTokenIdsOutsideTheVocabularyAreRefused) {
    test::TempDir dir("serve_check_specials");
    Json cfg = test::flash_official_config_json();
    const int64_t rows = cfg["vocab_size"].get<int64_t>();
    cfg["eos_token_id"] = rows;
    expect_refused(dir, "--model " + model_dir(dir, cfg).string(), {"config.json", "eos_token_id", "outside"});
    cfg["eos_token_id"] = 1;
    cfg["bos_token_id"] = -1;
    expect_refused(dir, "--model " + model_dir(dir, cfg).string(), {"config.json", "bos_token_id", "outside"});
    // In range of the embedding (the tokenizer defines every id below `rows`; 128 padding rows past
    // them are fine) but no token of the tokenizer.
    cfg["vocab_size"] = rows + 128;
    cfg["bos_token_id"] = rows + 1;
    expect_refused(dir, "--model " + model_dir(dir, cfg).string(),
                   {"config.json", "bos_token_id", "not a token of tokenizer"});
}

TEST(ServeStartupChecks, ADSparkNoiseTokenOutsideTheVocabularyIsRefused) {
    test::TempDir dir("serve_check_noise");
    Json cfg = test::flash_0731_config_json();
    cfg["dspark_noise_token_id"] = cfg["vocab_size"];
    expect_refused(dir, "--model " + model_dir(dir, cfg).string(), {"config.json", "dspark_noise_token_id"});
}

TEST(ServeStartupChecks, AConsistentModelFolderStillStarts) {
    test::TempDir dir("serve_check_ok");
    const auto m = model_dir(dir, test::flash_official_config_json());
    // `timeout -s INT 15`: serve would run forever; reaching "ready" before that is the point.
    const auto r = test::run_command(
        "timeout -s INT 15 " + serve_command(dir, 0, Json::object(), "--model " + m.string()) + " 2>&1 </dev/null");
    EXPECT_NE(r.out.find("\"event\":\"ready\""), std::string::npos) << r.out;
}

TEST(ServeStartupChecks, FrontEndDeadlinesAndBudgetsMustBePositive) {
    test::TempDir dir("serve_check_front");
    const std::vector<std::pair<std::string, std::string>> bad = {
        {"--header-timeout 0", "must be more than 0 seconds"},
        {"--body-timeout -1", "must be more than 0 seconds"},
        {"--keep-alive-timeout abc", "is not a number"},
        {"--tls-handshake-timeout 0", "must be more than 0 seconds"},
        {"--write-timeout=-2.5", "must be more than 0 seconds"},
        {"--header-timeout 1e9", "must be at most 86400 seconds"},
        {"--max-buffered-body-bytes 0", "must be more than 0 bytes"},
        {"--max-header-bytes -5", "must be more than 0 bytes"},
        {"--max-header-bytes 100", "between 1024"},
        {"--max-buffered-body-bytes 1000", "must be at least --max-body-bytes"},
    };
    for (const auto& [flag, says] : bad) {
        const auto t0 = Clock::now();
        const auto r =
            test::run_command("timeout 120 " + serve_command(dir, 60000, Json::object(), flag) + " 2>&1 </dev/null");
        const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
        EXPECT_NE(r.rc, 0) << flag << "\n" << r.out;
        EXPECT_LT(secs, 30.0) << flag << ": refused only after the load\n" << r.out;
        EXPECT_EQ(r.out.find("\"event\":\"listening\""), std::string::npos) << flag << "\n" << r.out;
        EXPECT_NE(r.out.find(flag.substr(0, flag.find_first_of(" ="))), std::string::npos) << flag << "\n" << r.out;
        EXPECT_NE(r.out.find(says), std::string::npos) << flag << ": missing '" << says << "'\n" << r.out;
    }
}

// What a raw connection to `port` gets for `sent` until the server closes it (or 5 s).
struct RawResult {
    std::string got;
    bool closed = false;
    double secs = 0;
};
RawResult raw_exchange(int port, const std::string& sent) {
    RawResult r;
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in dst{};
    dst.sin_family = AF_INET;
    dst.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, "127.0.0.1", &dst.sin_addr);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof(dst)) != 0) {
        ::close(fd);
        return r;
    }
    if (!sent.empty()) ::send(fd, sent.data(), sent.size(), MSG_NOSIGNAL);
    const auto t0 = Clock::now();
    for (;;) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 5000) <= 0) break;
        char buf[4096];
        const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
        if (n <= 0) {
            r.closed = true;
            break;
        }
        r.got.append(buf, static_cast<size_t>(n));
    }
    r.secs = std::chrono::duration<double>(Clock::now() - t0).count();
    ::close(fd);
    return r;
}

// The port of serve's `ready` event line in `out`, waiting up to 30 s; 0 if it never came.
int ready_port(const std::filesystem::path& out) {
    for (int i = 0; i < 600; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        std::istringstream lines(slurp(out));
        for (std::string l; std::getline(lines, l);)
            if (l.find("\"event\":\"ready\"") != std::string::npos) return Json::parse(l)["port"].get<int>();
    }
    return 0;
}

// Deadlines far below their defaults (10 s, 30 s, 5 s) close slow and idle clients on time, through
// the real command line.
TEST(ServeStartupChecks, FrontEndDeadlineFlagsAreHonoured) {
    test::TempDir dir("serve_front_flags");
    const auto out = dir / "serve.out";
    const auto pidf = dir / "serve.pid";
    const std::string cmd =
        "(" +
        serve_command(dir, 0, Json::object(), "--header-timeout 0.4 --body-timeout 0.4 --keep-alive-timeout 0.6") +
        " > " + out.string() + " 2>&1 </dev/null & echo $! > " + pidf.string() + ")";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    const int pid = std::stoi(slurp(pidf));
    const int port = ready_port(out);
    if (port == 0) {
        ::kill(pid, SIGKILL);
        FAIL() << "not ready:\n" << slurp(out);
    }
    const RawResult head = raw_exchange(port, "GET /health HTTP/1.1\r\nHost: x\r\n");
    EXPECT_EQ(head.got.rfind("HTTP/1.1 408 ", 0), 0u) << head.got;
    EXPECT_TRUE(head.closed);
    EXPECT_GT(head.secs, 0.3);
    EXPECT_LT(head.secs, 2.0);
    const RawResult body =
        raw_exchange(port, "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\": ");
    EXPECT_EQ(body.got.rfind("HTTP/1.1 408 ", 0), 0u) << body.got;
    EXPECT_TRUE(body.closed);
    EXPECT_GT(body.secs, 0.3);
    EXPECT_LT(body.secs, 2.0);
    const RawResult idle = raw_exchange(port, "");
    EXPECT_EQ(idle.got, "") << "an idle connection is closed without an answer";
    EXPECT_TRUE(idle.closed);
    EXPECT_GT(idle.secs, 0.45);
    EXPECT_LT(idle.secs, 2.0);
    // A request within the deadlines is served.
    const RawResult ok = raw_exchange(port, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    EXPECT_EQ(ok.got.rfind("HTTP/1.1 200 ", 0), 0u) << ok.got;
    ::kill(pid, SIGTERM);
    for (int i = 0; i < 200 && ::kill(pid, 0) == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (::kill(pid, 0) == 0) ::kill(pid, SIGKILL);
}

// A second SIGTERM during the drain: the drain (60 s here) is cut short, the open stream ends with
// a final chunk (finish_reason "abort") and [DONE], and the process exits within seconds.
TEST(ServeStartupChecks, ASecondSigtermEndsTheDrainAtOnce) {
    test::TempDir dir("serve_second_sigterm");
    const auto out = dir / "serve.out";
    const auto pidf = dir / "serve.pid";
    std::string text;
    for (int i = 0; i < 400; ++i) text += "word ";
    // 400 tokens at 50 ms: the stream would run 20 s, longer than the test waits.
    const Json script = {{"step_delay_ms", 50}, {"default", {{"text", text}}}};
    // Not under `timeout`: it forwards each signal twice (to serve and to its process group), which
    // would make the first SIGTERM a second one. `env` execs serve, so $! is serve's pid.
    const std::string cmd = "(" + serve_command(dir, 0, script, "--shutdown-timeout 60") + " > " + out.string() +
                            " 2>&1 </dev/null & echo $! > " + pidf.string() + ")";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    const int pid = std::stoi(slurp(pidf));
    const int port = ready_port(out);
    if (port == 0) {
        ::kill(pid, SIGKILL);
        FAIL() << "not ready:\n" << slurp(out);
    }
    std::string body;
    std::atomic<bool> first_chunk{false};
    std::thread client([&] {
        httplib::Client c("127.0.0.1", port);
        c.set_read_timeout(60);
        const Json req = {{"messages", Json::array({Json{{"role", "user"}, {"content", "go"}}})},
                          {"max_tokens", 1000},
                          {"stream", true}};
        httplib::Request r;
        r.method = "POST";
        r.path = "/v1/chat/completions";
        r.set_header("Content-Type", "application/json");
        r.body = req.dump();
        r.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
            body.append(d, n);
            if (body.find("word") != std::string::npos) first_chunk = true;
            return true;
        };
        c.send(r);
    });
    for (int i = 0; i < 200 && !first_chunk; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_TRUE(first_chunk.load()) << slurp(out);
    ::kill(pid, SIGTERM);
    std::this_thread::sleep_for(std::chrono::seconds(1));
    // Still draining: the first signal waits for the stream (up to --shutdown-timeout 60).
    EXPECT_EQ(::kill(pid, 0), 0) << "exited on the first signal?\n" << slurp(out);
    const auto t0 = Clock::now();
    ::kill(pid, SIGTERM);
    while (::kill(pid, 0) == 0 && Clock::now() - t0 < std::chrono::seconds(30))
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    const bool gone = ::kill(pid, 0) != 0;
    if (!gone) ::kill(pid, SIGKILL);
    client.join();
    EXPECT_TRUE(gone) << slurp(out);
    EXPECT_LT(secs, 5.0) << slurp(out);
    EXPECT_NE(body.find("\"finish_reason\":\"abort\""), std::string::npos)
        << body.substr(body.size() > 600 ? body.size() - 600 : 0);
    const auto done = body.rfind("data: [DONE]");
    EXPECT_NE(done, std::string::npos) << body.substr(body.size() > 600 ? body.size() - 600 : 0);
    const std::string log = slurp(out);
    EXPECT_NE(log.find("second signal"), std::string::npos) << log;
    EXPECT_NE(log.find("1 request(s) cancelled"), std::string::npos) << log;
}

}  // namespace
}  // namespace onecard
