// The BPE model of a Hugging Face tokenizer.json (`model.type == "BPE"`): vocabulary, ranked
// merges (both the "a b" string form and the ["a", "b"] pair form) and the merge loop.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace onecard::tok {

// Transparent hashing so lookups by string_view do not allocate.
struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// Open-addressing hash map from a merge pair (two ids packed in 64 bits) to its rank and result.
// The merge lookup is the hot loop of BPE; a flat table avoids the pointer chasing of
// std::unordered_map's nodes (about a quarter of encode time on cache-missing text).
class MergeTable {
public:
    struct Entry {
        uint64_t key = kEmpty;
        int32_t rank = 0;
        int32_t merged_id = 0;
    };
    static constexpr uint64_t kEmpty = ~uint64_t{0};

    void reserve(size_t n);
    // Inserts or overwrites.
    void put(uint64_t key, int32_t rank, int32_t merged_id);
    const Entry* find(uint64_t key) const {
        if (slots_.empty()) return nullptr;
        for (size_t i = slot_of(key);; i = (i + 1) & mask_) {
            const Entry& e = slots_[i];
            if (e.key == key) return &e;
            if (e.key == kEmpty) return nullptr;
        }
    }
    size_t size() const { return size_; }
    template <typename F>
    void for_each(F&& f) const {
        for (const Entry& e : slots_)
            if (e.key != kEmpty) f(e);
    }

private:
    size_t slot_of(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_); }
    std::vector<Entry> slots_;
    size_t mask_ = 0;
    int shift_ = 64;
    size_t size_ = 0;
};

class BpeModel {
public:
    // Parses `model` (the "model" object of tokenizer.json). Throws onecard::Error on an unsupported
    // option or a merge whose parts or result are not in the vocabulary.
    static BpeModel from_json(const nlohmann::json& model);

    // Appends the ids of one pre-tokenized word (already in the model's alphabet) to `out`.
    // Lowest-rank merge first, leftmost on ties (the Hugging Face order).
    void encode_word(std::string_view word, std::vector<int32_t>& out) const;

    std::optional<int32_t> token_to_id(std::string_view token) const;
    // nullptr for ids the model does not define.
    const std::string* id_to_token(int32_t id) const;
    // One past the largest id in the vocabulary.
    size_t id_limit() const { return id_to_token_.size(); }
    size_t n_vocab() const { return vocab_.size(); }
    size_t n_merges() const { return merges_.size(); }
    std::optional<int32_t> unk_id() const { return unk_id_; }

    // Throws onecard::Error when the vocabulary and merge tables disagree.
    void check_integrity() const;

private:
    static uint64_t pair_key(int32_t a, int32_t b) {
        return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
    }
    // Id of the single character `ch` (UTF-8), or -1 (then unk or dropped, as in Hugging Face).
    int32_t char_id(std::string_view ch) const;

    TokenMap vocab_;
    std::vector<std::string> id_to_token_;
    std::vector<bool> id_defined_;
    MergeTable merges_;
    std::vector<int32_t> small_char_ids_;  // ids of code points < 512 (the byte-level alphabet)
    std::optional<int32_t> unk_id_;
    bool ignore_merges_ = false;
    bool fuse_unk_ = false;
};

}  // namespace onecard::tok
