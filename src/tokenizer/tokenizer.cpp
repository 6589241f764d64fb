#include "tokenizer/tokenizer.h"

#include "core/error.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pretokenizer.h"

#include <nlohmann/json.hpp>

#include <array>
#include <fstream>
#include <mutex>
#include <sstream>
#include <unordered_map>

namespace onecard {

namespace {

// BPE results per pre-token word. Real text repeats words constantly, so this turns most of the
// merge work into one hash lookup. Direct-mapped and fixed-size: a colliding word just replaces
// the old entry, slots reuse their buffers (no allocation in steady state), and striped locks
// keep concurrent encodes from serialising on one mutex.
class WordCache {
public:
    static constexpr size_t kMaxWordBytes = 256;

    WordCache() : slots_(kSlots) {}

    static uint64_t hash(std::string_view word) { return std::hash<std::string_view>{}(word); }

    bool lookup(std::string_view word, uint64_t h, std::vector<int32_t>& out) {
        Slot& slot = slots_[h & (kSlots - 1)];
        std::lock_guard lock(locks_[h % kStripes]);
        if (!slot.used || slot.hash != h || slot.word != word) return false;
        out.insert(out.end(), slot.ids.begin(), slot.ids.end());
        return true;
    }
    void store(std::string_view word, uint64_t h, std::span<const int32_t> ids) {
        Slot& slot = slots_[h & (kSlots - 1)];
        std::lock_guard lock(locks_[h % kStripes]);
        slot.used = true;
        slot.hash = h;
        slot.word.assign(word.data(), word.size());
        slot.ids.assign(ids.begin(), ids.end());
    }

private:
    static constexpr size_t kSlots = size_t{1} << 16;
    static constexpr size_t kStripes = 64;
    struct Slot {
        bool used = false;
        uint64_t hash = 0;
        std::string word;
        std::vector<int32_t> ids;
    };
    std::vector<Slot> slots_;
    std::array<std::mutex, kStripes> locks_;
};

void check_normalizer(const nlohmann::json& j) {
    if (j.is_null()) return;
    const std::string type = j.value("type", std::string());
    if (type == "Sequence") {
        for (const auto& sub : j.at("normalizers")) check_normalizer(sub);
        return;
    }
    fail("tokenizer.json: normalizer '{}' is not supported (only null or an empty Sequence)", type);
}

}  // namespace

struct Tokenizer::Impl {
    tok::BpeModel model;
    tok::PreTokenizer pre;
    std::vector<tok::AddedToken> added;
    std::unordered_map<int32_t, size_t> added_by_id;  // id -> index into `added`
    tok::TokenMap added_by_content;
    std::unique_ptr<tok::AddedTokenMatcher> raw_matcher;         // normalized == false: first pass
    std::unique_ptr<tok::AddedTokenMatcher> normalized_matcher;  // normalized == true: second pass
    std::vector<std::string> token_bytes;                        // id -> bytes it decodes to
    std::vector<uint8_t> defined;                                // id -> 1 when the id exists
    std::vector<uint8_t> special;                                // id -> 1 for special added tokens
    std::unique_ptr<WordCache> cache = std::make_unique<WordCache>();

