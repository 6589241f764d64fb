#!/usr/bin/env python3
"""Function-preserving extra layers for the demo model (written for onecard; NEXT_RUN.md round 17): a trained
6-layer model grows to a deeper shape (train.py --shape demo-deep: one more CSA and HCA pair), and the deeper
model computes what the old one did (logits to about 2e-4 relative; round 10: 2.1e-4, --check) until training moves
the new layers.

Why: twelve candidates warm from round 10 sit at 515-531 of the 600 held-out tool requests whatever the data
mix, the expert width or the averaging; depth (attention capacity for copying values) is the lever left
untested, and a run from scratch costs two or three sessions of device time. Growing a trained model is the
block expansion of LLaMA Pro (Wu et al., 2024): copies of trained blocks whose output projections are zero.

How the function is kept: each new layer i (appended after the old ones) copies the last old layer with
its compress ratio (same attention kind, same compressor and indexer shapes; never a hash-routed layer),
then
- its sub-blocks' outputs are zero: the attention's wo_b and every expert's w2 (routed and shared) are 0,
  so `post * f(x)` adds nothing; their gradients are not zero, so training starts them at once;
- its hyper-connections' stream mix is the identity: the comb rows of `fn` are 0 and their `base` is
  IDENTITY_LOGIT on the diagonal, 0 off it, so softmax and Sinkhorn leave about 4.5e-5 of each stream to
  each other one (exact 0 would need an infinite logit). The trained layers' own diagonals are about 3.
Zero weights quantise to zero (quant.py floors a block's amax at 1e-4), so the exported model keeps this.

Usage: deepen.py --from CKPT_OR_MODEL_PT --shape demo-deep --out RUN/model.pt [--check N]
Beside OUT it writes train_meta.json (the source's config, as deep as the shape) and the source's
tokenizer.json when it has one, so export.py --run RUN takes the result. --check N prints how far the deeper
model's logits are from the source's on N random tokens (exact numerics; docs/results.md quotes it).
A state already as deep as the shape is written unchanged (a second device call resumes from the first's).
"""
import argparse
import dataclasses
import json
import re
import shutil
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import checkpoint_io  # noqa: E402

IDENTITY_LOGIT = 10.0
LAYER_KEY = re.compile(r"^layers\.(\d+)\.(.*)$")
ZEROED = re.compile(r"^(attn\.wo_b\.weight|ffn\.(experts\.\d+|shared_experts)\.w2\.weight)$")


def layer_count(state: dict) -> int:
    return 1 + max(int(m.group(1)) for k in state if (m := LAYER_KEY.match(k)))


def deepen(state: dict, ratios: list, num_hash_layers: int, hc_mult: int) -> dict:
    """`state` with layers appended up to len(ratios) - 1 (the last ratio is the MTP block's), each a copy of
    the last old layer of its ratio with zero outputs and an identity stream mix (module docstring). The old
    layers must follow the first ratios; other tensors are the same objects."""
    n_old, n_new = layer_count(state), len(ratios) - 1
    if n_new < n_old:
        raise SystemExit(f"deepen: the shape has {n_new} layers, the state {n_old}")
    out = dict(state)
    for i in range(n_old, n_new):
        src = [j for j in range(num_hash_layers, n_old) if ratios[j] == ratios[i]]
        if not src:
            raise SystemExit(f"deepen: no old layer past the hash-routed ones has compress ratio {ratios[i]}")
        j = src[-1]
        for k, v in state.items():
            m = LAYER_KEY.match(k)
            if m is None or int(m.group(1)) != j:
                continue
            name = m.group(2)
            new = torch.zeros_like(v) if ZEROED.match(name) else v.clone()
            if name.endswith(("hc_attn.fn", "hc_ffn.fn")):  # [(2 + hc) * hc, hc * D]: comb rows 0
                new[2 * hc_mult:] = 0
            elif name.endswith(("hc_attn.base", "hc_ffn.base")):  # [(2 + hc) * hc]: comb logits
                new[2 * hc_mult:] = (torch.eye(hc_mult, dtype=v.dtype) * IDENTITY_LOGIT).flatten()
            out[f"layers.{i}.{name}"] = new
    return out


def logit_distance(shallow: dict, deep: dict, cfg_shallow, cfg_deep, n_tokens: int) -> float:
    """|logits(deep) - logits(shallow)| / |logits(shallow)| over n_tokens random tokens (seed 0), exact numerics."""
    from dsv4_torch import DeepSeekV4, Numerics
    tokens = torch.randint(2, cfg_shallow.vocab_size, (1, n_tokens), generator=torch.Generator().manual_seed(0))
    logits = []
    for cfg, state in ((cfg_shallow, shallow), (cfg_deep, deep)):
        model = DeepSeekV4(cfg)
        model.load_state_dict(state, strict=True)
        with torch.no_grad():
            logits.append(model(tokens, Numerics("exact"))[0])
    return ((logits[1] - logits[0]).norm() / logits[0].norm()).item()


def main():
    import train  # the shapes' one home
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--from", dest="src", required=True,
                    help="an official-format checkpoint directory (dequantised) or a train.py model.pt")
    ap.add_argument("--shape", required=True, choices=list(train.SHAPES), help="the deeper train.py shape")
    ap.add_argument("--out", required=True, help="the deeper weights, a model.pt for train.py --resume")
    ap.add_argument("--check", type=int, default=0, metavar="N", help="print the logits' distance on N tokens")
    a = ap.parse_args()
    shape, src, out = train.SHAPES[a.shape], Path(a.src), Path(a.out)
    cfg = checkpoint_io.config_of(src)
    deep_cfg = dataclasses.replace(cfg, num_hidden_layers=shape["num_hidden_layers"],
                                   compress_ratios=list(shape["compress_ratios"]))
    state = checkpoint_io.load_weights(src)
    deep = deepen(state, deep_cfg.compress_ratios, deep_cfg.num_hash_layers, deep_cfg.hc_mult)
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(deep, out)
    (out.parent / "train_meta.json").write_text(json.dumps(
        {"config": dataclasses.asdict(deep_cfg), "deepened_from": str(src)}, indent=1))
    tokenizer = (src if src.is_dir() else src.parent) / "tokenizer.json"
    if tokenizer.exists() and tokenizer.resolve() != (out.parent / "tokenizer.json").resolve():
        shutil.copyfile(tokenizer, out.parent / "tokenizer.json")
    print(f"deepen: {cfg.num_hidden_layers} -> {deep_cfg.num_hidden_layers} layers "
          f"(ratios {deep_cfg.compress_ratios}) -> {out}")
    if a.check:
        print(f"deepen: logits' relative distance from the source's over {a.check} tokens: "
              f"{logit_distance(state, deep, cfg, deep_cfg, a.check):.3g}")


if __name__ == "__main__":
    main()
