// Added tokens of a tokenizer.json (`added_tokens`): found in the raw text before any
// pre-tokenization, with the Hugging Face rules for their flags.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace onecard::tok {

struct AddedToken {
    std::string content;
    int32_t id = -1;
    bool special = false;      // dropped by decode(skip_special = true)
    bool lstrip = false;       // the match swallows whitespace on its left
    bool rstrip = false;       // ... and on its right
    bool single_word = false;  // only matches when not inside a word
    bool normalized = false;   // matched after normalisation (second pass) instead of on raw text
};

// A piece of input text: either plain text [begin, end) or one added token.
struct TextSegment {
    uint32_t begin = 0;
    uint32_t end = 0;
    int32_t added_id = -1;  // -1: plain text
};

// Leftmost-longest matcher over a set of added tokens (a byte trie; the Aho-Corasick
// LeftmostLongest semantics that Hugging Face uses).
class AddedTokenMatcher {
public:
    explicit AddedTokenMatcher(std::vector<AddedToken> tokens);

    bool empty() const { return tokens_.empty(); }
    // Splits text[begin, end) into plain segments and matched tokens, honouring single_word,
    // lstrip and rstrip. Appends to `out`.
    void split(std::string_view text, uint32_t begin, uint32_t end, std::vector<TextSegment>& out) const;

private:
    struct Node {
        std::vector<std::pair<uint8_t, int32_t>> children;
        int32_t token = -1;  // index into tokens_ when a token ends here
    };
    // Longest token starting at `pos` (not beyond `end`): token index and its end, or {-1, 0}.
    std::pair<int32_t, uint32_t> longest_at(std::string_view text, uint32_t pos, uint32_t end) const;

    std::vector<AddedToken> tokens_;
    std::vector<Node> nodes_;
    std::array<bool, 256> first_byte_{};
};

}  // namespace onecard::tok
