// `onecard serve` as a background process for the e2e tests: start it, wait for its ready event,
// hand the event to a check, stop it with SIGTERM. One copy for every test that serves.
#pragma once

#include "support/test_support.h"
#include "support/time_scale.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

namespace onecard::test {

inline std::string slurp(const std::filesystem::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// Runs `<env> onecard serve <args>` under a `timeout_s` limit (scaled like every test timeout), its
// output in dir/serve.out; waits up to 120 s for the ready event (a JSON line), calls `check` with it
// when it came, then stops the server. Returns everything it printed; a server that never became
// ready fails the calling test with its output.
inline std::string serve_and(const std::filesystem::path& dir, const std::string& args,
                             const std::function<void(const nlohmann::json& ready)>& check, const std::string& env = "",
                             int timeout_s = 180) {
    const auto out = dir / "serve.out";
    const auto pidf = dir / "serve.pid";
    std::filesystem::remove(out);
    const std::string cmd = "(" + (env.empty() ? "" : "env " + env + " ") + timeout_prefix(timeout_s) +
                            onecard_binary().string() + " serve " + args + " > " + out.string() +
                            " 2>&1 </dev/null & echo $! > " + pidf.string() + ")";
    EXPECT_EQ(std::system(cmd.c_str()), 0);
    const int pid = std::stoi(slurp(pidf));
    nlohmann::json ready;
    for (int i = 0; i < 1200 && ready.is_null() && ::kill(pid, 0) == 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        std::istringstream lines(slurp(out));
        for (std::string l; std::getline(lines, l);)
            if (l.find("\"event\":\"ready\"") != std::string::npos) ready = nlohmann::json::parse(l);
    }
    if (!ready.is_null()) check(ready);
    ::kill(pid, SIGTERM);
    for (int i = 0; i < 300 && ::kill(pid, 0) == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const std::string text = slurp(out);
    EXPECT_FALSE(ready.is_null()) << "no ready line:\n" << text;
    return text;
}

}  // namespace onecard::test
