#!/usr/bin/env python3
"""Assembles a demo-model round's raw JSON for docs/bench/ from measure_round.sh's output directories, so the
figures in docs/results.md come from the files the measurement wrote, not from a hand-made copy.

Usage: round_json.py --out F [--extra META.json] NAME=MEASURE_DIR [NAME=MEASURE_DIR ...]
  NAME=MEASURE_DIR: one measured checkpoint (a call's export), under the key NAME ('call_A').
  --extra: a JSON object whose keys go in at the top level first (description, date, device_calls,
  device_attempts, measure_command, the baseline's figures): what no measurement file holds.

Each MEASURE_DIR/*.json goes in under its file name with the per-request 'examples' and the generated
'texts' left out (they are the bulk, and they stay in the measure directory); everything else is kept.
"""
import argparse
import json
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


def assemble(calls: list, extra: dict) -> dict:
    """calls: [(name, directory)]; extra's keys first, then one key per call. A name may not repeat or
    collide with extra's keys (one figure, one place)."""
    doc = dict(extra)
    for name, directory in calls:
        if name in doc:
            raise SystemExit(f"round_json: '{name}' given twice")
        doc[name] = measured(directory)
    return doc


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--extra")
    ap.add_argument("calls", nargs="+", metavar="NAME=MEASURE_DIR")
    a = ap.parse_args(argv)
    calls = []
    for c in a.calls:
        name, sep, directory = c.partition("=")
        if not sep or not name or not directory:
            ap.error(f"expected NAME=MEASURE_DIR, got '{c}'")
        if not Path(directory).is_dir():
            ap.error(f"{directory} is not a directory")
        calls.append((name, Path(directory)))
    extra = json.loads(Path(a.extra).read_text()) if a.extra else {}
    if not isinstance(extra, dict):
        ap.error("--extra must hold a JSON object")
    doc = assemble(calls, extra)
    Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"round_json: {a.out}: {', '.join(n for n, _ in calls)}", file=sys.stderr)


if __name__ == "__main__":
    main()
