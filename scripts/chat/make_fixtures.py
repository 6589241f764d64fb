#!/usr/bin/env python3
"""Produce the chat-encoding fixtures in tests/data/chat/ from DeepSeek's official encoder.

Usage (from a scratch directory outside the repo, never from CI):

    python3 scripts/chat/make_fixtures.py --encoder /path/to/encoding/encoding_dsv4.py \
        [--official-tests /path/to/encoding/tests] --out tests/data/chat

`--encoder` is DeepSeek's own `encoding/encoding_dsv4.py` (HF deepseek-ai/DeepSeek-V4-Flash; a copy lives in
GitHub supermy/ds4rs @ 2ecc534c, path encoding/encoding_dsv4.py). It is imported from that path and never
committed here. `--official-tests` is the `encoding/tests/` directory next to it (test_input_N.json /
test_output_N.txt); when given, those four golden conversations become fixtures too.

What each fixture holds (one JSON file per fixture):
  {"name", "variant": "v4" | "0731", "source", "request" | "encode", "expected"}
  * "request": an OpenAI chat-completions request. The adapter below (request_to_encoder_args) turns it into
    the encoder's arguments exactly the way onecard's C++ `render_chat_request` does; the expected string is
    what the official `encode_messages` returns for those arguments.
  * "encode": direct encoder arguments {messages, thinking_mode, drop_thinking, reasoning_effort} for the
    encoder-level API `encode_messages` (used for the official golden vectors and the internal `task` field).
  * "source": "official-encoder" (V4 fixtures), or "documentation" for the 0731 variant: the 0731 encoder
    itself was not reachable, so 0731 fixtures run the official V4 encoder with its reasoning-effort block
    replaced by the documented 0731 rule (REASONING_EFFORT_PROMPTS low/high/max, default low; text as in
    DeepSeek's encoding_dsv4.py of DeepSeek-V4-Flash-Vision-Exp and in the 0731 notes, CHAT_FORMAT.md of
    patrickbdevaney/deepseek-v4-flash-0731-cuda).

random_requests.json holds seeded random conversations (differential test data, same adapter).
completions.json holds model-output texts built with the official encoder's assistant rendering, and what the
official strict parser (`parse_message_from_completion_text`) extracts from them; the C++ DSML/reasoning
parsers must agree on all of them.
"""

import argparse
import copy
import importlib.util
import json
import os
import sys
import types

# ---------------------------------------------------------------------------------------------
# Loading the official encoder (and the documented 0731 effort rule)
# ---------------------------------------------------------------------------------------------

V4_EFFORT_BLOCK = """    assert reasoning_effort in ['max', None, 'high'], f"Invalid reasoning effort: {reasoning_effort}"
    if index == 0 and thinking_mode == "thinking" and reasoning_effort == 'max':
        prompt += REASONING_EFFORT_MAX
"""

EFFORT_0731_HIGH = (
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root "
    "cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial "
    "scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
    "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n"
)
EFFORT_0731_MAX = (
    "Reasoning Effort: Beyond maximum \u2014 exhaustive, relentless, and uncompromising.\n"
    "You MUST reason with the utmost depth and rigor, leaving absolutely nothing to chance: exhaustively "
    "decompose the problem into its most fundamental components, trace every causal chain to its root, and "
    "resolve the underlying cause rather than any surface symptom.\n"
    "Do not stop reasoning until you have independently verified the solution from multiple angles and are "
    "certain that no assumption remains unchecked and no error remains undiscovered.\n\n"
)
EFFORT_0731_BLOCK = """    reasoning_effort = reasoning_effort or "low"
    assert reasoning_effort in REASONING_EFFORT_PROMPTS, f"Invalid reasoning effort: {reasoning_effort}"
    if index == 0 and thinking_mode == "thinking":
        prompt += REASONING_EFFORT_PROMPTS[reasoning_effort]
"""


def load_encoders(path):
    spec = importlib.util.spec_from_file_location("encoding_dsv4", path)
    v4 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(v4)
    # The reference's own self-check: its high prompt must equal the 0731 "high" text we typed.
    assert v4.REASONING_EFFORT_MAX == EFFORT_0731_HIGH, "V4 max prompt differs from the documented 0731 high"

    source = open(path, encoding="utf-8").read()
    assert source.count(V4_EFFORT_BLOCK) == 1, "encoder effort block not found; unknown encoder version"
    v0731 = types.ModuleType("encoding_dsv4_0731")
    v0731.__dict__["REASONING_EFFORT_PROMPTS"] = {"low": "", "high": EFFORT_0731_HIGH, "max": EFFORT_0731_MAX}
    exec(compile(source.replace(V4_EFFORT_BLOCK, EFFORT_0731_BLOCK), path + "[0731]", "exec"), v0731.__dict__)
    return {"v4": v4, "0731": v0731}


