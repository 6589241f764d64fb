// The JSON-schema compiler (src/grammar/json_schema.h) on any bytes, and the matcher on what it builds.
// Checks: a refusal is a onecard::Error (SchemaError for a schema it cannot express), never a
// nlohmann exception, a stack overflow or a hang; an accepted schema gives a grammar that passes
// check_integrity(); a seeded random walk through that grammar (a random token from each next-token
// mask over a synthetic vocabulary with every single byte) never reaches a live state with no token
// and no end, every chosen token is also taken by the byte path, and a document the walk ends is one
// compact JSON value that the independent validator of the grammar tests (tests/unit/
// grammar_test_util.h, no code shared with src/grammar) accepts against the schema. Rolling the last
// tokens back and replaying them restores the same state.
// Input: [schema text ...][seed: 4 bytes][flags: 1 byte] (FuzzedDataProvider takes integers from the end).
#include "core/error.h"
#include "fuzz_util.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar_test_util.h"

#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <random>

using namespace onecard;
using namespace onecard::grammar;

namespace {

// Built once per process: all 256 bytes plus JSON-ish multi-byte pieces.
const std::shared_ptr<const TokenTrie>& vocab() {
    static const auto trie = std::make_shared<const TokenTrie>(test::synthetic_vocab(600, 11));
    return trie;
}

constexpr size_t kMaxWalkTokens = 400;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    FuzzedDataProvider fdp(data, size);
    const uint8_t flags = fdp.ConsumeIntegral<uint8_t>();
    const uint32_t seed = fdp.ConsumeIntegral<uint32_t>();
    const std::string text = fdp.ConsumeRemainingBytesAsString();

    std::shared_ptr<const Grammar> g;
    try {
        g = compile_json_schema_text(text);
    } catch (const Error&) {
        return 0;
    } catch (const std::exception& e) {
        fuzz::fail(std::string("compile_json_schema_text threw a non-onecard exception: ") + e.what());
    }
    try {
        g->check_integrity();
    } catch (const std::exception& e) {
        fuzz::fail(std::string("compiled grammar fails check_integrity: ") + e.what());
    }

    GrammarMatcher m(std::make_shared<const TokenMasks>(g, vocab()));
    std::mt19937 rng(seed);
    const TokenTrie& trie = *vocab();
    std::vector<uint32_t> mask(trie.n_mask_words());
    std::vector<int32_t> allowed;
    std::vector<int32_t> walk;
    std::string doc;
    bool ended = false;
    // flags & 3 sets how eagerly the walk ends where it may (1/2 .. 1/16 per step), so walks reach
    // both short documents and deep ones.
    const uint32_t end_odds = 2u << (flags & 3);
    while (walk.size() < kMaxWalkTokens) {
        if (m.is_complete() || (m.can_terminate() && rng() % end_odds == 0)) {
            ended = true;
            break;
        }
        std::fill(mask.begin(), mask.end(), 0u);
        m.fill_next_token_mask(mask);
        allowed.clear();
        for (size_t id = 0; id < trie.vocab_size(); ++id)
            if (test_bit(mask, static_cast<int32_t>(id))) allowed.push_back(static_cast<int32_t>(id));
        if (allowed.empty()) {
            FUZZ_CHECK(m.can_terminate(),
                       "a live matcher state with no allowed token and no end:\n" + text + "\n  after: " + doc);
            ended = true;
            break;
        }
        const int32_t id = allowed[rng() % allowed.size()];
        const std::string& bytes = trie.token_bytes(id);
        FUZZ_CHECK(m.can_accept_bytes(bytes), "a token in the mask is refused by the byte path: " + bytes);
        FUZZ_CHECK(m.accept_token(id), "accept_token refused a token in the mask");
        walk.push_back(id);
        doc += bytes;
    }
    m.check_integrity();
    FUZZ_CHECK(m.n_bytes() == doc.size(), "matcher byte count differs from the walk");

    if (ended) {
        FUZZ_CHECK(nlohmann::json::accept(doc), "a finished walk is not JSON:\n" + text + "\n  doc: " + doc);
        if ((flags & 4) == 0) {
            // The validator assumes a schema the compiler accepted; it reads numbers as long double and
            // follows $refs, so an exception from it is its own limit, not a finding.
            bool valid = true;
            bool judged = true;
            try {
                const auto schema = nlohmann::ordered_json::parse(text);
                valid = test::PolicyValidator(schema).validate_text(doc);
            } catch (const std::exception&) {
                judged = false;
            }
            FUZZ_CHECK(!judged || valid, "a finished walk fails the schema:\n" + text + "\n  doc: " + doc);
        }
    }

    // Roll back up to 8 tokens, replay them: the state must be the one before the rollback.
    const size_t back = std::min<size_t>(walk.size(), (flags >> 3) & 7);
    if (back > 0) {
        const StackSet before = m.state();
        m.rollback_tokens(back);
        m.check_integrity();
        for (size_t i = walk.size() - back; i < walk.size(); ++i)
            FUZZ_CHECK(m.accept_token(walk[i]), "a replayed token was refused after rollback");
        FUZZ_CHECK(m.state() == before, "rollback + replay did not restore the matcher state");
        FUZZ_CHECK(m.n_bytes() == doc.size(), "rollback + replay changed the byte count");
    }
    return 0;
}
