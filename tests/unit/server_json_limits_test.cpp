// The request-JSON limits (server/request_json.h) and the chat layer's serialisation depth guard
// (tokenizer/chat_json.h): depth limits hold exactly at their value, nothing recurses over input depth,
// and parse errors carry no body text.
#include "core/error.h"
#include "server/api_error.h"
#include "server/request_json.h"
#include "tokenizer/chat_json.h"
#include "tokenizer/dsml_parser.h"

#include <gtest/gtest.h>

#include <string>

using namespace onecard;
using namespace onecard::server;

namespace {

std::string nest(size_t levels) {
    return std::string(levels, '[') + "1" + std::string(levels, ']');
}

// The ApiError parse_body throws for `text` (fails the test when it does not throw).
ApiError refusal(const std::string& text, int max_depth = kMaxRequestJsonDepth) {
    try {
        (void)parse_body(text, max_depth);
    } catch (const ApiError& e) {
        return e;
    }
    ADD_FAILURE() << "accepted: " << text.substr(0, 80);
    return ApiError(0, "");
}

}  // namespace

TEST(ServerJsonLimits, DepthLimitHoldsExactly) {
    // The body object is level 1, so its value may nest kMaxRequestJsonDepth - 1 more.
    EXPECT_NO_THROW(parse_body("{\"x\": " + nest(kMaxRequestJsonDepth - 1) + "}"));
    const ApiError e = refusal("{\"x\": " + nest(kMaxRequestJsonDepth) + "}");
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.code(), "json_too_deep");
    EXPECT_NE(std::string(e.what()).find("limit of 128 levels"), std::string::npos) << e.what();
    // A caller may choose a smaller limit.
    EXPECT_NO_THROW(parse_body("{\"x\": [[1]]}", 3));
    EXPECT_EQ(refusal("{\"x\": " + nest(3) + "}", 3).code(), "json_too_deep");
}

TEST(ServerJsonLimits, MillionLevelsFailFastWithoutRecursion) {
    EXPECT_EQ(refusal(nest(1'000'000)).code(), "json_too_deep");
    std::string objects;
    for (int i = 0; i < 1'000'000; ++i) objects += "{\"a\":";
    EXPECT_EQ(refusal(objects).code(), "json_too_deep");  // unterminated too: the limit comes first
}

TEST(ServerJsonLimits, ExactlyOneValueAndNoNulBytes) {
    EXPECT_NO_THROW(parse_body("{\"a\": 1} \r\n\t"));
    EXPECT_EQ(refusal("{\"a\": 1} x").status(), 400);
    EXPECT_EQ(refusal("{\"a\": 1}{}").status(), 400);
    const ApiError nul = refusal(std::string("{\"a\": 1}\0{\"b\": 2}", 17));
    EXPECT_NE(std::string(nul.what()).find("NUL byte at offset 8"), std::string::npos) << nul.what();
    EXPECT_EQ(refusal(std::string("{\"a\": 1}\0", 9)).status(), 400);
    EXPECT_EQ(refusal(std::string("{\"a\": \"x\0y\"}", 12)).status(), 400);
}

TEST(ServerJsonLimits, ParseErrorsNameTheOffsetNotTheBody) {
    const ApiError e = refusal(R"({"prompt": "my secret password", oops})");
    const std::string msg = e.what();
    EXPECT_NE(msg.find("syntax error at byte"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("secret"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("oops"), std::string::npos) << msg;
    const std::string num = refusal(R"({"secret_number": 1e99999})").what();
    EXPECT_EQ(num.find("99999"), std::string::npos) << num;
    EXPECT_EQ(num.find("secret"), std::string::npos) << num;
}

TEST(ServerJsonLimits, EmbeddedToolCallArgumentsAreChecked) {
    EXPECT_FALSE(json_text_exceeds_depth("{\"a\": [1, 2]}"));
    EXPECT_FALSE(json_text_exceeds_depth("not json at all"));
    EXPECT_FALSE(json_text_exceeds_depth(nest(kMaxRequestJsonDepth)));
    EXPECT_TRUE(json_text_exceeds_depth(nest(kMaxRequestJsonDepth + 1)));
    EXPECT_TRUE(json_text_exceeds_depth(std::string(1'000'000, '[')));

    Json messages = Json::array(
        {Json{{"role", "user"}, {"content", "hi"}},
         Json{{"role", "assistant"},
              {"tool_calls", Json::array({Json{{"function", {{"name", "f"}, {"arguments", "{\"x\": 1}"}}}},
                                          Json{{"function", {{"name", "g"}, {"arguments", nest(500)}}}}})}}});
    try {
        check_tool_call_arguments(messages);
        FAIL() << "deep arguments accepted";
    } catch (const ApiError& e) {
        EXPECT_EQ(e.param(), "messages[1].tool_calls[1].function.arguments");
        EXPECT_EQ(e.code(), "json_too_deep");
    }
    messages[1]["tool_calls"][1]["function"]["arguments"] = "[[1]]";
    EXPECT_NO_THROW(check_tool_call_arguments(messages));
}

TEST(ChatJsonDepth, SerialisationRefusesWhatItWouldRecurseTooFarInto) {
    // Built by the (iterative) parser, so the test itself does not recurse.
    const OrderedJson ok = OrderedJson::parse(nest(kPyJsonMaxDepth));
    EXPECT_EQ(py_json_dumps(ok).size(), 2 * static_cast<size_t>(kPyJsonMaxDepth) + 1);
    const OrderedJson deep = OrderedJson::parse(nest(kPyJsonMaxDepth + 1));
    try {
        (void)py_json_dumps(deep);
        FAIL() << "too deep a value serialised";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("limit of 256 levels"), std::string::npos) << e.what();
    }
    const OrderedJson huge = OrderedJson::parse(nest(1'000'000));
    EXPECT_THROW((void)py_json_dumps(huge), Error);
}

// Tool-call arguments the model writes are checked with nlohmann's accept(), which walks the text
// with an explicit stack: a model (or a prompt-injected one) emitting a million '[' must not recurse.
TEST(ChatJsonDepth, ModelWrittenArgumentsOfAnyDepthDoNotRecurse) {
    const std::string deep = nest(1'000'000);
    DsmlParser parser;
    const std::string text =
        "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"x\" "
        "string=\"false\">" +
        deep + "</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
    std::string args;
    auto take = [&](const std::vector<ParseEvent>& evs) {
        for (const auto& e : evs)
            if (e.kind == ParseEventKind::ToolCallArgs) args += e.text;
    };
    take(parser.push(text));
    take(parser.finish());
    EXPECT_EQ(args, "{\"x\": " + deep + "}");
}
