#include "serve_front_flags.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace onecard::cli {

namespace {

// A day: a deadline beyond it is a typo, and the bound keeps the milliseconds in range.
constexpr double kMaxDeadlineS = 86400;

double seconds(std::chrono::milliseconds d) {
    return static_cast<double>(d.count()) / 1000.0;
}

std::chrono::milliseconds millis(double s) {
    // At least 1 ms: a positive value never rounds down to "no deadline".
    return std::chrono::milliseconds(std::max<int64_t>(1, std::llround(s * 1000.0)));
}

// A number > 0 (and at most `max`), checked on the text before CLI11 converts it: an unsigned parse
// would turn "-1" into 2^64 - 1, and a deadline of 0 would close every connection at once.
CLI::Validator positive(double max, const char* unit) {
    return CLI::Validator(
        [max, unit](std::string& v) -> std::string {
            char* end = nullptr;
            const double d = std::strtod(v.c_str(), &end);
            if (end == v.c_str() || *end != '\0' || !std::isfinite(d)) return "'" + v + "' is not a number";
            if (d <= 0) return fmt::format("must be more than 0 {}, got {}", unit, v);
            if (d > max) return fmt::format("must be at most {} {}, got {}", max, unit, v);
            return "";
        },
        ">0");
}

}  // namespace

void add_front_flags(CLI::App* cmd, FrontFlags& f, server::ServerOptions& o) {
    const server::ServerOptions d;
    f.handshake_timeout_s = seconds(d.handshake_timeout);
    f.keep_alive_timeout_s = seconds(d.idle_timeout);
    f.header_timeout_s = seconds(d.header_timeout);
    f.body_timeout_s = seconds(d.body_timeout);
    f.write_timeout_s = seconds(d.write_timeout);
    const CLI::Validator deadline = positive(kMaxDeadlineS, "seconds");
    cmd->add_option("--tls-handshake-timeout", f.handshake_timeout_s,
                    fmt::format("seconds a TLS client has from connecting to the end of its handshake, then the "
                                "connection is closed (default {:g})",
                                f.handshake_timeout_s))
        ->check(deadline);
    cmd->add_option("--keep-alive-timeout", f.keep_alive_timeout_s,
                    fmt::format("seconds a connection may stay open without starting a request (after connecting, "
                                "and between keep-alive requests) (default {:g})",
                                f.keep_alive_timeout_s))
        ->check(deadline);
    cmd->add_option("--header-timeout", f.header_timeout_s,
                    fmt::format("seconds from a request's first byte to the end of its headers; a slower client gets "
                                "408 and is disconnected (default {:g})",
                                f.header_timeout_s))
        ->check(deadline);
    cmd->add_option("--body-timeout", f.body_timeout_s,
                    fmt::format("seconds from the end of a request's headers to the end of its body (the whole "
                                "upload, not per read); a slower client gets 408 and is disconnected (default {:g})",
                                f.body_timeout_s))
        ->check(deadline);
    cmd->add_option("--write-timeout", f.write_timeout_s,
                    fmt::format("seconds each write of a response may wait for a client that does not read, then "
                                "the connection is closed (default {:g})",
                                f.write_timeout_s))
        ->check(deadline);
    cmd->add_option("--max-header-bytes", o.max_header_bytes,
                    fmt::format("largest request line plus headers, {} B to {} B; larger gets 431 (default {})",
                                server::kMinHeaderBytes, server::kMaxHeaderBytesCeiling, d.max_header_bytes))
        ->check(positive(static_cast<double>(server::kMaxHeaderBytesCeiling), "bytes"));
    cmd->add_option("--max-buffered-body-bytes", o.max_buffered_body_bytes,
                    fmt::format("request bodies being uploaded, all connections together, at least --max-body-bytes; "
                                "an upload past it gets 503 with Retry-After (default {} = 512 MiB)",
                                d.max_buffered_body_bytes))
        ->check(positive(1e18, "bytes"));
}

void apply_front_flags(const FrontFlags& f, server::ServerOptions& o) {
    o.handshake_timeout = millis(f.handshake_timeout_s);
    o.idle_timeout = millis(f.keep_alive_timeout_s);
    o.header_timeout = millis(f.header_timeout_s);
    o.body_timeout = millis(f.body_timeout_s);
    o.write_timeout = millis(f.write_timeout_s);
}

}  // namespace onecard::cli
