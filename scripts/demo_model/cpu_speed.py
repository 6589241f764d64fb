#!/usr/bin/env python3
"""CPU decode speed of demo checkpoints through `onecard generate` (greedy, --ignore-eos), to compare
candidates on one machine: what a newcomer waits for when `scripts/demo.sh` answers on a CPU.

Method: for each checkpoint and each length N in --tokens, one warm-up run, then --repeats timed runs of
the whole process; the median wall time is kept. A 1-token run measures what every request pays before
decoding (loading the checkpoint, verifying it, the prompt), so decode time per token at length N is
(median(N) - median(1)) / (N - 1). Checkpoints are interleaved run by run, so a slow spell of the machine
falls on all of them alike; the lengths run one after another, so such a spell can still move one length's
median, and with it the absolute figures (compare checkpoints within one run).

Usage: cpu_speed.py --onecard B --model NAME=DIR [--model NAME=DIR ...] [--tokens 300,1000] [--repeats 5]
                    [--prompt TEXT] [--out F]
Prints and writes (--out) JSON: the command, the machine, and per checkpoint the raw wall times, medians,
ms per decoded token and tokens per second at each length.
"""

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path


def run_once(onecard, model, prompt, n):
    """Wall seconds of one `onecard generate` process producing exactly n tokens."""
    cmd = [onecard, "generate", "--model", model, "--prompt", prompt, "--max-tokens", str(n), "--ignore-eos"]
    t0 = time.perf_counter()
    try:
        # a hung generate would otherwise stop the whole measurement without a word
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        sys.exit(f"cpu_speed: {shlex.join(cmd)}: {e}")
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"cpu_speed: {shlex.join(cmd)} failed ({p.returncode}): {p.stderr.strip()[-400:]}")
    try:
        got = len(json.loads(p.stdout)["tokens"])
    except (ValueError, KeyError, TypeError):
        sys.exit(f"cpu_speed: {shlex.join(cmd)} printed no token list: {p.stdout.strip()[-400:]}")
    if got != n:
        sys.exit(f"cpu_speed: {model} gave {got} tokens, asked for {n}")
    return wall


def cpu_name():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def speeds(walls, lengths):
    """Medians per length, and decode ms per token / tokens per second against the 1-token median."""
    med = {n: statistics.median(walls[n]) for n in walls}
    out = {"median_wall_s": {str(n): round(med[n], 4) for n in sorted(med)}, "per_length": {}}
    for n in lengths:
        per_tok = (med[n] - med[1]) / (n - 1)
        out["per_length"][str(n)] = {"decode_ms_per_token": round(per_tok * 1e3, 3),
                                     "decode_tokens_per_s": round(1.0 / per_tok, 1) if per_tok > 0 else None}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--onecard", required=True)
    ap.add_argument("--model", action="append", required=True, help="NAME=DIR, repeatable")
    ap.add_argument("--tokens", default="300,1000", help="decode lengths, comma-separated, each > 1")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--prompt", default="The history of the city")
    ap.add_argument("--out")
    a = ap.parse_args()
    pairs = [m.split("=", 1) for m in a.model]
    if any(len(p) != 2 or not p[0] or not p[1] for p in pairs) or len({p[0] for p in pairs}) != len(pairs):
        sys.exit("cpu_speed: each --model is NAME=DIR, with a NAME of its own")
    models = dict(pairs)
    try:
        lengths = [int(x) for x in a.tokens.split(",")]
    except ValueError:
        sys.exit(f"cpu_speed: --tokens {a.tokens!r} is not a comma-separated list of integers")
    if any(n <= 1 for n in lengths) or len(set(lengths)) != len(lengths) or a.repeats < 1:
        sys.exit("cpu_speed: the lengths must be distinct and > 1, and --repeats >= 1")
    walls = {name: {n: [] for n in [1] + lengths} for name in models}
    for n in [1] + lengths:
        for d in models.values():
            run_once(a.onecard, d, a.prompt, n)  # warm-up: page cache, CPU clocks
        for _ in range(a.repeats):
            for name, d in models.items():
                walls[name][n].append(round(run_once(a.onecard, d, a.prompt, n), 4))
    report = {
        "command": shlex.join([Path(sys.argv[0]).name] + sys.argv[1:]),
        "machine": {"cpu": cpu_name(), "cores": os.cpu_count()},
        "method": "median of --repeats whole-process walls after one warm-up; decode per token = "
                  "(median(N) - median(1)) / (N - 1)",
        "prompt": a.prompt,
        "repeats": a.repeats,
        "checkpoints": {name: {"dir": d, "walls_s": {str(n): w for n, w in walls[name].items()},
                               **speeds(walls[name], lengths)} for name, d in models.items()},
    }
    text = json.dumps(report, indent=1)
    if a.out:
        Path(a.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
