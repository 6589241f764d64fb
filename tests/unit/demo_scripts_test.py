#!/usr/bin/env python3
"""The demo model's helpers (scripts/demo_model): measure_tools.py's call comparison, failure classes
and pairwise sign test; soup.py's weight average; dsv4_torch.py's fused attention for train.py --fast
against the dense path (these two need torch: without it in this
python3 the file reruns itself under /usr/bin/python3 where Debian's python3-torch lives, else those
tests are skipped, saying so)."""

import os
import subprocess
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "demo_model"))
import measure_tools  # noqa: E402
import tool_gen  # noqa: E402

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


class NaturalTools(unittest.TestCase):
    """make_data.py --natural-share's tools: unseen by the held-out set, and their requests hold every
    argument value verbatim (what make_call promises, so the call is copyable from the request)."""

    def test_no_natural_tool_shares_a_name_or_a_domain_word_with_a_held_out_one(self):
        self.assertFalse(set(tool_gen.NATURAL) & set(tool_gen.HELD_OUT))
        for name in tool_gen.NATURAL:
            for word in ("weather", "time", "timer", "stock", "currency", "calculate", "web", "email", "translate",
                         "reminder"):
                self.assertNotIn(word, name.split("_"), name)

    def test_requests_hold_every_value_and_the_schema_its_parameters(self):
        import random
        r = random.Random(11)
        for name in sorted(tool_gen.NATURAL):
            tool = tool_gen.natural_tool(name)
            schema = tool_gen.tool_schema(tool)["function"]
            self.assertEqual(set(schema["parameters"]["properties"]), {p["name"] for p in tool["params"]})
            for _ in range(20):
                text, call = tool_gen.make_call(r, tool)
                self.assertEqual(call["name"], name)
                self.assertNotIn("{", text, text)
                for p in tool["params"]:
                    if p["required"]:
                        self.assertIn(p["name"], call["arguments"], text)
                for v in call["arguments"].values():
                    self.assertIn(tool_gen._show(v), text, name)


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