# ---------------------------------------------------------------------------------------------
# Request adapter: OpenAI chat request -> encode_messages arguments (mirrors chat_encoding.cpp)
# ---------------------------------------------------------------------------------------------

def _flatten_parts(parts, role):
    texts = []
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
        elif part.get("type") == "text":
            texts.append(part.get("text") or "")
        elif role == "tool":
            texts.append("[Unsupported %s]" % part.get("type"))
        else:
            raise ValueError("unsupported content part")
    return "\n\n".join(texts)


def request_to_encoder_args(req, variant):
    kwargs = req.get("chat_template_kwargs") or {}
    if "thinking" in kwargs or "enable_thinking" in kwargs:
        thinking = bool(kwargs.get("thinking")) or bool(kwargs.get("enable_thinking"))
    else:
        thinking = True
    effort = kwargs.get("reasoning_effort")
    if not isinstance(effort, str):
        effort = req.get("reasoning_effort")
    if not isinstance(effort, str):
        effort = None
    elif effort == "none":
        thinking, effort = False, None
    elif effort in ("max", "xhigh"):
        effort = "max"
    elif variant == "v4":
        effort = "high"  # V4 knows only max / high / None; everything below max renders no prefix
    elif effort in ("low", "minimal", "medium"):
        effort = "low"
    else:
        effort = "high"
    drop_thinking = kwargs.get("drop_thinking", True)

    messages = []
    for m in req["messages"]:
        m = copy.deepcopy(m)
        role = m["role"]
        content = m.get("content")
        if content is None:
            content = ""
        elif isinstance(content, list):
            content = _flatten_parts(content, role)
        m["content"] = content
        if "reasoning_content" not in m and "reasoning" in m:
            m["reasoning_content"] = m.pop("reasoning")
        for tc in m.get("tool_calls") or []:
            fn = tc["function"]
            if not isinstance(fn.get("arguments"), str):
                fn["arguments"] = json.dumps(fn.get("arguments", {}), ensure_ascii=False)
        messages.append(m)

    head_extra = {}
    if req.get("tools"):
        head_extra["tools"] = req["tools"]
    rf = req.get("response_format")
    if rf and rf.get("type") != "text":
        head_extra["response_format"] = rf
    if head_extra:
        if messages and messages[0]["role"] in ("system", "developer"):
            messages[0].update(head_extra)
        else:
            messages.insert(0, dict({"role": "system", "content": ""}, **head_extra))

    if req.get("continue_final_message"):
        assert messages[-1]["role"] == "assistant"
        messages[-1]["wo_eos"] = True

    return dict(messages=messages, thinking_mode="thinking" if thinking else "chat",
                drop_thinking=drop_thinking, reasoning_effort=effort)


# ---------------------------------------------------------------------------------------------
# The conversations
# ---------------------------------------------------------------------------------------------

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather for a city",
    "parameters": {"type": "object", "properties": {
        "location": {"type": "string", "description": "City name, e.g. \"Paris\""},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["location"]}}}
SEARCH = {"type": "function", "function": {
    "name": "web_search", "description": "Search the web; returns the top results",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string"},
        "num_results": {"type": "integer", "minimum": 1, "maximum": 20, "default": 5}},
        "required": ["query"]}}}
CALC = {"type": "function", "function": {
    "name": "plot_series", "description": "Plot a numeric series \u2014 \u7ed8\u5236\u56fe\u8868 \U0001F4C8",
    "parameters": {"type": "object", "properties": {
        "values": {"type": "array", "items": {"type": "number"}},
        "options": {"type": "object", "properties": {
            "log_scale": {"type": "boolean"}, "alpha": {"type": "number", "minimum": 0.0, "maximum": 1.0},
            "eps": {"type": "number", "default": 1e-05}, "big": {"type": "number", "default": 1e16},
            "edge": {"type": "number", "default": 1e15}, "tiny": {"type": "number", "default": 0.0001},
            "neg": {"type": "number", "default": -2.5e-07}}},
        "title": {"type": ["string", "null"]}},
        "required": ["values"]}}}
ALL_TOOLS = [WEATHER, SEARCH]


