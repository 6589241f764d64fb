#include "backend/cpu/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace onecard::cpu {
namespace {

// Pair-dimension at which a wavelength completes `n_rotations` turns over the original context.
double correction_dim(double n_rotations, double n_rope, double theta, double max_pos) {
    return n_rope * std::log(max_pos / (n_rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(theta));
}

}  // namespace

std::pair<int64_t, int64_t> yarn_correction_range(const RopeParams& p) {
    const double n = static_cast<double>(p.n_rope);
    const double max_pos = static_cast<double>(p.original_max_position);
    auto low = static_cast<int64_t>(std::floor(correction_dim(p.beta_fast, n, p.theta, max_pos)));
    auto high = static_cast<int64_t>(std::ceil(correction_dim(p.beta_slow, n, p.theta, max_pos)));
    return {std::max<int64_t>(low, 0), std::min<int64_t>(high, p.n_rope - 1)};
}

std::vector<float> rope_inv_freqs(const RopeParams& p) {
    const int64_t n_pairs = p.n_rope / 2;
    std::vector<float> f(static_cast<size_t>(n_pairs));
    for (int64_t i = 0; i < n_pairs; ++i) {
        // HF/REF evaluate base^(2i/n) in fp32 and invert; computing in double and rounding once
        // stays within an ulp of that.
        f[i] = static_cast<float>(1.0 / std::pow(p.theta, static_cast<double>(2 * i) / static_cast<double>(p.n_rope)));
    }
    if (!p.yarn) return f;
    auto [low, high] = yarn_correction_range(p);
    double hi = static_cast<double>(high);
    if (low == high) hi += 0.001;  // same singularity guard as the references
    for (int64_t i = 0; i < n_pairs; ++i) {
        float ramp = static_cast<float>((static_cast<double>(i) - static_cast<double>(low)) / (hi - low));
        ramp = std::clamp(ramp, 0.0f, 1.0f);
        // ramp = 0: original frequency (extrapolation); ramp = 1: frequency / factor (interpolation).
        const float interp = f[i] / static_cast<float>(p.factor);
        f[i] = interp * ramp + f[i] * (1.0f - ramp);
    }
    return f;
}

void apply_rope(float* x, const float* inv_freq, int64_t n_rope, int64_t pos, bool inverse) {
    for (int64_t i = 0; i < n_rope / 2; ++i) {
        // The angle is formed in fp32 like the references' (inv_freq @ position) product.
        const float angle = inv_freq[i] * static_cast<float>(pos);
        const float c = static_cast<float>(std::cos(static_cast<double>(angle)));
        float s = static_cast<float>(std::sin(static_cast<double>(angle)));
        if (inverse) s = -s;
        const float a = x[2 * i], b = x[2 * i + 1];
        x[2 * i] = a * c - b * s;
        x[2 * i + 1] = b * c + a * s;
    }
}

void apply_rope_rows(float* x, int64_t n_vec, int64_t dim, const float* inv_freq, int64_t n_rope, int64_t pos,
                     bool inverse) {
    for (int64_t v = 0; v < n_vec; ++v) apply_rope(x + v * dim + (dim - n_rope), inv_freq, n_rope, pos, inverse);
}

}  // namespace onecard::cpu
