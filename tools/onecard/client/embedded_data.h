// Data files compiled into the binary (tools/onecard/data/*.json, through embedded_data.cpp.in), so
// `onecard validate` and `bench-serve --dataset-name agent-trace` work without the source tree.
#pragma once

#include <string>

namespace onecard::client {

const std::string& builtin_tool_fixtures();  // data/tool_fixtures.json
const std::string& builtin_agent_trace();    // data/agent_trace.json
const char* build_commit();                  // `git describe --always --dirty` when CMake last configured

}  // namespace onecard::client
