// Internal: one server-sent event as the Anthropic and Responses stream encoders produce it (pure data,
// so they can be unit-tested without a socket; SseWriter::send_event writes it).
#pragma once

#include "server/request_json.h"

#include <string>

namespace onecard::server {

struct SseEvent {
    std::string name;  // the "event:" line (the same as data.type in both APIs)
    Json data;
};

}  // namespace onecard::server
