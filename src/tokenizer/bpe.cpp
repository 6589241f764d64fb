#include "tokenizer/bpe.h"

#include "core/error.h"
#include "tokenizer/byte_level.h"

#include <nlohmann/json.hpp>

#include <queue>

namespace onecard::tok {

namespace {

// One symbol of the word being merged: a doubly linked list over the original character slots.
struct Symbol {
    int32_t id;
    int32_t prev;  // -1: none
    int32_t next;  // -1: none
    bool alive;
};

struct Candidate {
    int32_t rank;
    int32_t pos;  // slot of the left symbol
    int32_t merged_id;
    // priority_queue is a max-heap: "less" means lower priority (higher rank, then later position).
    bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

bool is_unset(const nlohmann::json& j, const char* key) {
    if (!j.contains(key) || j.at(key).is_null()) return true;
    const auto& v = j.at(key);
    if (v.is_string()) return v.get<std::string>().empty();
    if (v.is_boolean()) return !v.get<bool>();
    if (v.is_number()) return v.get<double>() == 0.0;
    return false;
}

}  // namespace

void MergeTable::reserve(size_t n) {
    size_t cap = 16;
    int bits = 4;
    while (cap < 2 * n) {
        cap <<= 1;
        ++bits;
    }
    std::vector<Entry> old = std::move(slots_);
    slots_.assign(cap, Entry{});
    mask_ = cap - 1;
    shift_ = 64 - bits;
    size_ = 0;
    for (const Entry& e : old)
        if (e.key != kEmpty) put(e.key, e.rank, e.merged_id);
}

void MergeTable::put(uint64_t key, int32_t rank, int32_t merged_id) {
    if (2 * (size_ + 1) > slots_.size()) reserve(size_ + 1);
    for (size_t i = slot_of(key);; i = (i + 1) & mask_) {
        Entry& e = slots_[i];
        if (e.key == key) {
            e.rank = rank;
            e.merged_id = merged_id;
            return;
        }
        if (e.key == kEmpty) {
            e = Entry{key, rank, merged_id};
            ++size_;
            return;
        }
    }
}

BpeModel BpeModel::from_json(const nlohmann::json& model) {
    ONECARD_CHECK(model.is_object(), "tokenizer.json: 'model' must be an object");
    const std::string type = model.value("type", std::string("BPE"));
    ONECARD_CHECK(type == "BPE", "tokenizer.json: model.type '{}' is not supported (only BPE)", type);
    for (const char* key : {"dropout", "continuing_subword_prefix", "end_of_word_suffix", "byte_fallback"}) {
        ONECARD_CHECK(is_unset(model, key), "tokenizer.json: model.{} = {} is not supported", key,
                      model.at(key).dump());
    }
    ONECARD_CHECK(model.contains("vocab") && model.at("vocab").is_object(),
                  "tokenizer.json: model.vocab missing or not an object");
    ONECARD_CHECK(model.contains("merges") && model.at("merges").is_array(),
                  "tokenizer.json: model.merges missing or not an array");

    BpeModel m;
    const auto& vocab = model.at("vocab");
    m.vocab_.reserve(vocab.size());
    int64_t max_id = -1;
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
        ONECARD_CHECK(it.value().is_number_integer(), "tokenizer.json: model.vocab['{}'] is not an integer", it.key());
        const int64_t id = it.value().get<int64_t>();
        ONECARD_CHECK(id >= 0 && id < (int64_t{1} << 31), "tokenizer.json: model.vocab['{}'] = {} out of range",
                      it.key(), id);
        m.vocab_.emplace(it.key(), static_cast<int32_t>(id));
        max_id = std::max(max_id, id);
    }
    m.id_to_token_.resize(static_cast<size_t>(max_id + 1));
    m.id_defined_.assign(static_cast<size_t>(max_id + 1), false);
    for (const auto& [tok, id] : m.vocab_) {
        ONECARD_CHECK(!m.id_defined_[id], "tokenizer.json: model.vocab gives id {} to both '{}' and '{}'", id,
                      m.id_to_token_[id], tok);
        m.id_to_token_[id] = tok;
        m.id_defined_[id] = true;
    }

    const auto& merges = model.at("merges");
    m.merges_.reserve(merges.size());
    std::string a, b;
    for (size_t r = 0; r < merges.size(); ++r) {
        const auto& e = merges[r];
        if (e.is_string()) {
            const std::string s = e.get<std::string>();
            const size_t sp = s.find(' ');
            ONECARD_CHECK(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos,
                          "tokenizer.json: model.merges[{}] = '{}' is not of the form 'a b'", r, s);
            a = s.substr(0, sp);
            b = s.substr(sp + 1);
        } else {
            ONECARD_CHECK(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string(),
                          "tokenizer.json: model.merges[{}] is neither 'a b' nor [\"a\", \"b\"]", r);
            a = e[0].get<std::string>();
            b = e[1].get<std::string>();
        }
        const auto ia = m.vocab_.find(a);
        const auto ib = m.vocab_.find(b);
        const auto iab = m.vocab_.find(a + b);
        ONECARD_CHECK(ia != m.vocab_.end() && ib != m.vocab_.end(),
                      "tokenizer.json: model.merges[{}] uses '{}' / '{}' which are not in the vocab", r, a, b);
        ONECARD_CHECK(iab != m.vocab_.end(),
                      "tokenizer.json: model.merges[{}] produces '{}{}' which is not in the vocab", r, a, b);
        // A repeated pair keeps its last rank, as both the Rust and the JS implementations do.
        m.merges_.put(pair_key(ia->second, ib->second), static_cast<int32_t>(r), iab->second);
    }

