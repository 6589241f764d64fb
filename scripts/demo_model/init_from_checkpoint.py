#!/usr/bin/env python3
"""A warm start for train.py --resume (written for onecard): an official-format demo checkpoint
(e.g. models/demo) dequantised into dsv4_torch's fp32 state dict, the gate biases included.

Usage: init_from_checkpoint.py CHECKPOINT_DIR OUT.pt
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import checkpoint_io  # noqa: E402


def main():
    ckpt, out = Path(sys.argv[1]), Path(sys.argv[2])
    model = checkpoint_io.load_model(ckpt)
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, out)
    print(f"warm start: {ckpt} -> {out} ({sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters)")


if __name__ == "__main__":
    main()
