#include "tokenizer/dsml_parser.h"

#include "core/error.h"
#include "tokenizer/chat_json.h"
#include "tokenizer/chat_tokens.h"
#include "tokenizer/dsml_scan.h"

#include <fmt/format.h>

#include <utility>

namespace onecard {
namespace {

using dsv4::kDsml;
using dsv4::kDsmlClose;
using dsv4::kDsmlOpen;
using dsv4::kEos;

// A tag longer than this is not DSML but runaway text; bounds how much input is held back.
constexpr size_t kMaxTagBytes = 4096;

bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}
bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}
bool is_wrapper(std::string_view name) {
    return name == dsv4::kToolCallsBlock || name == "function_calls";
}

// `s` is a proper prefix of `marker` (more input could complete it).
bool is_partial(std::string_view s, std::string_view marker) {
    return s.size() < marker.size() && marker.substr(0, s.size()) == s;
}

struct Tag {
    enum class Status { Complete, Incomplete, Invalid } status = Status::Invalid;
    size_t length = 0;  // Complete: bytes of the tag. Invalid: bytes up to the offending one (>= 1)
    bool closing = false;
    std::string name;
    std::vector<std::pair<std::string, std::string>> attrs;

    const std::string* attr(std::string_view key) const {
        for (const auto& [k, v] : attrs)
            if (k == key) return &v;
        return nullptr;
    }
};

// Parses `<[/]｜DSML｜NAME( KEY="VALUE")*>` (whitespace tolerated) at the start of `s`.
Tag parse_tag(std::string_view s) {
    Tag t;
    auto incomplete = [&](size_t i) {
        t.status = i > kMaxTagBytes ? Tag::Status::Invalid : Tag::Status::Incomplete;
        t.length = std::max<size_t>(i, 1);
        return t;
    };
    auto invalid = [&](size_t i) {
        t.status = Tag::Status::Invalid;
        t.length = std::max<size_t>(i, 1);
        return t;
    };
    size_t i = 0;
    if (s.empty()) return incomplete(0);
    if (s[0] != '<') return invalid(1);
    i = 1;
    if (i < s.size() && s[i] == '/') {
        t.closing = true;
        ++i;
    }
    for (char c : kDsml) {
        if (i >= s.size()) return incomplete(i);
        if (s[i] != c) return invalid(i);
        ++i;
    }
    while (i < s.size() && is_space(s[i])) ++i;
    const size_t name_start = i;
    while (i < s.size() && is_name_char(s[i])) ++i;
    if (i >= s.size()) return incomplete(i);
    if (i == name_start) return invalid(i);
    t.name = std::string(s.substr(name_start, i - name_start));
    for (;;) {
        const size_t ws_start = i;
        while (i < s.size() && is_space(s[i])) ++i;
        if (i >= s.size()) return incomplete(i);
        if (s[i] == '>') {
            t.status = Tag::Status::Complete;
            t.length = i + 1;
            return t;
        }
        if (i == ws_start) return invalid(i);
        const size_t key_start = i;
        while (i < s.size() && is_name_char(s[i])) ++i;
        if (i >= s.size()) return incomplete(i);
        if (i == key_start || s[i] != '=') return invalid(i);
        ++i;
        if (i >= s.size()) return incomplete(i);
        if (s[i] != '"') return invalid(i);
        const size_t close = s.find('"', i + 1);
        if (close == std::string_view::npos) return incomplete(s.size());
        if (close > kMaxTagBytes) return invalid(i);
        // A DSML token inside a quoted value means the markup is broken, not a name containing it.
        if (s.substr(i + 1, close - i - 1).find(kDsml) != std::string_view::npos) return invalid(i);
        t.attrs.emplace_back(std::string(s.substr(key_start, i - 1 - key_start)),
                             std::string(s.substr(i + 1, close - i - 1)));
        i = close + 1;
    }
}

// Where the buffer stands relative to a DSML tag start: a full `<｜DSML｜` / `</｜DSML｜`, a prefix of one that
// more input may complete, or plain text.
enum class TagStart { Full, Partial, None };
TagStart tag_start(std::string_view buf) {
    if (buf.starts_with(kDsmlOpen) || buf.starts_with(kDsmlClose)) return TagStart::Full;
    if (is_partial(buf, kDsmlOpen) || is_partial(buf, kDsmlClose)) return TagStart::Partial;
    return TagStart::None;
}

