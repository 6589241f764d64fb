#!/usr/bin/env python3
"""Assembles a demo-model round's raw JSON for docs/bench/ from measure_round.sh's output directories, so the
figures in docs/results.md come from the files the measurement wrote, not from a hand-made copy.

Usage: round_json.py --out F [--extra META.json] [--run NAME=RUN_DIR ...] NAME=MEASURE_DIR [NAME=MEASURE_DIR ...]
  NAME=MEASURE_DIR: one measured checkpoint (a call's export), under the key NAME ('call_A').
  --extra: a JSON object whose keys go in at the top level first (description, date, device_calls,
  device_attempts, measure_command, the baseline's figures): what no measurement file holds.
  --run NAME=RUN_DIR (repeated, in call order): a device call's unpacked run directory (gpu_train.sh's
  run/). Its train_log.jsonl rows go under train_log.NAME and its stdout's "step N: ..." lines (the
  quantisation-aware start, the rows per forward) and "data: ..." line (the packing time) under
  train_steps.NAME, where the step rates, the
  compile time and the phases in results.md come from; the last run's train_meta.json and, if it
  evaluated, eval.json go under train_meta and evaluate_py_on_device.

Each MEASURE_DIR/*.json goes in under its file name with the per-request 'examples' and the generated
'texts' left out (they are the bulk, and they stay in the measure directory); everything else is kept.
"""
import argparse
import json
import re
import sys
from pathlib import Path

# Per-request detail left in the measure directory: measure_tools' examples, measure_spec's texts.
BULK_KEYS = ("examples", "texts")


def measured(directory: Path) -> dict:
    """{file stem: its JSON without BULK_KEYS} for every *.json measure_round.sh wrote in `directory`."""
    files = sorted(directory.glob("*.json"))
    if not files:
        raise SystemExit(f"round_json: no measurement (*.json) in {directory}")
    out = {}
    for f in files:
        try:
            value = json.loads(f.read_text())
        except json.JSONDecodeError as e:
            raise SystemExit(f"round_json: {f} is not JSON: {e}")
        if isinstance(value, dict):
            value = {k: v for k, v in value.items() if k not in BULK_KEYS}
        out[f.stem] = value
    return out


def trained(runs: list) -> dict:
    """runs: [(name, run directory)] of one round's device calls, in order: {train_log, train_steps,
    train_meta, evaluate_py_on_device (if the last call evaluated)}."""
    log, steps = {}, {}
    for name, run in runs:
        if name in log:
            raise SystemExit(f"round_json: run '{name}' given twice")
        rows = run / "train_log.jsonl"
        if not rows.is_file():
            raise SystemExit(f"round_json: no train_log.jsonl in {run}")
        log[name] = [json.loads(line) for line in rows.read_text().splitlines() if line.strip()]
        stdout = run / "train_stdout.log"
        steps[name] = [line for line in stdout.read_text().splitlines()
                       if re.match(r"(step \d+|data): ", line)] if stdout.is_file() else []
    last = runs[-1][1]
    out = {"train_log": log, "train_steps": steps,
           "train_meta": json.loads((last / "train_meta.json").read_text())}
    if (last / "eval.json").is_file():
        out["evaluate_py_on_device"] = json.loads((last / "eval.json").read_text())
    return out


def assemble(calls: list, extra: dict, runs: list = ()) -> dict:
    """calls: [(name, directory)]; runs: [(name, run directory)]. extra's keys first, then the runs' keys
    (trained), then one key per call. A key may not repeat or collide with another (one figure, one place)."""
    doc = dict(extra)
    for key, value in (trained(list(runs)) if runs else {}).items():
        if key in doc:
            raise SystemExit(f"round_json: '{key}' given twice")
        doc[key] = value
    for name, directory in calls:
        if name in doc:
            raise SystemExit(f"round_json: '{name}' given twice")
        doc[name] = measured(directory)
    return doc


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--extra")
    ap.add_argument("--run", action="append", default=[], metavar="NAME=RUN_DIR")
    ap.add_argument("calls", nargs="+", metavar="NAME=MEASURE_DIR")
    a = ap.parse_args(argv)

    def named_dir(arg, what):
        name, sep, directory = arg.partition("=")
        if not sep or not name or not directory:
            ap.error(f"expected {what}, got '{arg}'")
        if not Path(directory).is_dir():
            ap.error(f"{directory} is not a directory")
        return name, Path(directory)
    calls = [named_dir(c, "NAME=MEASURE_DIR") for c in a.calls]
    runs = [named_dir(r, "NAME=RUN_DIR") for r in a.run]
    extra = json.loads(Path(a.extra).read_text()) if a.extra else {}
    if not isinstance(extra, dict):
        ap.error("--extra must hold a JSON object")
    doc = assemble(calls, extra, runs)
    Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"round_json: {a.out}: {', '.join(n for n, _ in calls)}", file=sys.stderr)


if __name__ == "__main__":
    main()
