#include "tokenizer/byte_level.h"

namespace onecard::tok {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

bool maps_to_itself(int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

// Expected continuation ranges for a lead byte; need == 0 means the byte cannot start a sequence.
struct LeadInfo {
    int need = 0;
    uint8_t lo = 0x80;  // allowed range of the first continuation byte
    uint8_t hi = 0xBF;
};

LeadInfo lead_info(uint8_t b) {
    if (b >= 0xC2 && b <= 0xDF) return {1, 0x80, 0xBF};
    if (b == 0xE0) return {2, 0xA0, 0xBF};  // no overlongs
    if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return {2, 0x80, 0xBF};
    if (b == 0xED) return {2, 0x80, 0x9F};  // no surrogates
    if (b == 0xF0) return {3, 0x90, 0xBF};
    if (b >= 0xF1 && b <= 0xF3) return {3, 0x80, 0xBF};
    if (b == 0xF4) return {3, 0x80, 0x8F};  // <= U+10FFFF
    return {};
}

}  // namespace

ByteLevelAlphabet::ByteLevelAlphabet() {
    char_to_byte_.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
        const uint32_t cp = maps_to_itself(b) ? static_cast<uint32_t>(b) : next++;
        byte_to_char_[b] = cp;
        char_to_byte_[cp] = static_cast<int16_t>(b);
        std::string u;
        append_utf8(cp, u);
        utf8_of_byte_[b] = {u[0], u.size() > 1 ? u[1] : '\0'};
    }
}

void ByteLevelAlphabet::encode(std::string_view bytes, std::string& out) const {
    for (const char c : bytes) {
        const auto& u = utf8_of_byte_[static_cast<uint8_t>(c)];
        out.push_back(u[0]);
        if (u[1] != '\0') out.push_back(u[1]);
    }
}

bool ByteLevelAlphabet::decode(std::string_view token, std::string& out) const {
    const size_t start = out.size();
    size_t i = 0;
    while (i < token.size()) {
        uint32_t cp = 0;
        const size_t len = decode_utf8_char(token, i, cp);
        if (len == 0 || cp >= char_to_byte_.size() || char_to_byte_[cp] < 0) {
            out.resize(start);
            return false;
        }
        out.push_back(static_cast<char>(char_to_byte_[cp]));
        i += len;
    }
    return true;
}

const ByteLevelAlphabet& byte_level_alphabet() {
    static const ByteLevelAlphabet alphabet;
    return alphabet;
}

void append_utf8(uint32_t cp, std::string& out) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

size_t decode_utf8_char(std::string_view s, size_t i, uint32_t& cp) {
    const auto b = static_cast<uint8_t>(s[i]);
    if (b < 0x80) {
        cp = b;
        return 1;
    }
    const LeadInfo info = lead_info(b);
    const auto need = static_cast<size_t>(info.need);
    if (need == 0 || i + need >= s.size()) return 0;
    uint32_t v = b & (0x3F >> info.need);
    for (int k = 1; k <= info.need; ++k) {
        const auto c = static_cast<uint8_t>(s[i + k]);
        const uint8_t lo = k == 1 ? info.lo : 0x80;
        const uint8_t hi = k == 1 ? info.hi : 0xBF;
        if (c < lo || c > hi) return 0;
        v = (v << 6) | (c & 0x3F);
    }
    cp = v;
    return static_cast<size_t>(info.need) + 1;
}

bool is_valid_utf8(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        // ASCII fast path: most text is mostly ASCII.
        if (static_cast<uint8_t>(s[i]) < 0x80) {
            ++i;
            continue;
        }
        uint32_t cp = 0;
        const size_t len = decode_utf8_char(s, i, cp);
        if (len == 0) return false;
        i += len;
    }
    return true;
}

size_t append_utf8_lossy(std::string_view bytes, std::string& out, bool final) {
    const size_t n = bytes.size();
    size_t i = 0;
    while (i < n) {
        const auto b = static_cast<uint8_t>(bytes[i]);
        if (b < 0x80) {
            out.push_back(static_cast<char>(b));
            ++i;
            continue;
        }
        const LeadInfo info = lead_info(b);
        if (info.need == 0) {
            out.append(kReplacement);
            ++i;
            continue;
        }
        size_t j = i + 1;
        int got = 0;
        while (got < info.need) {
            if (j >= n) {
                // Truncated at the end of the input: a later chunk may complete it.
                if (!final) return i;
                out.append(kReplacement);
                return n;
            }
            const auto c = static_cast<uint8_t>(bytes[j]);
            const uint8_t lo = got == 0 ? info.lo : 0x80;
            const uint8_t hi = got == 0 ? info.hi : 0xBF;
            if (c < lo || c > hi) break;
            ++j;
            ++got;
        }
        if (got == info.need) {
            out.append(bytes.substr(i, j - i));
        } else {
            out.append(kReplacement);  // one U+FFFD for the maximal invalid subpart
        }
        i = j;
    }
    return n;
}

}  // namespace onecard::tok
