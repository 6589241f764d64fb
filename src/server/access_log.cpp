#include "server/access_log.h"

#include "server/route_table.h"

#include <fmt/format.h>

#include <cstdio>
#include <ctime>

namespace onecard::server {

std::string log_timestamp() {
    const auto now = std::chrono::system_clock::now();
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
    const std::time_t secs = static_cast<std::time_t>(ms / 1000);
    std::tm utc{};
    ::gmtime_r(&secs, &utc);
    return fmt::format("{:04d}-{:02d}-{:02d}T{:02d}:{:02d}:{:02d}.{:03d}Z", utc.tm_year + 1900, utc.tm_mon + 1,
                       utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, static_cast<int>(ms % 1000));
}

nlohmann::json access_line(const std::string& remote, const std::string& method, const std::string& path, int status,
                           std::chrono::steady_clock::time_point start, size_t bytes_in) {
    const Route* route = find_route(path);
    return {
        {"ts", log_timestamp()},
        {"remote", remote},
        {"method", method},
        {"path", route ? route->path : "(other)"},
        {"status", status},
        {"duration_ms", std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count()},
        {"bytes_in", bytes_in}};
}

void write_access_line(const nlohmann::json& line) {
    const std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    std::fwrite(text.data(), 1, text.size(), stderr);
}

}  // namespace onecard::server
