#include "tokenizer/dsml_scan.h"

#include <algorithm>

namespace onecard {

MarkerHit find_first_marker(std::string_view buf, std::initializer_list<std::string_view> markers) {
    // One left-to-right pass (not one find() per marker): a marker far away must not make every call scan
    // the whole buffer, or whole-text parsing of a long completion turns quadratic.
    bool first_byte[256] = {};
    for (std::string_view m : markers)
        if (!m.empty()) first_byte[static_cast<unsigned char>(m.front())] = true;
    for (size_t pos = 0; pos < buf.size(); ++pos) {
        if (!first_byte[static_cast<unsigned char>(buf[pos])]) continue;
        size_t i = 0;
        for (std::string_view m : markers) {
            if (!m.empty() && buf.substr(pos, m.size()) == m) return {pos, i};
            ++i;
        }
    }
    return {};
}

size_t partial_marker_suffix(std::string_view buf, std::initializer_list<std::string_view> markers) {
    size_t best = 0;
    for (std::string_view m : markers) {
        const size_t max_k = std::min(buf.size(), m.size() - 1);
        for (size_t k = max_k; k > best; --k) {
            if (buf.substr(buf.size() - k) == m.substr(0, k)) {
                best = k;
                break;
            }
        }
    }
    return best;
}

size_t trailing_newlines(std::string_view buf, size_t max_n) {
    size_t n = 0;
    while (n < max_n && n < buf.size() && buf[buf.size() - 1 - n] == '\n') ++n;
    return n;
}

}  // namespace onecard
