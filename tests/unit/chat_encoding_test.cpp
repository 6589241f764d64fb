// Chat encoding: byte-exact against the official DeepSeek encoder on every fixture in tests/data/chat
// (produced by scripts/chat/make_fixtures.py), plus the Python-compatible JSON writer and input validation.
#include "tokenizer/chat_encoding.h"
#include "core/error.h"
#include "tokenizer/chat_tokens.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace onecard {
namespace {

namespace fs = std::filesystem;

OrderedJson read_json(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return OrderedJson::parse(ss.str());
}

std::vector<fs::path> fixtures(std::string_view prefix) {
    std::vector<fs::path> out;
    for (const auto& e : fs::directory_iterator(fs::path(ONECARD_SOURCE_DIR) / "tests/data/chat"))
        if (e.path().filename().string().rfind(prefix, 0) == 0) out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
}

ChatVariant variant_of(const OrderedJson& fx) {
    return fx.at("variant") == "0731" ? ChatVariant::V40731 : ChatVariant::V4;
}

// Position and context of the first differing byte, so a failure says where the prompts diverge.
std::string first_difference(const std::string& a, const std::string& b) {
    size_t i = 0;
    while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
    auto ctx = [&](const std::string& s) { return s.substr(i >= 40 ? i - 40 : 0, 80); };
    return "at byte " + std::to_string(i) + "\n got: " + ctx(a) + "\nwant: " + ctx(b);
}

TEST(ChatEncoding, RequestFixturesMatchOfficialEncoder) {
    const auto files = fixtures("req_");
    ASSERT_GE(files.size(), 50u) << "fixtures missing: run scripts/chat/make_fixtures.py";
    size_t n_0731 = 0;
    for (const auto& p : files) {
        const OrderedJson fx = read_json(p);
        n_0731 += variant_of(fx) == ChatVariant::V40731;
        const ChatPrompt prompt = render_chat_request(fx.at("request"), variant_of(fx));
        const std::string expected = fx.at("expected").get<std::string>();
        EXPECT_EQ(prompt.text, expected) << p.filename() << " differs " << first_difference(prompt.text, expected);
        EXPECT_EQ(prompt.generation_in_reasoning, expected.ends_with("<think>")) << p.filename();
    }
    EXPECT_GE(n_0731, 8u);
}

TEST(ChatEncoding, EncoderLevelFixturesMatchOfficialEncoder) {
    const auto files = fixtures("enc_");
    ASSERT_GE(files.size(), 8u);
    for (const auto& p : files) {
        const OrderedJson fx = read_json(p);
        const OrderedJson& args = fx.at("encode");
        EncodeOptions opts;
        opts.variant = variant_of(fx);
        opts.thinking_mode = args.at("thinking_mode") == "thinking" ? ThinkingMode::Thinking : ThinkingMode::Chat;
        opts.drop_thinking = args.at("drop_thinking").get<bool>();
        const OrderedJson& effort = args.at("reasoning_effort");
        if (effort == "high") opts.reasoning_effort = ReasoningEffort::High;
        if (effort == "max") opts.reasoning_effort = ReasoningEffort::Max;
        const std::string got = encode_messages(args.at("messages"), opts);
        const std::string expected = fx.at("expected").get<std::string>();
        EXPECT_EQ(got, expected) << p.filename() << " differs " << first_difference(got, expected);
    }
}

// Seeded random conversations (scripts/chat/make_fixtures.py random_requests): differential data that the
// implementation was not written against.
TEST(ChatEncoding, RandomConversationsMatchOfficialEncoder) {
    const OrderedJson fx = read_json(fs::path(ONECARD_SOURCE_DIR) / "tests/data/chat/random_requests.json");
    const auto& cases = fx.at("cases");
    ASSERT_GE(cases.size(), 100u);
    for (size_t i = 0; i < cases.size(); ++i) {
        const ChatPrompt prompt = render_chat_request(cases[i].at("request"), variant_of(cases[i]));
        const std::string expected = cases[i].at("expected").get<std::string>();
        EXPECT_EQ(prompt.text, expected) << "case " << i << " differs " << first_difference(prompt.text, expected);
    }
}

TEST(ChatEncoding, VariantsDifferOnlyInEffortPrefix) {
    const std::string req = R"({"messages":[{"role":"user","content":"x"}],"reasoning_effort":"high"})";
    const ChatPrompt v4 = render_chat_request_text(req, ChatVariant::V4);
    const ChatPrompt v0731 = render_chat_request_text(req, ChatVariant::V40731);
    EXPECT_EQ(v4.text, "<｜begin▁of▁sentence｜><｜User｜>x<｜Assistant｜><think>");
    ASSERT_TRUE(v0731.text.ends_with("<｜User｜>x<｜Assistant｜><think>"));
    EXPECT_NE(v0731.text.find("Reasoning Effort: Absolute maximum"), std::string::npos);
    EXPECT_EQ(v0731.options.reasoning_effort, ReasoningEffort::High);
    EXPECT_TRUE(v4.generation_in_reasoning);
}

TEST(ChatEncoding, ContinueFinalMessageStartsInContent) {
    const std::string req = R"({"messages":[{"role":"user","content":"q"},
        {"role":"assistant","reasoning_content":"r","content":"par"}],"continue_final_message":true})";
    const ChatPrompt p = render_chat_request_text(req, ChatVariant::V4);
    EXPECT_EQ(p.text, "<｜begin▁of▁sentence｜><｜User｜>q<｜Assistant｜><think>r</think>par");
    EXPECT_FALSE(p.generation_in_reasoning);
}

