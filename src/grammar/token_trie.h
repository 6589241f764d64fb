// TokenTrie: the vocabulary's byte strings in a byte trie, flattened in preorder, so a mask walk
// visits each shared prefix once and skips a whole subtree when its prefix is rejected.
// Immutable; share one per tokenizer between all grammars (shared_ptr<const TokenTrie>).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace onecard {
class Tokenizer;
}

namespace onecard::grammar {

class TokenTrie {
public:
    // token_bytes: [vocab_size] the bytes each id decodes to; an empty string is a token the grammar
    // never allows (special tokens: the caller adds EOS itself when the matcher can terminate).
    explicit TokenTrie(std::vector<std::string> token_bytes);

    // The tokenizer's vocabulary: every BPE token by its raw bytes. Added tokens (BOS/EOS, the chat
    // and DSML markers, <think>) are left out: they are control tokens whose meaning is not their
    // text, so a grammar must never emit one as JSON characters.
    // `allowed_added` names added tokens kept anyway, by their text: the DSML grammar's trie keeps
    // ｜DSML｜, so a forced tool call is written with the marker token the model was trained on.
    static std::shared_ptr<const TokenTrie> from_tokenizer(const Tokenizer& tok,
                                                           const std::vector<std::string>& allowed_added = {});

    size_t vocab_size() const { return token_bytes_.size(); }
    size_t n_mask_words() const { return (token_bytes_.size() + 31) / 32; }
    const std::string& token_bytes(int32_t id) const { return token_bytes_[static_cast<size_t>(id)]; }

    // Preorder node access. Node 0 is the root (the empty prefix, no byte, no tokens).
    size_t n_nodes() const { return byte_.size(); }
    uint8_t byte(uint32_t i) const { return byte_[i]; }
    uint32_t subtree_end(uint32_t i) const { return end_[i]; }  // children of i: i+1, then end_[child]...
    bool has_children(uint32_t i) const { return end_[i] > i + 1; }
    std::span<const int32_t> tokens(uint32_t i) const {
        return {tokens_.data() + token_begin_[i], token_begin_[i + 1] - token_begin_[i]};
    }
    size_t max_token_len() const { return max_len_; }

    // Throws onecard::Error when the preorder arrays disagree with the token byte strings.
    void check_integrity() const;

private:
    std::vector<std::string> token_bytes_;  // [vocab_size]
    std::vector<uint8_t> byte_;             // [n_nodes] the byte leading into the node
    std::vector<uint32_t> end_;             // [n_nodes] one past the node's subtree (preorder)
    std::vector<uint32_t> token_begin_;     // [n_nodes + 1] offsets into tokens_
    std::vector<int32_t> tokens_;           // [n_tokens_in_trie] ids ending at each node
    size_t max_len_ = 0;
};

}  // namespace onecard::grammar
