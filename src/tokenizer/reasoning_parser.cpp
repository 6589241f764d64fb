#include "tokenizer/reasoning_parser.h"

#include "core/error.h"
#include "tokenizer/chat_tokens.h"
#include "tokenizer/dsml_scan.h"

#include <utility>

namespace onecard {
namespace {

using dsv4::kEos;
using dsv4::kThinkEnd;
using dsv4::kThinkStart;

// Tool-call block starts that end reasoning (the wrapper, or a bare invoke the model forgot to wrap).
constexpr std::string_view kBlockTools = "<｜DSML｜tool_calls";
constexpr std::string_view kBlockFunctions = "<｜DSML｜function_calls";
constexpr std::string_view kBlockInvoke = "<｜DSML｜invoke";

void append_events(std::vector<ParseEvent>& out, std::vector<ParseEvent> more) {
    for (auto& ev : more) out.push_back(std::move(ev));
}

void emit_reasoning(std::vector<ParseEvent>& out, std::string_view text) {
    if (text.empty()) return;
    if (!out.empty() && out.back().kind == ParseEventKind::Reasoning) {
        out.back().text += text;
        return;
    }
    ParseEvent ev;
    ev.kind = ParseEventKind::Reasoning;
    ev.text = std::string(text);
    out.push_back(std::move(ev));
}

}  // namespace

ReasoningParser::ReasoningParser(ReasoningParserOptions opts)
    : in_reasoning_(opts.start_in_reasoning), dsml_(std::move(opts.dsml)) {}

void ReasoningParser::forward(std::string_view text, std::vector<ParseEvent>& out) {
    if (!text.empty()) append_events(out, dsml_.push(text));
}

std::vector<ParseEvent> ReasoningParser::push(std::string_view text) {
    std::vector<ParseEvent> out;
    if (!in_reasoning_) {
        forward(text, out);
        return out;
    }
    buf_.append(text);
    if (at_start_) {
        if (buf_.size() < kThinkStart.size() && kThinkStart.starts_with(buf_)) return out;
        if (buf_.starts_with(kThinkStart)) buf_.erase(0, kThinkStart.size());  // the prompt already opened it
        at_start_ = false;
    }
    const MarkerHit hit = find_first_marker(buf_, {kThinkEnd, kBlockTools, kBlockFunctions, kBlockInvoke, kEos});
    if (!hit.found()) {
        size_t keep = partial_marker_suffix(buf_, {kThinkEnd, kBlockTools, kBlockFunctions, kBlockInvoke, kEos});
        keep += trailing_newlines(std::string_view(buf_).substr(0, buf_.size() - keep), 2);
        emit_reasoning(out, std::string_view(buf_).substr(0, buf_.size() - keep));
        buf_.erase(0, buf_.size() - keep);
        return out;
    }
    std::string rest;
    if (hit.marker == 0) {
        emit_reasoning(out, std::string_view(buf_).substr(0, hit.pos));
        rest = buf_.substr(hit.pos + kThinkEnd.size());
    } else if (hit.marker == 4) {
        warnings_.push_back("output ended before </think>; all of it is reasoning");
        emit_reasoning(out, std::string_view(buf_).substr(0, hit.pos));
        rest = buf_.substr(hit.pos);
    } else {
        warnings_.push_back("tool call started inside reasoning; handed to the tool parser");
        // The blank line before the block goes with the block (the tool parser drops it).
        const size_t nl = trailing_newlines(std::string_view(buf_).substr(0, hit.pos), 2);
        emit_reasoning(out, std::string_view(buf_).substr(0, hit.pos - nl));
        rest = buf_.substr(hit.pos - nl);
    }
    in_reasoning_ = false;
    buf_.clear();
    forward(rest, out);
    return out;
}

std::vector<ParseEvent> ReasoningParser::finish() {
    std::vector<ParseEvent> out;
    if (in_reasoning_) {
        warnings_.push_back("output ended before </think>; all of it is reasoning");
        emit_reasoning(out, buf_);
        buf_.clear();
        in_reasoning_ = false;
    }
    append_events(out, dsml_.finish());
    return out;
}

std::vector<std::string> ReasoningParser::warnings() const {
    std::vector<std::string> all = warnings_;
    all.insert(all.end(), dsml_.warnings().begin(), dsml_.warnings().end());
    return all;
}

void ReasoningParser::check_integrity() const {
    ONECARD_CHECK(in_reasoning_ || buf_.empty(), "ReasoningParser: reasoning text held after reasoning ended");
    // Held back: at most a marker prefix plus the blank line before it.
    ONECARD_CHECK(buf_.size() <= kEos.size() + kBlockFunctions.size() + 2, "ReasoningParser: {} bytes held back",
                  buf_.size());
    dsml_.check_integrity();
}

ParsedCompletion parse_completion(std::string_view text, const ReasoningParserOptions& opts) {
    ReasoningParser parser(opts);
    ParsedCompletion out;
    for (const auto& ev : parser.push(text)) apply_event(out, ev);
    for (const auto& ev : parser.finish()) apply_event(out, ev);
    out.warnings = parser.warnings();
    return out;
}

}  // namespace onecard
