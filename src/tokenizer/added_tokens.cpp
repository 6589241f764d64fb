#include "tokenizer/added_tokens.h"

#include "tokenizer/byte_level.h"
#include "tokenizer/pretokenizer.h"

namespace onecard::tok {

namespace {

// Whitespace as Rust's char::is_whitespace (Unicode White_Space), used by lstrip / rstrip.
bool is_white_space(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

// Word characters for single_word, as the `\w` of Rust's regex crate that Hugging Face uses
// (letters, marks, decimal digits, connector punctuation).
bool is_word_char(uint32_t cp) {
    if (cp < 0x80) {
        return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
    }
    static const Regex word("[\\p{L}\\p{M}\\p{Nd}\\p{Pc}]");
    std::string ch;
    append_utf8(cp, ch);
    std::vector<std::pair<uint32_t, uint32_t>> spans;
    word.find_all(ch, spans);
    return !spans.empty();
}

// Last code point before `pos` (text[..pos] is valid UTF-8).
uint32_t cp_before(std::string_view text, uint32_t pos) {
    uint32_t i = pos - 1;
    while (i > 0 && (static_cast<uint8_t>(text[i]) & 0xC0) == 0x80) --i;
    uint32_t cp = 0;
    decode_utf8_char(text, i, cp);
    return cp;
}

uint32_t cp_at(std::string_view text, uint32_t pos, size_t& len) {
    uint32_t cp = 0;
    len = decode_utf8_char(text, pos, cp);
    if (len == 0) len = 1;
    return cp;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
    nodes_.emplace_back();
    for (size_t t = 0; t < tokens_.size(); ++t) {
        const std::string& s = tokens_[t].content;
        if (s.empty()) continue;
        int32_t node = 0;
        for (const char c : s) {
            const auto b = static_cast<uint8_t>(c);
            int32_t child = -1;
            for (const auto& [cb, ci] : nodes_[node].children)
                if (cb == b) child = ci;
            if (child < 0) {
                child = static_cast<int32_t>(nodes_.size());
                nodes_[node].children.push_back({b, child});
                nodes_.emplace_back();
            }
            node = child;
        }
        nodes_[node].token = static_cast<int32_t>(t);
        first_byte_[static_cast<uint8_t>(s[0])] = true;
    }
}

std::pair<int32_t, uint32_t> AddedTokenMatcher::longest_at(std::string_view text, uint32_t pos, uint32_t end) const {
    std::pair<int32_t, uint32_t> best{-1, 0};
    int32_t node = 0;
    for (uint32_t j = pos; j < end; ++j) {
        const auto b = static_cast<uint8_t>(text[j]);
        int32_t child = -1;
        for (const auto& [cb, ci] : nodes_[node].children)
            if (cb == b) {
                child = ci;
                break;
            }
        if (child < 0) break;
        node = child;
        if (nodes_[node].token >= 0) best = {nodes_[node].token, j + 1};
    }
    return best;
}

void AddedTokenMatcher::split(std::string_view text, uint32_t begin, uint32_t end,
                              std::vector<TextSegment>& out) const {
    uint32_t start_offset = begin;  // end of what has been emitted so far
    uint32_t pos = begin;
    while (pos < end) {
        if (!first_byte_[static_cast<uint8_t>(text[pos])]) {
            ++pos;
            continue;
        }
        const auto [t, stop0] = longest_at(text, pos, end);
        if (t < 0) {
            ++pos;
            continue;
        }
        const AddedToken& tok = tokens_[t];
        uint32_t start = pos;
        uint32_t stop = stop0;
        if (tok.single_word) {
            size_t len = 0;
            const bool word_before = start > begin && is_word_char(cp_before(text, start));
            const bool word_after = stop < end && is_word_char(cp_at(text, stop, len));
            if (word_before || word_after) {
                // Rejected; like Hugging Face's non-overlapping Aho-Corasick iteration, scanning
                // resumes after the rejected match.
                pos = stop0;
                continue;
            }
        }
        if (tok.lstrip) {
            // Swallow whitespace to the left, but never what an earlier match already took.
            while (start > start_offset && is_white_space(cp_before(text, start))) {
                uint32_t i = start - 1;
                while (i > start_offset && (static_cast<uint8_t>(text[i]) & 0xC0) == 0x80) --i;
                start = i;
            }
        }
        if (tok.rstrip) {
            size_t len = 0;
            while (stop < end && is_white_space(cp_at(text, stop, len))) stop += static_cast<uint32_t>(len);
        }
        if (start_offset < start) out.push_back({start_offset, start, -1});
        out.push_back({start, stop, tok.id});
        start_offset = stop;
        pos = stop;
    }
    if (start_offset < end) out.push_back({start_offset, end, -1});
}

}  // namespace onecard::tok
