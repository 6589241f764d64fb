// Pre-tokenization for Hugging Face tokenizer.json files: the `Split` (regex or string pattern,
// every SplitDelimiterBehavior, invert) and `ByteLevel` pre-tokenizers and a `Sequence` of them.
// Regexes run on PCRE2 (UTF + UCP, JIT when available), never std::regex.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace onecard::tok {

// A compiled PCRE2 pattern. Immutable after construction, so one instance may be used from many
// threads (each search allocates its own match data).
class Regex {
public:
    // `pattern` uses Hugging Face / Oniguruma syntax; see translate_hf_regex().
    explicit Regex(std::string_view pattern);
    ~Regex();
    Regex(const Regex&) = delete;
    Regex& operator=(const Regex&) = delete;

    // Per-thread match buffers for find_all(); reuse one across many calls to avoid allocating.
    class Scratch {
    public:
        explicit Scratch(const Regex& re);
        ~Scratch();
        Scratch(const Scratch&) = delete;
        Scratch& operator=(const Scratch&) = delete;

    private:
        friend class Regex;
        void* match_data_;
    };

    // All match spans [begin, end) in `subject` (valid UTF-8), left to right, with the
    // non-overlapping iteration rule of Rust's regex/onig crates (an empty match right after the
    // previous match is skipped; after an empty match the search resumes one character later).
    void find_all(std::string_view subject, std::vector<std::pair<uint32_t, uint32_t>>& spans, Scratch& scratch) const;
    void find_all(std::string_view subject, std::vector<std::pair<uint32_t, uint32_t>>& spans) const {
        Scratch scratch(*this);
        find_all(subject, spans, scratch);
    }

    const std::string& pattern() const { return pattern_; }

private:
    struct Impl;
    std::string pattern_;
    std::unique_ptr<Impl> impl_;
};

// Rewrites a tokenizer.json regex for PCRE2. `\s` / `\S` become explicit classes with the
// Oniguruma (Hugging Face tokenizers) meaning: White_Space = TAB..CR, U+0085 and the Z categories.
// PCRE2's UCP \s would miss U+0085. (The JS reference uses ECMAScript \s, which also differs:
// it adds U+FEFF and drops U+0085; the parity corpus avoids those two characters.)
std::string translate_hf_regex(std::string_view pattern);

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

// The pieces of text flowing through the pre-tokenizer chain: spans into `text()`. A step that
// changes bytes (ByteLevel) writes a new buffer; splitting steps only refine the spans.
class PreTokenized {
public:
    explicit PreTokenized(std::string_view text);

    std::string_view text() const { return view_; }
    const std::vector<std::pair<uint32_t, uint32_t>>& spans() const { return spans_; }
    std::string_view piece(size_t i) const { return view_.substr(spans_[i].first, spans_[i].second - spans_[i].first); }
    size_t size() const { return spans_.size(); }

    void set_spans(std::vector<std::pair<uint32_t, uint32_t>> spans) { spans_ = std::move(spans); }
    // Replaces the text buffer (and spans that index into it).
    void set_buffer(std::string buffer, std::vector<std::pair<uint32_t, uint32_t>> spans);

private:
    std::string owned_;
    std::string_view view_;
    std::vector<std::pair<uint32_t, uint32_t>> spans_;
};

// One configured pre-tokenizer step.
class PreTokenizerStep {
public:
    virtual ~PreTokenizerStep() = default;
    virtual void apply(PreTokenized& pieces) const = 0;
    // True when this step already maps bytes to the byte-level alphabet.
    virtual bool is_byte_level() const { return false; }
};

// The whole `pre_tokenizer` section of a tokenizer.json (null = one piece per section).
class PreTokenizer {
public:
    PreTokenizer() = default;
    // Throws onecard::Error naming the unsupported type/field.
    static PreTokenizer from_json(const nlohmann::json& j);

    void apply(PreTokenized& pieces) const;
    bool byte_level() const { return byte_level_; }
    size_t n_steps() const { return steps_.size(); }

    // Building blocks, public for tests and for other tokenizer configurations.
    static std::unique_ptr<PreTokenizerStep> make_split(std::string_view regex, SplitBehavior behavior, bool invert);
    static std::unique_ptr<PreTokenizerStep> make_byte_level(bool add_prefix_space, bool use_regex);
    void add_step(std::unique_ptr<PreTokenizerStep> step);

private:
    std::vector<std::shared_ptr<const PreTokenizerStep>> steps_;
    bool byte_level_ = false;
};

// Applies a SplitDelimiterBehavior to (span, is_match) segments covering a piece, exactly as the
// Hugging Face `NormalizedString::split` does; empty results are dropped. Exposed for tests.
std::vector<std::pair<uint32_t, uint32_t>> apply_split_behavior(
    const std::vector<std::pair<std::pair<uint32_t, uint32_t>, bool>>& segments, SplitBehavior behavior);

}  // namespace onecard::tok
