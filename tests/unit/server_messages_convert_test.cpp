// The Anthropic Messages mapping (server/messages_convert.h): request -> chat body, outcome -> message,
// and the stream encoder's event sequence, without a server.
#include "server/api_error.h"
#include "server/messages_convert.h"
#include "tokenizer/chat_encoding.h"

#include <gtest/gtest.h>

using namespace onecard;
using namespace onecard::server;

namespace {

// The param of the 400 that converting `body` throws ("" when it does not throw).
std::string refused(const std::string& body, MessagesRoute route = MessagesRoute::Create) {
    try {
        (void)messages_to_chat(parse_body(body), route);
    } catch (const ApiError& e) {
        EXPECT_EQ(e.status(), 400) << body;
        // The message names the field too: Anthropic's error object has no param.
        EXPECT_NE(std::string(e.what()).find(e.param().substr(0, e.param().find('['))), std::string::npos) << e.what();
        return e.param();
    }
    return "";
}

ParseEvent ev(ParseEventKind k, std::string text = {}, std::string id = {}, std::string name = {}) {
    ParseEvent e;
    e.kind = k;
    e.text = std::move(text);
    e.id = std::move(id);
    e.name = std::move(name);
    e.index = 0;
    return e;
}

}  // namespace

TEST(MessagesConvert, StringContentSystemBlocksAndSampling) {
    const MessagesRequest r = messages_to_chat(
        parse_body(R"({"model": "m", "max_tokens": 32, "system": [{"type": "text", "text": "Be brief."}],
            "messages": [{"role": "user", "content": "Hi"}], "stop_sequences": ["END"], "temperature": 0.5,
            "top_p": 0.9, "top_k": 7, "stream": true})"),
        MessagesRoute::Create);
    const Json& c = r.chat_body;
    EXPECT_EQ(c["model"], "m");
    EXPECT_EQ(c["max_tokens"], 32);
    EXPECT_EQ(c["stop"], Json::array({"END"}));
    EXPECT_EQ(c["temperature"], 0.5);
    EXPECT_EQ(c["top_k"], 7);
    ASSERT_EQ(c["messages"].size(), 2u);
    EXPECT_EQ(c["messages"][0]["role"], "system");
    EXPECT_EQ(c["messages"][0]["content"][0]["text"], "Be brief.");
    EXPECT_EQ(c["messages"][1], (Json{{"role", "user"}, {"content", "Hi"}}));
    EXPECT_TRUE(r.stream);
    // Thinking is opt-in: absent means chat mode.
    EXPECT_FALSE(r.thinking);
    EXPECT_EQ(c["chat_template_kwargs"]["thinking"], false);
    EXPECT_FALSE(c.contains("continue_final_message"));
}

TEST(MessagesConvert, ThinkingEnabledRendersThinkingMode) {
    const MessagesRequest on =
        messages_to_chat(parse_body(R"({"max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 2048},
            "messages": [{"role": "user", "content": "Hi"}]})"),
                         MessagesRoute::Create);
    EXPECT_TRUE(on.thinking);
    EXPECT_TRUE(render_chat_request(on.chat_body, ChatVariant::V4).generation_in_reasoning);
    const MessagesRequest off = messages_to_chat(
        parse_body(
            R"({"max_tokens": 64, "thinking": {"type": "disabled"}, "messages": [{"role": "user", "content": "Hi"}]})"),
        MessagesRoute::Create);
    EXPECT_FALSE(render_chat_request(off.chat_body, ChatVariant::V4).generation_in_reasoning);
}

