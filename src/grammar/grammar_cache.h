// GrammarCache: compiled grammars bound to one vocabulary, keyed by canonical schema text, bounded
// (least recently used out). A hit also keeps the grammar's warm token-set cache, which is most of
// the benefit: the first request with a schema pays the cache misses, later ones mostly do not.
// Thread-safe. Not global: the server owns one per tokenizer.
#pragma once

#include "grammar/dsml_grammar.h"
#include "grammar/token_masks.h"

#include <nlohmann/json.hpp>

#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace onecard::grammar {

class GrammarCache {
public:
    GrammarCache(std::shared_ptr<const TokenTrie> trie, size_t capacity);

    // Throws SchemaError (json_schema.h) for a schema the compiler refuses; nothing is cached then.
    std::shared_ptr<const TokenMasks> json_schema(const nlohmann::ordered_json& schema);
    std::shared_ptr<const TokenMasks> json_schema_text(std::string_view schema_text);
    std::shared_ptr<const TokenMasks> json_object();
    // The DSML tool-call grammar of `tools` (dsml_grammar.h), keyed by the tools' names and schemas.
    std::shared_ptr<const TokenMasks> dsml_tool_calls(const std::vector<DsmlTool>& tools, bool one_call,
                                                      bool blank_line = true);

    size_t size() const;
    size_t n_hits() const;
    size_t n_misses() const;
    void check_integrity() const;

private:
    template <typename Make>
    std::shared_ptr<const TokenMasks> get(const std::string& key, Make&& make);

    std::shared_ptr<const TokenTrie> trie_;
    size_t capacity_;
    mutable std::mutex mu_;
    // Most recently used first; the map points into the list.
    std::list<std::pair<std::string, std::shared_ptr<const TokenMasks>>> lru_;
    std::unordered_map<std::string, decltype(lru_)::iterator> index_;
    size_t n_hits_ = 0, n_misses_ = 0;
};

}  // namespace onecard::grammar
