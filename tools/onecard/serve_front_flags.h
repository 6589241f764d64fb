// `onecard serve`'s flags for the HTTP front end (server/http_front.h): its per-connection deadlines,
// in seconds as --shutdown-timeout, and what a connection may make the server hold (header bytes, the
// budget of request bodies being uploaded). Zero, negative or non-numeric values are refused when the
// command line is parsed, before the port is bound or the model loads, naming the flag;
// OpenAIServer's constructor checks the resulting options again (check_limits).
#pragma once

#include "server/openai_server.h"

#include <CLI/CLI.hpp>

namespace onecard::cli {

// The deadlines as given (seconds); initialised from ServerOptions' defaults by add_front_flags.
struct FrontFlags {
    double handshake_timeout_s = 0;
    double keep_alive_timeout_s = 0;
    double header_timeout_s = 0;
    double body_timeout_s = 0;
    double write_timeout_s = 0;
};

// Adds --tls-handshake-timeout, --keep-alive-timeout, --header-timeout, --body-timeout,
// --write-timeout (into `flags`) and --max-header-bytes, --max-buffered-body-bytes (into `opts`).
// `flags` and `opts` must outlive `cmd`'s parse.
void add_front_flags(CLI::App* cmd, FrontFlags& flags, server::ServerOptions& opts);

// Writes the deadlines of `flags` into `opts` (milliseconds).
void apply_front_flags(const FrontFlags& flags, server::ServerOptions& opts);

}  // namespace onecard::cli
