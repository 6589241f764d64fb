#!/usr/bin/env python3
"""Growing a trained demo model (scripts/demo_model): respace.py's tokenizer (truncated and pruned too) and
model (a token the old model never had starts from its pieces' rows; the source's shape is kept); widen.py's
function-preserving wider experts; deepen.py's added layers; train.py --shape demo-deep's export. With
ONECARD_BIN (ctest sets it) the grown models are exported and run by onecard's CPU forward. Needs torch for
most tests: torch_python reruns this file under /usr/bin/python3 (Debian's python3-torch), else they are
skipped, saying so."""

import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "demo_model"))
from torch_python import torch_or_rerun  # noqa: E402  (tests/unit, this file's directory)

try:
    import numpy as np
except ImportError:
    np = None
torch = torch_or_rerun(__file__)

ONECARD = os.environ.get("ONECARD_BIN", "")


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
            # respace.py model on the deep checkpoint keeps its 8 layers (it wrote the 6-layer demo shape once).
            r = subprocess.run([sys.executable, str(root / "scripts/demo_model/respace.py"), "model", "--ckpt",
                                str(d / "ckpt"), "--tokenizer", str(demo / "tokenizer.json"), "--out", str(d / "re")],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr[-2000:])
            import checkpoint_io
            from dsv4_torch import DeepSeekV4
            re_cfg = checkpoint_io.config_of(d / "re" / "model.pt")
            self.assertEqual((re_cfg.num_hidden_layers, re_cfg.vocab_size), (8, config["vocab_size"]))
            DeepSeekV4(re_cfg).load_state_dict(torch.load(d / "re" / "model.pt"), strict=True)
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


if __name__ == "__main__":
    unittest.main()
