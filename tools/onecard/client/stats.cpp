#include "stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

namespace onecard::client {

double percentile(const std::vector<double>& v, double q) {
    if (v.empty()) return 0;
    std::vector<double> s = v;
    std::sort(s.begin(), s.end());
    const double rank = std::clamp(q, 0.0, 100.0) / 100.0 * static_cast<double>(s.size() - 1);
    const auto lo = static_cast<size_t>(std::floor(rank));
    const size_t hi = std::min(lo + 1, s.size() - 1);
    return s[lo] + (s[hi] - s[lo]) * (rank - static_cast<double>(lo));
}

Summary summarize(const std::vector<double>& v) {
    Summary s;
    s.n = v.size();
    if (v.empty()) return s;
    s.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
    s.p50 = percentile(v, 50);
    s.p90 = percentile(v, 90);
    s.p99 = percentile(v, 99);
    s.max = *std::max_element(v.begin(), v.end());
    return s;
}

nlohmann::json to_json(const Summary& s) {
    return {{"n", s.n}, {"mean", s.mean}, {"p50", s.p50}, {"p90", s.p90}, {"p99", s.p99}, {"max", s.max}};
}

std::string format_table(const std::vector<std::vector<std::string>>& rows) {
    std::vector<size_t> width;
    for (const auto& r : rows)
        for (size_t i = 0; i < r.size(); ++i) {
            if (width.size() <= i) width.push_back(0);
            width[i] = std::max(width[i], r[i].size());
        }
    std::string out;
    for (size_t ir = 0; ir < rows.size(); ++ir) {
        for (size_t i = 0; i < rows[ir].size(); ++i) {
            if (i) out += "  ";
            out += rows[ir][i];
            if (i + 1 < rows[ir].size()) out.append(width[i] - rows[ir][i].size(), ' ');
        }
        out += '\n';
        if (ir == 0) {
            size_t total = 0;
            for (size_t w : width) total += w + 2;
            out.append(total > 2 ? total - 2 : 0, '-');
            out += '\n';
        }
    }
    return out;
}

std::string fmt_num(double v, int decimals) {
    if (v < 0 || !std::isfinite(v)) return "-";
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
    return buf;
}

std::string utf8_prefix(const std::string& s, size_t max_bytes) {
    if (s.size() <= max_bytes) return s;
    size_t end = max_bytes;
    // Back off continuation bytes (10xxxxxx) to the lead byte of the character the cut falls in; drop
    // that character unless it ends exactly at the cut.
    size_t lead = end;
    while (lead > 0 && (static_cast<unsigned char>(s[lead]) & 0xC0) == 0x80) --lead;
    return s.substr(0, lead);
}

}  // namespace onecard::client
