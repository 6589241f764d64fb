// Helpers for the server end-to-end tests: an in-process OpenAIServer on an ephemeral loopback port
// over a real Engine, the demo tokenizer written once per process, a raw HTTP client that can choose
// its source address, and an SSE reader.
#pragma once

#include "core/error.h"
#include "engine/model_runner.h"
#include "onecard/engine.h"
#include "server/openai_server.h"
#include "server/text_decoder.h"
#include "testing/scripted_runner.h"
#include "tokenizer/deepseek_v4_vocab.h"
#include "tokenizer/tokenizer.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace onecard::test {

inline std::filesystem::path test_tmp_dir(const std::string& name) {
    auto d = std::filesystem::temp_directory_path() / ("onecard_" + name + "_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
}

// The V4 demo tokenizer (needs tools/js/node_modules from scripts/setup.sh); nullptr when missing.
inline const Tokenizer* demo_tokenizer() {
    static std::unique_ptr<Tokenizer> tok = []() -> std::unique_ptr<Tokenizer> {
        try {
            const auto dir = test_tmp_dir("tokenizer");
            write_demo_tokenizer(dir);
            auto t = std::make_unique<Tokenizer>(Tokenizer::from_file(dir / "tokenizer.json"));
            std::filesystem::remove_all(dir);
            return t;
        } catch (const Error&) {
            return nullptr;
        }
    }();
    return tok.get();
}

#define ONECARD_NEED_TOKENIZER()                                                                      \
    const Tokenizer* tok_ptr = demo_tokenizer();                                                      \
    if (tok_ptr == nullptr) GTEST_SKIP() << "V3 tokenizer.json not installed (run scripts/setup.sh)"; \
    const Tokenizer& tok = *tok_ptr

inline std::string write_script(const std::string& name, const nlohmann::json& script) {
    const auto path = test_tmp_dir("scripts") / (name + ".json");
    std::ofstream(path) << script.dump();
    return path.string();
}

// An engine plus a server on 127.0.0.1:<ephemeral>, ready; shut down (drain 0) on destruction.
class TestServer {
public:
    TestServer(server::ServerOptions opts, std::unique_ptr<ModelRunner> runner, const Tokenizer& tok,
               int64_t max_model_len, int64_t max_num_seqs = 8, int64_t kv_bytes = 64ll << 20) {
        EngineConfig ec;
        ec.eos_token_id = 1;
        ec.max_num_seqs = max_num_seqs;
        ec.max_model_len = max_model_len;
        ec.kv_cache_bytes = kv_bytes;
        ec.submit_queue_capacity = 512;
        ec.make_text_decoder = server::make_text_decoder_factory(tok);
        engine = std::make_unique<Engine>(ec, std::move(runner));
        opts.host = "127.0.0.1";
        opts.port = 0;
        opts.max_num_seqs = max_num_seqs;
        opts.access_log = false;
        server::ModelInfo info;
        info.served_model_name = "test-model";
        info.root = "/nowhere";
        info.max_model_len = max_model_len;
        srv = std::make_unique<server::OpenAIServer>(opts, *engine, tok, info);
        port = srv->bind();
        thread = std::thread([this] { srv->run(); });
        srv->set_ready(true);
    }
    ~TestServer() {
        srv->shutdown(std::chrono::milliseconds(0));
        thread.join();
    }
    httplib::Client client() const {
        httplib::Client c("127.0.0.1", port);
        c.set_read_timeout(60);
        c.set_connection_timeout(5);
        return c;
    }

    std::unique_ptr<Engine> engine;
    std::unique_ptr<server::OpenAIServer> srv;
    int port = 0;
    std::thread thread;
};

inline std::unique_ptr<ModelRunner> scripted(const Tokenizer& tok, const nlohmann::json& script,
                                             const std::string& name, int64_t max_model_len = 4096) {
    const std::string path = write_script(name, script);
    auto runner = std::make_unique<server::ScriptedRunner>(tok, path, max_model_len, 1);
    // The runner read the file in its constructor; leave nothing behind in /tmp.
    std::filesystem::remove_all(std::filesystem::path(path).parent_path());
    return runner;
}

// A TCP connection from `src_ip` (a loopback alias) to the test server on 127.0.0.1 (-1 on failure).
inline int connect_from(const std::string& src_ip, int port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    sockaddr_in src{};
    src.sin_family = AF_INET;
    inet_pton(AF_INET, src_ip.c_str(), &src.sin_addr);
    sockaddr_in dst{};
    dst.sin_family = AF_INET;
    dst.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, "127.0.0.1", &dst.sin_addr);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof(src)) != 0 ||
        ::connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof(dst)) != 0) {
        ::close(fd);
        return -1;
    }
    return fd;
}

// A one-day self-signed certificate for 127.0.0.1 (CN and subjectAltName, so a verifying client accepts
// it when told to trust it) in dir/cert.pem and dir/key.pem (the openssl CLI); false when it fails.
inline bool make_self_signed_cert(const std::filesystem::path& dir, std::string& cert, std::string& key) {
    cert = (dir / "cert.pem").string();
    key = (dir / "key.pem").string();
    const std::string cmd =
        "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 "
        "-addext subjectAltName=IP:127.0.0.1 -keyout " +
        key + " -out " + cert + " >/dev/null 2>&1";
    return std::system(cmd.c_str()) == 0;
}

// One HTTP/1.1 request over a socket bound to `src_ip`; returns the status code (-1 on failure).
inline int raw_request_status(const std::string& src_ip, int port, const std::string& request,
                              std::string* response = nullptr) {
    const int fd = connect_from(src_ip, port);
    if (fd < 0) return -1;
    timeval tv{10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    std::string got;
    char buf[4096];
    for (;;) {
        const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
        if (n <= 0) break;
        got.append(buf, static_cast<size_t>(n));
    }
    ::close(fd);
    if (response) *response = got;
    if (got.rfind("HTTP/1.1 ", 0) != 0 || got.size() < 12) return -1;
    return std::stoi(got.substr(9, 3));
}

// Splits an SSE body into its `data:` payloads.
inline std::vector<std::string> sse_data(const std::string& body) {
    std::vector<std::string> out;
    size_t pos = 0;
    while ((pos = body.find("data: ", pos)) != std::string::npos) {
        const size_t end = body.find("\n\n", pos);
        out.push_back(body.substr(pos + 6, end == std::string::npos ? std::string::npos : end - pos - 6));
        if (end == std::string::npos) break;
        pos = end + 2;
    }
    return out;
}

// Value of an unlabelled-by-extra gauge/counter line "name{model_name="test-model"} v".
inline double metric_value(const std::string& metrics, const std::string& name) {
    const std::string key = name + "{model_name=\"test-model\"} ";
    const size_t p = metrics.find(key);
    if (p == std::string::npos) return -1;
    return std::stod(metrics.substr(p + key.size()));
}

}  // namespace onecard::test