def call(cid, name, args, as_object=False):
    """An OpenAI tool call; arguments are a JSON string unless `as_object` (some clients send objects)."""
    if not isinstance(args, str) and not as_object:
        args = json.dumps(args, ensure_ascii=False)
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def tool_msg(cid, content):
    return {"role": "tool", "tool_call_id": cid, "content": content}


SYS = {"role": "system", "content": "You are a helpful assistant."}
SYS_ZH = {"role": "system", "content": "\u8be5\u52a9\u624b\u4e3aDeepSeek\uff0c\u7531\u6df1\u5ea6\u6c42\u7d22\u516c\u53f8\u521b\u9020\u3002"}
NO_THINK = {"thinking": False}
THINK = {"thinking": True}


def weather_round(reasoning=True):
    a = {"role": "assistant", "content": "",
         "tool_calls": [call("call_w1", "get_weather", {"location": "Beijing", "unit": "celsius"})]}
    if reasoning:
        a["reasoning_content"] = "The user wants the weather in Beijing; call get_weather."
    return [{"role": "user", "content": "What's the weather in Beijing?"}, a,
            tool_msg("call_w1", '{"temperature": 22, "condition": "sunny"}')]


def v4_cases():
    c = []
    add = lambda name, req: c.append((name, req))
    add("chat_single_user", {"messages": [{"role": "user", "content": "Hello!"}], "chat_template_kwargs": NO_THINK})
    add("thinking_default_single_user", {"messages": [{"role": "user", "content": "Why is the sky blue?"}]})
    add("thinking_system_user", {"messages": [SYS, {"role": "user", "content": "2+2?"}], "chat_template_kwargs": THINK})
    add("chat_system_user", {"messages": [SYS, {"role": "user", "content": "2+2?"}], "chat_template_kwargs": NO_THINK})
    add("enable_thinking_false", {"messages": [SYS, {"role": "user", "content": "hi"}],
                                  "chat_template_kwargs": {"enable_thinking": False}})
    multi = [SYS, {"role": "user", "content": "Hello"},
             {"role": "assistant", "reasoning_content": "Greet back.", "content": "Hi! How can I help?"},
             {"role": "user", "content": "Capital of France?"}]
    add("multi_turn_drop_thinking", {"messages": multi})
    add("multi_turn_keep_thinking", {"messages": multi, "chat_template_kwargs": {"thinking": True, "drop_thinking": False}})
    add("multi_turn_chat_mode_reasoning_ignored", {"messages": multi, "chat_template_kwargs": NO_THINK})
    add("multi_turn_assistant_last", {"messages": multi + [
        {"role": "assistant", "reasoning_content": "Paris.", "content": "Paris."}]})
    add("assistant_last_keep_thinking", {"messages": multi + [
        {"role": "assistant", "reasoning_content": "Paris.", "content": "Paris."}],
        "chat_template_kwargs": {"thinking": True, "drop_thinking": False}})
    add("reasoning_alias_field", {"messages": [SYS, {"role": "user", "content": "a"},
                                               {"role": "assistant", "reasoning": "r1", "content": "b"},
                                               {"role": "user", "content": "c"}],
                                  "chat_template_kwargs": {"thinking": True, "drop_thinking": False}})
    add("tools_single_call_thinking", {"messages": [SYS] + weather_round(), "tools": ALL_TOOLS})
    add("tools_single_call_chat", {"messages": [SYS] + weather_round(False), "tools": ALL_TOOLS,
                                   "chat_template_kwargs": NO_THINK})
    add("tools_no_system_inserted", {"messages": weather_round(), "tools": [WEATHER]})
    add("tools_first_turn_only", {"messages": [SYS, {"role": "user", "content": "Weather in Oslo?"}],
                                  "tools": ALL_TOOLS})
    add("tools_first_turn_chat", {"messages": [{"role": "user", "content": "Weather in Oslo?"}],
                                  "tools": ALL_TOOLS, "chat_template_kwargs": NO_THINK})
    par = [SYS, {"role": "user", "content": "Weather in Paris and London, and search for news."},
           {"role": "assistant", "reasoning_content": "Three independent calls.", "content": None, "tool_calls": [
               call("c1", "get_weather", {"location": "Paris"}),
               call("c2", "get_weather", {"location": "London", "unit": "fahrenheit"}),
               call("c3", "web_search", {"query": "news today", "num_results": 3})]},
           tool_msg("c3", "[\"headline 1\", \"headline 2\"]"), tool_msg("c1", "18C cloudy"),
           tool_msg("c2", "61F rain")]
    add("parallel_calls_results_reordered", {"messages": par, "tools": ALL_TOOLS})
    add("parallel_calls_then_user_text", {"messages": par + [{"role": "user", "content": "Also, summarise."}],
                                          "tools": ALL_TOOLS})
    add("parallel_calls_chat_mode", {"messages": par, "tools": ALL_TOOLS, "chat_template_kwargs": NO_THINK})
    rounds = [SYS, {"role": "user", "content": "Plan a picnic in Rome tomorrow."},
              {"role": "assistant", "reasoning_content": "Check weather first.", "content": "Let me check.",
               "tool_calls": [call("r1", "get_weather", {"location": "Rome"})]},
              tool_msg("r1", "sunny, 27C"),
              {"role": "assistant", "reasoning_content": "Now find parks.",
               "tool_calls": [call("r2", "web_search", {"query": "best parks in Rome", "num_results": 2})]},
              tool_msg("r2", "Villa Borghese; Villa Pamphili"),
              {"role": "assistant", "reasoning_content": "Compose answer.",
               "content": "Tomorrow is sunny (27C). Try Villa Borghese."},
              {"role": "user", "content": "And the day after?"}]
    add("multi_round_tools_then_new_question", {"messages": rounds, "tools": ALL_TOOLS})
    add("multi_round_tools_drop_requested_but_forced_off", {"messages": rounds, "tools": ALL_TOOLS,
                                                            "chat_template_kwargs": {"thinking": True, "drop_thinking": True}})
    add("multi_round_tools_chat", {"messages": rounds, "tools": ALL_TOOLS, "chat_template_kwargs": NO_THINK})
    esc = {"path": "C:\\Users\\\u00e9l\u00e8ve\\notes \"draft\".txt", "text": "line1\nline2\ttab \u0001 ctl",
           "emoji": "\U0001F468\u200d\U0001F469\u200d\U0001F467 \U0001F44D\U0001F3FD", "cjk": "\u4f60\u597d\uff0c\u4e16\u754c",
           "html": "<b>&amp;</b> </tool_result> <think>"}
    add("args_unicode_and_escaping", {"messages": [SYS, {"role": "user", "content": "save it"},
                                                   {"role": "assistant", "reasoning_content": "save",
                                                    "tool_calls": [call("e1", "save_note", esc)]},
                                                   tool_msg("e1", "saved \u2714")], "tools": [WEATHER]})
    typed = {"values": [1, 2.5, -3e-07, 1e+21, 0.1], "options": {"log_scale": True, "alpha": 0.25, "meta": None,
                                                                 "nested": {"k": [True, False, {"x": "y"}]}},
             "title": None, "count": 42, "ratio": 1.0, "big": 12345678901234567}
    add("args_typed_values", {"messages": [{"role": "user", "content": "plot"},
                                           {"role": "assistant", "reasoning_content": "plot it",
                                            "tool_calls": [call("t1", "plot_series", typed)]},
                                           tool_msg("t1", "ok")], "tools": [CALC]})
    add("args_invalid_json", {"messages": [{"role": "user", "content": "x"},
                                           {"role": "assistant", "content": "",
                                            "tool_calls": [call("i1", "web_search", "not json {")]},
                                           tool_msg("i1", "??")], "tools": [SEARCH]})
    add("args_as_object", {"messages": [{"role": "user", "content": "x"},
                                        {"role": "assistant", "content": "ok",
                                         "tool_calls": [call("o1", "web_search", {"query": "q \u00fc", "num_results": 2}, as_object=True)]},
                                        tool_msg("o1", "r")], "tools": [SEARCH]})
    add("args_empty_object", {"messages": [{"role": "user", "content": "time?"},
                                           {"role": "assistant", "reasoning_content": "",
                                            "tool_calls": [call("n1", "get_time", "{}")]},
                                           tool_msg("n1", "12:00")],
                              "tools": [{"type": "function", "function": {"name": "get_time", "parameters": {
                                  "type": "object", "properties": {}}}}]})
    add("tool_result_content_parts", {"messages": [SYS] + weather_round()[:2] + [
        {"role": "tool", "tool_call_id": "call_w1",
         "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": "part two"}]}],
        "tools": ALL_TOOLS})
    add("tool_result_empty_and_null", {"messages": [SYS, {"role": "user", "content": "two calls"},
                                                    {"role": "assistant", "tool_calls": [
                                                        call("a", "web_search", {"query": "x"}),
                                                        call("b", "web_search", {"query": "y"})]},
                                                    tool_msg("b", ""), tool_msg("a", None)], "tools": [SEARCH]})
    add("tool_message_without_id", {"messages": [SYS, {"role": "user", "content": "q"},
                                                 {"role": "assistant", "tool_calls": [
                                                     call("z1", "web_search", {"query": "x"})]},
                                                 {"role": "tool", "content": "result"}], "tools": [SEARCH]})
    add("user_content_parts", {"messages": [SYS, {"role": "user", "content": [
        {"type": "text", "text": "First part."}, {"type": "text", "text": "Second part."}]}]})
    add("system_content_parts", {"messages": [{"role": "system", "content": [{"type": "text", "text": "Be brief."},
                                                                             {"type": "text", "text": "Be kind."}]},
                                              {"role": "user", "content": "hi"}], "chat_template_kwargs": NO_THINK})
    add("consecutive_user_messages", {"messages": [SYS, {"role": "user", "content": "one"},
                                                   {"role": "user", "content": "two"},
                                                   {"role": "user", "content": "three"}]})
    dev_tools = [SYS_ZH, {"role": "latest_reminder", "content": "2026-02-21,\u661f\u671f\u516d,\u5e7f\u5dde,App,\u4e2d\u6587"},
                 {"role": "developer", "content": "\u67e5\u4e00\u4e0b\u4eca\u5929\u7684\u65b0\u95fb", "tools": [SEARCH]},
                 {"role": "assistant", "reasoning_content": "\u641c\u7d22", "tool_calls": [
                     call("d1", "web_search", {"query": "\u4eca\u65e5\u65b0\u95fb"})]},
                 tool_msg("d1", "\u3010\u7ed3\u679c\u3011")]
    add("developer_role_with_tools", {"messages": dev_tools})
    add("developer_role_with_tools_chat", {"messages": dev_tools, "chat_template_kwargs": NO_THINK})
    add("developer_request_tools_override", {"messages": [{"role": "developer", "content": "search please"},
                                                          {"role": "user", "content": "go"}], "tools": [WEATHER]})
    add("latest_reminder_before_user", {"messages": [SYS, {"role": "latest_reminder", "content": "2026-11-29, Sunday"},
                                                     {"role": "user", "content": "What day is it?"}]})
    add("latest_reminder_after_user", {"messages": [SYS, {"role": "user", "content": "What day is it?"},
                                                    {"role": "latest_reminder", "content": "2026-11-29"}]})
    add("developer_dropped_before_last_user", {"messages": [SYS, {"role": "developer", "content": "internal note"},
                                                            {"role": "assistant", "reasoning_content": "x", "content": "y"},
                                                            {"role": "user", "content": "next"}]})
    add("developer_kept_when_keep_thinking", {"messages": [SYS, {"role": "developer", "content": "internal note"},
                                                           {"role": "assistant", "reasoning_content": "x", "content": "y"},
                                                           {"role": "user", "content": "next"}],
                                              "chat_template_kwargs": {"thinking": True, "drop_thinking": False}})
    schema = {"type": "json_schema", "json_schema": {"name": "answer", "strict": True, "schema": {
        "type": "object", "properties": {"city": {"type": "string"}, "score": {"type": "number", "maximum": 9.5}},
        "required": ["city", "score"]}}}
    add("response_format_json_schema", {"messages": [SYS, {"role": "user", "content": "Best city?"}],
                                        "response_format": schema})
    add("response_format_json_object_chat", {"messages": [{"role": "user", "content": "JSON please"}],
                                             "response_format": {"type": "json_object"},
                                             "chat_template_kwargs": NO_THINK})
    add("response_format_text_ignored", {"messages": [SYS, {"role": "user", "content": "plain"}],
                                         "response_format": {"type": "text"}})
    add("response_format_with_tools", {"messages": [SYS, {"role": "user", "content": "weather as JSON"}],
                                       "tools": [WEATHER], "response_format": schema})
    for eff in ("max", "high", "xhigh", "low", "medium", "minimal"):
        add("effort_%s_v4" % eff, {"messages": [SYS, {"role": "user", "content": "Prove it."}], "reasoning_effort": eff})
    add("effort_none_v4_is_chat", {"messages": [SYS, {"role": "user", "content": "Quick."}], "reasoning_effort": "none"})
    add("effort_max_kwargs_v4", {"messages": [{"role": "user", "content": "Hard problem"}],
                                 "chat_template_kwargs": {"thinking": True, "reasoning_effort": "max"},
                                 "reasoning_effort": "high"})
    add("effort_max_chat_mode_v4", {"messages": [SYS, {"role": "user", "content": "x"}], "reasoning_effort": "max",
                                    "chat_template_kwargs": NO_THINK})
    add("effort_max_with_tools_multi_turn_v4", {"messages": rounds, "tools": ALL_TOOLS, "reasoning_effort": "max"})
    add("continue_final_thinking", {"messages": [SYS, {"role": "user", "content": "Write a haiku"},
                                                 {"role": "assistant", "reasoning_content": "5-7-5.",
                                                  "content": "Autumn moonlight\u2014"}],
                                    "continue_final_message": True})
    add("continue_final_chat", {"messages": [{"role": "user", "content": "Count to five"},
                                             {"role": "assistant", "content": "1, 2, 3"}],
                                "continue_final_message": True, "chat_template_kwargs": NO_THINK})
    add("continue_final_with_tool_history", {"messages": [SYS] + weather_round() + [
        {"role": "assistant", "reasoning_content": "Got it.", "content": "It is 22"}],
        "tools": ALL_TOOLS, "continue_final_message": True})
    add("literal_special_text_in_content", {"messages": [SYS, {"role": "user", "content":
                                                                "Explain <think> and </think> tags; also \\n and \"quotes\"."}]})
    add("long_mixed_conversation", {"messages": [SYS_ZH, {"role": "user", "content": "\u4f60\u597d"},
                                                 {"role": "assistant", "reasoning_content": "\u6253\u62db\u547c", "content": "\u4f60\u597d\uff01"},
                                                 {"role": "user", "content": "Weather in Tokyo and Osaka?"},
                                                 {"role": "assistant", "reasoning_content": "two calls", "tool_calls": [
                                                     call("k1", "get_weather", {"location": "Tokyo"}),
                                                     call("k2", "get_weather", {"location": "Osaka"})]},
                                                 tool_msg("k2", "rain"), tool_msg("k1", "clear"),
                                                 {"role": "assistant", "reasoning_content": "answer", "content": "Tokyo clear, Osaka rain."},
                                                 {"role": "user", "content": "Thanks! \U0001F64F"}],
                                    "tools": [WEATHER], "reasoning_effort": "max"})
    return c


