#!/usr/bin/env python3
"""Writes the seed corpora under tests/fuzz/corpus/<target>/ (a few small valid inputs each) from the
repository's own test data. Re-run after changing a target's input layout:
    python3 tests/fuzz/make_corpus.py"""
import hashlib
import json
import os
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fuzz", "corpus")


def put(target, data):
    if isinstance(data, str):
        data = data.encode()
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    name = hashlib.sha1(data).hexdigest()[:16]
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def load(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return json.load(f)


def compact(v):
    return json.dumps(v, ensure_ascii=False, separators=(",", ":"))


# ---- server_request: bodies for every JSON route ---------------------------------------------
WEATHER_TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
bodies = [
    {"model": "deepseek-v4-flash", "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 8},
    {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "hi"}]}],
     "stream": True, "stream_options": {"include_usage": True}, "temperature": 0.7, "top_p": 0.9, "seed": 3,
     "stop": ["\n\n"], "logprobs": True, "top_logprobs": 2},
    {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER_TOOL], "tool_choice": "auto",
     "chat_template_kwargs": {"thinking": False}},
    {"messages": [{"role": "user", "content": "Weather?"},
                  {"role": "assistant", "content": None, "tool_calls": [{"id": "call_0", "type": "function",
                   "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                  {"role": "tool", "tool_call_id": "call_0", "content": "sunny"}],
     "tools": [WEATHER_TOOL], "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
     "reasoning_effort": "max", "response_format": {"type": "json_object"}},
    {"prompt": "Once upon a time", "max_tokens": 16, "logprobs": 2, "stop": "x", "add_special_tokens": False},
    {"prompt": [[0, 100, 200]], "max_tokens": 4, "stream": True},
    {"prompt": "tokenize me <｜begin▁of▁sentence｜>", "return_token_strs": True},
    {"tokens": [0, 1, 100, 128000, 128815]},
    {"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 5000, "n": 1, "ignore_eos": True,
     "stop_token_ids": [1], "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1,
     "top_k": 40, "min_p": 0.05, "logit_bias": {}},
]
for b in bodies:
    put("server_request", compact(b))

# ---- config: the official configs of the test checkpoints + synth presets ---------------------
for name in ("tiny_every_kind", "tiny_odd_window", "real_dims_4layer"):
    meta = os.path.join(ROOT, "tests", "data", "golden", name, "meta.json")
    if os.path.exists(meta):
        m = load(os.path.relpath(meta, ROOT))
        cfg = m.get("config") if isinstance(m, dict) else None
        if isinstance(cfg, dict):
            put("config", json.dumps(cfg))
for extra in ("tests/fuzz/seed_configs",):
    d = os.path.join(ROOT, extra)
    if os.path.isdir(d):
        for f in sorted(os.listdir(d)):
            with open(os.path.join(d, f), "rb") as fh:
                put("config", fh.read())

# ---- tokenizer: [mode byte][text] / [mode|1][ids as 3 bytes] -----------------------------------
texts = ["Hello, world! 123 4567", "你好，世界。 café naïve 😀", "def f(x):\n    return x ** 2\n",
         "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜><think>", "  spaced\t\ttabs\r\n\n 1,000,000.50 ",
         "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">"]
for i, t in enumerate(texts):
    put("tokenizer", bytes([(i * 2 + 4) & 0xFE]) + t.encode())
put("tokenizer", bytes([1]) + b"".join(struct.pack("<I", v)[:3] for v in (0, 1, 100, 5000, 128000, 128815, 129279)))
put("tokenizer", bytes([3]) + b"".join(struct.pack("<I", v)[:3] for v in (1, 2, 3, 60000, 128803, 128804)))

# ---- parsers: [text][seed u32][flags] ----------------------------------------------------------
comps = load("tests/data/chat/completions.json")["completions"]
seen = set()
for c in comps:
    if c["name"] in seen:
        continue
    seen.add(c["name"])
    if len(seen) > 12:
        break
    flags = (len(seen) % 8) | (16 if c.get("thinking_mode") == "thinking" else 0) | (8 if len(seen) % 5 == 0 else 0)
    put("parsers", c["text"].encode() + struct.pack("<I", len(seen) * 7919) + bytes([flags]))

# ---- chat_render: [JSON][flags] -----------------------------------------------------------------
for i in range(1, 5):
    d = load(f"tests/data/chat/enc_official_golden_{i}.json")
    enc = d["encode"]
    msgs = enc.get("messages") if isinstance(enc, dict) else None
    if msgs:
        put("chat_render", compact(msgs) + "\x08")
rr = load("tests/data/chat/random_requests.json")["cases"]
for i, c in enumerate(rr[:6]):
    put("chat_render", compact(c["request"]) + chr(1 if c.get("variant") == "0731" else 0))
for b in bodies[:4]:
    put("chat_render", compact(b) + "\x00")

# ---- safetensors: [flags][file] ------------------------------------------------------------------
def st(tensors, metadata=None):
    header, data, off = {}, b"", 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        data += raw
        off += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data

f1 = st([("a.weight", "F32", [2, 2], struct.pack("<4f", 1, 2, 3, 4)), ("b", "BF16", [3], b"\x80\x3f" * 3)],
        {"format": "pt"})
f2 = st([("e.w", "F8_E4M3", [2, 4], bytes(range(8))), ("e.s", "F8_E8M0", [2, 1], b"\x7f\x7f"), ("z", "F32", [0], b""),
         ("experts.0.w1", "I8", [2, 2], b"\x12\x34\x56\x78")])
f3 = st([])
for flags, f in ((0, f1), (1, f1), (0, f2), (1, f2), (0, f3)):
    put("safetensors", bytes([flags]) + f)
index = compact({"metadata": {"total_size": 24}, "weight_map": {"a.weight": "model-00001-of-00001.safetensors",
                                                                 "b": "model-00001-of-00001.safetensors"}})
put("safetensors", bytes([2]) + index.encode() + b"\n" + f1)
# ---- json_schema: [schema][seed: 4 bytes][flags: 1 byte] ----------------------------------------
SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 12},
     "age": {"type": "integer", "minimum": 0, "maximum": 150}, "tags": {"type": "array", "items": {"type": "string"},
     "maxItems": 4}, "score": {"type": "number"}}, "required": ["name", "age"], "additionalProperties": False},
    {"type": "object", "properties": {"kind": {"enum": ["a", "b\u00e9", 3, None, True]},
     "value": {"anyOf": [{"type": "string", "maxLength": 5}, {"type": "integer", "exclusiveMinimum": -5}]}},
     "required": ["kind", "value"]},
    {"$ref": "#/$defs/node", "$defs": {"node": {"type": "object", "properties": {"label": {"type": "string"},
     "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 3}}, "required": ["label"]}}},
    {"type": "array", "prefixItems": [{"type": "boolean"}, {"type": "null"}], "items": {"type": "integer"},
     "minItems": 3, "maxItems": 6},
    {"type": "object", "properties": {"id": {"type": "string", "format": "uuid"},
     "when": {"type": "string", "format": "date-time"}, "day": {"type": "string", "format": "date"},
     "v": {"const": "fixed \"q\""}, "maybe": {"type": ["string", "null"]}}, "required": ["id", "when", "v"]},
    {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "boolean"}},
    {"type": "object", "additionalProperties": {"type": "string"}},
    {"type": "object", "properties": {"payload": {}}, "required": ["payload"]},
    {"type": "string", "pattern": "^a+$"},
]
for i, sch in enumerate(SCHEMAS):
    put("json_schema", compact(sch).encode() + struct.pack("<I", i) + bytes([i * 9 % 64]))
print("corpus written to", OUT)


# ---- dictionaries (libFuzzer -dict=tests/fuzz/<target>.dict) -----------------------------------
def write_dict(target, words):
    def esc(w):
        return "".join(chr(b) if 0x20 <= b < 0x7F and b not in (0x22, 0x5C) else "\\x%02X" % b for b in w.encode())
    with open(os.path.join(ROOT, "tests", "fuzz", target + ".dict"), "w") as f:
        f.write("# generated by tests/fuzz/make_corpus.py\n")
        for i, w in enumerate(words):
            f.write('k%d="%s"\n' % (i, esc(w)))

MARKERS = ["<｜DSML｜tool_calls>", "</｜DSML｜tool_calls>", "<｜DSML｜invoke name=\"", "</｜DSML｜invoke>",
           "<｜DSML｜parameter name=\"", "\" string=\"true\">", "\" string=\"false\">", "</｜DSML｜parameter>",
           "<think>", "</think>", "<｜end▁of▁sentence｜>", "\n\n", "｜DSML｜", "｜", "▁"]
write_dict("parsers", MARKERS)
write_dict("chat_render", MARKERS[:3] + ["\"role\":", "\"content\":", "\"tool_calls\":", "\"tools\":", "\"system\"",
           "\"user\"", "\"assistant\"", "\"tool\"", "\"developer\"", "\"latest_reminder\"", "\"reasoning_content\":",
           "\"tool_call_id\":", "\"function\":", "\"arguments\":", "\"name\":", "\"parameters\":", "\"task\":",
           "\"wo_eos\":", "\"response_format\":", "\"chat_template_kwargs\":", "\"thinking\":", "\"reasoning_effort\":",
           "\"drop_thinking\":", "\"continue_final_message\":", "\"messages\":", "\"type\":", "\"text\"", "1e+16",
           "-0.0", "\"\\u0000\"", "\"\\ud83d\\ude00\""])
write_dict("server_request", ["\"messages\":", "\"prompt\":", "\"tokens\":", "\"model\":", "\"max_tokens\":",
           "\"max_completion_tokens\":", "\"temperature\":", "\"top_p\":", "\"top_k\":", "\"min_p\":", "\"seed\":",
           "\"stop\":", "\"stop_token_ids\":", "\"stream\":", "\"stream_options\":", "\"include_usage\":",
           "\"logprobs\":", "\"top_logprobs\":", "\"n\":", "\"tools\":", "\"tool_choice\":", "\"required\"",
           "\"response_format\":", "\"json_schema\"", "\"logit_bias\":", "\"best_of\":", "\"echo\":", "\"suffix\":",
           "\"add_special_tokens\":", "\"return_token_strs\":", "\"role\":", "\"content\":", "\"tool_calls\":",
           "\"arguments\":", "\"function\":", "\"name\":", "\"presence_penalty\":", "\"frequency_penalty\":",
           "\"repetition_penalty\":", "\"ignore_eos\":", "\"include_stop_str_in_output\":", "\"user\"",
           "\"assistant\"", "\"tool\"", "\"system\"", "1e300", "99999999999999999999", "-1", "2.0", "null"])
