// The streaming DSML tool-call parser and the reasoning parser over it, fed the same text in random
// splits (piece sizes from the input, down to one byte, so cuts land inside UTF-8 sequences and
// markers). Checks: the split parse equals the whole-text parse (content, reasoning, tool calls and
// warnings), check_integrity() after every push, tool-call events in order (begin, args, end once),
// and, for valid UTF-8 text, every tool call's arguments parse as one JSON object.
// Input: [text ...][seed: 4 bytes][flags: 1 byte] (FuzzedDataProvider takes integers from the end).
#include "fuzz_util.h"

#include "tokenizer/dsml_parser.h"
#include "tokenizer/reasoning_parser.h"

#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <random>

using namespace onecard;

namespace {

void check_event_order(const std::vector<ParseEvent>& evs, std::vector<int>& call_state) {
    for (const auto& ev : evs) {
        if (ev.kind == ParseEventKind::ToolCallBegin) {
            FUZZ_CHECK(ev.index == static_cast<int>(call_state.size()), "tool call index out of order");
            call_state.push_back(1);
        } else if (ev.kind == ParseEventKind::ToolCallArgs || ev.kind == ParseEventKind::ToolCallEnd) {
            FUZZ_CHECK(ev.index >= 0 && ev.index < static_cast<int>(call_state.size()), "event for an unknown call");
            FUZZ_CHECK(call_state[static_cast<size_t>(ev.index)] == 1, "event after the call ended");
            if (ev.kind == ParseEventKind::ToolCallEnd) call_state[static_cast<size_t>(ev.index)] = 2;
        }
    }
}

template <class Parser>
ParsedCompletion parse_pieces(Parser& parser, std::string_view text, const std::vector<size_t>& cuts) {
    ParsedCompletion out;
    std::vector<int> call_state;
    size_t prev = 0;
    auto take = [&](std::vector<ParseEvent> evs) {
        check_event_order(evs, call_state);
        for (const auto& ev : evs) apply_event(out, ev);
        parser.check_integrity();
    };
    for (size_t cut : cuts) {
        take(parser.push(text.substr(prev, cut - prev)));
        prev = cut;
    }
    take(parser.push(text.substr(prev)));
    take(parser.finish());
    for (int s : call_state) FUZZ_CHECK(s == 2, "a tool call never ended");
    out.warnings = parser.warnings();
    return out;
}

void check_arguments(const ParsedCompletion& pc) {
    for (const auto& c : pc.tool_calls) {
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(c.arguments);
        } catch (const nlohmann::json::exception& e) {
            fuzz::fail("tool call arguments are not JSON: " + c.arguments);
        }
        FUZZ_CHECK(j.is_object(), "tool call arguments are not a JSON object: " + c.arguments);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    FuzzedDataProvider fdp(data, size);
    const uint8_t flags = fdp.ConsumeIntegral<uint8_t>();
    const uint32_t seed = fdp.ConsumeIntegral<uint32_t>();
    const std::string text = fdp.ConsumeRemainingBytesAsString();

    static constexpr size_t kMaxPiece[8] = {1, 2, 3, 5, 8, 13, 32, 4096};
    std::mt19937 rng(seed);
    std::uniform_int_distribution<size_t> piece(1, kMaxPiece[flags & 7]);
    std::vector<size_t> cuts;
    for (size_t pos = piece(rng); pos < text.size(); pos += piece(rng)) cuts.push_back(pos);

    const bool utf8 = fuzz::valid_utf8(text);
    if (flags & 8) {
        DsmlParser whole;
        const ParsedCompletion a = parse_pieces(whole, text, {});
        DsmlParser split;
        const ParsedCompletion b = parse_pieces(split, text, cuts);
        FUZZ_CHECK(a == b, "DsmlParser: split parse differs from whole-text parse");
        FUZZ_CHECK(a.reasoning.empty(), "DsmlParser produced reasoning");
        if (utf8) check_arguments(a);
    } else {
        ReasoningParserOptions opts;
        opts.start_in_reasoning = (flags & 16) != 0;
        const ParsedCompletion a = parse_completion(text, opts);
        ReasoningParser split(opts);
        const ParsedCompletion b = parse_pieces(split, text, cuts);
        FUZZ_CHECK(a.content == b.content && a.reasoning == b.reasoning && a.tool_calls == b.tool_calls,
                   "ReasoningParser: split parse differs from parse_completion");
        FUZZ_CHECK(a.warnings == b.warnings, "ReasoningParser: warnings differ between split and whole parse");
        if (utf8) check_arguments(a);
    }
    return 0;
}