    void encode_plain(std::string_view text, std::vector<int32_t>& out) const;
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_file(const std::filesystem::path& tokenizer_json) {
    std::ifstream in(tokenizer_json, std::ios::binary);
    ONECARD_CHECK(in.good(), "tokenizer: cannot open '{}'", tokenizer_json.string());
    std::stringstream ss;
    ss << in.rdbuf();
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(ss.str());
    } catch (const nlohmann::json::exception& e) {
        fail("tokenizer: '{}' is not valid JSON: {}", tokenizer_json.string(), e.what());
    }
    try {
        return from_json(j);
    } catch (const Error& e) {
        fail("{} (in '{}')", e.what(), tokenizer_json.string());
    } catch (const nlohmann::json::exception& e) {
        fail("tokenizer: '{}' has an unexpected structure: {}", tokenizer_json.string(), e.what());
    }
}

Tokenizer Tokenizer::from_json(const nlohmann::json& j) {
    ONECARD_CHECK(j.is_object() && j.contains("model"), "tokenizer.json: no 'model' section");
    auto impl = std::make_unique<Impl>();
    impl->model = tok::BpeModel::from_json(j.at("model"));
    check_normalizer(j.value("normalizer", nlohmann::json()));
    impl->pre = tok::PreTokenizer::from_json(j.value("pre_tokenizer", nlohmann::json()));

    const nlohmann::json decoder = j.value("decoder", nlohmann::json());
    ONECARD_CHECK(decoder.is_object() && decoder.value("type", std::string()) == "ByteLevel",
                  "tokenizer.json: decoder {} is not supported (only ByteLevel)", decoder.dump());

    size_t limit = impl->model.id_limit();
    if (j.contains("added_tokens")) {
        for (const auto& a : j.at("added_tokens")) {
            tok::AddedToken t;
            t.content = a.at("content").get<std::string>();
            t.id = a.at("id").get<int32_t>();
            t.special = a.value("special", false);
            t.lstrip = a.value("lstrip", false);
            t.rstrip = a.value("rstrip", false);
            t.single_word = a.value("single_word", false);
            t.normalized = a.value("normalized", !t.special);
            ONECARD_CHECK(!t.content.empty() && t.id >= 0, "tokenizer.json: added token {} is malformed", a.dump());
            ONECARD_CHECK(tok::is_valid_utf8(t.content), "tokenizer.json: added token {} is not UTF-8", t.id);
            ONECARD_CHECK(!impl->added_by_id.contains(t.id), "tokenizer.json: added token id {} appears twice", t.id);
            ONECARD_CHECK(!impl->added_by_content.contains(t.content), "tokenizer.json: added token '{}' appears twice",
                          t.content);
            impl->added_by_id[t.id] = impl->added.size();
            impl->added_by_content.emplace(t.content, t.id);
            limit = std::max(limit, static_cast<size_t>(t.id) + 1);
            impl->added.push_back(std::move(t));
        }
    }
    std::vector<tok::AddedToken> raw, normalized;
    for (const auto& t : impl->added) (t.normalized ? normalized : raw).push_back(t);
    impl->raw_matcher = std::make_unique<tok::AddedTokenMatcher>(std::move(raw));
    impl->normalized_matcher = std::make_unique<tok::AddedTokenMatcher>(std::move(normalized));

    // Precompute what every id decodes to: the ByteLevel decoder maps a token's characters back
    // to bytes, and a token with characters outside the alphabet stands for its own UTF-8 bytes.
    const tok::ByteLevelAlphabet& alphabet = tok::byte_level_alphabet();
    impl->token_bytes.resize(limit);
    impl->defined.assign(limit, 0);
    impl->special.assign(limit, 0);
    for (size_t id = 0; id < limit; ++id) {
        const std::string* s = nullptr;
        if (const auto it = impl->added_by_id.find(static_cast<int32_t>(id)); it != impl->added_by_id.end()) {
            s = &impl->added[it->second].content;
            impl->special[id] = impl->added[it->second].special ? 1 : 0;
        } else {
            s = impl->model.id_to_token(static_cast<int32_t>(id));
        }
        if (s == nullptr) continue;
        impl->defined[id] = 1;
        if (!alphabet.decode(*s, impl->token_bytes[id])) impl->token_bytes[id] = *s;
    }
    return Tokenizer(std::move(impl));
}

void Tokenizer::Impl::encode_plain(std::string_view text, std::vector<int32_t>& out) const {
    if (text.empty()) return;
    tok::PreTokenized pieces(text);
    pre.apply(pieces);
    std::string raw_word;
    for (size_t i = 0; i < pieces.size(); ++i) {
        std::string_view word = pieces.piece(i);
        if (word.empty()) continue;
        const bool cacheable = word.size() <= WordCache::kMaxWordBytes;
        const uint64_t h = cacheable ? WordCache::hash(word) : 0;
        if (cacheable && cache->lookup(word, h, out)) continue;
        const size_t before = out.size();
        model.encode_word(word, out);
        if (cacheable) cache->store(word, h, std::span<const int32_t>(out).subspan(before));
    }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool allow_special) const {
    std::string sanitized;
    if (!tok::is_valid_utf8(text)) {
        tok::append_utf8_lossy(text, sanitized, true);
        text = sanitized;
    }
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 4);
    if (!allow_special || impl_->added.empty()) {
        impl_->encode_plain(text, out);
        return out;
    }
    // Two passes as in Hugging Face: tokens with normalized = false are found in the raw text,
    // then normalized ones inside what is left (the normalizer is the identity here).
    std::vector<tok::TextSegment> first, segments;
    impl_->raw_matcher->split(text, 0, static_cast<uint32_t>(text.size()), first);
    for (const auto& seg : first) {
        if (seg.added_id >= 0) {
            segments.push_back(seg);
        } else {
            impl_->normalized_matcher->split(text, seg.begin, seg.end, segments);
        }
    }
    for (const auto& seg : segments) {
        if (seg.added_id >= 0) {
            out.push_back(seg.added_id);
        } else {
            impl_->encode_plain(text.substr(seg.begin, seg.end - seg.begin), out);
        }
    }
    return out;
}

