// The Responses mapping (server/responses_convert.h) and the response store (server/response_store.h),
// without a server.
#include "server/api_error.h"
#include "server/response_store.h"
#include "server/responses_convert.h"
#include "tokenizer/chat_encoding.h"

#include <gtest/gtest.h>

using namespace onecard;
using namespace onecard::server;

namespace {

ResponsesRequest convert(const std::string& body, const ConversationLookup& lookup = {}) {
    return responses_to_chat(parse_body(body), lookup);
}

std::string refused(const std::string& body, const ConversationLookup& lookup = {}) {
    try {
        (void)convert(body, lookup);
    } catch (const ApiError& e) {
        EXPECT_EQ(e.status(), 400) << body;
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

TEST(ResponsesConvert, StringInputInstructionsAndFields) {
    const ResponsesRequest r = convert(R"({"model": "m", "input": "Hi", "instructions": "Be brief.",
        "max_output_tokens": 50, "temperature": 0.3, "top_p": 0.8, "reasoning": {"effort": "max"},
        "stream": true, "store": false, "metadata": {"k": "v"}})");
    const Json& c = r.chat_body;
    ASSERT_EQ(c["messages"].size(), 2u);
    EXPECT_EQ(c["messages"][0], (Json{{"role", "system"}, {"content", "Be brief."}}));
    EXPECT_EQ(c["messages"][1], (Json{{"role", "user"}, {"content", "Hi"}}));
    EXPECT_EQ(c["max_tokens"], 50);
    EXPECT_EQ(c["temperature"], 0.3);
    EXPECT_EQ(c["reasoning_effort"], "max");
    // The conversation (what is stored) leaves the instructions out.
    EXPECT_EQ(r.conversation, Json::array({Json{{"role", "user"}, {"content", "Hi"}}}));
    EXPECT_TRUE(r.stream);
    EXPECT_FALSE(r.store);
    EXPECT_EQ(r.echo["instructions"], "Be brief.");
    EXPECT_EQ(r.echo["max_output_tokens"], 50);
    EXPECT_EQ(r.echo["reasoning"]["effort"], "max");
    EXPECT_EQ(r.echo["metadata"]["k"], "v");
    EXPECT_EQ(r.echo["store"], false);
    EXPECT_EQ(render_chat_request(c, ChatVariant::V4).options.reasoning_effort, ReasoningEffort::Max);
}

TEST(ResponsesConvert, ItemsWithToolCallsAcrossTurns) {
    const ResponsesRequest r = convert(R"({"input": [
        {"role": "developer", "content": "Use tools."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "Need a tool."}]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"},
        {"type": "function_call", "call_id": "call_2", "name": "get_time", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "noon"}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Sunny at noon."}]},
        {"role": "user", "content": "Thanks"}],
      "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}},
                {"type": "function", "name": "get_time", "description": "Clock"}],
      "tool_choice": {"type": "function", "name": "get_weather"}})");
    const Json& c = r.chat_body;
    EXPECT_EQ(c["tools"][0]["function"]["name"], "get_weather");
    EXPECT_EQ(c["tools"][1]["function"]["description"], "Clock");
    EXPECT_EQ(c["tool_choice"]["function"]["name"], "get_weather");
    const Json& m = c["messages"];
    ASSERT_EQ(m.size(), 7u) << m.dump();
    EXPECT_EQ(m[0]["role"], "developer");
    EXPECT_EQ(m[1]["content"][0]["text"], "Weather in Paris?");
    // The reasoning goes with the assistant turn that the two calls share.
    EXPECT_EQ(m[2]["role"], "assistant");
    EXPECT_EQ(m[2]["reasoning_content"], "Need a tool.");
    ASSERT_EQ(m[2]["tool_calls"].size(), 2u);
    EXPECT_EQ(m[2]["tool_calls"][0]["id"], "call_1");
    EXPECT_EQ(m[2]["tool_calls"][1]["function"]["name"], "get_time");
    EXPECT_EQ(m[3], (Json{{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "sunny"}}));
    EXPECT_EQ(m[4]["content"][0]["text"], "noon");
    EXPECT_EQ(m[5], (Json{{"role", "assistant"}, {"content", "Sunny at noon."}}));
    EXPECT_EQ(m[6]["role"], "user");
    const std::string prompt = render_chat_request(c, ChatVariant::V4).text;
    EXPECT_NE(prompt.find("sunny"), std::string::npos);
    EXPECT_NE(prompt.find("get_time"), std::string::npos);
}

