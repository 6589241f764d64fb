// Top-level streaming parser for DeepSeek-V4 model output: splits reasoning from the answer and hands the
// answer to the DSML tool-call parser.
//
// Thinking mode (the prompt ended with <think>): text up to </think> is reasoning, the rest is content. A
// re-emitted leading <think> is dropped. If a DSML tool-call block starts inside the reasoning, the
// reasoning ends there and the block (and all after it) goes to the tool parser, with a warning. Output
// that ends (or hits end-of-sentence) before </think> is all reasoning, with a warning.
// Chat mode (the prompt ended with </think>): everything is content.
//
// Streaming and whole-text parsing give identical results: `parse_completion` is push(text) + finish().
#pragma once

#include "tokenizer/dsml_parser.h"

#include <string>
#include <string_view>
#include <vector>

namespace onecard {

struct ReasoningParserOptions {
    bool start_in_reasoning = true;  // ChatPrompt::generation_in_reasoning
    DsmlParserOptions dsml;
};

class ReasoningParser {
public:
    explicit ReasoningParser(ReasoningParserOptions opts = {});

    // Consumes the next piece of output text (any split, even inside a UTF-8 sequence or a marker).
    std::vector<ParseEvent> push(std::string_view text);
    // End of output; flushes everything held back.
    std::vector<ParseEvent> finish();

    bool in_reasoning() const { return in_reasoning_; }
    bool saw_eos() const { return dsml_.saw_eos(); }
    // Reasoning-level warnings followed by the tool parser's.
    std::vector<std::string> warnings() const;
    void check_integrity() const;

private:
    void forward(std::string_view text, std::vector<ParseEvent>& out);

    bool in_reasoning_;
    bool at_start_ = true;  // nothing consumed yet (a leading <think> may still be dropped)
    std::string buf_;       // reasoning text held back
    DsmlParser dsml_;
    std::vector<std::string> warnings_;
};

// Whole-text parse of one completion.
ParsedCompletion parse_completion(std::string_view text, const ReasoningParserOptions& opts = {});

}  // namespace onecard
