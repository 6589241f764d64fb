#include "tokenizer/pretokenizer.h"

#include "core/error.h"
#include "tokenizer/byte_level.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>

namespace onecard::tok {

namespace {

// Unicode White_Space as Oniguruma's \s sees it (what Hugging Face tokenizers runs in Rust).
constexpr std::string_view kWhiteSpaceClassBody =
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
    "\\x{205F}\\x{3000}";

// The regex the ByteLevel pre-tokenizer uses when `use_regex` is true (GPT-2's).
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

using Span = std::pair<uint32_t, uint32_t>;
using Segment = std::pair<Span, bool>;

size_t utf8_char_len(std::string_view s, size_t i) {
    const auto b = static_cast<uint8_t>(s[i]);
    if (b < 0x80) return 1;
    if (b >= 0xF0) return 4;
    if (b >= 0xE0) return 3;
    return 2;
}

SplitBehavior parse_behavior(const std::string& name) {
    if (name == "Removed") return SplitBehavior::Removed;
    if (name == "Isolated") return SplitBehavior::Isolated;
    if (name == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
    if (name == "MergedWithNext") return SplitBehavior::MergedWithNext;
    if (name == "Contiguous") return SplitBehavior::Contiguous;
    fail("tokenizer.json: pre_tokenizer Split has unknown behavior '{}'", name);
}

// Splits every piece by a pattern (a Regex, or a literal string) with a delimiter behavior.
class SplitStep final : public PreTokenizerStep {
public:
    SplitStep(std::optional<std::string> literal, std::unique_ptr<Regex> regex, SplitBehavior behavior, bool invert)
        : literal_(std::move(literal)), regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}

    void apply(PreTokenized& pieces) const override {
        std::vector<Span> out;
        out.reserve(pieces.size() * 2);
        std::vector<Span> matches;
        std::vector<Segment> segments;
        std::optional<Regex::Scratch> scratch;
        if (regex_) scratch.emplace(*regex_);
        for (size_t p = 0; p < pieces.size(); ++p) {
            const std::string_view piece = pieces.piece(p);
            const uint32_t base = pieces.spans()[p].first;
            segments.clear();
            if (piece.empty()) {
                segments.push_back({{0, 0}, false});
            } else {
                matches.clear();
                find(piece, matches, scratch);
                uint32_t prev = 0;
                for (const auto& [s, e] : matches) {
                    if (prev != s) segments.push_back({{prev, s}, false});
                    segments.push_back({{s, e}, true});
                    prev = e;
                }
                if (prev != piece.size()) segments.push_back({{prev, static_cast<uint32_t>(piece.size())}, false});
            }
            if (invert_) {
                for (auto& seg : segments) seg.second = !seg.second;
            }
            for (const auto& [s, e] : apply_split_behavior(segments, behavior_)) out.push_back({base + s, base + e});
        }
        pieces.set_spans(std::move(out));
    }

private:
    void find(std::string_view piece, std::vector<Span>& matches, std::optional<Regex::Scratch>& scratch) const {
        if (regex_) {
            regex_->find_all(piece, matches, *scratch);
            return;
        }
        const std::string& lit = *literal_;
        size_t pos = 0;
        while ((pos = piece.find(lit, pos)) != std::string_view::npos) {
            matches.push_back({static_cast<uint32_t>(pos), static_cast<uint32_t>(pos + lit.size())});
            pos += lit.size();
        }
    }

    std::optional<std::string> literal_;
    std::unique_ptr<Regex> regex_;
    SplitBehavior behavior_;
    bool invert_;
};

// Hugging Face ByteLevel pre-tokenizer: optional leading space per piece, optional GPT-2 regex
// split, then every byte mapped to the byte-level alphabet.
class ByteLevelStep final : public PreTokenizerStep {
public:
    ByteLevelStep(bool add_prefix_space, bool use_regex)
        : add_prefix_space_(add_prefix_space), regex_(use_regex ? std::make_unique<Regex>(kGpt2Pattern) : nullptr) {}

    bool is_byte_level() const override { return true; }

