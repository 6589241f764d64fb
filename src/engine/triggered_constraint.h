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
#pragma once

#include "engine/token_constraint.h"
#include "grammar/matcher.h"

#include <memory>
#include <string>
#include <vector>

namespace onecard {

// Immutable, built once per vocabulary and trigger (a scan of the vocabulary), shared by every
// request and grammar over that vocabulary: the trigger, its KMP table, and the tokens that can
// complete it from some partial match.
class TriggerTokens {
public:
    TriggerTokens(std::shared_ptr<const grammar::TokenTrie> trie, std::string trigger);

    const std::string& trigger() const { return trigger_; }
    const grammar::TokenTrie& trie() const { return *trie_; }
    // The KMP transition: k bytes of the trigger matched, then byte b. Returns the new match length
    // (trigger().size(): the trigger is complete).
    size_t next(size_t k, uint8_t b) const;
    // Where `bytes` completes the trigger from match state k: the offset just past the trigger's
    // last byte in `bytes`, or npos (then *k_out, if given, is the match state after `bytes`).
    size_t completes_at(size_t k, std::string_view bytes, size_t* k_out = nullptr) const;
    const std::vector<int32_t>& candidates() const { return candidates_; }

private:
    std::shared_ptr<const grammar::TokenTrie> trie_;
    std::string trigger_;
    std::vector<size_t> fail_;         // [trigger size + 1] KMP failure function
    std::vector<int32_t> candidates_;  // tokens that complete the trigger from some state
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

    std::shared_ptr<const TriggerTokens> trigger_;
    int64_t vocab_size_;
    grammar::GrammarMatcher matcher_;  // untouched until the trigger
    size_t k_ = 0;                     // free phase: trigger bytes matched at the end of the output
    bool triggered_ = false;
};

}  // namespace onecard
