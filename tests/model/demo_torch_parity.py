#!/usr/bin/env python3
"""ctest demo_torch_parity: the demo model's PyTorch implementation (scripts/demo_model/dsv4_torch.py,
which trains the embedded demo checkpoint) against onecard's CPU forward pass, exact numerics, main
logits and MTP logits, on two official-format synthetic checkpoints: the tiny preset and a custom
shape (other hidden size, vocabulary, heads, experts, window, top-k).

Needs PyTorch (Debian python3-torch; `ONECARD_SETUP_TORCH=1 scripts/setup.sh` installs it). Without
it the test is skipped (exit 77) and says so: python3-torch pulls about 200 Debian packages, too much
for every CI run, so CI installs it only on request.

Usage: demo_torch_parity.py ONECARD_BINARY
"""

import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PARITY = ROOT / "scripts/demo_model/parity.py"

CASES = {
    "tiny": ["--preset", "tiny"],
    "custom": ["--preset", "tiny", "--hidden", "384", "--vocab", "700", "--heads", "2", "--o-groups", "1",
               "--experts", "6", "--experts-per-tok", "2", "--window", "48", "--index-topk", "5", "--layers", "5",
               "--hash-layers", "1"],
}


def torch_python():
    for py in (sys.executable, "/usr/bin/python3"):
        if subprocess.run([py, "-c", "import torch, numpy"], capture_output=True).returncode == 0:
            return py
    return None


def main():
    onecard = sys.argv[1]
    py = torch_python()
    if py is None:
        print("SKIP: no python3 with torch (install Debian python3-torch, e.g. ONECARD_SETUP_TORCH=1 scripts/setup.sh)")
        sys.exit(77)
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, flags in CASES.items():
            ckpt = Path(tmp) / name
            subprocess.run([onecard, "synth", *flags, "--out", str(ckpt), "--quiet"], check=True)
            vocab = 1024 if name == "tiny" else 700
            r = random.Random(7)
            # 160 tokens: past the first HCA entry (ratio 128) and well past the indexer's top-k.
            toks = ",".join(str(r.randrange(vocab)) for _ in range(160))
            lg, mtp = Path(tmp) / f"{name}_logits.npy", Path(tmp) / f"{name}_mtp.npy"
            subprocess.run([onecard, "logits", "--model", str(ckpt), "--tokens", toks, "--numerics", "exact",
                            "--out", str(lg), "--mtp-out", str(mtp)], check=True, capture_output=True)
            print(f"[{name}]", flush=True)
            if subprocess.run([py, str(PARITY), str(ckpt), toks, str(lg), str(mtp), "exact", "1e-5"]).returncode != 0:
                failed.append(name)
    if failed:
        print(f"FAIL: {failed}")
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