TEST(MessagesConvert, ToolUseAndToolResultTurns) {
    const MessagesRequest r = messages_to_chat(parse_body(R"({"max_tokens": 64,
        "tools": [{"name": "get_weather", "description": "Forecast", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "tool", "name": "get_weather"},
        "messages": [
          {"role": "user", "content": "Weather in Paris?"},
          {"role": "assistant", "content": [
             {"type": "thinking", "thinking": "Need a tool.", "signature": "x"},
             {"type": "text", "text": "Checking."},
             {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
          {"role": "user", "content": [
             {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "sunny"}]},
             {"type": "tool_result", "tool_use_id": "toolu_2", "content": "boom", "is_error": true},
             {"type": "text", "text": "Thanks"}]}]})"),
                                               MessagesRoute::Create);
    const Json& c = r.chat_body;
    EXPECT_EQ(c["tools"][0]["type"], "function");
    EXPECT_EQ(c["tools"][0]["function"]["name"], "get_weather");
    EXPECT_EQ(c["tools"][0]["function"]["parameters"], (Json{{"type", "object"}}));
    EXPECT_EQ(c["tool_choice"]["function"]["name"], "get_weather");
    const Json& m = c["messages"];
    ASSERT_EQ(m.size(), 5u) << m.dump();
    EXPECT_EQ(m[1]["role"], "assistant");
    EXPECT_EQ(m[1]["content"], "Checking.");
    EXPECT_EQ(m[1]["reasoning_content"], "Need a tool.");
    EXPECT_EQ(m[1]["tool_calls"][0]["id"], "toolu_1");
    EXPECT_EQ(Json::parse(m[1]["tool_calls"][0]["function"]["arguments"].get<std::string>()),
              (Json{{"city", "Paris"}}));
    EXPECT_EQ(m[2]["role"], "tool");
    EXPECT_EQ(m[2]["tool_call_id"], "toolu_1");
    EXPECT_EQ(m[2]["content"][0]["text"], "sunny");
    EXPECT_EQ(m[3]["tool_call_id"], "toolu_2");
    EXPECT_EQ(m[3]["content"], "Error: boom");
    EXPECT_EQ(m[4]["role"], "user");
    EXPECT_EQ(m[4]["content"][0]["text"], "Thanks");
    // The chat encoder takes the converted conversation.
    const std::string prompt = render_chat_request(c, ChatVariant::V4).text;
    EXPECT_NE(prompt.find("Error: boom"), std::string::npos);
    EXPECT_NE(prompt.find("sunny"), std::string::npos);
}

TEST(MessagesConvert, ToolChoiceKindsAndPrefill) {
    auto choice = [](const std::string& tc) {
        return messages_to_chat(parse_body(R"({"max_tokens": 8, "messages": [{"role": "user", "content": "x"}],
            "tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": )" +
                                           tc + "}"),
                                MessagesRoute::Create)
            .chat_body["tool_choice"];
    };
    EXPECT_EQ(choice(R"({"type": "auto"})"), "auto");
    EXPECT_EQ(choice(R"({"type": "any"})"), "required");
    EXPECT_EQ(choice(R"({"type": "none"})"), "none");
    const MessagesRequest pre = messages_to_chat(
        parse_body(
            R"({"max_tokens": 8, "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "Sure,"}]})"),
        MessagesRoute::Create);
    EXPECT_EQ(pre.chat_body["continue_final_message"], true);
}

TEST(MessagesConvert, RefusalsNameTheField) {
    EXPECT_EQ(refused(R"({"messages": [{"role": "user", "content": "x"}]})"), "max_tokens");
    EXPECT_EQ(refused(R"({"max_tokens": 0, "messages": [{"role": "user", "content": "x"}]})"), "max_tokens");
    EXPECT_EQ(refused(R"({"max_tokens": 8})"), "messages");
    EXPECT_EQ(refused(R"({"max_tokens": 8, "messages": [{"role": "system", "content": "x"}]})"), "messages[0].role");
    EXPECT_EQ(refused(R"({"max_tokens": 8, "messages": [{"role": "user", "content": 3}]})"), "messages[0].content");
    EXPECT_EQ(refused(R"({"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "image"}]}]})"),
              "messages[0].content[0].type");
    EXPECT_EQ(refused(R"({"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "tool_result"}]}]})"),
              "messages[0].content[0].tool_use_id");
    EXPECT_EQ(
        refused(
            R"({"max_tokens": 8, "messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": "x"}]}]})"),
        "messages[0].content[0].input");
    EXPECT_EQ(refused(R"({"max_tokens": 8, "messages": [{"role": "user", "content": "x"}], "tools": [{"name": "f"}]})"),
              "tools[0].input_schema");
    EXPECT_EQ(
        refused(
            R"({"max_tokens": 8, "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "bash_20250124", "name": "bash"}]})"),
        "tools[0].type");
    EXPECT_EQ(
        refused(
            R"({"max_tokens": 8, "messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "some"}})"),
        "tool_choice.type");
    EXPECT_EQ(
        refused(
            R"({"max_tokens": 4096, "messages": [{"role": "user", "content": "x"}], "thinking": {"type": "enabled", "budget_tokens": 100}})"),
        "thinking.budget_tokens");
    EXPECT_EQ(
        refused(
            R"({"max_tokens": 2000, "messages": [{"role": "user", "content": "x"}], "thinking": {"type": "enabled", "budget_tokens": 2000}})"),
        "thinking.budget_tokens");
    EXPECT_EQ(
        refused(R"({"max_tokens": 8, "messages": [{"role": "user", "content": "x"}], "thinking": {"type": "maybe"}})"),
        "thinking.type");
    EXPECT_EQ(refused(R"({"max_tokens": 8, "messages": [{"role": "user", "content": "x"}], "temperature": 1.5})"),
              "temperature");
    EXPECT_EQ(refused(R"({"max_tokens": 8, "messages": [{"role": "user", "content": "x"}], "stop_sequences": [""]})"),
              "stop_sequences");
    // count_tokens takes no max_tokens.
    EXPECT_EQ(refused(R"({"messages": [{"role": "user", "content": "x"}]})", MessagesRoute::CountTokens), "");
}