TEST(ChatEncoding, RejectsInvalidInput) {
    EXPECT_THROW(render_chat_request_text("{", ChatVariant::V4), Error);
    EXPECT_THROW(render_chat_request_text(R"({"messages":[]})", ChatVariant::V4), Error);
    EXPECT_THROW(render_chat_request_text(R"({"messages":[{"role":"wizard","content":"x"}]})", ChatVariant::V4), Error);
    EXPECT_THROW(render_chat_request_text(R"({"messages":[{"role":"developer","content":""}]})", ChatVariant::V4),
                 Error);
    EXPECT_THROW(render_chat_request_text(
                     R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]})",
                     ChatVariant::V4),
                 Error);
    EXPECT_THROW(render_chat_request_text(R"({"messages":[{"role":"user","content":"x"}],
        "continue_final_message":true})",
                                          ChatVariant::V4),
                 Error);
    // Arguments that parse as JSON but not as an object cannot become DSML parameters.
    EXPECT_THROW(render_chat_request_text(R"({"messages":[{"role":"user","content":"x"},{"role":"assistant",
        "tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"[1,2]"}}]}]})",
                                          ChatVariant::V4),
                 Error);
    EncodeOptions low;
    low.reasoning_effort = ReasoningEffort::Low;
    EXPECT_THROW(encode_messages(OrderedJson::parse(R"([{"role":"user","content":"x"}])"), low), Error);
    // Found by chat_render_fuzz: a part's "type" that is not a string was nlohmann's own type_error (no field
    // named); now onecard::Error naming the part, for content parts, tool results and response_format.
    for (const char* body :
         {R"({"messages":[{"role":"user","content":[{"type":{"a":1},"text":"x"}]}]})",
          R"({"messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,"tool_calls":[{"id":"a",
             "type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"a",
             "content":[{"type":[1]}]}]})",
          R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":3}})"}) {
        try {
            render_chat_request_text(body, ChatVariant::V4);
            ADD_FAILURE() << "expected an error: " << body;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("type must be a string"), std::string::npos) << e.what();
        }
    }
    try {
        render_chat_request_text(R"({"messages":[{"role":"user","content":"x"},{"role":7}]})", ChatVariant::V4);
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("messages[1]"), std::string::npos) << e.what();
    }
}

TEST(ChatJson, MatchesPythonJsonDumps) {
    // Expected strings are what CPython 3.11 prints for json.dumps(x, ensure_ascii=False).
    EXPECT_EQ(py_float_repr(1e16), "1e+16");
    EXPECT_EQ(py_float_repr(1e15), "1000000000000000.0");
    EXPECT_EQ(py_float_repr(1.5e-5), "1.5e-05");
    EXPECT_EQ(py_float_repr(0.0001), "0.0001");
    EXPECT_EQ(py_float_repr(0.00012345), "0.00012345");
    EXPECT_EQ(py_float_repr(123.456), "123.456");
    EXPECT_EQ(py_float_repr(-0.0), "-0.0");
    EXPECT_EQ(py_float_repr(2.0), "2.0");
    EXPECT_EQ(py_float_repr(0.1 + 0.2), "0.30000000000000004");
    EXPECT_EQ(py_float_repr(1.7976931348623157e308), "1.7976931348623157e+308");
    EXPECT_EQ(py_float_repr(5e-324), "5e-324");
    EXPECT_EQ(py_json_dumps(OrderedJson::parse(R"({"b":[1,2.50,{"x":null}],"a":"\u0001\"\\\n é \u2028"})")),
              "{\"b\": [1, 2.5, {\"x\": null}], \"a\": \"\\u0001\\\"\\\\\\n é \u2028\"}");
    EXPECT_FALSE(json_truthy(OrderedJson::parse("[]")));
    EXPECT_FALSE(json_truthy(OrderedJson::parse("0.0")));
    EXPECT_TRUE(json_truthy(OrderedJson::parse(R"({"a":0})")));
}

}  // namespace
}  // namespace onecard

namespace onecard {
namespace {

// A million levels of nesting anywhere in the request is refused while it is parsed (no stack
// overflow in `onecard render-chat`), with the limit named; a modest depth still renders.
TEST(ChatEncoding, DeeplyNestedRequestIsRefusedNotCrashed) {
    const std::string deep = R"({"messages": [{"role": "user", "content": "hi"}], "x": )" + std::string(1000000, '[') +
                             std::string(1000000, ']') + "}";
    try {
        (void)render_chat_request_text(deep, ChatVariant::V4);
        FAIL() << "a million-level request was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("deeper than the limit of 256"), std::string::npos) << e.what();
    }
    const std::string ok = R"({"messages": [{"role": "user", "content": "hi"}], "x": )" + std::string(100, '[') +
                           std::string(100, ']') + "}";
    EXPECT_NE(render_chat_request_text(ok, ChatVariant::V4).text.find("hi"), std::string::npos);
}

}  // namespace
}  // namespace onecard