def v0731_cases():
    c = []
    base = [SYS, {"role": "user", "content": "Prove that sqrt(2) is irrational."}]
    for eff in ("low", "high", "max", "minimal", "medium", "xhigh"):
        c.append(("effort_%s_0731" % eff, {"messages": base, "reasoning_effort": eff}))
    c.append(("effort_default_0731", {"messages": base}))
    c.append(("effort_none_0731_is_chat", {"messages": base, "reasoning_effort": "none"}))
    c.append(("effort_max_chat_mode_0731", {"messages": base, "reasoning_effort": "max", "chat_template_kwargs": NO_THINK}))
    c.append(("effort_high_kwargs_0731", {"messages": [{"role": "user", "content": "hmm"}],
                                          "chat_template_kwargs": {"thinking": True, "reasoning_effort": "high"}}))
    c.append(("effort_max_tools_0731", {"messages": [SYS] + weather_round(), "tools": ALL_TOOLS, "reasoning_effort": "max"}))
    c.append(("effort_high_multi_turn_0731", {"messages": [SYS, {"role": "user", "content": "a"},
                                                           {"role": "assistant", "reasoning_content": "r", "content": "b"},
                                                           {"role": "user", "content": "c"}], "reasoning_effort": "high"}))
    return c


def direct_cases():
    return [
        ("task_query_chat", dict(messages=[SYS, {"role": "user", "content": "best pizza nearby", "task": "query"}],
                                 thinking_mode="chat", drop_thinking=True, reasoning_effort=None)),
        ("task_action_thinking", dict(messages=[SYS, {"role": "user", "content": "hi"},
                                                {"role": "assistant", "reasoning_content": "r", "content": "hello"},
                                                {"role": "user", "content": "open example.com", "task": "action"}],
                                      thinking_mode="thinking", drop_thinking=True, reasoning_effort=None)),
        ("task_title_then_answer", dict(messages=[{"role": "user", "content": "Tell me about Rome", "task": "title"},
                                                  {"role": "assistant", "content": "Rome overview"}],
                                        thinking_mode="thinking", drop_thinking=True, reasoning_effort="max")),
        ("wo_eos_direct", dict(messages=[{"role": "user", "content": "q"},
                                         {"role": "assistant", "reasoning_content": "r", "content": "partial", "wo_eos": True}],
                               thinking_mode="thinking", drop_thinking=True, reasoning_effort="high")),
    ]