std::string json_string_body(std::string_view s) {
    std::string quoted;
    py_json_append_string(quoted, s);
    return quoted.substr(1, quoted.size() - 2);
}

size_t skip_space(std::string_view s) {
    size_t i = 0;
    while (i < s.size() && is_space(s[i])) ++i;
    return i;
}

}  // namespace

void apply_event(ParsedCompletion& out, const ParseEvent& ev) {
    switch (ev.kind) {
        case ParseEventKind::Content:
            out.content += ev.text;
            break;
        case ParseEventKind::Reasoning:
            out.reasoning += ev.text;
            break;
        case ParseEventKind::ToolCallBegin:
            out.tool_calls.push_back({ev.id, ev.name, ""});
            break;
        case ParseEventKind::ToolCallArgs:
            ONECARD_CHECK(ev.index >= 0 && static_cast<size_t>(ev.index) < out.tool_calls.size(),
                          "parser: arguments for unknown tool call {}", ev.index);
            out.tool_calls[static_cast<size_t>(ev.index)].arguments += ev.text;
            break;
        case ParseEventKind::ToolCallEnd:
            break;
    }
}

DsmlParser::DsmlParser(DsmlParserOptions opts) : opts_(std::move(opts)) {}

std::string_view DsmlParser::tag_window() const {
    return rest().substr(0, kMaxTagBytes + 16);
}

void DsmlParser::emit(ParseEventKind kind, std::string text) {
    const int index = kind == ParseEventKind::ToolCallArgs ? n_calls_ - 1 : -1;
    // Adjacent deltas of one kind merge, so a caller sees one event per kind per push.
    if ((kind == ParseEventKind::Content || kind == ParseEventKind::ToolCallArgs) && !out_.empty() &&
        out_.back().kind == kind && out_.back().index == index) {
        out_.back().text += text;
        return;
    }
    ParseEvent ev;
    ev.kind = kind;
    ev.text = std::move(text);
    ev.index = index;
    out_.push_back(std::move(ev));
}

void DsmlParser::emit_content(std::string text) {
    if (text.empty()) return;
    if (after_tool_calls_ && !warned_trailing_) {
        warned_trailing_ = true;
        warn("text after a tool_calls block was returned as content");
    }
    emit(ParseEventKind::Content, std::move(text));
}

void DsmlParser::begin_call(std::string name) {
    ParseEvent ev;
    ev.kind = ParseEventKind::ToolCallBegin;
    ev.index = n_calls_;
    ev.id = opts_.id_prefix + std::to_string(n_calls_);
    ev.name = std::move(name);
    out_.push_back(std::move(ev));
    ++n_calls_;
    call_open_ = true;
    n_params_ = 0;
    param_names_.clear();
}

void DsmlParser::end_call() {
    emit(ParseEventKind::ToolCallArgs, n_params_ > 0 ? "}" : "{}");
    ParseEvent ev;
    ev.kind = ParseEventKind::ToolCallEnd;
    ev.index = n_calls_ - 1;
    out_.push_back(std::move(ev));
    call_open_ = false;
}

void DsmlParser::finish_value(bool closed_by_tag) {
    if (!closed_by_tag) warn(fmt::format("parameter '{}' was not closed", param_name_));
    if (param_skipped_) return;
    if (param_is_string_) {
        emit(ParseEventKind::ToolCallArgs, "\"");
    } else if (param_raw_.find('\0') == std::string::npos && OrderedJson::accept(param_raw_)) {
        // (nlohmann's lexer takes a NUL byte for the end of input, so "0\0x" would pass accept() whole and
        // end the arguments' JSON early; a raw NUL is never JSON.)
        emit(ParseEventKind::ToolCallArgs, param_raw_);  // the model's own JSON text, as the official parser keeps it
    } else {
        warn(fmt::format("parameter '{}' is marked string=\"false\" but is not JSON; passed as a string", param_name_));
        std::string quoted;
        py_json_append_string(quoted, param_raw_);
        emit(ParseEventKind::ToolCallArgs, std::move(quoted));
    }
    param_raw_.clear();
}

