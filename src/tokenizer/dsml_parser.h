// Streaming parser for DeepSeek-V4 DSML tool calls in model output (dsv4-model.md §9.3):
//
//   content\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="f">\n
//   <｜DSML｜parameter name="k" string="true|false">VALUE</｜DSML｜parameter>\n...</｜DSML｜invoke>\n
//   </｜DSML｜tool_calls><｜end▁of▁sentence｜>
//
// Fed any split of the text, it yields the same events (after merging adjacent deltas) as when fed the whole
// text at once. Contract:
//  * no byte of a DSML tag ever reaches content or arguments: a tail that could still become a tag (or the
//    end-of-sentence token, or the blank line that precedes a block) is held back until it resolves;
//  * arguments stream as one JSON object text in the official layout `{"k": v, "k2": v2}`: string="true"
//    values as JSON strings (streamed as they arrive), string="false" values as their JSON text (buffered
//    and validated; invalid JSON becomes a JSON string plus a warning);
//  * invokes without the outer tool_calls wrapper are recovered; several invokes and several blocks work;
//  * malformed markup never throws: before any invoke opened it is returned as content, after that the open
//    call is closed and the rest continues as content; each case adds a warning;
//  * the end-of-sentence token ends parsing; later text is ignored (with a warning).
#pragma once

#include <cstddef>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace onecard {

enum class ParseEventKind { Content, Reasoning, ToolCallBegin, ToolCallArgs, ToolCallEnd };

struct ParseEvent {
    ParseEventKind kind = ParseEventKind::Content;
    std::string text;  // Content / Reasoning / ToolCallArgs: the delta
    int index = -1;    // tool-call events: 0-based call index in order of appearance
    std::string id;    // ToolCallBegin
    std::string name;  // ToolCallBegin
};

struct ParsedToolCall {
    std::string id;
    std::string name;
    std::string arguments;  // JSON object text
    bool operator==(const ParsedToolCall&) const = default;
};

// Everything a completion parsed into; `apply_event` folds a stream of events into it.
struct ParsedCompletion {
    std::string content;
    std::string reasoning;
    std::vector<ParsedToolCall> tool_calls;
    std::vector<std::string> warnings;
    bool operator==(const ParsedCompletion&) const = default;
};
void apply_event(ParsedCompletion& out, const ParseEvent& ev);

struct DsmlParserOptions {
    std::string id_prefix = "call_";  // tool-call ids are id_prefix + index (a server passes a per-request prefix)
};

class DsmlParser {
public:
    explicit DsmlParser(DsmlParserOptions opts = {});

    // Consumes a piece of model output (content side; reasoning is split off by ReasoningParser).
    std::vector<ParseEvent> push(std::string_view text);
    // End of output: flushes held-back text and closes an unterminated call (with a warning).
    std::vector<ParseEvent> finish();

    const std::vector<std::string>& warnings() const { return warnings_; }
    bool saw_eos() const { return state_ == State::Done && saw_eos_; }
    int n_tool_calls() const { return n_calls_; }
    void check_integrity() const;

private:
    enum class State { Content, Block, Invoke, ParamValue, AfterBlock, Done };

    // Each returns true when it made progress (consumed input or changed state).
    bool step_content(bool final);
    bool step_block(bool final);
    bool step_invoke(bool final);
    bool step_param_value(bool final);
    bool step_after_block();

    void emit(ParseEventKind kind, std::string text);
    void emit_content(std::string text);
    void begin_call(std::string name);
    void drop_after_eos();  // text after the end-of-sentence token: ignored, with one warning
    void end_call();
    void finish_value(bool closed_by_tag);
    // Malformed markup at buf_[0, n_bad): give back what is not a call as content and resume in Content.
    void fail_block(size_t n_bad, const std::string& why);
    void warn(std::string w) { warnings_.push_back(std::move(w)); }

    DsmlParserOptions opts_;
    State state_ = State::Content;
    // Unconsumed input is buf_[pos_, end): consuming moves pos_, so whole-text parsing stays linear.
    std::string_view rest() const { return std::string_view(buf_).substr(pos_); }
    std::string_view tag_window() const;  // rest(), cut just past the longest tag we accept
    void consume(size_t n) { pos_ += n; }

    std::string buf_;
    size_t pos_ = 0;
    std::string raw_block_;  // raw text of the current block before its first invoke (returned on failure)
    bool in_wrapper_ = false;
    bool block_has_call_ = false;
    bool after_tool_calls_ = false;  // content now follows a finished block
    bool saw_eos_ = false;
    bool warned_trailing_ = false;      // "text after tool calls" reported
    bool warned_trailing_eos_ = false;  // "text after EOS" reported
    int n_calls_ = 0;
    bool call_open_ = false;
    int n_params_ = 0;  // parameters written into the open call
    std::set<std::string> param_names_;
    std::string param_name_;
    bool param_is_string_ = true;
    bool param_skipped_ = false;  // duplicate name: value is read but not written
    std::string param_raw_;       // string="false" value text so far
    std::vector<ParseEvent> out_;
    std::vector<std::string> warnings_;
};

}  // namespace onecard