TEST(ResponsesConvert, PreviousResponseIdPrependsTheStoredConversation) {
    ResponseStore store(4, 1 << 20);
    ParsedCompletion pc;
    pc.reasoning = "Tool time.";
    pc.tool_calls.push_back({"call_9", "get_weather", R"({"city": "Oslo"})"});
    Json first = Json::array({Json{{"role", "user"}, {"content", "Weather in Oslo?"}}});
    first.push_back(assistant_turn(pc));
    ASSERT_TRUE(store.put("resp_1", first, Json{{"id", "resp_1"}}));
    const ConversationLookup lookup = [&](const std::string& id) { return store.get(id); };
    const ResponsesRequest r = convert(R"({"previous_response_id": "resp_1", "instructions": "New rules.",
        "input": [{"type": "function_call_output", "call_id": "call_9", "output": "cold"}]})",
                                       lookup);
    const Json& m = r.chat_body["messages"];
    ASSERT_EQ(m.size(), 4u) << m.dump();
    EXPECT_EQ(m[0]["content"], "New rules.");
    EXPECT_EQ(m[1]["content"], "Weather in Oslo?");
    EXPECT_EQ(m[2]["tool_calls"][0]["id"], "call_9");
    EXPECT_EQ(m[2]["reasoning_content"], "Tool time.");
    EXPECT_EQ(m[3]["tool_call_id"], "call_9");
    EXPECT_EQ(r.conversation.size(), 3u);
    EXPECT_EQ(r.echo["previous_response_id"], "resp_1");
    EXPECT_EQ(refused(R"({"previous_response_id": "resp_x", "input": "hi"})", lookup), "previous_response_id");
}

TEST(ResponsesConvert, RefusalsNameTheField) {
    EXPECT_EQ(refused(R"({})"), "input");
    EXPECT_EQ(refused(R"({"input": 3})"), "input");
    EXPECT_EQ(refused(R"({"input": []})"), "input");
    EXPECT_EQ(refused(R"({"input": [{"role": "tool", "content": "x"}]})"), "input[0].role");
    EXPECT_EQ(refused(R"({"input": [{"role": "user", "content": [{"type": "input_image"}]}]})"),
              "input[0].content[0].type");
    EXPECT_EQ(refused(R"({"input": [{"type": "function_call", "call_id": "c", "name": "f"}]})"), "input[0].arguments");
    EXPECT_EQ(refused(R"({"input": [{"type": "function_call_output", "output": "x"}]})"), "input[0].call_id");
    EXPECT_EQ(refused(R"({"input": [{"type": "item_reference", "id": "x"}]})"), "input[0].type");
    EXPECT_EQ(refused(R"({"input": "x", "tools": [{"type": "web_search"}]})"), "tools[0].type");
    EXPECT_EQ(refused(R"({"input": "x", "tools": [{"type": "function"}]})"), "tools[0].name");
    EXPECT_EQ(refused(R"({"input": "x", "tool_choice": "sometimes"})"), "tool_choice");
    EXPECT_EQ(refused(R"({"input": "x", "reasoning": {"effort": "extreme"}})"), "reasoning.effort");
    EXPECT_EQ(refused(R"({"input": "x", "max_output_tokens": 0})"), "max_output_tokens");
    EXPECT_EQ(refused(R"({"input": "x", "temperature": 3})"), "temperature");
    EXPECT_EQ(refused(R"({"input": "x", "text": {"format": {"type": "json_schema"}}})"), "text.format.schema");
    EXPECT_EQ(refused(R"({"input": "x", "background": true})"), "background");
    EXPECT_EQ(
        refused(
            R"({"input": "x", "text": {"format": {"type": "json_schema", "name": "a", "schema": {"type": "object"}}}})"),
        "");
}