void DsmlParser::fail_block(size_t n_bad, const std::string& why) {
    warn(why);
    if (state_ == State::ParamValue) finish_value(false);
    if (call_open_) end_call();
    std::string text = block_has_call_ ? std::string() : raw_block_;
    text += rest().substr(0, n_bad);
    consume(n_bad);
    raw_block_.clear();
    state_ = State::Content;
    emit_content(std::move(text));
}

bool DsmlParser::step_content(bool final) {
    if (rest().empty()) return false;
    const MarkerHit hit = find_first_marker(rest(), {kDsmlOpen, kDsmlClose, kEos});
    if (hit.found()) {
        const std::string_view before = rest().substr(0, hit.pos);
        if (hit.marker == 2) {
            emit_content(std::string(before));
            consume(hit.pos + kEos.size());
            state_ = State::Done;
            saw_eos_ = true;
            return true;
        }
        // The blank line before a block belongs to the markup, not to the content.
        const size_t nl = trailing_newlines(before, 2);
        emit_content(std::string(before.substr(0, before.size() - nl)));
        raw_block_ = std::string(before.substr(before.size() - nl));
        consume(hit.pos);
        state_ = State::Block;
        in_wrapper_ = false;
        block_has_call_ = false;
        return true;
    }
    size_t keep = 0;
    if (!final) {
        keep = partial_marker_suffix(rest(), {kDsmlOpen, kDsmlClose, kEos});
        keep += trailing_newlines(rest().substr(0, rest().size() - keep), 2);
    }
    if (keep >= rest().size()) return false;
    emit_content(std::string(rest().substr(0, rest().size() - keep)));
    consume(rest().size() - keep);
    return true;
}

bool DsmlParser::step_block(bool final) {
    const size_t ws = skip_space(rest());
    if (ws > 0) {
        if (!block_has_call_) raw_block_.append(rest().substr(0, ws));
        consume(ws);
    }
    if (rest().empty()) return ws > 0;
    const TagStart start = tag_start(rest());
    if (start == TagStart::Partial && !final) return ws > 0;
    if (start != TagStart::Full) {
        if (block_has_call_ && !in_wrapper_) {
            state_ = State::AfterBlock;  // a run of unwrapped invokes ended
        } else {
            fail_block(0, "text inside a tool_calls block; block returned as content");
        }
        return true;
    }
    const Tag t = parse_tag(tag_window());
    if (t.status == Tag::Status::Incomplete) {
        if (!final) return ws > 0;
        if (block_has_call_) {
            warn("output ended inside a DSML tag; fragment dropped");
            consume(rest().size());
            state_ = State::AfterBlock;
        } else {
            fail_block(rest().size(), "output ended inside a DSML tag; block returned as content");
        }
        return true;
    }
    if (t.status == Tag::Status::Invalid) {
        fail_block(t.length, "malformed DSML tag; returned as content");
        return true;
    }
    if (!t.closing && is_wrapper(t.name) && !in_wrapper_ && !block_has_call_) {
        in_wrapper_ = true;
        raw_block_.append(rest().substr(0, t.length));
        consume(t.length);
        return true;
    }
    if (!t.closing && t.name == "invoke") {
        const std::string* name = t.attr("name");
        if (!name) {
            fail_block(t.length, "DSML invoke without a name; returned as content");
            return true;
        }
        if (!in_wrapper_ && !block_has_call_) warn("tool call without the tool_calls wrapper recovered");
        std::string call_name = *name;
        consume(t.length);
        raw_block_.clear();
        block_has_call_ = true;
        begin_call(std::move(call_name));
        state_ = State::Invoke;
        return true;
    }
    if (t.closing && is_wrapper(t.name)) {
        if (!block_has_call_) warn(in_wrapper_ ? "empty tool_calls block" : "stray closing tool_calls tag dropped");
        consume(t.length);
        raw_block_.clear();
        state_ = State::AfterBlock;
        return true;
    }
    fail_block(t.length, fmt::format("unexpected DSML tag '{}{}' in a tool_calls block", t.closing ? "/" : "", t.name));
    return true;
}

