// Streaming detokenizer: turns generated ids into text one id at a time without ever emitting
// part of a UTF-8 character. The concatenation of every push() and the final flush() is exactly
// Tokenizer::decode() of the whole sequence (including U+FFFD for bytes that never became valid).
#pragma once

#include "tokenizer/tokenizer.h"

#include <cstdint>
#include <string>

namespace onecard {

class IncrementalDetokenizer {
public:
    // `tokenizer` must outlive this object.
    explicit IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special = false);

    // Text that became complete with `id` (possibly empty while a character is still split).
    std::string push(int32_t id);
    // Whatever is still pending, with an unfinished character replaced by U+FFFD; then resets.
    std::string flush();
    // Bytes held back because they end in an incomplete character (at most 3).
    size_t n_pending_bytes() const { return pending_.size(); }
    // Throws onecard::Error unless the held-back bytes are a proper, still completable prefix of
    // one UTF-8 character (the only state push() may leave behind).
    void check_integrity() const;

private:
    const Tokenizer* tokenizer_;
    bool skip_special_;
    std::string pending_;
};

}  // namespace onecard
