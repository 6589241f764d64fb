// Pearson's chi-square for the statistical tests of speculative sampling (spec_verify_test,
// dspark_chi2_test): the upper tail of the chi-square distribution, and the statistic of observed
// pair counts against an expected joint. Header-only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <vector>

namespace onecard::test {

// Upper tail of the chi-square distribution, Q(df/2, x/2) (regularised upper incomplete gamma:
// series below a + 1, Lentz continued fraction above).
inline double chi2_sf(double x, double df) {
    const double a = df / 2, z = x / 2;
    if (z <= 0) return 1.0;
    const double lg = std::lgamma(a);
    if (z < a + 1) {
        double sum = 1.0 / a, term = sum;
        for (int n = 1; n < 1000; ++n) {
            term *= z / (a + n);
            sum += term;
            if (term < sum * 1e-15) break;
        }
        return 1.0 - sum * std::exp(-z + a * std::log(z) - lg);
    }
    double b = z + 1 - a, c = 1e300, d = 1 / b, h = d;
    for (int i = 1; i < 1000; ++i) {
        const double an = -i * (i - a);
        b += 2;
        d = an * d + b;
        d = std::fabs(d) < 1e-300 ? 1e-300 : d;
        c = b + an / c;
        c = std::fabs(c) < 1e-300 ? 1e-300 : c;
        d = 1 / d;
        const double del = d * c;
        h *= del;
        if (std::fabs(del - 1) < 1e-15) break;
    }
    return std::exp(-z + a * std::log(z) - lg) * h;
}

struct ChiSquare {
    double stat = 0, p_value = 1;
    int df = 0;
    double min_expected = 0;
};

// Pearson's statistic of `counts` (pairs (t1, t2) over n_draws) against the joint p1(t1) · p2(t1)(t2),
// over the cells where it is positive (p1 [vocab]; p2(t1) returns [vocab]). A pair outside those
// cells (one the target cannot produce) makes p_value 0.
inline ChiSquare pair_chi_square(std::map<std::pair<int32_t, int32_t>, int64_t> counts, int64_t n_draws,
                                 const std::vector<double>& p1,
                                 const std::function<const std::vector<double>&(int32_t)>& p2_of) {
    ChiSquare c;
    c.min_expected = 1e300;
    int cells = 0;
    for (size_t t1 = 0; t1 < p1.size(); ++t1) {
        if (p1[t1] <= 0) continue;
        const std::vector<double>& p2 = p2_of(static_cast<int32_t>(t1));
        for (size_t t2 = 0; t2 < p2.size(); ++t2) {
            if (p2[t2] <= 0) continue;
            const double e = static_cast<double>(n_draws) * p1[t1] * p2[t2];
            const auto it = counts.find({static_cast<int32_t>(t1), static_cast<int32_t>(t2)});
            const double obs = it == counts.end() ? 0.0 : static_cast<double>(it->second);
            if (it != counts.end()) counts.erase(it);
            c.stat += (obs - e) * (obs - e) / e;
            c.min_expected = std::min(c.min_expected, e);
            ++cells;
        }
    }
    c.df = cells - 1;
    c.p_value = counts.empty() ? chi2_sf(c.stat, c.df) : 0.0;
    return c;
}

}  // namespace onecard::test
