#!/usr/bin/env python3
"""train.py on the CPU. --tie-twins (round 15): each bare word piece ("Boston", a DSML value's first word) reads and
writes as its space-led twin (" Boston") plus one offset shared by every pair. respace.twin_pairs finds the
pairs; dsv4_torch.DeepSeekV4.tie_twins ties the rows and hash routes; export_state writes the tied rows, so an
untied model (export.py, evaluate.py) computes what the tied one did; train.py trains and resumes with the tie.
Rows per forward across calls: the steps before the quantisation-aware phase and that phase keep separate
counts, so a QAT phase that starts in a later call begins at the full --batch (halving only if it runs out of
memory itself); round 15's eager QAT phase, sharing the compiled steps' count, fell to 8 (53 steps in 2.8 min).
--resume takes only weights that fit --shape: an 8-layer checkpoint under a shallower shape stops it.
Needs torch (reruns itself under /usr/bin/python3, Debian's python3-torch, else skipped saying so)."""

import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "demo_model"))
from torch_python import torch_or_rerun  # noqa: E402  (tests/unit, this file's directory)

torch = torch_or_rerun(__file__)

ONECARD = os.environ.get("ONECARD_BIN", "")
# train.py on the CPU: torch here, and onecard to tokenize the data
NEEDS_TRAIN = unittest.skipUnless(torch is not None and ONECARD and os.path.exists(ONECARD),
                                  "needs torch and ONECARD_BIN (ctest sets it; onecard tokenizes for train.py here)")
EOS = "<｜end▁of▁sentence｜>"


def small_tokenizer():
    """A respaced byte-level tokenizer.json: "th" and " th" from the trained BPE, " the" and its twin "the",
    which respace appended after every space-led token."""
    import tokenizer_build
    tmpl = json.loads((ROOT / "scripts" / "demo_model" / "tokenizer_template.json").read_text())
    merges = ["t h", "th e", "Ġ th", "Ġ the", "Ġ Ġ"]
    made = ["th", "Ġth", "Ġthe", "ĠĠ", "the"]
    return tokenizer_build.assemble(tmpl, tokenizer_build.byte_alphabet() + made, merges)


