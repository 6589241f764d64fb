// validate's tool-call fixtures (tools/onecard/client/tool_fixtures.h): the built-in set loads and
// yields one request per turn with the right history, the matching rules (any order, numbers as
// numbers, defaults, no coercion, answer_contains) and the errors a malformed file gets.
#include "core/error.h"
#include "tool_fixtures.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace onecard::client {
namespace {

StreamResult answer(std::vector<std::pair<std::string, std::string>> calls, std::string content = "") {
    StreamResult r;
    r.ok = true;
    for (auto& [name, args] : calls) r.tool_calls.push_back({"id", name, args});
    r.content = std::move(content);
    return r;
}

FixtureTurn turn(Json expected) {
    FixtureTurn t;
    t.expected = std::move(expected);
    t.tool_params["f"] = Json::parse(
        R"({"type": "object", "properties": {"a": {"type": "number"}, "s": {"type": "string"},
            "opt": {"type": "integer", "default": 10}, "tags": {"type": "array", "items": {"type": "string"}}}})");
    t.tool_params["g"] = Json::parse(R"({"type": "object", "properties": {"x": {"type": "string"}}})");
    return t;
}

bool matches(const StreamResult& r, const FixtureTurn& t) {
    std::string why;
    return turn_matches(r, t, &why);
}

TEST(ToolFixtures, BuiltinSetLoadsWithHistory) {
    const Json fx = load_fixtures("");
    ASSERT_GE(fx["fixtures"].size(), 90u);
    const auto turns = fixture_turns(fx, Json{{"model", "m"}, {"max_tokens", 7}});
    size_t n_turns = 0, n_parallel = 0, n_none = 0, n_second = 0;
    for (const auto& f : fx["fixtures"]) n_turns += f["turns"].size();
    ASSERT_EQ(turns.size(), n_turns);
    for (const auto& t : turns) {
        EXPECT_EQ(t.body["model"], "m");
        EXPECT_EQ(t.body["max_tokens"], 7);
        EXPECT_FALSE(t.body["tools"].empty());
        n_parallel += t.expected.size() > 1;
        n_none += t.expected.empty();
        n_second += t.i_turn > 0;
    }
    EXPECT_GE(n_parallel, 10u);
    EXPECT_GE(n_none, 15u);  // 8 no-call fixtures plus the final answers after tool results
    EXPECT_GE(n_second, 15u);
    // A turn without a user message follows the tool results: the request ends on a tool message.
    const auto it = std::find_if(turns.begin(), turns.end(), [](const FixtureTurn& t) {
        return t.fixture_id == "chain_contact_email" && t.i_turn == 1;
    });
    ASSERT_NE(it, turns.end());
    const Json& m = it->body["messages"];
    ASSERT_EQ(m.size(), 3u);
    EXPECT_EQ(m[0]["role"], "user");
    EXPECT_EQ(m[1]["role"], "assistant");
    EXPECT_EQ(m[1]["tool_calls"][0]["function"]["name"], "lookup_contact");
    EXPECT_EQ(Json::parse(m[1]["tool_calls"][0]["function"]["arguments"].get<std::string>())["name"], "Tomás Ferreira");
    EXPECT_EQ(m[2]["role"], "tool");
    EXPECT_EQ(m[2]["tool_call_id"], m[1]["tool_calls"][0]["id"]);
    EXPECT_NE(m[2]["content"].get<std::string>().find("t.ferreira@example.net"), std::string::npos);
}

