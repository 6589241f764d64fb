// Prefix caching across the turns of a conversation (issue 15, "multi-turn chats"): what a prefix
// cache can reuse when turn n+1's request is rendered after turn n's, for the common agent flows.
// The model's output of turn n is what the official encoder renders for that assistant message as the
// last turn (the trained form: `reasoning</think>content<｜end▁of▁sentence｜>`, DSML tool calls), so
// "prompt_n + output_n" is the token stream the cache holds after turn n.
//
// What the rendered prompts show (asserted below, in characters of the rendered text):
//  * chat mode (thinking off), with or without tools: turn n+1's prompt starts with prompt_n + output_n:
//    everything hits, the generated answer included;
//  * thinking mode with tools (the encoder keeps reasoning whenever tools are present), calls and tool
//    results across turns: the same, everything hits;
//  * thinking mode without tools (drop_thinking, the default): the reasoning of earlier turns is dropped
//    from the history, so turn n+1 diverges right after prompt_n's last `<｜Assistant｜>` marker: the
//    prompt of turn n hits, less the trailing `<think>` token of its generation prompt (prompt_n ends
//    with `<think>`, the history renders that turn as `</think>answer`); nothing of output_n hits.
// Hits are then rounded down to whole 128-token KV blocks by the engine.
#include "tokenizer/chat_encoding.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace onecard {
namespace {

// Characters shared by a and b from the start.
size_t common_prefix(const std::string& a, const std::string& b) {
    size_t i = 0;
    while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
    return i;
}

OrderedJson weather_tool() {
    return OrderedJson::parse(R"({"type": "function", "function": {"name": "get_weather",
        "description": "Weather of a city", "parameters": {"type": "object",
        "properties": {"location": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["location"]}}})");
}

// A conversation driven turn by turn: request(messages) -> prompt; the assistant's answer appended as the
// model would have produced it; then the next user or tool messages.
class Conversation {
public:
    Conversation(bool thinking, bool tools) {
        base_ = OrderedJson::object();
        base_["chat_template_kwargs"] = {{"thinking", thinking}};
        if (tools) base_["tools"] = OrderedJson::array({weather_tool()});
        base_["messages"] = OrderedJson::array();
        thinking_ = thinking;
    }
    void add(OrderedJson m) { base_["messages"].push_back(std::move(m)); }
    std::string prompt() const { return render_chat_request(base_, ChatVariant::V4).text; }
    // The tokens the model generated for `assistant` (appended to the history): the encoder's rendering
    // of it as the last message, less the prompt before it.
    std::string answer(OrderedJson assistant) {
        const std::string prompt_n = prompt();
        OrderedJson with = base_;
        with["messages"].push_back(assistant);
        // The new message is after the last user turn, so its reasoning is kept: the rendering the model
        // was trained to produce, which extends the generation prompt (`<｜Assistant｜><think>` in
        // thinking mode, `<｜Assistant｜></think>` in chat mode) by exactly what the model generates.
        const std::string full = render_chat_request(with, ChatVariant::V4).text;
        add(std::move(assistant));
        EXPECT_EQ(full.compare(0, prompt_n.size(), prompt_n), 0) << "the last turn's rendering must extend its prompt";
        return full.substr(std::min(prompt_n.size(), full.size()));
    }

private:
    OrderedJson base_;
    bool thinking_ = false;
};

struct TurnHit {
    size_t prompt = 0;       // characters of prompt_n
    size_t with_output = 0;  // characters of prompt_n + output_n
    size_t common = 0;       // shared by prompt_{n+1} and prompt_n + output_n
    std::string where;       // both texts around the first difference (for failure messages)
};

std::string around(const std::string& a, const std::string& b, size_t i) {
    auto ctx = [&](const std::string& s) { return s.substr(i >= 60 ? i - 60 : 0, 120); };
    return "\n held: " + ctx(a) + "\n next: " + ctx(b);
}

// Runs a scripted agent flow and returns, for every turn after the first, what the previous turn leaves.
std::vector<TurnHit> run_flow(bool thinking, bool tools) {
    Conversation c(thinking, tools);
    std::vector<TurnHit> hits;
    std::string held;  // prompt_n + output_n
    size_t held_prompt = 0;
    auto next_prompt = [&] {
        const std::string p = c.prompt();
        if (!held.empty()) {
            const size_t n = common_prefix(p, held);
            hits.push_back({held_prompt, held.size(), n, around(held, p, n)});
        }
        held = p;
        held_prompt = p.size();
    };
    c.add({{"role", "system"}, {"content", "You are a concise assistant."}});
    c.add({{"role", "user"}, {"content", "What's the weather in Paris?"}});
    next_prompt();
    if (tools) {
        OrderedJson call = {{"role", "assistant"}, {"content", ""}, {"reasoning_content", "Call the tool."}};
        call["tool_calls"] =
            OrderedJson::array({{{"id", "call_1"},
                                 {"type", "function"},
                                 {"function", {{"name", "get_weather"}, {"arguments", R"({"location": "Paris"})"}}}}});
        if (!thinking) call.erase("reasoning_content");
        held += c.answer(call);
        c.add({{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", R"({"temp_c": 18})"}});
        next_prompt();
    }
    for (int turn = 0; turn < 3; ++turn) {
        OrderedJson a = {{"role", "assistant"}, {"content", "It is 18 degrees, turn " + std::to_string(turn) + "."}};
        if (thinking) a["reasoning_content"] = "Answer from the tool result.";
        held += c.answer(a);
        c.add({{"role", "user"}, {"content", "And tomorrow, case " + std::to_string(turn) + "?"}});
        next_prompt();
    }
    return hits;
}

TEST(ChatPrefixCache, ChatModeHitsEverythingIncludingTheAnswers) {
    for (bool tools : {false, true}) {
        const auto hits = run_flow(/*thinking=*/false, tools);
        ASSERT_EQ(hits.size(), tools ? 4u : 3u);
        for (const auto& h : hits) {
            EXPECT_EQ(h.common, h.with_output)
                << "tools " << tools << ": turn n+1 must extend prompt_n + output_n" << h.where;
            EXPECT_GT(h.with_output, h.prompt);
        }
    }
}

TEST(ChatPrefixCache, ThinkingWithToolsKeepsReasoningSoEverythingHits) {
    const auto hits = run_flow(/*thinking=*/true, /*tools=*/true);
    ASSERT_EQ(hits.size(), 4u);
    for (const auto& h : hits) EXPECT_EQ(h.common, h.with_output) << h.where;
}

TEST(ChatPrefixCache, ThinkingWithoutToolsHitsThePromptLessItsThinkToken) {
    const auto hits = run_flow(/*thinking=*/true, /*tools=*/false);
    ASSERT_EQ(hits.size(), 3u);
    for (const auto& h : hits) {
        // Dropped reasoning: the shared part ends inside the generation prompt of turn n.
        // The texts part inside prompt_n's last token, `<think>`, which the history renders as `</think>`
        // (they share the '<'): in tokens, all of prompt_n but its last one is shared.
        EXPECT_GE(h.common, h.prompt - std::string("<think>").size()) << h.where;
        EXPECT_LT(h.common, h.prompt) << h.where;
        EXPECT_LT(h.common, h.with_output);
    }
}

}  // namespace
}  // namespace onecard
