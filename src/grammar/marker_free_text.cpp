#include "grammar/marker_free_text.h"

#include <map>
#include <optional>
#include <string>
#include <tuple>

namespace onecard::grammar {

namespace {

// Where a UTF-8 decoder stands (RFC 3629: no overlongs, surrogates or code points past U+10FFFF):
// `pending` continuation bytes still due, the next one in [lo, hi]. pending 0: between characters.
struct Utf8 {
    uint8_t pending = 0, lo = 0, hi = 0;
    auto operator<=>(const Utf8&) const = default;
};

std::optional<Utf8> utf8_next(Utf8 u, uint8_t b) {
    if (u.pending > 0) {
        if (b < u.lo || b > u.hi) return std::nullopt;
        return u.pending == 1 ? Utf8{} : Utf8{static_cast<uint8_t>(u.pending - 1), 0x80, 0xBF};
    }
    if (b < 0x80) return Utf8{};
    if (b >= 0xC2 && b <= 0xDF) return Utf8{1, 0x80, 0xBF};
    if (b == 0xE0) return Utf8{2, 0xA0, 0xBF};
    if (b == 0xED) return Utf8{2, 0x80, 0x9F};
    if (b >= 0xE1 && b <= 0xEF) return Utf8{2, 0x80, 0xBF};
    if (b == 0xF0) return Utf8{3, 0x90, 0xBF};
    if (b >= 0xF1 && b <= 0xF3) return Utf8{3, 0x80, 0xBF};
    if (b == 0xF4) return Utf8{3, 0x80, 0x8F};
    return std::nullopt;
}

}  // namespace

void add_marker_free_text(Grammar& g, uint32_t from, uint32_t to, const std::vector<std::string_view>& markers,
                          std::string_view excluded, bool min_one) {
    // Marker states: the distinct proper prefixes of the markers, "" first.
    std::vector<std::string> prefix{""};
    std::map<std::string, size_t, std::less<>> index{{"", 0}};
    std::string marker_bytes;  // every byte some marker holds; any other byte leads back to ""
    for (const std::string_view m : markers) {
        marker_bytes += m;
        for (size_t i = 1; i < m.size(); ++i)
            if (index.emplace(std::string(m.substr(0, i)), prefix.size()).second) prefix.emplace_back(m.substr(0, i));
    }
    // The marker state after `b`, or nullopt when `b` completes a marker.
    auto marker_next = [&](size_t state, uint8_t b) -> std::optional<size_t> {
        if (marker_bytes.find(static_cast<char>(b)) == std::string::npos) return 0;
        const std::string t = prefix[state] + static_cast<char>(b);
        for (const std::string_view m : markers)
            if (t.ends_with(m)) return std::nullopt;
        for (size_t k = 0; k < t.size(); ++k)  // the longest tail of t that is a state
            if (auto it = index.find(std::string_view(t).substr(k)); it != index.end()) return it->second;
        return 0;
    };
    // A node per reachable (marker state, UTF-8 state); the text may end only between characters.
    using Key = std::tuple<size_t, Utf8>;
    std::map<Key, uint32_t> node;
    std::vector<Key> todo;
    auto node_of = [&](const Key& k) {
        auto [it, fresh] = node.emplace(k, 0);
        if (fresh) {
            it->second = g.add_node();
            if (std::get<1>(k) == Utf8{}) g.add_eps(it->second, to);
            todo.push_back(k);
        }
        return it->second;
    };
    auto next = [&](const Key& k, int b) -> std::optional<Key> {
        if (excluded.find(static_cast<char>(b)) != std::string_view::npos) return std::nullopt;
        const auto u = utf8_next(std::get<1>(k), static_cast<uint8_t>(b));
        const auto m = u ? marker_next(std::get<0>(k), static_cast<uint8_t>(b)) : std::nullopt;
        if (!m) return std::nullopt;
        return Key{*m, *u};
    };
    // The byte edges of `k` leaving `at`, runs of bytes with one target merged into a range.
    auto add_edges = [&](uint32_t at, const Key& k) {
        std::optional<Key> run = next(k, 0);
        int run_lo = 0;
        for (int b = 1; b <= 256; ++b) {
            const std::optional<Key> t = b < 256 ? next(k, b) : std::nullopt;
            if (b < 256 && t == run) continue;
            if (run) g.add_bytes(at, static_cast<uint8_t>(run_lo), static_cast<uint8_t>(b - 1), node_of(*run));
            run_lo = b;
            run = t;
        }
    };
    const Key start{0, Utf8{}};
    add_edges(from, start);  // the entry: like the start state, without the epsilon when a byte is required
    if (!min_one) g.add_eps(from, to);
    while (!todo.empty()) {
        const Key k = todo.back();
        todo.pop_back();
        add_edges(node.at(k), k);
    }
}

}  // namespace onecard::grammar