bool Tokenizer::append_token_bytes(int32_t id, bool skip_special, std::string& out) const {
    if (id < 0 || static_cast<size_t>(id) >= impl_->defined.size() || !impl_->defined[id]) return false;
    if (skip_special && impl_->special[id]) return false;
    out.append(impl_->token_bytes[id]);
    return true;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
    std::string bytes;
    for (const int32_t id : ids) append_token_bytes(id, skip_special, bytes);
    std::string text;
    text.reserve(bytes.size());
    tok::append_utf8_lossy(bytes, text, true);
    return text;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
    if (const auto it = impl_->added_by_content.find(token); it != impl_->added_by_content.end()) return it->second;
    return impl_->model.token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
    if (const auto it = impl_->added_by_id.find(id); it != impl_->added_by_id.end())
        return impl_->added[it->second].content;
    const std::string* s = impl_->model.id_to_token(id);
    ONECARD_CHECK(s != nullptr, "tokenizer: id {} is not in the vocabulary (vocab_size {})", id, vocab_size());
    return *s;
}

size_t Tokenizer::vocab_size() const {
    return impl_->defined.size();
}

bool Tokenizer::is_special(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) < impl_->special.size() && impl_->special[id];
}

bool Tokenizer::is_added(int32_t id) const {
    return impl_->added_by_id.contains(id);
}

const std::vector<tok::AddedToken>& Tokenizer::added_tokens() const {
    return impl_->added;
}

void Tokenizer::check_integrity() const {
    impl_->model.check_integrity();
    ONECARD_CHECK(impl_->token_bytes.size() == impl_->defined.size() && impl_->special.size() == impl_->defined.size(),
                  "tokenizer: per-id tables have different sizes");
    for (const auto& t : impl_->added) {
        ONECARD_CHECK(static_cast<size_t>(t.id) < impl_->defined.size() && impl_->defined[t.id],
                      "tokenizer: added token '{}' (id {}) is not marked defined", t.content, t.id);
        const auto it = impl_->added_by_content.find(t.content);
        ONECARD_CHECK(it != impl_->added_by_content.end() && it->second == t.id,
                      "tokenizer: added token '{}' lookup disagrees with id {}", t.content, t.id);
        ONECARD_CHECK(static_cast<bool>(impl_->special[t.id]) == t.special,
                      "tokenizer: special flag of id {} disagrees with its added token", t.id);
    }
}

}  // namespace onecard