@unittest.skipUnless(torch is not None, "needs torch (no python3 here has it)")
class TieTwins(unittest.TestCase):
    def setUp(self):
        from dsv4_torch import Config, DeepSeekV4, Numerics, init_weights
        self.DeepSeekV4, self.Numerics = DeepSeekV4, Numerics
        self.cfg = Config(vocab_size=64, hidden_size=128, num_hidden_layers=3, num_attention_heads=2, head_dim=128,
                          qk_rope_head_dim=64, q_lora_rank=128, o_groups=1, o_lora_rank=128, sliding_window=32,
                          compress_ratios=[0, 4, 128, 0], index_n_heads=2, index_head_dim=128, index_topk=4,
                          n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=128, num_hash_layers=1)
        torch.manual_seed(0)
        self.model = DeepSeekV4(self.cfg)
        init_weights(self.model, seed=3)
        self.bare, self.spaced = torch.tensor([5, 9, 20]), torch.tensor([40, 41, 60])
        self.tokens = torch.randint(2, 64, (1, 48))

    def test_twin_pairs_are_the_words_spelt_both_ways(self):
        import respace
        tok = small_tokenizer()
        v = tok["model"]["vocab"]
        # "th" came from the trained BPE (it continues words too); "ĠĠ" is a run of spaces, not a word.
        self.assertEqual(respace.twin_pairs(tok), [(v["the"], v["Ġthe"])])
        import tokenizer_build
        self.assertEqual(respace.twin_pairs(tokenizer_build.assemble(
            {k: tok[k] for k in ("added_tokens", "normalizer", "pre_tokenizer", "post_processor", "decoder")},
            tokenizer_build.byte_alphabet(), [])), [])
        # On the shipped tokenizer: the 2,192 twins left after pruning, every one bare and above the space-led ids.
        shipped = json.loads((ROOT / "models" / "demo" / "tokenizer.json").read_text())
        pairs = respace.twin_pairs(shipped)
        inv = {i: t for t, i in shipped["model"]["vocab"].items()}
        self.assertEqual(len(pairs), 2192)
        self.assertTrue(all("Ġ" + inv[b] == inv[s] for b, s in pairs))
        self.assertIn((shipped["model"]["vocab"]["Boston"], shipped["model"]["vocab"]["ĠBoston"]), pairs)
        self.assertNotIn(shipped["model"]["vocab"]["see"], [b for b, _ in pairs])

    def test_tied_rows_are_the_twins_plus_one_offset(self):
        before_e, before_h = self.model.embed.detach().clone(), self.model.head.detach().clone()
        routes = self.model.layers[0].ffn.gate.tid2eid.clone()
        self.model.tie_twins(self.bare, self.spaced)
        emb, head = self.model.tables()
        for table, before, off in ((emb, before_e, self.model.embed_twin_offset),
                                   (head, before_h, self.model.head_twin_offset)):
            self.assertTrue(torch.allclose(table[self.bare], table[self.spaced] + off))
            # The offset is the pairs' mean difference: the bare rows' mean does not move.
            self.assertTrue(torch.allclose(table[self.bare].mean(0), before[self.bare].mean(0), atol=1e-6))
            others = torch.ones(64, dtype=torch.bool)
            others[self.bare] = False
            self.assertTrue(torch.equal(table[others], before[others]))
        t = self.model.layers[0].ffn.gate.tid2eid
        self.assertTrue(torch.equal(t[self.bare], routes[self.spaced]))
        self.assertTrue(torch.equal(t[self.spaced], routes[self.spaced]))
        self.assertFalse(torch.equal(routes[self.bare], routes[self.spaced]))  # so the copy was a change

    def test_gradients_reach_the_twins_and_the_offsets_not_the_bare_rows(self):
        self.model.tie_twins(self.bare, self.spaced)
        tokens = torch.cat([self.bare, self.spaced, torch.tensor([3, 4])]).view(1, -1)
        logits, _ = self.model(tokens, self.Numerics("exact"))
        logits[..., self.bare].sum().backward()
        for p, off in ((self.model.embed, self.model.embed_twin_offset),
                       (self.model.head, self.model.head_twin_offset)):
            self.assertEqual(float(p.grad[self.bare].abs().sum()), 0.0)
            self.assertGreater(float(p.grad[self.spaced].abs().sum()), 0.0)
            self.assertGreater(float(off.grad.abs().sum()), 0.0)

    def test_the_exported_state_computes_what_the_tied_model_does(self):
        self.model.tie_twins(self.bare, self.spaced)
        with torch.no_grad():  # offsets away from their start, so an untied export would differ
            self.model.embed_twin_offset.add_(0.3)
            self.model.head_twin_offset.add_(0.05)
        st = self.model.export_state()
        self.assertFalse([k for k in st if "twin" in k])
        plain = self.DeepSeekV4(self.cfg)
        plain.load_state_dict(st, strict=True)
        num = self.Numerics("exact")
        with torch.no_grad():
            tied_logits, tied_x = self.model(self.tokens, num)
            self.assertTrue(torch.allclose(plain(self.tokens, num)[0], tied_logits, atol=1e-5))
            nxt = self.tokens[:, 1:]
            self.assertTrue(torch.allclose(plain.forward_mtp(tied_x[:, :-1], nxt, num)[0],
                                           self.model.forward_mtp(tied_x[:, :-1], nxt, num)[0], atol=1e-5))
            raw = {k: v for k, v in self.model.state_dict().items() if "twin" not in k}
            plain.load_state_dict(raw, strict=True)
            self.assertFalse(torch.allclose(plain(self.tokens, num)[0], tied_logits, atol=1e-3))