TEST(ResponsesConvert, BuilderEventsAndFinalObject) {
    ResponseBuilder b("resp_abc", 100, "model", convert(R"({"input": "x"})").echo);
    std::vector<SseEvent> all = b.start();
    auto add = [&](std::vector<SseEvent> v) {
        b.check_integrity();
        all.insert(all.end(), v.begin(), v.end());
    };
    add(b.push({ev(ParseEventKind::Reasoning, "Hmm"), ev(ParseEventKind::Reasoning, ".")}));
    add(b.push({ev(ParseEventKind::Content, "Hel"), ev(ParseEventKind::Content, "lo")}));
    add(b.push({ev(ParseEventKind::ToolCallBegin, "", "call_1", "f"), ev(ParseEventKind::ToolCallArgs, "{\"a\":"),
                ev(ParseEventKind::ToolCallArgs, " 1}"), ev(ParseEventKind::ToolCallEnd)}));
    EngineEvent last;
    last.finish_reason = FinishReason::Stop;
    last.usage.prompt_tokens = 7;
    last.usage.completion_tokens = 9;
    add(b.finish(last, 3));
    std::vector<std::string> names;
    for (size_t i = 0; i < all.size(); ++i) {
        EXPECT_EQ(all[i].data["sequence_number"], static_cast<int64_t>(i));
        EXPECT_EQ(all[i].data["type"], all[i].name);
        names.push_back(all[i].name);
    }
    const std::vector<std::string> want = {"response.created",
                                           "response.in_progress",
                                           "response.output_item.added",
                                           "response.content_part.added",
                                           "response.reasoning_text.delta",
                                           "response.reasoning_text.delta",
                                           "response.reasoning_text.done",
                                           "response.content_part.done",
                                           "response.output_item.done",
                                           "response.output_item.added",
                                           "response.content_part.added",
                                           "response.output_text.delta",
                                           "response.output_text.delta",
                                           "response.output_text.done",
                                           "response.content_part.done",
                                           "response.output_item.done",
                                           "response.output_item.added",
                                           "response.function_call_arguments.delta",
                                           "response.function_call_arguments.delta",
                                           "response.function_call_arguments.done",
                                           "response.output_item.done",
                                           "response.completed"};
    EXPECT_EQ(names, want);
    EXPECT_EQ(all[0].data["response"]["status"], "in_progress");
    EXPECT_EQ(all[11].data["output_index"], 1);
    EXPECT_EQ(all[13].data["text"], "Hello");
    EXPECT_EQ(all[19].data["arguments"], "{\"a\": 1}");
    const Json& r = b.response();
    EXPECT_EQ(r, all.back().data["response"]);
    EXPECT_EQ(r["status"], "completed");
    ASSERT_EQ(r["output"].size(), 3u);
    EXPECT_EQ(r["output"][0]["type"], "reasoning");
    EXPECT_EQ(r["output"][0]["content"][0], (Json{{"type", "reasoning_text"}, {"text", "Hmm."}}));
    EXPECT_EQ(r["output"][1]["content"][0]["text"], "Hello");
    EXPECT_EQ(r["output"][2]["call_id"], "call_1");
    EXPECT_EQ(r["output"][2]["arguments"], "{\"a\": 1}");
    EXPECT_EQ(r["usage"]["output_tokens_details"]["reasoning_tokens"], 3);
    EXPECT_EQ(r["usage"]["total_tokens"], 16);
    EXPECT_EQ(r["tool_choice"], "auto");

    ResponseBuilder cut("resp_x", 1, "m", Json::object());
    cut.push({ev(ParseEventKind::Content, "Hel")});
    last.finish_reason = FinishReason::Length;
    EXPECT_EQ(cut.finish(last, 0).back().name, "response.incomplete");
    EXPECT_EQ(cut.response()["incomplete_details"]["reason"], "max_output_tokens");
    ResponseBuilder failed("resp_y", 1, "m", Json::object());
    failed.push({ev(ParseEventKind::Content, "Hel")});
    EXPECT_EQ(failed.fail("boom").back().name, "response.failed");
    EXPECT_EQ(failed.response()["error"]["message"], "boom");
    failed.check_integrity();
}

TEST(ResponseStore, LruByCountAndBytes) {
    ResponseStore s(3, 200);
    auto conv = [](const std::string& text) { return Json::array({Json{{"role", "user"}, {"content", text}}}); };
    EXPECT_TRUE(s.put("a", conv("1"), Json::object()));
    EXPECT_TRUE(s.put("b", conv("2"), Json::object()));
    EXPECT_TRUE(s.put("c", conv("3"), Json::object()));
    s.check_integrity();
    ASSERT_TRUE(s.get("a"));  // a is now the most recent: b goes first
    EXPECT_TRUE(s.put("d", conv("4"), Json::object()));
    s.check_integrity();
    EXPECT_EQ(s.size(), 3u);
    EXPECT_FALSE(s.get("b"));
    EXPECT_EQ((*s.get("a"))[0]["content"], "1");
    // Over the byte bound by itself: not kept, and an older entry under the same id is dropped.
    EXPECT_FALSE(s.put("a", conv(std::string(300, 'x')), Json::object()));
    EXPECT_FALSE(s.get("a"));
    s.check_integrity();
    // Bytes evict the oldest too.
    EXPECT_TRUE(s.put("e", conv(std::string(120, 'y')), Json::object()));
    s.check_integrity();
    EXPECT_LE(s.bytes(), 200u);
    EXPECT_TRUE(s.get("e"));
    EXPECT_FALSE(s.get("c"));
    // Replacing keeps one entry per id.
    EXPECT_TRUE(s.put("e", conv("short"), Json::object()));
    s.check_integrity();
    EXPECT_EQ((*s.get("e"))[0]["content"], "short");
}

TEST(ResponseStore, KeepsTheResponseObjectAndForgetsOnErase) {
    ResponseStore s(3, 300);
    const Json conv = Json::array({Json{{"role", "user"}, {"content", "hi"}}});
    const Json resp = {{"id", "a"}, {"object", "response"}, {"status", "completed"}};
    ASSERT_TRUE(s.put("a", conv, resp));
    EXPECT_EQ(s.response("a"), resp);
    EXPECT_EQ(s.get("a"), conv);
    // Both halves count against the byte bound.
    EXPECT_EQ(s.bytes(), dump_json(conv).size() + dump_json(resp).size());
    EXPECT_FALSE(s.put("big", conv, Json{{"text", std::string(300, 'x')}}));
    EXPECT_FALSE(s.response("big"));
    EXPECT_TRUE(s.erase("a"));
    EXPECT_FALSE(s.erase("a"));
    EXPECT_FALSE(s.response("a"));
    EXPECT_FALSE(s.get("a"));
    EXPECT_EQ(s.size(), 0u);
    EXPECT_EQ(s.bytes(), 0u);
    s.check_integrity();
}
