// Rotary position embedding as DeepSeek-V4 uses it (dsv4-model.md §4.4): interleaved (GPT-J) pairs
// on the TRAILING n_rope dims of a vector, base frequencies θ^(−2i/n_rope), optionally with
// DeepSeek's YaRN frequency interpolation (no mscale: amplitudes and softmax scale unchanged).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace onecard::cpu {

struct RopeParams {
    double theta = 10000.0;
    int64_t n_rope = 64;  // rotated trailing dims (qk_rope_head_dim)
    bool yarn = false;    // CSA/HCA layers only
    double factor = 16.0;
    int64_t original_max_position = 65536;
    double beta_fast = 32.0;
    double beta_slow = 1.0;
};

// YaRN correction range [low, high] over the n_rope/2 pair indices (floor/ceil, clamped to
// [0, n_rope-1]); pairs below `low` keep their frequency, pairs above `high` are divided by factor.
std::pair<int64_t, int64_t> yarn_correction_range(const RopeParams& p);

// Per-pair inverse frequencies [n_rope/2], fp32 (what HF's inv_freq buffer holds).
std::vector<float> rope_inv_freqs(const RopeParams& p);

// Rotates pairs (x[2i], x[2i+1]) of `x` ([n_rope] = the trailing slice) by angle pos·inv_freq[i];
// inverse = rotate by the negative angle (de-rotation of the attention output).
void apply_rope(float* x, const float* inv_freq, int64_t n_rope, int64_t pos, bool inverse = false);

// Same rotation on the trailing n_rope dims of each of n_vec vectors of width `dim` (contiguous).
void apply_rope_rows(float* x, int64_t n_vec, int64_t dim, const float* inv_freq, int64_t n_rope, int64_t pos,
                     bool inverse = false);

}  // namespace onecard::cpu
