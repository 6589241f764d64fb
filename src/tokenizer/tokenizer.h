// Byte-level BPE tokenizer loaded from a Hugging Face tokenizer.json (the DeepSeek V3/V4 format):
// added tokens matched first, then the pre-tokenizer chain, then BPE; decode through the
// ByteLevel decoder. Thread-safe: encode/decode are const and may run concurrently.
#pragma once

#include "tokenizer/added_tokens.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace onecard {

class Tokenizer {
public:
    // Throws onecard::Error naming the file and the offending field.
    static Tokenizer from_file(const std::filesystem::path& tokenizer_json);
    static Tokenizer from_json(const nlohmann::json& j);

    Tokenizer(Tokenizer&&) noexcept;
    Tokenizer& operator=(Tokenizer&&) noexcept;
    ~Tokenizer();

    // Token ids of `text`. With allow_special = false no added token (special or not) is
    // recognised: the text is encoded as plain text, so user content can never forge a control
    // token. Invalid UTF-8 in `text` is replaced by U+FFFD first (as a Rust &str would require).
    std::vector<int32_t> encode(std::string_view text, bool allow_special = true) const;

    // Text of `ids`. skip_special drops added tokens flagged "special". Ids the tokenizer does not
    // define are skipped (as Hugging Face does). Invalid UTF-8 becomes U+FFFD.
    std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

    std::optional<int32_t> token_to_id(std::string_view token) const;
    // The vocabulary string of `id` (byte-level form for BPE tokens, e.g. "Ġhello"). Throws
    // onecard::Error for an id the tokenizer does not define.
    std::string id_to_token(int32_t id) const;
    // One past the largest defined id (BPE vocabulary and added tokens together).
    size_t vocab_size() const;

    // ---- beyond the basic API --------------------------------------------------------------
    // Appends the raw bytes `id` decodes to (possibly a partial UTF-8 sequence). Returns false,
    // appending nothing, for an undefined id or for a special token when skip_special is set.
    bool append_token_bytes(int32_t id, bool skip_special, std::string& out) const;
    bool is_special(int32_t id) const;
    bool is_added(int32_t id) const;
    const std::vector<tok::AddedToken>& added_tokens() const;
    // Throws onecard::Error when internal tables disagree (vocab vs ids vs merges vs added tokens).
    void check_integrity() const;

private:
    struct Impl;
    explicit Tokenizer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace onecard
