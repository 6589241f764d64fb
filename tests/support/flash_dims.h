// The whole-model GPU tests' synthetic checkpoint at the real per-layer Flash dimensions, in a header
// without CUDA so CPU tools (tests/tools/tame_floor.cpp) write the very same one.
#pragma once

#include "model/synth.h"

#include <cstdint>
#include <filesystem>

namespace onecard::test {

// Written to `dir`: 4 layers at the real per-layer Flash
// dimensions (three hash-routed layers, one learned-routing layer), `experts` routed experts with
// top-6, vocabulary 1024, moe_intermediate 1024, `mtp` MTP blocks (none by default). `tame`: the tame
// drawing rule (SynthOptions::tame). `dspark`: the 0731 release, its DSpark drafter (three stages tapping
// layers 1-3, block 5, Markov rank 256) in place of the MTP block.
inline ModelConfig write_flash_dims_checkpoint(const std::filesystem::path& dir, uint64_t seed, int64_t experts,
                                               int64_t index_topk, bool tame = false, int64_t mtp = 0,
                                               bool dspark = false) {
    SynthOptions o;
    o.preset = SynthPreset::Flash;
    o.seed = seed;
    o.layers = 4;
    o.experts = experts;
    o.experts_per_tok = 6;
    o.vocab = 1024;
    o.moe_inter = 1024;
    o.index_topk = index_topk;
    o.mtp = mtp;
    o.tame = tame;
    o.dspark = dspark;
    const ModelConfig cfg = synth_config(o);
    synth_write(cfg, o.seed, dir, synth_default_shard_bytes(SynthPreset::Flash), false, 0, o.tame);
    return cfg;
}

}  // namespace onecard::test
