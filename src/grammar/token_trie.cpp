#include "grammar/token_trie.h"

#include "core/error.h"
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <numeric>

namespace onecard::grammar {

TokenTrie::TokenTrie(std::vector<std::string> token_bytes) : token_bytes_(std::move(token_bytes)) {
    // Sorting ids by their bytes lays the trie out in preorder directly: a node is the first id whose
    // bytes start with its prefix, and its subtree is the run of ids sharing that prefix.
    std::vector<int32_t> order;  // [n non-empty tokens]
    for (size_t i = 0; i < token_bytes_.size(); ++i)
        if (!token_bytes_[i].empty()) order.push_back(static_cast<int32_t>(i));
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return token_bytes_[a] < token_bytes_[b]; });

    byte_.push_back(0);
    end_.push_back(0);
    token_begin_.push_back(0);
    std::vector<uint32_t> path{0};  // node of each prefix length of the previous token
    std::string prev;
    for (const int32_t id : order) {
        const std::string& s = token_bytes_[static_cast<size_t>(id)];
        max_len_ = std::max(max_len_, s.size());
        size_t common = 0;
        while (common < s.size() && common < prev.size() && s[common] == prev[common]) ++common;
        // Close the nodes of the previous token below the common prefix.
        while (path.size() > common + 1) {
            end_[path.back()] = static_cast<uint32_t>(byte_.size());
            path.pop_back();
        }
        for (size_t d = common; d < s.size(); ++d) {
            path.push_back(static_cast<uint32_t>(byte_.size()));
            byte_.push_back(static_cast<uint8_t>(s[d]));
            end_.push_back(0);
            token_begin_.push_back(static_cast<uint32_t>(tokens_.size()));
        }
        tokens_.push_back(id);  // ends at path.back(); equal byte strings share the node
        prev = s;
    }
    while (!path.empty()) {
        end_[path.back()] = static_cast<uint32_t>(byte_.size());
        path.pop_back();
    }
    token_begin_.push_back(static_cast<uint32_t>(tokens_.size()));
    // token_begin_[i] was the tokens_ size when node i was created; tokens of node i are appended
    // before any later node is created, so [token_begin_[i], token_begin_[i+1]) is exactly node i's.
}

std::shared_ptr<const TokenTrie> TokenTrie::from_tokenizer(const Tokenizer& tok,
                                                           const std::vector<std::string>& allowed_added) {
    std::vector<std::string> bytes(tok.vocab_size());  // [vocab_size]
    std::vector<int32_t> keep;
    for (const auto& text : allowed_added)
        if (auto id = tok.token_to_id(text); id && tok.is_added(*id)) keep.push_back(*id);
    for (size_t id = 0; id < bytes.size(); ++id) {
        const auto i = static_cast<int32_t>(id);
        if (tok.is_added(i) && std::find(keep.begin(), keep.end(), i) == keep.end()) continue;
        tok.append_token_bytes(i, false, bytes[id]);
    }
    return std::make_shared<const TokenTrie>(std::move(bytes));
}

void TokenTrie::check_integrity() const {
    const size_t n = byte_.size();
    ONECARD_CHECK(end_.size() == n && token_begin_.size() == n + 1 && end_[0] == n, "token trie: array sizes");
    std::vector<uint8_t> seen(token_bytes_.size(), 0);  // [vocab_size]
    // Rebuild each node's prefix by walking the preorder with a stack of open nodes.
    std::vector<uint32_t> open{0};
    std::string prefix;
    for (uint32_t i = 1; i < n; ++i) {
        while (open.size() > 1 && end_[open.back()] <= i) {
            open.pop_back();
            prefix.pop_back();
        }
        ONECARD_CHECK(end_[i] > i && end_[i] <= end_[open.back()], "token trie: node {} subtree out of its parent", i);
        open.push_back(i);
        prefix.push_back(static_cast<char>(byte_[i]));
        for (const int32_t id : tokens(i)) {
            ONECARD_CHECK(id >= 0 && static_cast<size_t>(id) < token_bytes_.size() && token_bytes_[id] == prefix,
                          "token trie: token {} misplaced at node {}", id, i);
            ONECARD_CHECK(!seen[id], "token trie: token {} twice", id);
            seen[id] = 1;
        }
    }
    for (size_t id = 0; id < token_bytes_.size(); ++id)
        ONECARD_CHECK(seen[id] == !token_bytes_[id].empty(), "token trie: token {} missing", id);
}

}  // namespace onecard::grammar
