// The gates of `onecard validate`: each runs its own requests against the endpoint and reports its
// figures and a pass/fail. Gates that need a capable model (tool-call fixtures, needle recall) fail
// on a random model with their figures; none throws for a bad answer (only for bad options). A gate
// that needs something the endpoint does not offer (an optional OpenAI feature such as logprobs)
// reports itself skipped with the reason instead of failing.
#pragma once

#include "http_client.h"
#include "progress.h"
#include "stream_request.h"

#include <string>
#include <vector>

namespace onecard::client {

struct ValidateOptions {
    Endpoint ep;
    std::string model;
    uint64_t seed = 0;             // nonces of needles and prompts; 0: a fresh one per run
    Progress* progress = nullptr;  // counts each gate's requests on the live line (not owned); null: none
    // tool_calls / no_dsml
    std::string fixtures_path;  // "" : the built-in fixtures (data/tool_fixtures.json)
    int64_t tool_concurrency = 8;
    double tool_min_accuracy = 1.0;  // share of fixture turns that must match exactly
    bool tool_thinking = false;
    int64_t tool_max_tokens = 512;
    // reasoning
    int64_t reasoning_max_tokens = 512;
    // capacity
    int64_t capacity_streams = 16, capacity_max_tokens = 64;
    // replay
    int64_t replay_prompt_len = 600, replay_max_tokens = 16;
    double logprob_tol = 1e-6;
    // mixed load
    int64_t mixed_prefill_len = 50000, mixed_running = 2, mixed_decode_tokens = 256;
    double mixed_late_s = 0.05, mixed_max_ttft_s = 0.3, mixed_max_gap_s = 0.2;
    // needle
    int64_t needle_len = 8000, n_needles = 3, needle_max_tokens = 128;
};

struct GateResult {
    std::string name;
    bool passed = false;
    bool skipped = false;  // the endpoint lacks what the gate needs (summary: "skipped: endpoint lacks X ...")
    std::string summary;   // one line for the table
    Json figures = Json::object();
    double seconds = 0;
};

// The gate names in their default order.
const std::vector<std::string>& gate_names();

// Runs gate `name` (one of gate_names()). Throws onecard::Error for an unknown name.
GateResult run_gate(const std::string& name, const ValidateOptions& o);

GateResult gate_tool_calls(const ValidateOptions& o);
GateResult gate_no_dsml(const ValidateOptions& o);
GateResult gate_reasoning(const ValidateOptions& o);
GateResult gate_capacity(const ValidateOptions& o);
GateResult gate_replay(const ValidateOptions& o);
GateResult gate_mixed_load(const ValidateOptions& o);
GateResult gate_needle(const ValidateOptions& o);

// Helpers shared by the gate files.
Json base_body(const ValidateOptions& o, Json messages, int64_t max_tokens, bool thinking);
// The markers that must never reach a client: DSML tags and DeepSeek's <｜...｜> control tokens.
std::vector<std::string> leaked_markers(const std::string& chunk);
// Runs `bodies` on /v1/chat/completions with `concurrency` connections; results in input order. Each
// finished request advances `progress` (when set), whose total grows by bodies.size().
std::vector<StreamResult> run_concurrent(const Endpoint& ep, const std::vector<Json>& bodies, int64_t concurrency,
                                         Progress* progress);
// One request on `http`, counted on `progress` (when set) like run_concurrent's.
StreamResult run_counted(HttpClient& http, const Json& body, Progress* progress);

}  // namespace onecard::client