    void apply(PreTokenized& pieces) const override {
        const ByteLevelAlphabet& alphabet = byte_level_alphabet();
        std::string buffer;
        buffer.reserve(pieces.text().size() * 2 + pieces.size());
        std::vector<Span> spans;
        spans.reserve(pieces.size());
        std::string prefixed;
        std::vector<Span> matches;
        std::optional<Regex::Scratch> scratch;
        if (regex_) scratch.emplace(*regex_);
        for (size_t p = 0; p < pieces.size(); ++p) {
            std::string_view piece = pieces.piece(p);
            if (add_prefix_space_ && (piece.empty() || piece.front() != ' ')) {
                prefixed.clear();
                prefixed.push_back(' ');
                prefixed.append(piece.data(), piece.size());
                piece = prefixed;
            }
            auto emit = [&](std::string_view part) {
                if (part.empty()) return;
                const auto start = static_cast<uint32_t>(buffer.size());
                alphabet.encode(part, buffer);
                spans.push_back({start, static_cast<uint32_t>(buffer.size())});
            };
            if (!regex_) {
                emit(piece);
                continue;
            }
            matches.clear();
            regex_->find_all(piece, matches, *scratch);
            // Isolated behaviour: matches and the gaps between them are all pieces.
            uint32_t prev = 0;
            for (const auto& [s, e] : matches) {
                if (prev != s) emit(piece.substr(prev, s - prev));
                emit(piece.substr(s, e - s));
                prev = e;
            }
            if (prev < piece.size()) emit(piece.substr(prev));
        }
        pieces.set_buffer(std::move(buffer), std::move(spans));
    }

private:
    bool add_prefix_space_;
    std::unique_ptr<Regex> regex_;
};

void add_steps_from_json(PreTokenizer& pt, const nlohmann::json& j) {
    if (j.is_null()) return;
    ONECARD_CHECK(j.is_object() && j.contains("type"), "tokenizer.json: pre_tokenizer entry without a type: {}",
                  j.dump().substr(0, 200));
    const std::string type = j.at("type").get<std::string>();
    if (type == "Sequence") {
        for (const auto& sub : j.at("pretokenizers")) add_steps_from_json(pt, sub);
    } else if (type == "Split") {
        const auto& pattern = j.at("pattern");
        const SplitBehavior behavior = parse_behavior(j.value("behavior", std::string("Isolated")));
        const bool invert = j.value("invert", false);
        if (pattern.contains("Regex")) {
            pt.add_step(PreTokenizer::make_split(pattern.at("Regex").get<std::string>(), behavior, invert));
        } else if (pattern.contains("String")) {
            const std::string lit = pattern.at("String").get<std::string>();
            ONECARD_CHECK(!lit.empty(), "tokenizer.json: pre_tokenizer Split with an empty String pattern");
            pt.add_step(std::make_unique<SplitStep>(lit, nullptr, behavior, invert));
        } else {
            fail("tokenizer.json: pre_tokenizer Split pattern must be Regex or String: {}", pattern.dump());
        }
    } else if (type == "ByteLevel") {
        pt.add_step(PreTokenizer::make_byte_level(j.value("add_prefix_space", true), j.value("use_regex", true)));
    } else {
        fail("tokenizer.json: unsupported pre_tokenizer type '{}' (supported: Sequence, Split, ByteLevel)", type);
    }
}

}  // namespace

// ---- Regex ----------------------------------------------------------------------------------

struct Regex::Impl {
    pcre2_code* code = nullptr;
    bool jit = false;
};

Regex::Regex(std::string_view pattern) : pattern_(pattern), impl_(std::make_unique<Impl>()) {
    const std::string translated = translate_hf_regex(pattern);
    int err = 0;
    PCRE2_SIZE err_off = 0;
    impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
    if (impl_->code == nullptr) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        fail("tokenizer regex '{}' does not compile (PCRE2 at offset {}): {}", pattern_, err_off,
             reinterpret_cast<const char*>(msg));
    }
    // JIT is an optimisation only: fall back to the interpreter where it is unavailable.
    impl_->jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() {
    if (impl_ && impl_->code) pcre2_code_free(impl_->code);
}

Regex::Scratch::Scratch(const Regex& re) : match_data_(pcre2_match_data_create_from_pattern(re.impl_->code, nullptr)) {
    ONECARD_CHECK(match_data_ != nullptr, "tokenizer regex: out of memory for match data");
}

Regex::Scratch::~Scratch() {
    pcre2_match_data_free(static_cast<pcre2_match_data*>(match_data_));
}

void Regex::find_all(std::string_view subject, std::vector<std::pair<uint32_t, uint32_t>>& spans,
                     Scratch& scratch) const {
    auto* md = static_cast<pcre2_match_data*>(scratch.match_data_);
    const auto* subj = reinterpret_cast<PCRE2_SPTR>(subject.data());
    const size_t n = subject.size();
    size_t last_end = 0;
    std::optional<size_t> last_match;
    while (last_end <= n) {
        const int rc = impl_->jit ? pcre2_jit_match(impl_->code, subj, n, last_end, 0, md, nullptr)
                                  : pcre2_match(impl_->code, subj, n, last_end, PCRE2_NO_UTF_CHECK, md, nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            fail("tokenizer regex '{}' failed to match: {}", pattern_, reinterpret_cast<const char*>(msg));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        const size_t s = ov[0];
        const size_t e = ov[1];
        if (s == e) {
            last_end = e < n ? e + utf8_char_len(subject, e) : n + 1;
            if (last_match && *last_match == e) continue;
        } else {
            last_end = e;
        }
        last_match = e;
        spans.push_back({static_cast<uint32_t>(s), static_cast<uint32_t>(e)});
    }
}

std::string translate_hf_regex(std::string_view pattern) {
    std::string out;
    out.reserve(pattern.size() + 64);
    bool in_class = false;
    for (size_t i = 0; i < pattern.size(); ++i) {
        const char c = pattern[i];
        if (c == '\\' && i + 1 < pattern.size()) {
            const char n = pattern[i + 1];
            if (n == 's') {
                if (in_class) {
                    out.append(kWhiteSpaceClassBody);
                } else {
                    out.append("[").append(kWhiteSpaceClassBody).append("]");
                }
            } else if (n == 'S' && !in_class) {
                out.append("[^").append(kWhiteSpaceClassBody).append("]");
            } else {
                out.push_back(c);
                out.push_back(n);
            }
            ++i;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            out.push_back(c);
            // A ']' right after '[' or '[^' is a literal member, not the end of the class.
            if (i + 1 < pattern.size() && pattern[i + 1] == '^') out.push_back(pattern[++i]);
            if (i + 1 < pattern.size() && pattern[i + 1] == ']') out.push_back(pattern[++i]);
            continue;
        }
        if (in_class && c == ']') in_class = false;
        out.push_back(c);
    }
    return out;
}

// ---- PreTokenized ---------------------------------------------------------------------------

PreTokenized::PreTokenized(std::string_view text) : view_(text) {
    if (!text.empty()) spans_.push_back({0, static_cast<uint32_t>(text.size())});
}

void PreTokenized::set_buffer(std::string buffer, std::vector<std::pair<uint32_t, uint32_t>> spans) {
    owned_ = std::move(buffer);
    view_ = owned_;
    spans_ = std::move(spans);
}

// ---- split behaviours -----------------------------------------------------------------------

std::vector<std::pair<uint32_t, uint32_t>> apply_split_behavior(const std::vector<Segment>& segments,
                                                                SplitBehavior behavior) {
    std::vector<Segment> acc;
    acc.reserve(segments.size());
    switch (behavior) {
        case SplitBehavior::Isolated:
            acc = segments;
            break;
        case SplitBehavior::Removed:
            for (const auto& seg : segments)
                if (!seg.second) acc.push_back(seg);
            break;
        case SplitBehavior::MergedWithPrevious: {
            bool previous_match = false;
            for (const auto& [span, is_match] : segments) {
                if (is_match && !previous_match && !acc.empty()) {
                    acc.back().first.second = span.second;
                } else {
                    acc.push_back({span, false});
                }
                previous_match = is_match;
            }
            break;
        }
        case SplitBehavior::MergedWithNext: {
            bool previous_match = false;  // whether the segment to the right was a match
            for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
                const auto& [span, is_match] = *it;
                if (is_match && !previous_match && !acc.empty()) {
                    acc.back().first.first = span.first;
                } else {
                    acc.push_back({span, false});
                }
                previous_match = is_match;
            }
            std::reverse(acc.begin(), acc.end());
            break;
        }
        case SplitBehavior::Contiguous: {
            bool previous_match = false;
            bool first = true;
            for (const auto& [span, is_match] : segments) {
                if (!first && is_match == previous_match) {
                    acc.back().first.second = span.second;
                } else {
                    acc.push_back({span, false});
                }
                previous_match = is_match;
                first = false;
            }
            break;
        }
    }
    std::vector<Span> out;
    out.reserve(acc.size());
    for (const auto& [span, is_match] : acc)
        if (span.first != span.second) out.push_back(span);
    return out;
}

// ---- PreTokenizer ---------------------------------------------------------------------------

PreTokenizer PreTokenizer::from_json(const nlohmann::json& j) {
    PreTokenizer pt;
    add_steps_from_json(pt, j);
    return pt;
}

std::unique_ptr<PreTokenizerStep> PreTokenizer::make_split(std::string_view regex, SplitBehavior behavior,
                                                           bool invert) {
    return std::make_unique<SplitStep>(std::nullopt, std::make_unique<Regex>(regex), behavior, invert);
}

std::unique_ptr<PreTokenizerStep> PreTokenizer::make_byte_level(bool add_prefix_space, bool use_regex) {
    return std::make_unique<ByteLevelStep>(add_prefix_space, use_regex);
}

void PreTokenizer::add_step(std::unique_ptr<PreTokenizerStep> step) {
    byte_level_ = byte_level_ || step->is_byte_level();
    steps_.push_back(std::move(step));
}

void PreTokenizer::apply(PreTokenized& pieces) const {
    for (const auto& step : steps_) step->apply(pieces);
}

}  // namespace onecard::tok
