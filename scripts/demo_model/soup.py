#!/usr/bin/env python3
"""Weight averaging for the demo model (written for onecard): w = alpha * RUN's weights + (1 - alpha) *
BASE's, where RUN was trained warm from BASE (train.py --resume), so the two lie in one basin and the
blend is a model between them. Round 6 (issue 24) needed it: fresh tool data raised exact tool calls
but the twelve thousand Brown paragraphs, seen once more, cost held-out perplexity; the blend kept
the first and gave back most of the second (docs/results.md).

Writes OUT as a train.py run (model.pt, train_meta.json and tokenizer.json copied from RUN), so
export.py takes it unchanged: export.py --run OUT --onecard B --out CKPT.

Usage: soup.py --run RUN --base models/demo --alpha 0.5 --out OUT
       soup.py --runs RUN1 RUN2 [...] --out OUT      (the uniform average, 1/N each)
BASE is an official-format checkpoint directory (dequantised as train.py --resume does) or a model.pt.
Integer buffers (the hash layers' tid2eid) come from RUN (with --runs, from RUN1, whose train_meta.json and
tokenizer.json OUT gets; a later entry may be a run or a checkpoint directory, as BASE may).
Round 14's average of four took three chained --run/--alpha calls (1/2, 1/3, 1/4); --runs is that in one.
"""

import argparse
import shutil
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import checkpoint_io  # noqa: E402


def weighted(states: list, weights: list) -> dict:
    """sum_i weights[i] * states[i] for every float tensor (accumulated in float64, stored in the first
    state's dtype), over the first state's keys, which every other must have with the same shape; integer
    buffers from the first."""
    out = {}
    for k, v in states[0].items():
        if not v.is_floating_point():
            out[k] = v
            continue
        for s in states[1:]:
            if k not in s or s[k].shape != v.shape:
                raise SystemExit(f"soup: {k} is not in every model with shape {tuple(v.shape)}")
        out[k] = sum(w * s[k].to(torch.float64) for w, s in zip(weights, states)).to(v.dtype)
    return out


def blend(run: dict, base: dict, alpha: float) -> dict:
    """alpha * run + (1 - alpha) * base."""
    return weighted([run, base], [alpha, 1.0 - alpha])


def uniform(states: list) -> dict:
    """The mean over `states`, 1/N each."""
    return weighted(states, [1.0 / len(states)] * len(states))


def load_any(path: Path) -> dict:
    """A train.py run directory (its model.pt), or what checkpoint_io.load_weights reads."""
    return checkpoint_io.load_weights(path / "model.pt" if (path / "model.pt").exists() else path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", help="train.py's OUT (model.pt, train_meta.json, tokenizer.json)")
    ap.add_argument("--base", help="the checkpoint RUN started from (a directory or a model.pt)")
    ap.add_argument("--alpha", type=float, help="RUN's share, in [0, 1]")
    ap.add_argument("--runs", nargs="+", default=[], help="instead: average these 1/N each (the first a train.py run)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    out = Path(a.out)
    if a.runs:
        if a.run or a.base or a.alpha is not None or len(a.runs) < 2:
            raise SystemExit("soup: --runs takes two or more runs and no --run, --base or --alpha")
        run = Path(a.runs[0])
        weights = uniform([load_any(Path(r)) for r in a.runs])
        what = f"averaged over {len(a.runs)} models, 1/{len(a.runs)} each"
    else:
        if not (a.run and a.base and a.alpha is not None):
            raise SystemExit("soup: give --run, --base and --alpha, or --runs")
        if not 0.0 <= a.alpha <= 1.0:
            raise SystemExit("soup: --alpha must lie in [0, 1]")
        run = Path(a.run)
        weights = blend(torch.load(run / "model.pt", map_location="cpu"), checkpoint_io.load_weights(Path(a.base)),
                        a.alpha)
        what = f"blended at alpha {a.alpha} (run) / {1 - a.alpha:g} (base)"
    out.mkdir(parents=True, exist_ok=True)
    torch.save(weights, out / "model.pt")
    for f in ("train_meta.json", "tokenizer.json"):
        shutil.copy(run / f, out / f)
    n = sum(1 for v in weights.values() if v.is_floating_point())
    print(f"soup: {n} float tensors {what} -> {out}")


if __name__ == "__main__":
    main()