def tiny_train(d: Path, tok: dict, calls):
    """train.py on the CPU in DIR d (the dry shape, batch 2, a state kept in d/keep): three short chats and a
    Brown line tokenised by `tok`; each of `calls` is (extra arguments, output directory name), run in turn.
    Returns every call's CompletedProcess; a failed call raises AssertionError with its output."""
    (d / "tok.json").write_text(json.dumps(tok, ensure_ascii=False))
    data = d / "data"
    data.mkdir()
    chats = [{"prompt": f"<｜begin▁of▁sentence｜><｜User｜>the {w} then<｜Assistant｜></think>",
              "completion": f"the {w} there." + EOS, "kind": "chat"} for w in ("sea", "thin", "other")]
    (data / "chat_train.jsonl").write_text("".join(json.dumps(c, ensure_ascii=False) + "\n" for c in chats))
    (data / "brown_train.jsonl").write_text(json.dumps({"text": "the thing the other thought"}) + "\n")
    done = []
    for extra, out in calls:
        r = run_train(d, extra + ["--state-dir", str(d / "keep")], out)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        done.append(r)
    return done


def run_train(d: Path, extra, out):
    """One train.py call on tiny_train's data in d (the dry shape, batch 2, on the CPU)."""
    env = dict(os.environ, ONECARD_BIN=ONECARD, OMP_NUM_THREADS="2")
    base = [sys.executable, str(ROOT / "scripts" / "demo_model" / "train.py"), "--data", str(d / "data"),
            "--tokenizer", str(d / "tok.json"), "--shape", "dry", "--seq", "64", "--batch", "2",
            "--minutes", "5", "--warmup", "1", "--device", "cpu"]
    return subprocess.run(base + extra + ["--out", str(d / out)], env=env, capture_output=True, text=True,
                          timeout=600)


@NEEDS_TRAIN
class TrainWithTie(unittest.TestCase):
    """train.py --tie-twins on the CPU (the dry shape, three steps, then one more from the saved state):
    model.pt's rows keep the tie and train_meta.json counts the pairs."""

    def test_train_and_resume_keep_the_tie(self):
        import respace
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            tok = small_tokenizer()
            tie = ["--qat-frac", "0", "--tie-twins"]
            done = tiny_train(d, tok, [(tie + ["--max-steps", "3"], "run1"), (tie + ["--max-steps", "4"], "run2")])
            for r in done:
                self.assertIn("tied 1 bare word pieces", r.stdout)
            self.assertIn("continuing from", done[1].stdout)
            meta = json.loads((d / "run2" / "train_meta.json").read_text())
            self.assertEqual((meta["steps"], meta["tied_twins"]), (4, 1))
            st = torch.load(d / "run2" / "model.pt", map_location="cpu")
            self.assertFalse([k for k in st if "twin" in k])
            pairs = torch.tensor(respace.twin_pairs(tok))
            first = torch.load(d / "run1" / "model.pt", map_location="cpu")
            for k in ("embed", "head"):  # the twin's row is its space-led token's plus the offset, which trained
                off1 = first[k][pairs[:, 0]] - first[k][pairs[:, 1]]
                off2 = st[k][pairs[:, 0]] - st[k][pairs[:, 1]]
                self.assertFalse(torch.allclose(off1, off2), k)


@NEEDS_TRAIN
class QatRowsPerForward(unittest.TestCase):
    def test_a_later_calls_qat_phase_starts_at_the_full_batch(self):
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            # Call 1 stands for steps that fell to 1 row per forward; call 2 (no --micro) enters the QAT phase
            # at step 2 of 4 (--max-steps sets the schedule's fraction).
            done = tiny_train(d, small_tokenizer(), [(["--micro", "1", "--qat-frac", "0", "--max-steps", "2"], "run1"),
                                                     (["--qat-frac", "0.5", "--max-steps", "4"], "run2")])
            self.assertIn("continuing from", done[1].stdout)
            self.assertIn("step 2: quantisation-aware phase starts", done[1].stdout)
            first = json.loads((d / "run1" / "train_meta.json").read_text())
            meta = json.loads((d / "run2" / "train_meta.json").read_text())
            self.assertEqual((first["micro"], first["qat_from_step"]), (1, None))
            self.assertEqual((meta["steps"], meta["qat_from_step"]), (4, 2))
            self.assertEqual((meta["micro"], meta["qat_micro"]), (1, 2))  # the QAT phase ran the whole batch
            self.assertFalse(meta["compiled"])