TEST(ToolFixtures, ExactMatchRules) {
    const FixtureTurn t = turn(Json::parse(R"([{"name": "f", "arguments": {"a": 22, "s": "x", "tags": ["p", "q"]}},
                                               {"name": "g", "arguments": {"x": "y"}}])"));
    EXPECT_TRUE(matches(answer({{"f", R"({"s": "x", "a": 22, "tags": ["p", "q"]})"}, {"g", R"({"x": "y"})"}}), t));
    // Parallel calls in any order; numbers as numbers.
    EXPECT_TRUE(matches(answer({{"g", R"({"x":"y"})"}, {"f", R"({"a": 22.0, "s": "x", "tags": ["p","q"]})"}}), t));
    // A parameter with a default may be sent with it, not with another value.
    EXPECT_TRUE(
        matches(answer({{"f", R"({"a": 22, "s": "x", "tags": ["p", "q"], "opt": 10})"}, {"g", R"({"x": "y"})"}}), t));
    EXPECT_FALSE(
        matches(answer({{"f", R"({"a": 22, "s": "x", "tags": ["p", "q"], "opt": 11})"}, {"g", R"({"x": "y"})"}}), t));
    // No coercion, arrays in order, no extra or missing parameters, names exact, calls counted.
    EXPECT_FALSE(matches(answer({{"f", R"({"a": "22", "s": "x", "tags": ["p", "q"]})"}, {"g", R"({"x": "y"})"}}), t));
    EXPECT_FALSE(matches(answer({{"f", R"({"a": 22, "s": "x", "tags": ["q", "p"]})"}, {"g", R"({"x": "y"})"}}), t));
    EXPECT_FALSE(
        matches(answer({{"f", R"({"a": 22, "s": "x", "tags": ["p", "q"], "z": 1})"}, {"g", R"({"x": "y"})"}}), t));
    EXPECT_FALSE(matches(answer({{"f", R"({"a": 22, "tags": ["p", "q"]})"}, {"g", R"({"x": "y"})"}}), t));
    EXPECT_FALSE(matches(answer({{"f", R"({"a": 22, "s": "x", "tags": ["p", "q"]})"}, {"G", R"({"x": "y"})"}}), t));
    EXPECT_FALSE(matches(answer({{"f", R"({"a": 22, "s": "x", "tags": ["p", "q"]})"}}), t));
    EXPECT_FALSE(matches(answer({{"f", R"({"a": 22, "s": "x", "tags": ["p", "q"]})"},
                                 {"f", R"({"a": 22, "s": "x", "tags": ["p", "q"]})"}}),
                         t));
    EXPECT_FALSE(matches(answer({{"f", R"({"a": 22, "s": "x", "tags": ["p", "q"])"}, {"g", R"({"x": "y"})"}}), t));
    StreamResult failed = answer({});
    failed.ok = false;
    failed.error = "HTTP 400: no tools";
    std::string why;
    EXPECT_FALSE(turn_matches(failed, t, &why));
    EXPECT_EQ(why, "HTTP 400: no tools");
    // The reason names the call that found no match.
    EXPECT_FALSE(
        turn_matches(answer({{"f", R"({"a": 23, "s": "x", "tags": ["p", "q"]})"}, {"g", R"({"x": "y"})"}}), t, &why));
    EXPECT_NE(why.find("no call matches f"), std::string::npos) << why;
}

TEST(ToolFixtures, NoCallAndAnswerContains) {
    FixtureTurn t = turn(Json::array());
    EXPECT_TRUE(matches(answer({}, "Anything."), t));
    EXPECT_FALSE(matches(answer({{"g", R"({"x": "y"})"}}), t));
    t.answer_contains = {"Vielen Dank", "14:05"};
    EXPECT_TRUE(matches(answer({}, "It is 14:05; VIELEN DANK means thank you."), t));
    EXPECT_FALSE(matches(answer({}, "It is 14:05."), t));
}

TEST(ToolFixtures, MalformedFileNamesTheFixture) {
    const auto path = std::filesystem::temp_directory_path() / "onecard_bad_fixtures.json";
    auto expect_error = [&](const std::string& text, const std::string& needle) {
        std::ofstream(path) << text;
        try {
            load_fixtures(path.string());
            ADD_FAILURE() << "accepted: " << text;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
    };
    const std::string tools = R"("tools": {"f": {"parameters": {"type": "object", "properties": {}}}})";
    expect_error("{", "not JSON");
    expect_error(R"({"fixtures": []})", "needs a \"tools\" object");
    expect_error(
        "{" + tools + R"(, "fixtures": [{"id": "a", "tools": ["h"], "turns": [{"user": "u", "expected": []}]}]})",
        "fixture a: tool \"h\" is not defined");
    expect_error("{" + tools + R"(, "fixtures": [{"id": "b", "tools": ["f"], "turns": [{"expected": []}]}]})",
                 "fixture b: turn 1: the first turn needs \"user\"");
    expect_error(
        "{" + tools +
            R"(, "fixtures": [{"id": "c", "tools": ["f"], "turns": [{"user": "u", "expected": [{"name": "f"}]}]}]})",
        "fixture c: turn 1: every expected call needs");
    expect_error(
        "{" + tools +
            R"(, "fixtures": [{"id": "d", "tools": ["f"], "turns": [{"user": "u", "expected": []}, {"user": "v", "expected": []}]}]})",
        "fixture d: turn 2: follows a turn without calls");
    std::filesystem::remove(path);
}

}  // namespace
}  // namespace onecard::client