bool DsmlParser::step_invoke(bool final) {
    const size_t ws = skip_space(rest());
    consume(ws);
    if (rest().empty()) return ws > 0;
    const TagStart start = tag_start(rest());
    if (start == TagStart::Partial && !final) return ws > 0;
    if (start != TagStart::Full) {
        fail_block(0, "text inside a DSML invoke; call closed, text returned as content");
        return true;
    }
    const Tag t = parse_tag(tag_window());
    if (t.status == Tag::Status::Incomplete) {
        if (!final) return ws > 0;
        warn("output ended inside a DSML tag; fragment dropped, call closed");
        consume(rest().size());
        end_call();
        state_ = State::AfterBlock;
        return true;
    }
    if (t.status == Tag::Status::Invalid) {
        fail_block(t.length, "malformed DSML tag inside an invoke; call closed");
        return true;
    }
    if (!t.closing && t.name == "parameter") {
        const std::string* name = t.attr("name");
        if (!name) {
            fail_block(t.length, "DSML parameter without a name; call closed");
            return true;
        }
        const std::string* str = t.attr("string");
        param_name_ = *name;
        param_is_string_ = !(str && *str == "false");
        param_skipped_ = param_names_.count(param_name_) > 0;
        param_raw_.clear();
        consume(t.length);
        if (param_skipped_) {
            warn(fmt::format("duplicate parameter '{}' ignored", param_name_));
        } else {
            param_names_.insert(param_name_);
            std::string head = n_params_ == 0 ? "{" : ", ";
            py_json_append_string(head, param_name_);
            head += ": ";
            if (param_is_string_) head += "\"";
            emit(ParseEventKind::ToolCallArgs, std::move(head));
            ++n_params_;
        }
        state_ = State::ParamValue;
        return true;
    }
    if (t.closing && t.name == "invoke") {
        consume(t.length);
        end_call();
        state_ = State::Block;
        return true;
    }
    fail_block(t.length,
               fmt::format("unexpected DSML tag '{}{}' inside an invoke; call closed", t.closing ? "/" : "", t.name));
    return true;
}

bool DsmlParser::step_param_value(bool final) {
    if (rest().empty()) return false;
    // Besides full tags, a bare `｜DSML｜` (the special token without its '<', or a closing tag missing its
    // '<') also ends the value: that token is markup and must never become argument text.
    static constexpr std::string_view kSlashDsml = "/｜DSML｜";
    const auto markers = {kDsmlOpen, kDsmlClose, kSlashDsml, kDsml, kEos};
    const MarkerHit hit = find_first_marker(rest(), markers);
    // Value text is everything before the next marker; a tail that may become one waits (and is dropped at
    // the end of output: it is markup, never argument text).
    const size_t upto = hit.found() ? hit.pos : rest().size() - partial_marker_suffix(rest(), markers);
    bool progress = false;
    if (upto > 0) {
        const std::string_view piece = rest().substr(0, upto);
        if (!param_skipped_) {
            if (param_is_string_)
                emit(ParseEventKind::ToolCallArgs, json_string_body(piece));
            else
                param_raw_ += piece;
        }
        consume(upto);
        progress = true;
    }
    if (!hit.found()) {
        if (!final) return progress;
        consume(rest().size());
        finish_value(false);
        end_call();
        state_ = State::AfterBlock;
        return true;
    }
    if (hit.marker == 4) {
        finish_value(false);
        end_call();
        consume(kEos.size());
        state_ = State::Done;
        saw_eos_ = true;
        return true;
    }
    // Read the tag, repairing a missing '<' (or "</") in front of the DSML token.
    const std::string_view repair = hit.marker == 2 ? "<" : hit.marker == 3 ? "</" : "";
    const Tag t = parse_tag(std::string(repair) + std::string(tag_window()));
    if (t.status == Tag::Status::Incomplete && !final) return progress;
    if (t.status == Tag::Status::Complete && t.closing && t.name == "parameter") {
        if (!repair.empty()) warn(fmt::format("closing tag of parameter '{}' was missing its '<'", param_name_));
        consume(t.length - repair.size());
        finish_value(true);
        state_ = State::Invoke;
        return true;
    }
    // Another tag interrupts the value: close the value and let the invoke state judge the tag.
    finish_value(false);
    if (!repair.empty()) {
        // A bare DSML token that is not a closing parameter tag: drop it (markup), keep what follows.
        warn("stray DSML token inside a parameter value dropped");
        consume(hit.marker == 2 ? kSlashDsml.size() : kDsml.size());
    }
    state_ = State::Invoke;
    return true;
}

