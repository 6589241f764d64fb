#include "tokenizer/detokenizer.h"

#include "core/error.h"
#include "tokenizer/byte_level.h"

namespace onecard {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(&tokenizer), skip_special_(skip_special) {}

std::string IncrementalDetokenizer::push(int32_t id) {
    // Byte-level BPE decodes by concatenating bytes, so a byte buffer is exact: no re-decoding
    // of a prefix window, and a leading space ("Ġ") is just the byte 0x20 like any other.
    if (!tokenizer_->append_token_bytes(id, skip_special_, pending_)) return {};
    std::string text;
    const size_t used = tok::append_utf8_lossy(pending_, text, /*final=*/false);
    pending_.erase(0, used);
    return text;
}

std::string IncrementalDetokenizer::flush() {
    std::string text;
    tok::append_utf8_lossy(pending_, text, /*final=*/true);
    pending_.clear();
    return text;
}

void IncrementalDetokenizer::check_integrity() const {
    ONECARD_CHECK(pending_.size() <= 3, "IncrementalDetokenizer: {} bytes pending (at most 3 allowed)",
                  pending_.size());
    std::string probe;
    ONECARD_CHECK(tok::append_utf8_lossy(pending_, probe, /*final=*/false) == 0,
                  "IncrementalDetokenizer: pending bytes are not an incomplete character");
}

}  // namespace onecard
