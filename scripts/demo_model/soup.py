#!/usr/bin/env python3
"""Weight averaging for the demo model (written for onecard): w = alpha * RUN's weights + (1 - alpha) *
BASE's, where RUN was trained warm from BASE (train.py --resume), so the two lie in one basin and the
blend is a model between them. Round 6 (issue 24) needed it: fresh tool data raised exact tool calls
but the twelve thousand Brown paragraphs, seen once more, cost held-out perplexity; the blend kept
the first and gave back most of the second (docs/results.md).

Writes OUT as a train.py run (model.pt, train_meta.json and tokenizer.json copied from RUN), so
export.py takes it unchanged: export.py --run OUT --onecard B --out CKPT.

Usage: soup.py --run RUN --base models/demo --alpha 0.5 --out OUT
BASE is an official-format checkpoint directory (dequantised as train.py --resume does) or a model.pt.
Integer buffers (the hash layers' tid2eid) come from RUN.
"""

import argparse
import shutil
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import checkpoint_io  # noqa: E402


def blend(run: dict, base: dict, alpha: float) -> dict:
    out = {}
    for k, v in run.items():
        if v.is_floating_point():
            if k not in base or base[k].shape != v.shape:
                raise SystemExit(f"soup: {k} is not in the base model with shape {tuple(v.shape)}")
            out[k] = alpha * v + (1.0 - alpha) * base[k].to(v.dtype)
        else:
            out[k] = v
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", required=True, help="train.py's OUT (model.pt, train_meta.json, tokenizer.json)")
    ap.add_argument("--base", required=True, help="the checkpoint RUN started from (a directory or a model.pt)")
    ap.add_argument("--alpha", type=float, required=True, help="RUN's share, in [0, 1]")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if not 0.0 <= a.alpha <= 1.0:
        raise SystemExit("soup: --alpha must lie in [0, 1]")
    run, out = Path(a.run), Path(a.out)
    weights = blend(torch.load(run / "model.pt", map_location="cpu"), checkpoint_io.load_weights(Path(a.base)), a.alpha)
    out.mkdir(parents=True, exist_ok=True)
    torch.save(weights, out / "model.pt")
    for f in ("train_meta.json", "tokenizer.json"):
        shutil.copy(run / f, out / f)
    n = sum(1 for v in weights.values() if v.is_floating_point())
    print(f"soup: {n} float tensors blended at alpha {a.alpha} (run) / {1 - a.alpha:g} (base) -> {out}")


if __name__ == "__main__":
    main()
