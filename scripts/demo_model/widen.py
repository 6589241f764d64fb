#!/usr/bin/env python3
"""Function-preserving wider experts for the demo model (written for onecard; NEXT_RUN.md round 14): every
expert's intermediate size (routed and shared, the MTP block's too) grows from I to INTER, and the widened
model computes exactly what the old one did until training moves the new units.

Why: rounds 11-13 tuned the data mix and six candidates scored 517-526 of the 600 held-out tool requests;
round 14 asks whether capacity is what is missing, starting warm from a trained model instead of from
scratch (a smaller vocabulary, the only room inside 20 MB, would need a new tokenizer and a fresh run).

How the function is kept: an expert is w2 @ (silu(w1 x) * w3 x). The new rows of w1 and w3 ([INTER - I, D])
are drawn at the scale of the old rows, so the new units start alive; the new columns of w2 ([D, INTER - I])
are zero, so what they compute is multiplied by 0. I is a multiple of 128, so the new weights fill
quantisation blocks of their own (FP8 128x128, MXFP4 1x32, the activations' 1x128): the old blocks' scales,
and so the quantised model's outputs, do not change either.

Usage: widen.py --from CKPT_OR_MODEL_PT --inter INTER --out OUT.pt [--seed S]
A checkpoint already INTER wide is written unchanged (a second device call resumes from the first's export).
"""
import argparse
import re
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import checkpoint_io  # noqa: E402

# w1 / w3: [I, D] (rows are intermediate units); w2: [D, I].
EXPERT_WEIGHT = re.compile(r"(?:^|\.)(?:experts\.\d+|shared_experts)\.(w1|w2|w3)\.weight$")


def widen(state: dict, inter: int, seed: int = 0) -> dict:
    """`state` with every expert's intermediate size grown to `inter` (function-preserving, see the module
    docstring); other tensors are the same objects. Refuses a narrower `inter`, one not a multiple of 128,
    and experts of unequal widths."""
    if inter % 128:
        raise SystemExit(f"widen: --inter {inter} is not a multiple of 128 (FP8 blocks)")
    widths = {(v.shape[1] if m.group(1) == "w2" else v.shape[0])
              for k, v in state.items() if (m := EXPERT_WEIGHT.search(k))}
    if not widths:
        raise SystemExit("widen: no expert weights (…experts.N.w1.weight) in the state")
    if len(widths) != 1:
        raise SystemExit(f"widen: experts of several widths {sorted(widths)}")
    old = widths.pop()
    if inter < old:
        raise SystemExit(f"widen: --inter {inter} is narrower than the experts' {old}")
    g = torch.Generator().manual_seed(seed)
    out = {}
    for k, v in state.items():
        m = EXPERT_WEIGHT.search(k)
        if m is None or inter == old:
            out[k] = v
        elif m.group(1) == "w2":  # [D, old] -> [D, inter]: the new units' outputs are multiplied by 0
            out[k] = torch.cat([v, torch.zeros(v.shape[0], inter - old, dtype=v.dtype)], dim=1)
        else:  # [old, D] -> [inter, D]: new rows at the old rows' scale
            new = torch.randn(inter - old, v.shape[1], generator=g, dtype=torch.float32) * v.float().std()
            out[k] = torch.cat([v, new.to(v.dtype)], dim=0)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--from", dest="src", required=True,
                    help="an official-format checkpoint directory (dequantised) or a train.py model.pt")
    ap.add_argument("--inter", type=int, required=True, help="the new moe_intermediate_size")
    ap.add_argument("--out", required=True, help="the widened weights, a model.pt for train.py --resume")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    state = checkpoint_io.load_weights(Path(a.src))
    wide = widen(state, a.inter, a.seed)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    torch.save(wide, a.out)
    grown = sum(1 for k in wide if wide[k] is not state[k])
    print(f"widen: {grown} expert weights grown to intermediate size {a.inter} -> {a.out}")


if __name__ == "__main__":
    main()
