// Planted faults for the whole-model GPU tests (tests/ops/gpu_tame_test.cpp): each switch turns one
// line of GpuModel's host code into a plausible bug, so a test can show that its parity check
// catches that bug and by how much. All off by default; an off switch costs one host-side branch
// per layer. Never set outside tests.
#pragma once

namespace onecard {

struct GpuFaultPlan {
    // Drop one KV entry: the last row of every step never reaches its sequence's window ring, so a
    // later step reads the stale slot (a decode step's own token is missing from every later window).
    bool drop_ring_row = false;
    // Off-by-one in the sliding window: key lists are built for window − 1 (the oldest key dropped,
    // ring slots addressed modulo window − 1).
    bool window_off_by_one = false;
    // Stale indexer keys: this step's indexer keys are not written, so the top-k scores read
    // whatever the key stream held before.
    bool stale_indexer_keys = false;
    // Missing SwiGLU clamp: the experts run with no swiglu_limit.
    bool no_swiglu_clamp = false;
    // Routing decided differently: learned-routing layers select by score alone, without the
    // selection bias (the bias only decides which experts win, never their weights).
    bool route_without_bias = false;

    bool any() const {
        return drop_ring_row || window_off_by_one || stale_indexer_keys || no_swiglu_clamp || route_without_bias;
    }
};

}  // namespace onecard
