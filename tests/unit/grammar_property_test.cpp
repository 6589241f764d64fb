// Property tests of the matcher against an independent validator (grammar_test_util.h): random
// valid documents are taken byte by byte and end complete; random single-byte mutations die no
// earlier than the mutated byte, and the matcher's verdict on the whole mutated text equals the
// validator's. Token masks: every token in the mask keeps the matcher live and every token outside
// it kills it, checked exhaustively against the byte path (can_accept_bytes), on a synthetic
// vocabulary with multi-byte UTF-8 pieces and on the real DeepSeek-V4 vocabulary when installed.
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar_test_util.h"

#include <gtest/gtest.h>

namespace onecard::grammar {
namespace {

using test::ojson;

struct Compiled {
    test::NamedSchema named;
    ojson schema;
    std::shared_ptr<const Grammar> grammar;
};

std::vector<Compiled> compiled_schemas() {
    std::vector<Compiled> out;
    for (const auto& n : test::grammar_test_schemas()) {
        ojson s = ojson::parse(n.text);
        out.push_back({n, s, compile_json_schema(s)});
    }
    return out;
}

TEST(GrammarProperty, ValidDocumentsAreAcceptedAndComplete) {
    auto trie = std::make_shared<const TokenTrie>(test::synthetic_vocab(512, 1));
    for (const auto& c : compiled_schemas()) {
        auto masks = std::make_shared<const TokenMasks>(c.grammar, trie);
        test::DocGen gen(c.schema, 42);
        test::PolicyValidator val(c.schema);
        for (int n = 0; n < 200; ++n) {
            const std::string doc = gen.value(c.schema);
            ASSERT_TRUE(val.validate_text(doc)) << c.named.name << ": generator made an invalid document " << doc;
            GrammarMatcher m(masks);
            for (size_t i = 0; i < doc.size(); ++i)
                ASSERT_TRUE(m.accept_byte(static_cast<uint8_t>(doc[i])))
                    << c.named.name << ": rejected byte " << i << " of " << doc;
            EXPECT_TRUE(m.can_terminate()) << c.named.name << ": " << doc;
            EXPECT_FALSE(m.is_dead());
            if (n % 50 == 0) m.check_integrity();
        }
    }
}

TEST(GrammarProperty, MutationsDieAtOrAfterTheMutationAndAgreeWithTheValidator) {
    auto trie = std::make_shared<const TokenTrie>(test::synthetic_vocab(512, 1));
    size_t n_mutations = 0, n_died_at_mutation = 0, n_still_valid = 0;
    for (const auto& c : compiled_schemas()) {
        auto masks = std::make_shared<const TokenMasks>(c.grammar, trie);
        test::DocGen gen(c.schema, 7);
        test::PolicyValidator val(c.schema);
        static const std::string alphabet =
            "{}[],:\"\\0123456789-+.eEtrufalsn aZ\x01\xc3\xa9\xe2\x82\xac\xf0\xed\xff/uT";
        for (int n = 0; n < 120; ++n) {
            const std::string doc = gen.value(c.schema);
            for (int k = 0; k < 12; ++k) {
                std::string mut = doc;
                const size_t i = gen.pick(doc.size());
                char b = alphabet[gen.pick(alphabet.size())];
                if (b == doc[i]) continue;
                mut[i] = b;
                ++n_mutations;
                GrammarMatcher m(masks);
                size_t died = mut.size();
                for (size_t j = 0; j < mut.size(); ++j)
                    if (!m.accept_byte(static_cast<uint8_t>(mut[j]))) {
                        died = j;
                        break;
                    }
                const bool valid = val.validate_text(mut);
                ASSERT_GE(died, i) << c.named.name << ": died before the mutation in " << mut;
                if (died == mut.size()) {
                    ASSERT_EQ(m.can_terminate(), valid) << c.named.name << ": verdicts differ on " << mut;
                    n_still_valid += valid;
                } else {
                    ASSERT_FALSE(valid) << c.named.name << ": valid document rejected at byte " << died << ": " << mut;
                    n_died_at_mutation += died == i;
                }
            }
        }
    }
    // Most mutations are caught at the mutated byte itself; keep the test honest about coverage.
    EXPECT_GT(n_mutations, 5000u);
    EXPECT_GT(n_died_at_mutation, n_mutations / 2);
    std::printf("mutations %zu, died at the mutated byte %zu, still valid %zu\n", n_mutations, n_died_at_mutation,
                n_still_valid);
}

// Checks the mask of the matcher's current state against the byte path for every token.
void expect_mask_exact(const GrammarMatcher& m, const TokenTrie& trie, const std::string& where) {
    std::vector<uint32_t> mask(trie.n_mask_words());  // [n_mask_words]
    m.fill_next_token_mask(mask);
    size_t n_allowed = 0, n_bad = 0;
    for (size_t id = 0; id < trie.vocab_size(); ++id) {
        const auto& bytes = trie.token_bytes(static_cast<int32_t>(id));
        const bool live = !bytes.empty() && m.can_accept_bytes(bytes);
        const bool bit = test_bit(mask, static_cast<int32_t>(id));
        n_allowed += bit;
        if (bit != live && n_bad++ < 5)
            ADD_FAILURE() << where << ": token " << id << " '" << bytes << "' mask " << bit << " byte path " << live;
    }
    for (size_t id = trie.vocab_size(); id < mask.size() * 32; ++id)
        EXPECT_FALSE(test_bit(mask, static_cast<int32_t>(id))) << "bit beyond the vocabulary";
    EXPECT_EQ(n_bad, 0u) << where;
}

// Walks random documents, checking the mask exactly at `n_checks` positions per document, and
// advancing by the bytes of the document (so states mid-token are covered too).
void check_masks(const std::shared_ptr<const TokenTrie>& trie, int n_docs, int n_checks, uint64_t seed) {
    for (const auto& c : compiled_schemas()) {
        auto masks = std::make_shared<const TokenMasks>(c.grammar, trie);
        test::DocGen gen(c.schema, seed);
        for (int n = 0; n < n_docs; ++n) {
            const std::string doc = gen.value(c.schema);
            GrammarMatcher m(masks);
            std::set<size_t> at;
            at.insert(0);
            at.insert(doc.size());
            while (static_cast<int>(at.size()) < n_checks && at.size() <= doc.size())
                at.insert(gen.pick(doc.size() + 1));
            size_t pos = 0;
            for (const size_t p : at) {
                ASSERT_TRUE(m.accept_bytes(std::string_view(doc).substr(pos, p - pos)));
                pos = p;
                expect_mask_exact(m, *trie, c.named.name + " at byte " + std::to_string(p) + " of " + doc);
                if (::testing::Test::HasFailure()) return;
            }
            masks->check_integrity();
        }
    }
}

TEST(GrammarMasks, ExactOnSyntheticVocabulary) {
    auto trie = std::make_shared<const TokenTrie>(test::synthetic_vocab(6000, 3));
    trie->check_integrity();
    check_masks(trie, 12, 12, 11);
}

TEST(GrammarMasks, ExactOnTheRealVocabulary) {
    auto trie = test::real_trie();
    if (!trie) GTEST_SKIP() << "DeepSeek tokenizer.json not installed: run scripts/setup.sh";
    ASSERT_EQ(trie->vocab_size(), 129280u);
    trie->check_integrity();
    check_masks(trie, 4, 6, 5);
}

TEST(GrammarMasks, TokenByTokenGenerationFollowsTheMask) {
    // Random walks that pick only masked tokens always end in a document the validator accepts.
    auto trie = std::make_shared<const TokenTrie>(test::synthetic_vocab(3000, 9));
    std::mt19937_64 rng(5);
    for (const auto& c : compiled_schemas()) {
        auto masks = std::make_shared<const TokenMasks>(c.grammar, trie);
        test::PolicyValidator val(c.schema);
        std::vector<uint32_t> mask(trie->n_mask_words());
        for (int n = 0; n < 20; ++n) {
            GrammarMatcher m(masks);
            std::string text;
            for (int step = 0; step < 400 && !m.is_complete(); ++step) {
                m.fill_next_token_mask(mask);
                std::vector<int32_t> allowed;
                for (size_t id = 0; id < trie->vocab_size(); ++id)
                    if (test_bit(mask, static_cast<int32_t>(id))) allowed.push_back(static_cast<int32_t>(id));
                // Stop as soon as the document may end (with some chance), like a model choosing EOS.
                if (m.can_terminate() && (allowed.empty() || rng() % 3 == 0)) break;
                ASSERT_FALSE(allowed.empty()) << c.named.name << ": no token allowed after " << text;
                const int32_t id = allowed[rng() % allowed.size()];
                ASSERT_TRUE(m.accept_token(id));
                text += trie->token_bytes(id);
            }
            if (m.can_terminate()) {
                EXPECT_TRUE(val.validate_text(text)) << c.named.name << ": " << text;
            }
        }
    }
}

}  // namespace
}  // namespace onecard::grammar