    if (model.contains("unk_token") && model.at("unk_token").is_string()) {
        const auto it = m.vocab_.find(model.at("unk_token").get<std::string>());
        if (it != m.vocab_.end()) m.unk_id_ = it->second;
    }
    m.ignore_merges_ = model.value("ignore_merges", false);
    m.fuse_unk_ = model.value("fuse_unk", false);

    m.small_char_ids_.assign(512, -1);
    std::string ch;
    for (uint32_t cp = 0; cp < 512; ++cp) {
        ch.clear();
        append_utf8(cp, ch);
        const auto it = m.vocab_.find(ch);
        if (it != m.vocab_.end()) m.small_char_ids_[cp] = it->second;
    }
    return m;
}

int32_t BpeModel::char_id(std::string_view ch) const {
    uint32_t cp = 0;
    if (decode_utf8_char(ch, 0, cp) == ch.size() && cp < small_char_ids_.size()) return small_char_ids_[cp];
    const auto it = vocab_.find(ch);
    return it == vocab_.end() ? -1 : it->second;
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
    if (word.empty()) return;
    if (ignore_merges_) {
        if (const auto it = vocab_.find(word); it != vocab_.end()) {
            out.push_back(it->second);
            return;
        }
    }
    std::vector<Symbol> sym;
    sym.reserve(word.size());
    bool prev_unk = false;
    for (size_t i = 0; i < word.size();) {
        uint32_t cp = 0;
        size_t len = decode_utf8_char(word, i, cp);
        if (len == 0) len = 1;  // callers pass valid UTF-8; be defensive anyway
        int32_t id = char_id(word.substr(i, len));
        i += len;
        if (id < 0) {
            // Unknown character: the unk token if configured (fused if asked), else dropped.
            if (!unk_id_) continue;
            if (fuse_unk_ && prev_unk) continue;
            id = *unk_id_;
            prev_unk = true;
        } else {
            prev_unk = false;
        }
        const auto slot = static_cast<int32_t>(sym.size());
        sym.push_back(Symbol{id, slot - 1, -1, true});
        if (slot > 0) sym[slot - 1].next = slot;
    }
    if (sym.size() > 1) {
        std::priority_queue<Candidate> queue;
        auto consider = [&](int32_t left) {
            const int32_t right = sym[left].next;
            if (right < 0) return;
            if (const auto* e = merges_.find(pair_key(sym[left].id, sym[right].id)))
                queue.push(Candidate{e->rank, left, e->merged_id});
        };
        for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i) consider(i);
        while (!queue.empty()) {
            const Candidate top = queue.top();
            queue.pop();
            Symbol& left = sym[top.pos];
            if (!left.alive || left.next < 0) continue;
            // The entry is stale if either side changed since it was queued.
            const auto* e = merges_.find(pair_key(left.id, sym[left.next].id));
            if (e == nullptr || e->merged_id != top.merged_id) continue;
            Symbol& right = sym[left.next];
            left.id = top.merged_id;
            right.alive = false;
            left.next = right.next;
            if (right.next >= 0) sym[right.next].prev = top.pos;
            if (left.prev >= 0) consider(left.prev);
            consider(top.pos);
        }
    }
    for (int32_t i = 0; i >= 0 && i < static_cast<int32_t>(sym.size()); i = sym[i].next) out.push_back(sym[i].id);
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
    const auto it = vocab_.find(token);
    if (it == vocab_.end()) return std::nullopt;
    return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !id_defined_[id]) return nullptr;
    return &id_to_token_[id];
}

void BpeModel::check_integrity() const {
    for (const auto& [tok, id] : vocab_) {
        ONECARD_CHECK(
            id >= 0 && static_cast<size_t>(id) < id_to_token_.size() && id_defined_[id] && id_to_token_[id] == tok,
            "BpeModel: vocab entry '{}' -> {} disagrees with the id table", tok, id);
    }
    merges_.for_each([&](const MergeTable::Entry& e) {
        const auto a = static_cast<int32_t>(e.key >> 32);
        const auto b = static_cast<int32_t>(e.key & 0xFFFFFFFFu);
        const std::string* ta = id_to_token(a);
        const std::string* tb = id_to_token(b);
        const std::string* tm = id_to_token(e.merged_id);
        ONECARD_CHECK(ta && tb && tm && *tm == *ta + *tb, "BpeModel: merge {} + {} -> {} is inconsistent", a, b,
                      e.merged_id);
        ONECARD_CHECK(merges_.find(e.key) == &e, "BpeModel: merge table lookup of {} + {} is broken", a, b);
    });
}

}  // namespace onecard::tok
