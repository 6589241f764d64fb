#include "run_method.h"

#include "core/error.h"
#include "embedded_data.h"

#include <ctime>
#include <fstream>
#include <sstream>

namespace onecard::client {

std::string command_line() {
    std::ifstream in("/proc/self/cmdline", std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string s = ss.str();
    while (!s.empty() && s.back() == '\0') s.pop_back();
    for (char& c : s)
        if (c == '\0') c = ' ';
    return s;
}

std::string utc_now_iso() {
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

Json run_method(HttpClient& http, const Endpoint& ep) {
    Json models = nullptr;
    const HttpReply r = http.get("/v1/models");
    if (r.ok()) {
        try {
            models = Json::parse(r.body);
        } catch (const std::exception&) {
            models = r.body;
        }
    }
    return {{"command", command_line()},
            {"date", utc_now_iso()},
            {"onecard_commit", build_commit()},
            {"base_url", ep.base_url},
            {"models", models}};
}

std::string first_model_id(const Json& models) {
    if (models.is_object() && models.contains("data") && models["data"].is_array() && !models["data"].empty())
        return models["data"][0].value("id", "");
    return "";
}

void write_file(const std::string& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    ONECARD_CHECK(out.good(), "cannot write '{}'", path);
    out << text;
    ONECARD_CHECK(out.good(), "cannot write '{}'", path);
}

}  // namespace onecard::client
