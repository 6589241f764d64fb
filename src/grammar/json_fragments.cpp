#include "grammar/json_fragments.h"

#include "core/error.h"

#include <algorithm>
#include <array>
#include <map>
#include <vector>

namespace onecard::grammar {

namespace {

// UTF-8 as a DFA (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF). State kBoundary
// is between characters; the others say how many continuation bytes are pending and, for the
// first of them, the restricted range. kAfterEF / kAfterEFBD exist only under kNoFullwidthBar: they
// follow the bytes of U+FF5C (EF BD 9C) so that its last byte alone is left out.
enum Utf8State : uint8_t {
    kBoundary,
    kCont1,
    kCont2,
    kCont3,
    kAfterE0,
    kAfterED,
    kAfterF0,
    kAfterF4,
    kAfterEF,
    kAfterEFBD,
    kNumUtf8
};
struct Utf8Edge {
    uint8_t lo, hi;
    Utf8State next;
};
const std::vector<Utf8Edge>& utf8_edges(Utf8State s, RawChars raw) {
    // kBoundary has the string-content ASCII ranges ('"', '\\' and controls < 0x20 excluded).
    static const std::array<std::vector<Utf8Edge>, kNumUtf8> all = {{
        {{0x20, 0x21, kBoundary},
         {0x23, 0x5B, kBoundary},
         {0x5D, 0x7F, kBoundary},
         {0xC2, 0xDF, kCont1},
         {0xE0, 0xE0, kAfterE0},
         {0xE1, 0xEC, kCont2},
         {0xED, 0xED, kAfterED},
         {0xEE, 0xEF, kCont2},
         {0xF0, 0xF0, kAfterF0},
         {0xF1, 0xF3, kCont3},
         {0xF4, 0xF4, kAfterF4}},
        {{0x80, 0xBF, kBoundary}},
        {{0x80, 0xBF, kCont1}},
        {{0x80, 0xBF, kCont2}},
        {{0xA0, 0xBF, kCont1}},
        {{0x80, 0x9F, kCont1}},
        {{0x90, 0xBF, kCont2}},
        {{0x80, 0x8F, kCont2}},
    }};  // kAfterEF, kAfterEFBD: empty (never entered)
    static const std::array<std::vector<Utf8Edge>, kNumUtf8> no_bar = [] {
        auto t = all;
        t[kBoundary][7] = {0xEE, 0xEE, kCont2};
        t[kBoundary].push_back({0xEF, 0xEF, kAfterEF});
        t[kAfterEF] = {{0x80, 0xBC, kCont1}, {0xBD, 0xBD, kAfterEFBD}, {0xBE, 0xBF, kCont1}};
        t[kAfterEFBD] = {{0x80, 0x9B, kBoundary}, {0x9D, 0xBF, kBoundary}};  // 0x9C would end U+FF5C
        return t;
    }();
    return raw == RawChars::kAll ? all[s] : no_bar[s];
}

void add_hex(Grammar& g, uint32_t from, uint32_t to) {
    g.add_bytes(from, '0', '9', to);
    g.add_bytes(from, 'A', 'F', to);
    g.add_bytes(from, 'a', 'f', to);
}

// from --n hex digits--> to
void add_hex_run(Grammar& g, uint32_t from, uint32_t to, int n) {
    uint32_t cur = from;
    for (int i = 0; i < n; ++i) {
        const uint32_t next = i + 1 == n ? to : g.add_node();
        add_hex(g, cur, next);
        cur = next;
    }
}

void add_digits(Grammar& g, uint32_t from, uint32_t to, int n) {
    uint32_t cur = from;
    for (int i = 0; i < n; ++i) {
        const uint32_t next = i + 1 == n ? to : g.add_node();
        g.add_bytes(cur, '0', '9', next);
        cur = next;
    }
}

// from --an escape sequence after the backslash--> to
void add_escape_body(Grammar& g, uint32_t e, uint32_t to) {
    for (const char c : std::string_view("\"\\/bfnrt")) g.add_bytes(e, c, c, to);
    const uint32_t u = g.add_node();
    g.add_bytes(e, 'u', 'u', u);
    // \uXXXX: D800-DBFF must be followed by \uDC00-DFFF; a lone low surrogate is refused (strict
    // parsers, nlohmann's included, reject both halves alone).
    const uint32_t h3 = g.add_node();
    g.add_bytes(u, '0', '9', h3);
    g.add_bytes(u, 'A', 'C', h3);
    g.add_bytes(u, 'a', 'c', h3);
    g.add_bytes(u, 'E', 'F', h3);
    g.add_bytes(u, 'e', 'f', h3);
    add_hex_run(g, h3, to, 3);
    const uint32_t ud = g.add_node();
    g.add_bytes(u, 'D', 'D', ud);
    g.add_bytes(u, 'd', 'd', ud);
    const uint32_t h2 = g.add_node();
    g.add_bytes(ud, '0', '7', h2);
    add_hex_run(g, h2, to, 2);
    const uint32_t hs = g.add_node();
    for (const char c : std::string_view("89ABab")) g.add_bytes(ud, c, c, hs);
    const uint32_t low = g.add_node();
    add_hex_run(g, hs, low, 2);
    const uint32_t low_d = g.add_node();
    g.add_literal(low, "\\u", low_d);
    const uint32_t low_x = g.add_node();
    g.add_bytes(low_d, 'D', 'D', low_x);
    g.add_bytes(low_d, 'd', 'd', low_x);
    const uint32_t low_h = g.add_node();
    g.add_bytes(low_x, 'C', 'F', low_h);
    g.add_bytes(low_x, 'c', 'f', low_h);
    add_hex_run(g, low_h, to, 2);
}

// uint in [lo, hi] of exactly the digits of a and b (same length, a <= b digit strings).
void add_same_len(Grammar& g, uint32_t from, uint32_t to, const std::string& a, const std::string& b) {
    if (a.empty()) {
        g.add_eps(from, to);
        return;
    }
    if (a.size() == 1) {
        g.add_bytes(from, static_cast<uint8_t>(a[0]), static_cast<uint8_t>(b[0]), to);
        return;
    }
    // Every n-digit string: a plain chain. Without this the split below recurses into 0..0-9..9
    // twice per digit, 2^n nodes (a "minimum" of 17 digits built millions; json_schema_fuzz found it).
    if (a.find_first_not_of('0') == std::string::npos && b.find_first_not_of('9') == std::string::npos) {
        add_digits(g, from, to, static_cast<int>(a.size()));
        return;
    }
    const std::string ra = a.substr(1), rb = b.substr(1);
    if (a[0] == b[0]) {
        const uint32_t m = g.add_node();
        g.add_bytes(from, static_cast<uint8_t>(a[0]), static_cast<uint8_t>(a[0]), m);
        add_same_len(g, m, to, ra, rb);
        return;
    }
    const std::string nines(ra.size(), '9'), zeros(ra.size(), '0');
    const uint32_t m1 = g.add_node();
    g.add_bytes(from, static_cast<uint8_t>(a[0]), static_cast<uint8_t>(a[0]), m1);
    add_same_len(g, m1, to, ra, nines);
    if (a[0] + 1 <= b[0] - 1) {
        const uint32_t m2 = g.add_node();
        g.add_bytes(from, static_cast<uint8_t>(a[0] + 1), static_cast<uint8_t>(b[0] - 1), m2);
        add_digits(g, m2, to, static_cast<int>(ra.size()));
    }
    const uint32_t m3 = g.add_node();
    g.add_bytes(from, static_cast<uint8_t>(b[0]), static_cast<uint8_t>(b[0]), m3);
    add_same_len(g, m3, to, zeros, rb);
}

// from --1..max_n digits--> to
void add_digits_upto(Grammar& g, uint32_t from, uint32_t to, int max_n) {
    uint32_t cur = from;
    for (int i = 0; i < max_n; ++i) {
        const uint32_t next = g.add_node();
        g.add_bytes(cur, '0', '9', next);
        g.add_eps(next, to);
        cur = next;
    }
}

uint64_t pow10(size_t n) {
    uint64_t p = 1;
    for (size_t i = 0; i < n; ++i) p *= 10;
    return p;
}

// Unsigned decimal (no leading zeros) in [lo, hi]; hi empty: unbounded.
void add_uint_range(Grammar& g, uint32_t from, uint32_t to, uint64_t lo, std::optional<uint64_t> hi) {
    const size_t len_lo = std::to_string(lo).size();
    const size_t len_hi = hi ? std::to_string(*hi).size() : len_lo;
    for (size_t len = len_lo; len <= len_hi; ++len) {
        const uint64_t first = len == 1 ? 0 : pow10(len - 1);
        const uint64_t last = len >= 20 ? UINT64_MAX : pow10(len) - 1;
        const uint64_t a = std::max(lo, first), b = hi ? std::min(*hi, last) : last;
        if (a <= b) add_same_len(g, from, to, std::to_string(a), std::to_string(b));
    }
    if (!hi && static_cast<int>(len_lo) < kMaxIntegerDigits) {
        // Every number with more digits than lo is larger: [1-9][0-9]{len_lo}, then optional digits
        // up to kMaxIntegerDigits in all.
        const uint32_t m = g.add_node(), tail = g.add_node();
        g.add_bytes(from, '1', '9', m);
        add_digits(g, m, tail, static_cast<int>(len_lo));
        g.add_eps(tail, to);
        const int more = kMaxIntegerDigits - static_cast<int>(len_lo) - 1;
        if (more > 0) add_digits_upto(g, tail, to, more);
    }
}

// Splits [lo, hi] around the bytes in `taken` and adds the pieces from -> to.
void add_range_minus(Grammar& g, uint32_t from, uint8_t lo, uint8_t hi, const std::vector<uint8_t>& taken,
                     uint32_t to) {
    int start = lo;
    for (int b = lo; b <= hi + 1; ++b) {
        const bool cut = b == hi + 1 || std::find(taken.begin(), taken.end(), static_cast<uint8_t>(b)) != taken.end();
        if (!cut) continue;
        if (start <= b - 1) g.add_bytes(from, static_cast<uint8_t>(start), static_cast<uint8_t>(b - 1), to);
        start = b + 1;
    }
}

}  // namespace

void add_string_char(Grammar& g, uint32_t from, uint32_t to, bool no_escapes, RawChars raw) {
    std::array<uint32_t, kNumUtf8> node{};  // the node for each UTF-8 state inside this character
    node[kBoundary] = from;
    for (int s = 1; s < kNumUtf8; ++s)  // states `raw` never enters get no node
        node[s] = utf8_edges(static_cast<Utf8State>(s), raw).empty() ? 0 : g.add_node();
    for (int s = 0; s < kNumUtf8; ++s)
        for (const auto& e : utf8_edges(static_cast<Utf8State>(s), raw))
            g.add_bytes(node[s], e.lo, e.hi, e.next == kBoundary ? to : node[e.next]);
    if (!no_escapes) {
        const uint32_t e = g.add_node();
        g.add_bytes(from, '\\', '\\', e);
        add_escape_body(g, e, to);
    }
}

void add_string(Grammar& g, uint32_t from, uint32_t to, uint64_t min_len, std::optional<uint64_t> max_len,
                RawChars raw) {
    const uint64_t k = max_len ? *max_len : min_len;
    std::vector<uint32_t> p(k + 1);  // [k + 1] node after i characters
    for (auto& v : p) v = g.add_node();
    g.add_bytes(from, '"', '"', p[0]);
    for (uint64_t i = 0; i <= k; ++i) {
        if (i < k) add_string_char(g, p[i], p[i + 1], false, raw);
        if (i >= min_len) g.add_bytes(p[i], '"', '"', to);
    }
    if (!max_len) add_string_char(g, p[k], p[k], false, raw);
}

void add_string_excluding(Grammar& g, uint32_t from, uint32_t to, const std::vector<std::string>& excluded,
                          RawChars raw) {
    // A byte trie of the excluded names, run alongside the UTF-8 DFA: a byte that follows a trie
    // edge stays in the trie, any other valid byte drops to the free automaton (which can no
    // longer spell an excluded name). A trie node that completes a name may not close the string.
    std::array<uint32_t, kNumUtf8> free_node{};
    for (auto& v : free_node) v = g.add_node();
    for (int s = 0; s < kNumUtf8; ++s)
        for (const auto& e : utf8_edges(static_cast<Utf8State>(s), raw))
            g.add_bytes(free_node[s], e.lo, e.hi, free_node[e.next]);
    g.add_bytes(free_node[kBoundary], '"', '"', to);

    struct TrieNode {
        uint32_t node;
        Utf8State state;
        bool is_name = false;
        std::map<uint8_t, size_t> children;
    };
    std::vector<TrieNode> trie{{g.add_node(), kBoundary, false, {}}};
    g.add_bytes(from, '"', '"', trie[0].node);
    for (const auto& name : excluded) {
        // A name needing escapes cannot be spelled without them: nothing to exclude.
        if (std::any_of(name.begin(), name.end(), [](char c) {
                const auto b = static_cast<uint8_t>(c);
                return b < 0x20 || b == '"' || b == '\\';
            }))
            continue;
        size_t cur = 0;
        for (const char c : name) {
            const auto b = static_cast<uint8_t>(c);
            auto it = trie[cur].children.find(b);
            if (it == trie[cur].children.end()) {
                Utf8State next = kNumUtf8;
                for (const auto& e : utf8_edges(trie[cur].state, raw))
                    if (b >= e.lo && b <= e.hi) next = e.next;
                if (next == kNumUtf8) break;  // not valid UTF-8 here: no string spells it
                trie.push_back({g.add_node(), next, false, {}});
                it = trie[cur].children.emplace(b, trie.size() - 1).first;
            }
            cur = it->second;
        }
        if (cur != 0 && trie[cur].state == kBoundary) trie[cur].is_name = true;
    }
    for (const auto& t : trie) {
        std::vector<uint8_t> taken;
        for (const auto& [b, child] : t.children) {
            g.add_bytes(t.node, b, b, trie[child].node);
            taken.push_back(b);
        }
        for (const auto& e : utf8_edges(t.state, raw)) add_range_minus(g, t.node, e.lo, e.hi, taken, free_node[e.next]);
        if (t.state == kBoundary && !t.is_name) g.add_bytes(t.node, '"', '"', to);
    }
}

void add_number(Grammar& g, uint32_t from, uint32_t to, bool non_negative) {
    const uint32_t sign = g.add_node(), zero = g.add_node(), digits = g.add_node();
    g.add_eps(from, sign);
    if (!non_negative) g.add_bytes(from, '-', '-', sign);
    g.add_bytes(sign, '0', '0', zero);
    g.add_bytes(sign, '1', '9', digits);
    const uint32_t int_end = g.add_node();
    g.add_eps(zero, int_end);
    g.add_eps(digits, int_end);
    add_digits_upto(g, digits, int_end, kMaxIntegerDigits - 1);
    const uint32_t dot = g.add_node(), frac = g.add_node(), frac_end = g.add_node();
    g.add_bytes(int_end, '.', '.', dot);
    g.add_bytes(dot, '0', '9', frac);
    g.add_bytes(frac, '0', '9', frac);
    g.add_eps(int_end, frac_end);
    g.add_eps(frac, frac_end);
    const uint32_t e = g.add_node(), esign = g.add_node(), exp = g.add_node();
    g.add_bytes(frac_end, 'e', 'e', e);
    g.add_bytes(frac_end, 'E', 'E', e);
    g.add_eps(e, esign);
    g.add_bytes(e, '+', '+', esign);
    g.add_bytes(e, '-', '-', esign);
    add_digits_upto(g, esign, exp, kMaxExponentDigits);
    g.add_eps(frac_end, to);
    g.add_eps(exp, to);
}

void add_integer(Grammar& g, uint32_t from, uint32_t to, std::optional<int64_t> lo, std::optional<int64_t> hi) {
    ONECARD_CHECK(!lo || !hi || *lo <= *hi, "integer range [{}, {}] is empty", *lo, *hi);
    // Negative part: [lo, min(hi, -1)] as '-' then magnitudes [max(1, -min(hi,-1)), -lo].
    if (!lo || *lo < 0) {
        const int64_t upper = hi ? std::min<int64_t>(*hi, -1) : -1;
        if (!lo || *lo <= upper) {
            const uint32_t m = g.add_node();
            g.add_bytes(from, '-', '-', m);
            const uint64_t mag_lo = static_cast<uint64_t>(-(upper + 1)) + 1;  // -upper without overflow
            std::optional<uint64_t> mag_hi;
            if (lo) mag_hi = static_cast<uint64_t>(-(*lo + 1)) + 1;
            add_uint_range(g, m, to, mag_lo, mag_hi);
        }
    }
    // Non-negative part: [max(lo, 0), hi].
    if (!hi || *hi >= 0) {
        const uint64_t a = lo ? static_cast<uint64_t>(std::max<int64_t>(*lo, 0)) : 0;
        std::optional<uint64_t> b;
        if (hi) b = static_cast<uint64_t>(*hi);
        add_uint_range(g, from, to, a, b);
    }
}

bool add_string_format(Grammar& g, uint32_t from, uint32_t to, std::string_view format) {
    auto date = [&](uint32_t a, uint32_t b) {
        const uint32_t y = g.add_node(), m0 = g.add_node(), m1 = g.add_node(), dash = g.add_node();
        add_digits(g, a, y, 4);
        g.add_literal(y, "-", m0);
        const uint32_t m0a = g.add_node(), m0b = g.add_node();
        g.add_bytes(m0, '0', '0', m0a);
        g.add_bytes(m0a, '1', '9', m1);
        g.add_bytes(m0, '1', '1', m0b);
        g.add_bytes(m0b, '0', '2', m1);
        g.add_literal(m1, "-", dash);
        const uint32_t d0 = g.add_node(), d12 = g.add_node(), d3 = g.add_node();
        g.add_bytes(dash, '0', '0', d0);
        g.add_bytes(d0, '1', '9', b);
        g.add_bytes(dash, '1', '2', d12);
        g.add_bytes(d12, '0', '9', b);
        g.add_bytes(dash, '3', '3', d3);
        g.add_bytes(d3, '0', '1', b);
    };
    auto two = [&](uint32_t a, uint32_t b, char first_hi, char second_hi_at_top) {
        // 00..(first_hi)(9), with the last first digit limited to second_hi_at_top (e.g. 23, 59).
        const uint32_t low = g.add_node(), top = g.add_node();
        if (first_hi > '0') g.add_bytes(a, '0', static_cast<uint8_t>(first_hi - 1), low);
        g.add_bytes(low, '0', '9', b);
        g.add_bytes(a, static_cast<uint8_t>(first_hi), static_cast<uint8_t>(first_hi), top);
        g.add_bytes(top, '0', static_cast<uint8_t>(second_hi_at_top), b);
    };
    auto time = [&](uint32_t a, uint32_t b) {
        const uint32_t hh = g.add_node(), c1 = g.add_node(), mm = g.add_node(), c2 = g.add_node(), ss = g.add_node();
        two(a, hh, '2', '3');
        g.add_literal(hh, ":", c1);
        two(c1, mm, '5', '9');
        g.add_literal(mm, ":", c2);
        two(c2, ss, '5', '9');
        const uint32_t dot = g.add_node(), frac = g.add_node(), off = g.add_node();
        g.add_eps(ss, off);
        g.add_bytes(ss, '.', '.', dot);
        g.add_bytes(dot, '0', '9', frac);
        g.add_bytes(frac, '0', '9', frac);
        g.add_eps(frac, off);
        g.add_bytes(off, 'Z', 'Z', b);
        const uint32_t sign = g.add_node(), oh = g.add_node(), oc = g.add_node();
        g.add_bytes(off, '+', '+', sign);
        g.add_bytes(off, '-', '-', sign);
        two(sign, oh, '2', '3');
        g.add_literal(oh, ":", oc);
        two(oc, b, '5', '9');
    };
    const uint32_t open = g.add_node(), close = g.add_node();
    if (format == "date") {
        date(open, close);
    } else if (format == "time") {
        time(open, close);
    } else if (format == "date-time") {
        const uint32_t d = g.add_node(), t = g.add_node();
        date(open, d);
        g.add_literal(d, "T", t);
        time(t, close);
    } else if (format == "uuid") {
        uint32_t cur = open;
        const int groups[5] = {8, 4, 4, 4, 12};
        for (int i = 0; i < 5; ++i) {
            const uint32_t next = i == 4 ? close : g.add_node();
            if (i < 4) {
                const uint32_t dash = g.add_node();
                add_hex_run(g, cur, dash, groups[i]);
                g.add_literal(dash, "-", next);
            } else {
                add_hex_run(g, cur, next, groups[i]);
            }
            cur = next;
        }
    } else {
        return false;  // the nodes made above are unreachable and harmless
    }
    g.add_bytes(from, '"', '"', open);
    g.add_bytes(close, '"', '"', to);
    return true;
}

void add_separator(Grammar& g, uint32_t from, uint32_t to, char c, Separators sep) {
    g.add_literal(from, std::string(1, c), to);
    if (sep == Separators::kSpaceOptional) g.add_literal(from, std::string(1, c) + " ", to);
}

uint32_t any_value_rule(Grammar& g, std::optional<uint32_t>& cached, RawChars raw, Separators sep) {
    if (cached) return *cached;
    const uint32_t value = g.add_rule("any value");
    cached = value;
    const uint32_t str = g.add_rule("string"), num = g.add_rule("number"), obj = g.add_rule("object"),
                   arr = g.add_rule("array");
    add_string(g, g.rule(str).start, g.rule(str).end, 0, std::nullopt, raw);
    add_number(g, g.rule(num).start, g.rule(num).end, false);
    const uint32_t vs = g.rule(value).start, ve = g.rule(value).end;
    for (const uint32_t r : {obj, arr, str, num}) g.add_call(vs, r, ve);
    for (const char* lit : {"true", "false", "null"}) g.add_literal(vs, lit, ve);
    {
        const uint32_t s = g.rule(obj).start, e = g.rule(obj).end;
        const uint32_t open = g.add_node(), key = g.add_node(), colon = g.add_node(), member = g.add_node();
        g.add_literal(s, "{", open);
        g.add_literal(open, "}", e);
        g.add_call(open, str, key);
        add_separator(g, key, colon, ':', sep);
        g.add_call(colon, value, member);
        const uint32_t comma = g.add_node();
        add_separator(g, member, comma, ',', sep);
        g.add_call(comma, str, key);
        g.add_literal(member, "}", e);
    }
    {
        const uint32_t s = g.rule(arr).start, e = g.rule(arr).end;
        const uint32_t open = g.add_node(), item = g.add_node(), comma = g.add_node();
        g.add_literal(s, "[", open);
        g.add_literal(open, "]", e);
        g.add_call(open, value, item);
        add_separator(g, item, comma, ',', sep);
        g.add_call(comma, value, item);
        g.add_literal(item, "]", e);
    }
    return value;
}

std::string json_literal(std::string json_text, RawChars raw) {
    if (raw == RawChars::kAll) return json_text;
    static constexpr std::string_view kBar = "\xEF\xBD\x9C", kEscaped = "\\uff5c";
    for (size_t at = json_text.find(kBar); at != std::string::npos; at = json_text.find(kBar, at + kEscaped.size()))
        json_text.replace(at, kBar.size(), kEscaped);
    return json_text;
}

}  // namespace onecard::grammar