TEST(MessagesConvert, StopReasonsAndResponse) {
    EngineEvent last;
    last.finish_reason = FinishReason::Stop;
    ParsedCompletion pc;
    pc.content = "Hi";
    EXPECT_EQ(anthropic_stop_reason(last, pc).reason, "end_turn");
    last.stop_string = "END";
    const StopReason st = anthropic_stop_reason(last, pc);
    EXPECT_EQ(st.reason, "stop_sequence");
    EXPECT_EQ(st.stop_sequence, "END");
    last.stop_string.clear();
    pc.tool_calls.push_back({"toolu_1", "f", R"({"a": 1})"});
    EXPECT_EQ(anthropic_stop_reason(last, pc).reason, "tool_use");
    last.finish_reason = FinishReason::Length;
    EXPECT_EQ(anthropic_stop_reason(last, pc).reason, "max_tokens");

    pc.reasoning = "Hmm.";
    Usage u;
    u.prompt_tokens = 10;
    u.completion_tokens = 4;
    u.cached_tokens = 3;
    const Json m = messages_response("msg_1", "model", pc, {"tool_use", {}}, u);
    ASSERT_EQ(m["content"].size(), 3u);
    EXPECT_EQ(m["content"][0]["type"], "thinking");
    EXPECT_EQ(m["content"][0]["thinking"], "Hmm.");
    EXPECT_EQ(m["content"][0]["signature"], thinking_signature("Hmm."));
    EXPECT_NE(thinking_signature("Hmm."), thinking_signature("Hmm!"));
    EXPECT_EQ(m["content"][1], (Json{{"type", "text"}, {"text", "Hi"}}));
    EXPECT_EQ(m["content"][2]["input"], (Json{{"a", 1}}));
    EXPECT_EQ(m["stop_reason"], "tool_use");
    EXPECT_TRUE(m["stop_sequence"].is_null());
    EXPECT_EQ(m["usage"]["input_tokens"], 7);
    EXPECT_EQ(m["usage"]["cache_read_input_tokens"], 3);
    EXPECT_EQ(m["usage"]["output_tokens"], 4);
}

TEST(MessagesConvert, StreamEncoderBlocks) {
    MessagesStreamEncoder enc("msg_1", "model", 12);
    std::vector<SseEvent> all = enc.start();
    auto add = [&](std::vector<SseEvent> v) {
        enc.check_integrity();
        all.insert(all.end(), v.begin(), v.end());
    };
    add(enc.push({ev(ParseEventKind::Reasoning, "Think"), ev(ParseEventKind::Reasoning, "ing.")}));
    add(enc.push({ev(ParseEventKind::Content, ""), ev(ParseEventKind::Content, "Hi")}));
    add(enc.push({ev(ParseEventKind::ToolCallBegin, "", "toolu_1", "f"), ev(ParseEventKind::ToolCallArgs, "{\"a\": "),
                  ev(ParseEventKind::ToolCallArgs, "1}"), ev(ParseEventKind::ToolCallEnd)}));
    Usage u;
    u.prompt_tokens = 12;
    u.completion_tokens = 9;
    add(enc.finish({"tool_use", {}}, u));
    std::vector<std::string> names;
    for (const auto& e : all) {
        EXPECT_EQ(e.data["type"], e.name);
        names.push_back(e.name);
    }
    const std::vector<std::string> want = {"message_start",       "content_block_start", "content_block_delta",
                                           "content_block_delta", "content_block_delta", "content_block_stop",
                                           "content_block_start", "content_block_delta", "content_block_stop",
                                           "content_block_start", "content_block_delta", "content_block_delta",
                                           "content_block_stop",  "message_delta",       "message_stop"};
    EXPECT_EQ(names, want);
    EXPECT_EQ(all[0].data["message"]["usage"]["input_tokens"], 12);
    EXPECT_EQ(all[1].data["content_block"]["type"], "thinking");
    EXPECT_EQ(all[2].data["delta"], (Json{{"type", "thinking_delta"}, {"thinking", "Think"}}));
    EXPECT_EQ(all[4].data["delta"]["type"], "signature_delta");
    EXPECT_EQ(all[4].data["delta"]["signature"], thinking_signature("Thinking."));
    EXPECT_EQ(all[6].data["index"], 1);
    EXPECT_EQ(all[7].data["delta"], (Json{{"type", "text_delta"}, {"text", "Hi"}}));
    EXPECT_EQ(all[9].data["content_block"]["name"], "f");
    EXPECT_EQ(all[9].data["index"], 2);
    EXPECT_EQ(all[10].data["delta"]["partial_json"].get<std::string>() +
                  all[11].data["delta"]["partial_json"].get<std::string>(),
              "{\"a\": 1}");
    EXPECT_EQ(all[13].data["delta"]["stop_reason"], "tool_use");
    EXPECT_EQ(all[13].data["usage"]["output_tokens"], 9);
}
