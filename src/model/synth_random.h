// Deterministic random numbers for synthetic checkpoints: splitmix64 and a Box-Muller normal
// built only from +, -, *, / and sqrt (all correctly rounded in IEEE 754), so the stream is
// bit-identical on every machine and compiler — unlike std::*_distribution or libm's log/cos.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

namespace onecard::synth_random {

inline uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

inline uint64_t fnv1a64(std::string_view s) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (unsigned char ch : s) {
        h ^= ch;
        h *= 0x100000001B3ull;
    }
    return h;
}

// Reciprocals for the series below. Constant-folded divisions are correctly rounded, exactly
// like the runtime IEEE division they replace, so the tables are the same on every compiler.
inline constexpr double kInvOdd[10] = {1.0,      1.0 / 3,  1.0 / 5,  1.0 / 7,  1.0 / 9,
                                       1.0 / 11, 1.0 / 13, 1.0 / 15, 1.0 / 17, 1.0 / 19};
// kInvPair[i] = 1 / (k (k - 1)) for k = i + 2.
inline constexpr double kInvPair[19] = {1.0 / 2,   1.0 / 6,   1.0 / 12,  1.0 / 20,  1.0 / 30,  1.0 / 42,  1.0 / 56,
                                        1.0 / 72,  1.0 / 90,  1.0 / 110, 1.0 / 132, 1.0 / 156, 1.0 / 182, 1.0 / 210,
                                        1.0 / 240, 1.0 / 272, 1.0 / 306, 1.0 / 342, 1.0 / 380};

// Natural log for x > 0: x = m * 2^e, m in [sqrt(1/2), sqrt(2)), log m = 2 atanh((m-1)/(m+1)).
inline double det_log(double x) {
    int e = 0;
    double m = std::frexp(x, &e);  // exact
    if (m < 0.70710678118654752) {
        m *= 2.0;
        e -= 1;
    }
    const double t = (m - 1.0) / (m + 1.0);
    const double t2 = t * t;
    // atanh series to t^11: |t| <= 0.172, remainder below 1e-10 — plenty for sampling, and
    // accuracy does not matter for determinism, only the fixed operation sequence does.
    double s = kInvOdd[5];
    for (int i = 4; i >= 0; --i) s = s * t2 + kInvOdd[i];
    return 2.0 * t * s + static_cast<double>(e) * 0.69314718055994531;
}

// cos and sin of 2*pi*u for u in [0, 1): reduce to a quadrant, Taylor series on [0, pi/2).
inline void det_cos_sin_2pi(double u, double& c, double& s) {
    const double q4 = u * 4.0;
    const int q = static_cast<int>(q4);  // 0..3
    const double th = (q4 - q) * 1.5707963267948966;
    const double t2 = th * th;
    // Horner form of the Taylor series to th^12 / th^13 (remainder < 1e-8 on [0, pi/2)).
    double cs = 1.0, sn = 1.0;
    for (int k = 12; k >= 2; k -= 2) {
        cs = 1.0 - cs * t2 * kInvPair[k - 2];
        sn = 1.0 - sn * t2 * kInvPair[k - 1];
    }
    sn *= th;
    switch (q & 3) {
        case 0:
            c = cs;
            s = sn;
            break;
        case 1:
            c = -sn;
            s = cs;
            break;
        case 2:
            c = -cs;
            s = -sn;
            break;
        default:
            c = sn;
            s = -cs;
            break;
    }
}

class Rng {
public:
    explicit Rng(uint64_t seed) : state_(seed) {}
    uint64_t next() {
        state_ += 0x9E3779B97F4A7C15ull;
        uint64_t z = state_;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    // Uniform in [0, 1) with 53 random bits.
    double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
    // Uniform integer in [0, n) (n < 2^32) by the multiply-shift method: no modulo bias worth
    // caring about here, and exactly reproducible.
    uint32_t below(uint32_t n) { return static_cast<uint32_t>(((next() >> 32) * static_cast<uint64_t>(n)) >> 32); }
    // Standard normal (Box-Muller; the second value of each pair is kept for the next call).
    double normal() {
        if (have_spare_) {
            have_spare_ = false;
            return spare_;
        }
        const double u1 = 1.0 - uniform();  // (0, 1]: log stays finite
        const double u2 = uniform();
        const double r = std::sqrt(-2.0 * det_log(u1));
        double c = 0.0, s = 0.0;
        det_cos_sin_2pi(u2, c, s);
        spare_ = r * s;
        have_spare_ = true;
        return r * c;
    }

private:
    uint64_t state_;
    double spare_ = 0.0;
    bool have_spare_ = false;
};

}  // namespace onecard::synth_random
