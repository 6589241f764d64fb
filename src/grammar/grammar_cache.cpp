#include "grammar/grammar_cache.h"

#include "core/error.h"
#include "grammar/json_schema.h"

namespace onecard::grammar {

GrammarCache::GrammarCache(std::shared_ptr<const TokenTrie> trie, size_t capacity)
    : trie_(std::move(trie)), capacity_(capacity) {
    ONECARD_CHECK(trie_ != nullptr && capacity_ > 0, "grammar cache: needs a vocabulary and a capacity > 0");
}

template <typename Make>
std::shared_ptr<const TokenMasks> GrammarCache::get(const std::string& key, Make&& make) {
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (auto it = index_.find(key); it != index_.end()) {
            lru_.splice(lru_.begin(), lru_, it->second);
            ++n_hits_;
            return it->second->second;
        }
        ++n_misses_;
    }
    // Compile outside the lock: a large schema must not stall other requests' lookups. Two threads
    // missing on the same key both compile; the second insert finds the first and uses it.
    auto masks = std::make_shared<const TokenMasks>(make(), trie_);
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) return it->second->second;
    lru_.emplace_front(key, masks);
    index_[key] = lru_.begin();
    while (lru_.size() > capacity_) {
        index_.erase(lru_.back().first);
        lru_.pop_back();
    }
    return masks;
}

std::shared_ptr<const TokenMasks> GrammarCache::dsml_tool_calls(const std::vector<DsmlTool>& tools, bool one_call,
                                                                bool blank_line) {
    nlohmann::ordered_json key = nlohmann::ordered_json::array();
    for (const auto& t : tools) {
        if (t.constrained) check_schema_depth(t.parameters);  // copying and dumping recurse per level
        key.push_back({t.name, t.constrained ? t.parameters : "free"});
    }
    return get(fmt::format("dsml{}{}:{}", one_call ? "1" : "", blank_line ? "" : "@marker", key.dump()),
               [&] { return compile_dsml_tool_calls(tools, one_call, blank_line); });
}

std::shared_ptr<const TokenMasks> GrammarCache::json_schema(const nlohmann::ordered_json& schema) {
    // ordered_json's compact dump keeps key order (which is output order) and drops formatting. The
    // dump recurses once per level: bound the depth first.
    check_schema_depth(schema);
    return get("schema:" + schema.dump(), [&] { return compile_json_schema(schema); });
}

std::shared_ptr<const TokenMasks> GrammarCache::json_schema_text(std::string_view schema_text) {
    nlohmann::ordered_json schema;
    try {
        schema = nlohmann::ordered_json::parse(schema_text);
    } catch (const std::exception& e) {
        throw SchemaError("", fmt::format("not valid JSON: {}", e.what()));
    }
    return json_schema(schema);
}

std::shared_ptr<const TokenMasks> GrammarCache::json_object() {
    return get("json_object", [] { return json_object_grammar(); });
}

size_t GrammarCache::size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return lru_.size();
}
size_t GrammarCache::n_hits() const {
    std::lock_guard<std::mutex> lock(mu_);
    return n_hits_;
}
size_t GrammarCache::n_misses() const {
    std::lock_guard<std::mutex> lock(mu_);
    return n_misses_;
}

void GrammarCache::check_integrity() const {
    std::lock_guard<std::mutex> lock(mu_);
    ONECARD_CHECK(lru_.size() == index_.size() && lru_.size() <= capacity_,
                  "grammar cache: {} entries, {} indexed, cap {}", lru_.size(), index_.size(), capacity_);
    for (auto it = lru_.begin(); it != lru_.end(); ++it) {
        auto f = index_.find(it->first);
        ONECARD_CHECK(f != index_.end() && f->second == it && it->second != nullptr,
                      "grammar cache: index out of date");
    }
}

}  // namespace onecard::grammar