bool DsmlParser::step_after_block() {
    const size_t ws = skip_space(rest());
    consume(ws);
    if (rest().empty()) return ws > 0;
    after_tool_calls_ = true;
    state_ = State::Content;
    return true;
}

void DsmlParser::drop_after_eos() {
    if (!rest().empty() && !warned_trailing_eos_) {
        warned_trailing_eos_ = true;
        warn("text after the end-of-sentence token ignored");
    }
    consume(rest().size());
}

std::vector<ParseEvent> DsmlParser::push(std::string_view text) {
    buf_.erase(0, pos_);  // compact once per push, not once per consumed element
    pos_ = 0;
    buf_.append(text);
    for (bool progress = true; progress;) {
        switch (state_) {
            case State::Content:
                progress = step_content(false);
                break;
            case State::Block:
                progress = step_block(false);
                break;
            case State::Invoke:
                progress = step_invoke(false);
                break;
            case State::ParamValue:
                progress = step_param_value(false);
                break;
            case State::AfterBlock:
                progress = step_after_block();
                break;
            case State::Done:
                drop_after_eos();
                progress = false;
                break;
        }
    }
    return std::exchange(out_, {});
}

std::vector<ParseEvent> DsmlParser::finish() {
    for (bool progress = true; progress;) {
        switch (state_) {
            case State::Content:
                progress = step_content(true);
                break;
            case State::Block:
                progress = step_block(true);
                break;
            case State::Invoke:
                progress = step_invoke(true);
                break;
            case State::ParamValue:
                progress = step_param_value(true);
                break;
            case State::AfterBlock:
                progress = step_after_block();
                break;
            case State::Done:
                // A final step can reach the end-of-sentence token in held-back text with more after it
                // (found by parsers_fuzz): dropped here as push drops it.
                drop_after_eos();
                progress = false;
                break;
        }
    }
    // Whatever state the (now empty) buffer left us in, close it.
    switch (state_) {
        case State::Block:
            if (!block_has_call_) {
                warn("output ended inside a tool_calls block; returned as content");
                emit_content(std::exchange(raw_block_, {}));
            } else if (in_wrapper_) {
                warn("tool_calls block was not closed");
            }
            break;
        case State::Invoke:
            warn("output ended inside an invoke; call closed");
            end_call();
            break;
        case State::ParamValue:
            finish_value(false);
            end_call();
            break;
        default:
            break;
    }
    if (state_ != State::Done) state_ = State::AfterBlock;
    return std::exchange(out_, {});
}

void DsmlParser::check_integrity() const {
    ONECARD_CHECK(n_calls_ >= 0, "DsmlParser: negative call count");
    ONECARD_CHECK(!call_open_ || n_calls_ > 0, "DsmlParser: open call without a begin event");
    const bool in_call_state = state_ == State::Invoke || state_ == State::ParamValue;
    ONECARD_CHECK(in_call_state == call_open_, "DsmlParser: call_open {} disagrees with state {}", call_open_,
                  static_cast<int>(state_));
    ONECARD_CHECK(state_ == State::ParamValue || param_raw_.empty(), "DsmlParser: stale parameter text");
    ONECARD_CHECK(state_ == State::Block || raw_block_.empty(), "DsmlParser: stale raw block text outside a block");
    ONECARD_CHECK(n_params_ <= static_cast<int>(param_names_.size()), "DsmlParser: parameter count mismatch");
    ONECARD_CHECK(state_ != State::Done || rest().empty(), "DsmlParser: input kept after end of sentence");
    // Held-back input is bounded by the longest tag, unless a tag is being read.
    ONECARD_CHECK(state_ != State::Content || rest().size() < kDsmlClose.size() + kEos.size() + 2,
                  "DsmlParser: {} bytes held back in content", rest().size());
}

}  // namespace onecard
