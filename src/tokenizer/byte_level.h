// Byte-level helpers shared by the BPE tokenizer, its decoder and the streaming detokenizer:
// the GPT-2 byte <-> printable-character map, and UTF-8 validation / lossy decoding.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace onecard::tok {

// The GPT-2 byte-level alphabet: every byte value maps to one printable Unicode character so
// that BPE never sees raw control bytes or spaces. Bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF map
// to themselves; the other 68 bytes map to U+0100.. in byte order (so ' ' becomes U+0120 'Ġ').
class ByteLevelAlphabet {
public:
    ByteLevelAlphabet();

    // The character (code point) byte `b` maps to.
    uint32_t char_of(uint8_t b) const { return byte_to_char_[b]; }
    // Appends the UTF-8 encoding of the mapped character of every byte in `bytes`.
    void encode(std::string_view bytes, std::string& out) const;
    // Maps a byte-level token back to raw bytes. Returns false (out untouched) when some character
    // is not in the alphabet: such a token (an added token like "<｜User｜>") stands for its own
    // UTF-8 bytes, which is what the Hugging Face ByteLevel decoder does.
    bool decode(std::string_view token, std::string& out) const;

private:
    std::array<uint32_t, 256> byte_to_char_{};
    std::array<std::array<char, 2>, 256> utf8_of_byte_{};  // mapped chars are all < U+0800
    std::array<int16_t, 512> char_to_byte_{};              // -1: not in the alphabet
};

// The one immutable alphabet instance (a function-local constant, built once).
const ByteLevelAlphabet& byte_level_alphabet();

// Appends the UTF-8 encoding of code point `cp` to `out`.
void append_utf8(uint32_t cp, std::string& out);

// Decodes one UTF-8 character at `s[i]`; returns its length (1..4) and sets `cp`, or 0 when the
// bytes at i do not start a complete valid sequence.
size_t decode_utf8_char(std::string_view s, size_t i, uint32_t& cp);

// True when `s` is entirely valid UTF-8 (no overlongs, surrogates or code points > U+10FFFF).
bool is_valid_utf8(std::string_view s);

// Lossy UTF-8 decoding with the WHATWG / Rust `from_utf8_lossy` rule: each maximal invalid subpart
// becomes one U+FFFD. Appends the text for `bytes` to `out` and returns how many bytes were
// consumed. When `final` is false, a trailing sequence that is incomplete but could still become
// valid is left unconsumed (at most 3 bytes), so a stream decoded chunk by chunk gives exactly the
// text of decoding it whole.
size_t append_utf8_lossy(std::string_view bytes, std::string& out, bool final);

}  // namespace onecard::tok
