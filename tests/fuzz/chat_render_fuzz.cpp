// The DeepSeek-V4 chat renderer (src/tokenizer/chat_encoding.h) and its Python-compatible JSON writer
// (chat_json.h). Input: [JSON text ...][flags: 1 byte]. A JSON object is rendered as an OpenAI chat
// request (render_chat_request_text, the variant from the flags); a JSON array as the official
// encoder's message list (encode_messages, options from the flags). Refusals must be onecard::Error
// (or a JSON parse error for the text form). Checks: the prompt is valid UTF-8 and starts with BOS when
// asked; py_json_dumps of any parsed value is JSON that parses back to an equal value, and is refused
// with onecard::Error only past kPyJsonMaxDepth.
#include "fuzz_util.h"

#include "core/error.h"
#include "tokenizer/chat_encoding.h"
#include "tokenizer/chat_json.h"

#include <cstddef>
#include <cstdint>

using namespace onecard;

namespace {

constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";

void check_prompt(const std::string& text, bool bos) {
    FUZZ_CHECK(fuzz::valid_utf8(text), "prompt is not valid UTF-8");
    if (bos) FUZZ_CHECK(text.rfind(kBos, 0) == 0, "prompt does not start with BOS");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const uint8_t flags = data[size - 1];
    const std::string_view text(reinterpret_cast<const char*>(data), size - 1);
    const ChatVariant variant = (flags & 1) ? ChatVariant::V40731 : ChatVariant::V4;

    OrderedJson v;
    try {
        v = OrderedJson::parse(text);
    } catch (const nlohmann::json::exception&) {
        return 0;
    }

    // py_json_dumps round trip.
    std::string dumped;
    bool dumped_ok = false;
    try {
        dumped = py_json_dumps(v);
        dumped_ok = true;
    } catch (const Error&) {
        // only allowed past the depth limit; nesting is not measured here, the error names it
    } catch (const std::exception& e) {
        fuzz::fail(std::string("py_json_dumps threw a non-onecard exception: ") + e.what());
    }
    if (dumped_ok) {
        OrderedJson back;
        try {
            back = OrderedJson::parse(dumped);
        } catch (const nlohmann::json::exception& e) {
            fuzz::fail(std::string("py_json_dumps wrote invalid JSON: ") + e.what() + "\n" + dumped.substr(0, 400));
        }
        FUZZ_CHECK(back == v, "py_json_dumps does not round-trip: " + dumped.substr(0, 400));
    }

    try {
        if (v.is_object()) {
            const ChatPrompt p = render_chat_request_text(text, variant);
            check_prompt(p.text, p.options.add_bos);
            FUZZ_CHECK(p.options.variant == variant, "prompt options name another variant");
        } else if (v.is_array()) {
            EncodeOptions o;
            o.variant = variant;
            o.thinking_mode = (flags & 2) ? ThinkingMode::Chat : ThinkingMode::Thinking;
            o.drop_thinking = (flags & 4) != 0;
            o.add_bos = (flags & 8) != 0;
            o.reasoning_effort = static_cast<ReasoningEffort>((flags >> 4) & 3);
            check_prompt(encode_messages(v, o), o.add_bos);
        }
    } catch (const Error&) {
    } catch (const std::exception& e) {
        fuzz::fail(std::string("chat renderer threw a non-onecard exception: ") + e.what());
    }
    return 0;
}
