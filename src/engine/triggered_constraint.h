// TriggeredConstraint: free text until a trigger string appears in the output, then a grammar that
// starts at the trigger's first byte. Strict tools under tool_choice "auto": the model may answer in
// text or call a tool; once it writes the DSML marker "<｜DSML｜" (what the server's DSML parser takes
// as the start of tool-call markup) the rest must be the DSML tool-call block of the grammar
// (grammar/dsml_grammar.h compiled with blank_line = false, so it starts at the marker), with each
// strict tool's arguments held to its parameters schema.
//
// Byte-exact: the trigger is matched in the output's bytes (a KMP automaton), however tokens split
// it; one token may end the free text and begin the grammar, its bytes after the trigger then go to
// the grammar. In the free phase every token is allowed but one that would complete the trigger with
// bytes the grammar refuses; only tokens that can complete the trigger from some partial match (a
// short list, TriggerTokens) are checked, so a free step costs about a mask fill.
// EOS: at any point of the free phase (a text answer, even one ending in part of the trigger); after
// the trigger only when the grammar can end. Tokens without bytes (special tokens) break a partial
// match: their text is not the trigger's.
// The guard (optional, a suffix of the trigger: the DSML marker "｜DSML｜" without its '<') may appear
// in the free phase only as the trigger's end. Without it a stray "</｜DSML｜parameter>" in free text
// starts no block, so the parser hands it to the client as content: markup a strict request must
// never show (onecard validate's no_dsml gate caught the demo model writing one).
#pragma once

#include "engine/token_constraint.h"
#include "grammar/matcher.h"

#include <memory>
#include <string>
#include <vector>

namespace onecard {

// A byte pattern's KMP automaton: the match state is how many of its bytes end the text so far.
class BytePattern {
public:
    explicit BytePattern(std::string pattern);

    const std::string& text() const { return p_; }
    size_t size() const { return p_.size(); }
    // Where `bytes` completes the pattern from match state k: the offset just past the pattern's
    // last byte in `bytes`, or npos (then *k_out, if given, is the match state after `bytes`). An
    // empty pattern never completes.
    size_t completes_at(size_t k, std::string_view bytes, size_t* k_out = nullptr) const;

private:
    // The transition: k bytes matched, then byte b. Returns the new match length (size(): complete).
    size_t next(size_t k, uint8_t b) const;

    std::string p_;
    std::vector<size_t> fail_;  // [size + 1] KMP failure function
};

// Immutable, built once per vocabulary and trigger (a scan of the vocabulary), shared by every
// request and grammar over that vocabulary: the trigger and the guard (header comment), their
// automata, and the tokens that can complete either from some partial match.
class TriggerTokens {
public:
    TriggerTokens(std::shared_ptr<const grammar::TokenTrie> trie, std::string trigger, std::string guard = {});

    const std::string& trigger() const { return trigger_.text(); }
    const grammar::TokenTrie& trie() const { return *trie_; }
    const BytePattern& guard() const { return guard_; }  // empty: no guard
    // BytePattern::completes_at of the trigger.
    size_t completes_at(size_t k, std::string_view bytes, size_t* k_out = nullptr) const {
        return trigger_.completes_at(k, bytes, k_out);
    }
    const std::vector<int32_t>& candidates() const { return candidates_; }

private:
    std::shared_ptr<const grammar::TokenTrie> trie_;
    BytePattern trigger_;
    BytePattern guard_;
    std::vector<int32_t> candidates_;  // tokens that complete the trigger or the guard from some state
};

class TriggeredConstraint : public TokenConstraint {
public:
    // masks: the grammar from the trigger on, over trigger's vocabulary. vocab_size: the ids the free
    // phase allows ([0, vocab_size), the model's vocabulary).
    TriggeredConstraint(std::shared_ptr<const TriggerTokens> trigger, std::shared_ptr<const grammar::TokenMasks> masks,
                        int64_t vocab_size);

    void fill_mask(std::span<uint32_t> mask) override;
    bool can_terminate() const override { return !triggered_ || matcher_.can_terminate(); }
    bool accept(int32_t token) override;
    void check_integrity() const override;

    bool triggered() const { return triggered_; }
    const grammar::GrammarMatcher& matcher() const { return matcher_; }

private:
    // The grammar's input when `bytes` completes the trigger at `end`: the trigger, then the rest.
    std::string grammar_input(std::string_view bytes, size_t end) const;
    // Free phase: whether `bytes` writes the guard anywhere but as the trigger's end (trigger_end: where
    // they complete the trigger, or npos). *g_out, if given: the guard's match state after `bytes` when
    // they do not complete it.
    bool breaks_guard(std::string_view bytes, size_t trigger_end, size_t* g_out = nullptr) const;

    std::shared_ptr<const TriggerTokens> trigger_;
    int64_t vocab_size_;
    grammar::GrammarMatcher matcher_;  // untouched until the trigger
    size_t k_ = 0;                     // free phase: trigger bytes matched at the end of the output
    size_t g_ = 0;                     // free phase: guard bytes matched at the end of the output
    bool triggered_ = false;
};

}  // namespace onecard
