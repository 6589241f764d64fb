#!/usr/bin/env python3
"""dsv4_torch against onecard's CPU forward pass on an official-format checkpoint (written for onecard).

Usage: parity.py CKPT TOKENS_CSV LOGITS_NPY MTP_NPY NUMERICS [TOL]
LOGITS_NPY / MTP_NPY are `onecard logits --model CKPT --tokens TOKENS_CSV --numerics NUMERICS --out
LOGITS_NPY --mtp-out MTP_NPY`. Prints the relative L2 difference per position (median, max) for the
main logits and the MTP logits and exits 1 when a median exceeds TOL (default 1e-5) or any argmax differs.
"""

import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import checkpoint_io  # noqa: E402
from dsv4_torch import Numerics  # noqa: E402


def rel(a, b):
    return np.linalg.norm(a - b, axis=-1) / np.maximum(np.linalg.norm(b, axis=-1), 1e-30)


def main():
    ckpt, toks, want_logits, want_mtp, numerics = sys.argv[1:6]
    tol = float(sys.argv[6]) if len(sys.argv) > 6 else 1e-5
    torch.set_num_threads(2)
    model = checkpoint_io.load_model(Path(ckpt)).eval()
    ids = torch.tensor([[int(t) for t in toks.split(",")]])
    num = Numerics(numerics)
    with torch.no_grad():
        logits, X = model(ids, num)
        mtp, _ = model.forward_mtp(X[:, :-1], ids[:, 1:], num)
    ok = True
    for name, got, want_path in (("logits", logits[0].numpy(), want_logits), ("mtp", mtp[0].numpy(), want_mtp)):
        want = np.load(want_path)
        assert got.shape == want.shape, f"{name}: shape {got.shape} vs onecard {want.shape}"
        r = rel(got, want)
        same_argmax = float((got.argmax(-1) == want.argmax(-1)).mean())
        print(f"{name} ({numerics}): relative L2 per position median {np.median(r):.2e} max {r.max():.2e}; "
              f"argmax agreement {same_argmax:.4f} over {len(r)} positions")
        ok &= bool(np.median(r) <= tol and same_argmax == 1.0)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
