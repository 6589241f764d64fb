// Planted faults for the whole-model GPU tests (tests/ops/gpu_tame_test.cpp): each switch turns one
// line of GpuModel's host code into a plausible bug, so a test can show that its parity check
// catches that bug and by how much. All off by default; an off switch costs one host-side branch
// per layer. Never set outside tests: only GpuModel::set_faults takes a plan, and no CLI flag,
// config key or environment variable reaches it.
#pragma once

#include <cstddef>

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
    // Skip one compressed entry: the step's last token's compressed KV entry (where it closes a
    // compression window) is never written, so attention later reads a stale entry in its place.
    bool skip_compressed_entry = false;
    // The FNUZ trap on one block: the fp32 scale of FP8 weight block (0, 0) of the first layer's wkv
    // (the shared KV head every query reads) doubled, as reading E4M3FNUZ bytes as E4M3FN does.
    bool fp8_block_scale_x2 = false;
    // Two experts' routing weights swapped: each token's first and second pick get each other's weight.
    bool swap_expert_weights = false;
    // Off-by-one RoPE position: queries are rotated for position p + 1 (keys stay at p).
    bool rope_off_by_one = false;

    bool any() const {
        return drop_ring_row || window_off_by_one || stale_indexer_keys || no_swiglu_clamp || route_without_bias ||
               skip_compressed_entry || fp8_block_scale_x2 || swap_expert_weights || rope_off_by_one;
    }
};

}  // namespace onecard
