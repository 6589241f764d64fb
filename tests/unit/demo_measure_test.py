#!/usr/bin/env python3
"""The demo model's measuring scripts (scripts/demo_model): measure_tools.py's call comparison, failure
classes (and --reclassify of a saved run), pairwise sign test and pooling; measure_spec.py's per-kind
acceptance against a stub server; first_errors.py's classes; round_json.py's raw bench JSON; cpu_speed.py's
medians and decode rate."""

import json
import subprocess
import sys
import tempfile
import threading
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "demo_model"))
import measure_tools  # noqa: E402


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
        self.assertEqual(out["wrong_first_word"], {"generated": 1})  # "striking gennar": its left edge
        with self.assertRaises(SystemExit):  # a run measured on other requests
            measure_tools.reclassify(run, rows[1:] + rows[:1])

    def test_first_word_wrong_is_the_values_left_edge(self):
        want = [call("fx", n=3, note="see you soon", city="Parma")]
        self.assertFalse(measure_tools.first_word_wrong(want, want))
        self.assertFalse(measure_tools.first_word_wrong([call("fx", n=4, note="see you soon", city="Parma")], want))
        self.assertFalse(measure_tools.first_word_wrong([call("fx", n=3, note="see see you soon", city="Parma")],
                                                        want))
        self.assertTrue(measure_tools.first_word_wrong([call("fx", n=3, note="see you soon", city="Paris")], want))
        self.assertTrue(measure_tools.first_word_wrong([call("fx", n=3, note="for see you soon", city="Parma")],
                                                       want))
        self.assertTrue(measure_tools.first_word_wrong([call("fx", n=3, note="", city="Parma")], want))

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

    def test_ask_counts_one_request_form_by_the_tools_offered(self):
        def row(text, n_tools):
            return {"request": {"messages": [{"role": "user", "content": text}],
                                "tools": [{"function": {"name": f"t{i}"}} for i in range(n_tools)]}}
        rows = [row("Remind me to go on 2025-01-01.", 2), row("Create a reminder to go.", 2),
                row("Remind me to stop on 2026-02-02.", 1), row("Remind me to eat on 2027-03-03.", 2)]
        got = measure_tools.asked("0011", rows, r"^Remind me")
        self.assertEqual(got, {"ask": "^Remind me", "exact": 2, "n": 3,
                               "by_tools_offered": {"1": {"exact": 1, "n": 1}, "2": {"exact": 1, "n": 2}}})
        with self.assertRaises(SystemExit):
            measure_tools.asked("10", rows, "x")
        with tempfile.TemporaryDirectory() as d:  # the same from a saved run
            (Path(d) / "tool_eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            (Path(d) / "run.json").write_text(json.dumps({"exact_per_request": "0011"}))
            out = subprocess.run([sys.executable, str(Path(measure_tools.__file__)), "--breakdown",
                                  str(Path(d) / "run.json"), "--data", d, "--ask", "^Remind me"],
                                 capture_output=True, text=True, check=True)
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

    def test_runs_give_the_training_rows_step_lines_meta_and_eval(self):
        # --run replaces the train_log / train_meta / evaluate.py keys rounds 18-19 copied into --extra by hand.
        import round_json
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            for call, steps, lines in (("c1", [0, 25], ["trained 50 steps (WARNING: no quantisation-aware phase yet)"]),
                                       ("c2", [50, 75], ["step 60: quantisation-aware phase starts", "tokenizer ok",
                                                         "step 60: out of memory; 32 rows per forward from now on"])):
                (d / call).mkdir()
                (d / call / "train_log.jsonl").write_text("".join(json.dumps({"step": n, "t": n * 0.6}) + "\n"
                                                                  for n in steps))
                (d / call / "train_stdout.log").write_text("\n".join(lines) + "\n")
                (d / call / "train_meta.json").write_text(json.dumps({"steps": steps[-1]}))
            (d / "c2" / "eval.json").write_text(json.dumps({"fp32/chat": {"ppl": 3.8}}))
            (d / "m").mkdir()
            (d / "m" / "ppl.json").write_text("{}")
            out = d / "round.json"
            round_json.main(["--out", str(out), "--run", f"call1={d / 'c1'}", "--run", f"call2={d / 'c2'}",
                             f"full={d / 'm'}"])
            doc = json.loads(out.read_text())
            self.assertEqual(list(doc), ["train_log", "train_steps", "train_meta", "evaluate_py_on_device", "full"])
            rows = doc["train_log"]["call1"] + doc["train_log"]["call2"]
            self.assertEqual([r["step"] for r in rows], [0, 25, 50, 75])
            self.assertEqual(doc["train_steps"], {"call1": [], "call2": [
                "step 60: quantisation-aware phase starts", "step 60: out of memory; 32 rows per forward from now on"]})
            self.assertEqual(doc["train_meta"], {"steps": 75})  # the last call's
            self.assertEqual(doc["evaluate_py_on_device"]["fp32/chat"]["ppl"], 3.8)
            with self.assertRaises(SystemExit):  # a hand-made copy beside the run's would be two homes
                round_json.assemble([("full", d / "m")], {"train_meta": {}}, [("call1", d / "c1")])
            with self.assertRaises(SystemExit):
                round_json.assemble([("full", d / "m")], {}, [("call1", d / "m")])  # no train_log.jsonl

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


class CpuSpeed(unittest.TestCase):
    """cpu_speed.py: decode time per token is the median wall at N less the 1-token median (what loading
    and the prompt cost), over N - 1; every run must give exactly the tokens asked for."""

    def test_decode_rate_subtracts_the_one_token_median(self):
        import cpu_speed
        walls = {1: [3.0, 9.0, 3.2], 101: [4.2, 4.1, 4.3], 1001: [13.2, 13.0, 30.0]}
        out = cpu_speed.speeds(walls, [101, 1001])
        self.assertEqual(out["median_wall_s"], {"1": 3.2, "101": 4.2, "1001": 13.2})
        self.assertEqual(out["per_length"]["101"], {"decode_ms_per_token": 10.0, "decode_tokens_per_s": 100.0})
        self.assertEqual(out["per_length"]["1001"], {"decode_ms_per_token": 10.0, "decode_tokens_per_s": 100.0})

    def stub(self, d, extra):
        # a stand-in for `onecard generate`: logs its arguments, prints max-tokens ids (plus `extra`)
        bin_ = d / f"onecard{extra}"
        bin_.write_text("#!/usr/bin/env python3\nimport json, sys\n"
                        f"open({str(d / 'calls.log')!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
                        "n = int(sys.argv[sys.argv.index('--max-tokens') + 1])\n"
                        f"print(json.dumps({{'tokens': [7] * (n + {extra}), 'finish_reason': 'length'}}))\n")
        bin_.chmod(0o755)
        return bin_

    def test_runs_every_checkpoint_and_refuses_a_short_generation(self):
        script = Path(__file__).resolve().parents[2] / "scripts" / "demo_model" / "cpu_speed.py"
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            good = self.stub(d, 0)
            out = d / "speed.json"
            p = subprocess.run([sys.executable, str(script), "--onecard", str(good), "--model", "a=A", "--model",
                                "b=B", "--tokens", "5,9", "--repeats", "2", "--out", str(out)],
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            doc = json.loads(out.read_text())
            self.assertEqual(list(doc["checkpoints"]), ["a", "b"])
            self.assertEqual({k: len(v) for k, v in doc["checkpoints"]["b"]["walls_s"].items()},
                             {"1": 2, "5": 2, "9": 2})
            self.assertEqual(list(doc["checkpoints"]["a"]["per_length"]), ["5", "9"])
            # per length: one warm-up of each checkpoint, then the timed runs alternating a, b
            calls = (d / "calls.log").read_text().splitlines()
            want = [f"generate --model {m} --prompt The history of the city --max-tokens {n} --ignore-eos"
                    for n in (1, 5, 9) for m in ("A", "B") * 3]
            self.assertEqual(calls, want)
            for extra, said in ((-1, "gave 0 tokens, asked for 1"), (1, "gave 2 tokens, asked for 1")):
                p = subprocess.run([sys.executable, str(script), "--onecard", str(self.stub(d, extra)), "--model",
                                    "a=A", "--tokens", "5", "--repeats", "1"], capture_output=True, text=True)
                self.assertNotEqual(p.returncode, 0)
                self.assertIn(said, p.stderr)
            p = subprocess.run([sys.executable, str(script), "--onecard", str(good), "--model", "a=A", "--model",
                                "a=B"], capture_output=True, text=True)
            self.assertIn("a NAME of its own", p.stderr)


if __name__ == "__main__":
    unittest.main()
