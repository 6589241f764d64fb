// `onecard serve` binds its port before the model loads, through the real binary with the TEST-ONLY
// scripted runner and its slow "load" (load_delay_ms): a taken port fails at once with exit code 98
// and says so; during the load /health and /ready answer 503 (and generation 503 with Retry-After),
// then 200 once the engine is up.
#include "support/test_support.h"
#include "support/time_scale.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

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

// The serve command line in test mode: the demo tokenizer goes into `dir` (XDG_CACHE_HOME), the
// model is the scripted runner, whose constructor sleeps `load_ms`.
std::string serve_command(const test::TempDir& dir, int64_t load_ms, const std::string& args) {
    const auto script = dir / "script.json";
    std::ofstream(script) << Json{{"load_delay_ms", load_ms}, {"default", {{"text", "Loaded and ready."}}}}.dump();
    return "env ONECARD_TEST_MODE=1 XDG_CACHE_HOME=" + dir.path().string() + " " + test::onecard_binary().string() +
           " serve --test-script " + script.string() + " --host 127.0.0.1 --no-access-log " + args;
}

TEST(ServeStartup, APortInUseFailsAtOnceWithExitCode98) {
    test::TempDir dir("serve_startup_busy");
    // Hold a listening socket on an ephemeral port: the server must find it taken.
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = 0;
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    ASSERT_EQ(::listen(fd, 4), 0);
    socklen_t len = sizeof(addr);
    ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    const int port = ntohs(addr.sin_port);

    const auto t0 = Clock::now();
    // A 60 s "load": failing after it would take a minute; failing first takes well under that.
    const auto r = test::run_command("timeout 120 " + serve_command(dir, 60000, "--port " + std::to_string(port)) +
                                     " 2>&1 </dev/null");
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    ::close(fd);
    ASSERT_TRUE(WIFEXITED(r.rc)) << r.out;
    EXPECT_EQ(WEXITSTATUS(r.rc), 98) << r.out;
    EXPECT_LT(secs, 30.0) << "the port must be checked before the model loads\n" << r.out;
    EXPECT_NE(r.out.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("already in use"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("\"event\":\"ready\""), std::string::npos) << r.out;
}

TEST(ServeStartup, WhileTheModelLoadsProbesSay503ThenReady) {
    test::TempDir dir("serve_startup_load");
    const auto out = dir / "serve.out";
    const auto pidf = dir / "serve.pid";
    const std::string cmd = "(timeout 120 " + serve_command(dir, 4000, "--port 0") + " > " + out.string() +
                            " 2>&1 </dev/null & echo $! > " + pidf.string() + ")";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    const int pid = std::stoi(slurp(pidf));
    auto stop = [&] {
        ::kill(pid, SIGTERM);
        for (int i = 0; i < 300 && ::kill(pid, 0) == 0; ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
    };
    // The listening line comes before the load.
    int port = 0;
    for (int i = 0; i < 300 && port == 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        std::istringstream lines(slurp(out));
        for (std::string l; std::getline(lines, l);)
            if (l.find("\"event\":\"listening\"") != std::string::npos) port = Json::parse(l)["port"].get<int>();
    }
    if (port == 0) {
        stop();
        FAIL() << "no listening line:\n" << slurp(out);
    }
    EXPECT_EQ(slurp(out).find("\"event\":\"ready\""), std::string::npos) << "ready before the 4 s load?";
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(30);
    const Json chat = {{"messages", Json::array({Json{{"role", "user"}, {"content", "hi"}}})}, {"max_tokens", 8}};
    {
        auto ready = c.Get("/ready");
        ASSERT_TRUE(ready);
        EXPECT_EQ(ready->status, 503) << ready->body;
        EXPECT_TRUE(ready->has_header("Retry-After"));
        auto health = c.Get("/health");
        ASSERT_TRUE(health);
        EXPECT_EQ(health->status, 503) << health->body;
        auto gen = c.Post("/v1/chat/completions", chat.dump(), "application/json");
        ASSERT_TRUE(gen);
        EXPECT_EQ(gen->status, 503) << gen->body;
        EXPECT_TRUE(gen->has_header("Retry-After"));
        EXPECT_NE(gen->body.find("loading"), std::string::npos) << gen->body;
        auto models = c.Get("/v1/models");
        ASSERT_TRUE(models);
        EXPECT_EQ(models->status, 503);
        auto version = c.Get("/version");
        ASSERT_TRUE(version);
        EXPECT_EQ(version->status, 200);
        auto metrics = c.Get("/metrics");
        ASSERT_TRUE(metrics);
        EXPECT_EQ(metrics->status, 200);
        EXPECT_NE(metrics->body.find("vllm:num_requests_running"), std::string::npos);
    }
    // Then ready: /ready and /health 200, and a request is served.
    int status = 0;
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (status != 200 && Clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        auto r = c.Get("/ready");
        status = r ? r->status : -1;
    }
    EXPECT_EQ(status, 200) << slurp(out);
    auto health = c.Get("/health");
    ASSERT_TRUE(health);
    EXPECT_EQ(health->status, 200);
    auto gen = c.Post("/v1/chat/completions", chat.dump(), "application/json");
    ASSERT_TRUE(gen);
    EXPECT_EQ(gen->status, 200) << gen->body;
    EXPECT_NE(gen->body.find("Loaded and ready."), std::string::npos) << gen->body;
    stop();
}

// SIGTERM while the model loads: OpenBLAS's threads (started before main() could block the signal)
// used to take it and die of it (exit 143, no word said). Now it stops at once, says so, exits 0.
TEST(ServeStartup, AStopSignalWhileLoadingStopsCleanlyAtOnce) {
    test::TempDir dir("serve_startup_sigterm");
    const auto out = dir / "serve.out";
    // Started from a script so that its exit status can be waited for: listening, then SIGTERM.
    const auto script = dir / "stop_while_loading.sh";
    // OPENBLAS_NUM_THREADS=1: no BLAS thread exists to take the signal (serve's own watcher must).
    std::ofstream(script) << "OPENBLAS_NUM_THREADS=1 " << serve_command(dir, 20000, "--port 0") << " > " << out.string()
                          << " 2>&1 </dev/null &\n"
                          << "pid=$!\n"
                          << "for i in $(seq " << static_cast<int>(600 * test::time_scale())
                          << "); do grep -q '\"event\":\"listening\"' " << out.string()
                          << " && break; sleep 0.05; done\n"
                          << "kill -TERM $pid; wait $pid; echo \"exit=$?\"\n";
    const auto t0 = Clock::now();
    const auto r = test::run_command(test::timeout_prefix(120) + "bash " + script.string() + " 2>&1");
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    const std::string log = slurp(out);
    EXPECT_NE(r.out.find("exit=0"), std::string::npos) << r.out << log;
    EXPECT_NE(log.find("stop signal while loading: stopped before serving"), std::string::npos) << log;
    // Stopping must not wait for the 20 s load. Under a sanitizer (time scale > 1) the start alone can
    // take longer than that, so there the log lines above and below carry the check.
    if (test::time_scale() == 1.0) {
        EXPECT_LT(secs, 15.0) << "it waited for the 20 s load\n" << log;
    }
    EXPECT_EQ(log.find("\"event\":\"ready\""), std::string::npos) << log;
}

TEST(ServeStartup, AGenerationConfigFolderWithoutTheFileIsRefused) {
    test::TempDir dir("serve_startup_genconfig");
    const auto r =
        test::run_command("timeout 60 " + serve_command(dir, 0, "--port 0 --generation-config " + dir.path().string()) +
                          " 2>&1 </dev/null");
    EXPECT_NE(r.rc, 0) << r.out;
    EXPECT_NE(r.out.find("--generation-config"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("\"event\":\"listening\""), std::string::npos) << r.out;
}

}  // namespace
}  // namespace onecard
