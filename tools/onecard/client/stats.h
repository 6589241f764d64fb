// Summary statistics for latency samples (numpy's linear-interpolation percentiles) and a plain
// column-aligned terminal table.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace onecard::client {

struct Summary {
    size_t n = 0;
    double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
};

// The q-th percentile (q in [0, 100]) of `v` with linear interpolation between closest ranks
// (numpy.percentile's default); 0 for an empty sample. Does not modify `v`.
double percentile(const std::vector<double>& v, double q);
Summary summarize(const std::vector<double>& v);
nlohmann::json to_json(const Summary& s);

// Rows of cells printed with every column padded to its widest cell; the first row is the header.
std::string format_table(const std::vector<std::vector<std::string>>& rows);

std::string fmt_num(double v, int decimals);  // fixed notation; "-" for a negative (absent) figure

// The longest prefix of `s` of at most max_bytes that does not end inside a UTF-8 sequence: report
// samples are cut to a length, and a cut through a multi-byte character would make the JSON report
// unwritable (nlohmann::json refuses invalid UTF-8 on dump).
std::string utf8_prefix(const std::string& s, size_t max_bytes);

}  // namespace onecard::client