def random_requests(seed, n):
    """Random conversations (roles, tools, efforts, kwargs, content parts, unicode) for differential testing:
    nothing here was looked at while writing the C++ encoder."""
    import random
    rng = random.Random(seed)
    words = ["alpha", "\u4f60\u597d", "caf\u00e9", "\U0001F600", "tab\there", "quote\"d", "back\\slash",
             "<think>", "line\nbreak", "", "  spaced  ", "\u0627\u0644\u0633\u0644\u0627\u0645", "x" * 30]
    text = lambda: " ".join(rng.choice(words) for _ in range(rng.randint(0, 5)))
    tools_pool = [WEATHER, SEARCH, CALC]

    def value(depth=0):
        r = rng.random()
        if r < 0.35 or depth > 2:
            return text()
        if r < 0.5:
            return rng.choice([0, -7, 3.25, 1e-07, 2.5e20, 123456789])
        if r < 0.6:
            return rng.choice([True, False, None])
        if r < 0.8:
            return [value(depth + 1) for _ in range(rng.randint(0, 3))]
        return {"k%d" % i: value(depth + 1) for i in range(rng.randint(0, 3))}

    out = []
    while len(out) < n:
        msgs = []
        if rng.random() < 0.7:
            msgs.append({"role": "system", "content": text() or "sys"})
        if rng.random() < 0.2:
            msgs.append({"role": "latest_reminder", "content": text()})
        pending = []
        for _ in range(rng.randint(1, 4)):
            r = rng.random()
            if r < 0.1:
                msgs.append({"role": "developer", "content": text() or "dev"})
            elif r < 0.2 and pending:
                pass
            else:
                content = text()
                if rng.random() < 0.2:
                    content = [{"type": "text", "text": text()} for _ in range(rng.randint(1, 3))]
                msgs.append({"role": "user", "content": content})
            a = {"role": "assistant", "content": text() if rng.random() < 0.8 else None}
            if rng.random() < 0.7:
                a["reasoning_content"] = text()
            if rng.random() < 0.5:
                calls = []
                for j in range(rng.randint(1, 3)):
                    cid = "id%d_%d" % (len(msgs), j)
                    args = {"p%d" % i: value() for i in range(rng.randint(0, 3))}
                    calls.append(call(cid, rng.choice(["get_weather", "web_search", "plot_series"]), args,
                                      as_object=rng.random() < 0.1))
                a["tool_calls"] = calls
                msgs.append(a)
                ids = [c["id"] for c in calls]
                rng.shuffle(ids)
                for cid in ids:
                    msgs.append(tool_msg(cid, text() if rng.random() < 0.9 else [{"type": "text", "text": text()}]))
            else:
                msgs.append(a)
        if rng.random() < 0.6 and msgs[-1]["role"] == "assistant":
            msgs.pop()
        if msgs[-1]["role"] == "tool" and rng.random() < 0.3:
            msgs.append({"role": "user", "content": text()})
        req = {"messages": msgs}
        if rng.random() < 0.5:
            req["tools"] = rng.sample(tools_pool, rng.randint(1, 3))
        kw = {}
        if rng.random() < 0.5:
            kw[rng.choice(["thinking", "enable_thinking"])] = rng.random() < 0.6
        if rng.random() < 0.3:
            kw["drop_thinking"] = rng.random() < 0.5
        if rng.random() < 0.3:
            kw["reasoning_effort"] = rng.choice(["low", "high", "max", "none", "medium", "xhigh"])
        if kw:
            req["chat_template_kwargs"] = kw
        if rng.random() < 0.4:
            req["reasoning_effort"] = rng.choice(["low", "high", "max", "none", "minimal"])
        if rng.random() < 0.15:
            req["response_format"] = rng.choice([{"type": "json_object"}, {"type": "text"},
                                                 {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object"}}}])
        if msgs[-1]["role"] == "assistant" and rng.random() < 0.5:
            req["continue_final_message"] = True
        out.append(req)
    return out


# ---------------------------------------------------------------------------------------------
# Completions for the parser (official strict parser as the oracle)
# ---------------------------------------------------------------------------------------------

def completion_text(enc, assistant, thinking_mode):
    """The exact text the model emits for `assistant` (what follows the generation prompt)."""
    msgs = [{"role": "user", "content": "q"}, assistant]
    rendered = enc.render_message(1, msgs, thinking_mode=thinking_mode, drop_thinking=True)
    return rendered


def completion_cases():
    out = []
    cases = v4_cases() + [("random_%d" % i, r) for i, r in enumerate(random_requests(20261129, 150))]
    for name, req in cases:
        for m in req["messages"]:
            if m["role"] != "assistant":
                continue
            a = copy.deepcopy(m)
            a.pop("wo_eos", None)
            if "reasoning" in a:
                a["reasoning_content"] = a.pop("reasoning")
            for tc in a.get("tool_calls") or []:
                if not isinstance(tc["function"]["arguments"], str):
                    tc["function"]["arguments"] = json.dumps(tc["function"]["arguments"], ensure_ascii=False)
            out.append((name, a))
    extra = [
        {"role": "assistant", "reasoning_content": "Think about <b>tags</b> and \"quotes\".",
         "content": "Multi\nline\n\ncontent with trailing newline\n"},
        {"role": "assistant", "reasoning_content": "", "content": ""},
        {"role": "assistant", "reasoning_content": "calls", "content": "Calling now:",
         "tool_calls": [call("x1", "f", {"a": "1", "b": 1, "c": [1, "2"], "d": {"e": None}}),
                        call("x2", "g", {"s": "</\u30c6\u30b9\u30c8>", "t": "\\\"\n"})]},
    ]
    out += [("extra_%d" % i, a) for i, a in enumerate(extra)]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--encoder", required=True)
    ap.add_argument("--official-tests")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    encs = load_encoders(args.encoder)
    os.makedirs(args.out, exist_ok=True)

    def write(name, obj):
        with open(os.path.join(args.out, name + ".json"), "w", encoding="utf-8") as f:
            json.dump(obj, f, ensure_ascii=False, indent=1)
            f.write("\n")

    n = 0
    for variant, cases in (("v4", v4_cases()), ("0731", v0731_cases())):
        for name, req in cases:
            enc = encs[variant]
            expected = enc.encode_messages(**request_to_encoder_args(req, variant))
            source = "official-encoder" if variant == "v4" else "documentation"
            write("req_" + name, {"name": name, "variant": variant, "source": source, "request": req,
                                  "expected": expected})
            n += 1
    for name, enc_args in direct_cases():
        expected = encs["v4"].encode_messages(**enc_args)
        write("enc_" + name, {"name": name, "variant": "v4", "source": "official-encoder", "encode": enc_args,
                              "expected": expected})
        n += 1
    if args.official_tests:
        modes = {1: "thinking", 2: "thinking", 3: "thinking", 4: "chat"}
        for i, mode in modes.items():
            data = json.load(open(os.path.join(args.official_tests, "test_input_%d.json" % i), encoding="utf-8"))
            if isinstance(data, dict):
                messages = data["messages"]
                messages[0]["tools"] = data["tools"]
            else:
                messages = data
            gold = open(os.path.join(args.official_tests, "test_output_%d.txt" % i), encoding="utf-8").read()
            enc_args = dict(messages=messages, thinking_mode=mode, drop_thinking=True, reasoning_effort=None)
            assert encs["v4"].encode_messages(**enc_args) == gold
            write("enc_official_golden_%d" % i, {"name": "official_golden_%d" % i, "variant": "v4",
                                                 "source": "official-golden", "encode": enc_args, "expected": gold})
            n += 1

    randoms = []
    for i, req in enumerate(random_requests(20261129, 150)):
        variant = "v4" if i % 3 else "0731"
        try:
            expected = encs[variant].encode_messages(**request_to_encoder_args(req, variant))
        except Exception:
            continue  # inputs the official encoder rejects are not fixtures
        randoms.append({"variant": variant, "source": "official-encoder" if variant == "v4" else "documentation",
                        "request": req, "expected": expected})
    write("random_requests", {"seed": 20261129, "cases": randoms})

    completions = []
    for name, a in completion_cases():
        for mode in ("thinking", "chat"):
            text = completion_text(encs["v4"], a, mode)
            try:
                parsed = encs["v4"].parse_message_from_completion_text(text, thinking_mode=mode)
            except (AssertionError, ValueError):
                continue  # text the strict official parser rejects (e.g. "<think>" inside content)
            completions.append({"name": name, "thinking_mode": mode, "text": text,
                                "content": parsed["content"], "reasoning_content": parsed["reasoning_content"],
                                "tool_calls": [{"name": t["function"]["name"], "arguments": t["function"]["arguments"]}
                                               for t in parsed["tool_calls"]]})
    write("completions", {"source": "official-encoder", "completions": completions})
    print("wrote %d prompt fixtures, %d random requests and %d completions to %s"
          % (n, len(randoms), len(completions), args.out), file=sys.stderr)


if __name__ == "__main__":
    main()