@NEEDS_TRAIN
class ResumeFits(unittest.TestCase):
    def test_resume_refuses_weights_that_do_not_fit_the_shape(self):
        # Round 18 resumes an 8-layer checkpoint: under a shape with fewer layers train.py must stop, not
        # drop the extra layers; with one weight missing it must stop too; so must a kept state that does
        # not fit. The fitting model.pt resumes.
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            tiny_train(d, small_tokenizer(), [(["--qat-frac", "0", "--max-steps", "1"], "run1")])
            st = torch.load(d / "run1" / "model.pt", map_location="cpu")
            r = run_train(d, ["--max-steps", "1", "--resume", str(d / "run1" / "model.pt")], "ok")
            self.assertEqual(r.returncode, 0, r.stdout[-2000:] + r.stderr[-2000:])
            self.assertIn("resumed from", r.stdout)
            deeper = dict(st, **{"layers.9.attn_norm": st["layers.0.attn_norm"].clone()})
            short = {k: v for k, v in st.items() if k != "layers.1.ffn_norm"}
            for name, bad, what in (("deeper", deeper, "1 unexpected"), ("short", short, "1 weights missing")):
                torch.save(bad, d / f"{name}.pt")
                r = run_train(d, ["--max-steps", "1", "--resume", str(d / f"{name}.pt")], name)
                self.assertNotEqual(r.returncode, 0, name)
                self.assertIn("does not fit --shape dry", r.stderr)
                self.assertIn(what, r.stderr)
            # A kept state (a later call of the same run) is held to the shape the same way.
            kept = torch.load(d / "keep" / "state.pt", map_location="cpu", weights_only=False)
            kept["model"]["layers.9.attn_norm"] = kept["model"]["layers.0.attn_norm"].clone()
            torch.save(kept, d / "keep" / "state.pt")
            r = run_train(d, ["--max-steps", "2", "--state-dir", str(d / "keep")], "kept")
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("state.pt does not fit --shape dry: 0 weights missing [], 1 unexpected", r.stderr)

    def test_the_readers_of_a_run_refuse_weights_that_do_not_fit_its_config(self):
        # export.py, evaluate.py, measure_ppl.py and first_errors.py loaded model.pt with strict=False and said
        # nothing: a model.pt with a layer more than its train_meta.json exported without it. They share
        # checkpoint_io.load_trained / load_fitting now.
        import checkpoint_io
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            tiny_train(d, small_tokenizer(), [(["--qat-frac", "0", "--max-steps", "1"], "run1")])
            model = checkpoint_io.load_trained(d / "run1" / "model.pt")
            self.assertEqual(checkpoint_io.train_meta(d / "run1" / "model.pt")["steps"], 1)
            st = torch.load(d / "run1" / "model.pt", map_location="cpu")
            for k, v in model.state_dict().items():
                self.assertTrue(torch.equal(v, st[k]), k)
            bad = d / "bad"
            bad.mkdir()
            (bad / "train_meta.json").write_bytes((d / "run1" / "train_meta.json").read_bytes())
            torch.save(dict(st, **{"layers.9.attn_norm": st["layers.0.attn_norm"].clone()}), bad / "model.pt")
            with self.assertRaises(SystemExit) as e:
                checkpoint_io.load_trained(bad / "model.pt")
            self.assertIn("does not fit the model: 0 weights missing [], 1 unexpected ['layers.9.attn_norm']",
                          str(e.exception))
            r = subprocess.run([sys.executable, str(ROOT / "scripts" / "demo_model" / "export.py"), "--run", str(bad),
                                "--onecard", ONECARD, "--out", str(d / "exported")], capture_output=True, text=True)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("does not fit the model", r.stderr)
            self.assertFalse((d / "exported").exists())


if __name__ == "__main__":
    unittest.main()
