#!/usr/bin/env python3
"""Whether each held-out tool request's argument values are the same tokens in the request and in the
call, and how exact the calls were in each class (measure_tools.py's per-request results).

A value is copied from the user's message into the DSML call, where it follows `">` and so has no
leading space. Per value, comparing the request's tokens over the value's bytes with the value's own
tokens:
  same           the same ids (a number, or a value after punctuation in the request);
  first-differs  only the first id differs, as " Boston" and "Boston" (one id each);
  different      otherwise: the value is split differently (" Boston" against "B" + "oston"), so the
                 model must spell it, not copy it;
  absent         the value is not in the message verbatim (computed, reformatted).
A request's class is its worst value's. respace.py builds a tokenizer without the third class.

Usage: copy_align.py --onecard B --tokenizer T --data DATA [--results R.json ...] [--examples N]
"""

import argparse
import collections
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import data_tokens  # noqa: E402
from tokenizer_build import token_bytes  # noqa: E402

ORDER = ["same", "first-differs", "different", "absent"]


def request_tokens(message_ids, value: str, tb: dict):
    """[(start byte, end byte, id)] of the message's tokens that overlap the value's first occurrence, and
    the value's start byte; ([], -1) when the message does not hold it."""
    msg = b"".join(tb[t] for t in message_ids)
    v = value.encode()
    start = msg.find(v)
    if start < 0:
        return [], -1
    spans, at = [], 0
    for t in message_ids:
        n = len(tb[t])
        if at + n > start and at < start + len(v):
            spans.append((at, at + n, t))
        at += n
    return spans, start


def classify(message_ids, value_ids, value: str, tb: dict) -> str:
    """The class of one value, given the message's ids, the value's own ids and the ids' bytes."""
    spans, start = request_tokens(message_ids, value, tb)
    if start < 0:
        return "absent"
    end = start + len(value.encode())
    src = [t for _, _, t in spans]
    if spans[0][0] == start and spans[-1][1] == end and src == value_ids:
        return "same"
    if len(src) == len(value_ids) and src[1:] == value_ids[1:] and spans[-1][1] == end:
        return "first-differs"
    return "different"


def value_text(v) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--onecard", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--data", required=True, help="a make_data.py output directory (its tool_eval.jsonl)")
    ap.add_argument("--results", nargs="*", default=[], help="measure_tools.py --out files on the same requests")
    ap.add_argument("--examples", type=int, default=0, help="print this many 'different' values")
    a = ap.parse_args()
    rows = [json.loads(line) for line in open(Path(a.data) / "tool_eval.jsonl")]
    tb = token_bytes(json.loads(Path(a.tokenizer).read_text()))
    messages = [[m["content"] for m in r["request"]["messages"] if m["role"] == "user"][-1] for r in rows]
    values = [[value_text(v) for call in r["expected"] for v in call["arguments"].values()] for r in rows]
    enc = data_tokens.Encoder(Path(a.tokenizer), a.onecard)
    msg_ids = enc.encode_batch(messages)
    val_ids = iter(enc.encode_batch([v for vs in values for v in vs]))
    classes, shown = [], 0
    for ids, vs in zip(msg_ids, values):
        cs = []
        for v in vs:
            vid = next(val_ids)
            cs.append(classify(ids, vid, v, tb))
            if cs[-1] == "different" and shown < a.examples:
                print(f"{v!r}: request {[tb[t] for _, _, t in request_tokens(ids, v, tb)[0]]}, "
                      f"call {[tb[t] for t in vid]}")
                shown += 1
        classes.append(max(cs, key=ORDER.index) if cs else "same")
    report = {"tokenizer": a.tokenizer, "requests": len(rows), "classes": {}}
    for s in sorted({r["set"] for r in rows}):
        report["classes"][s] = {c: sum(1 for r, k in zip(rows, classes) if r["set"] == s and k == c) for c in ORDER}
    for f in a.results:
        exact = json.loads(Path(f).read_text())["exact_per_request"]
        tab = collections.defaultdict(lambda: [0, 0])
        for r, k, e in zip(rows, classes, exact):
            tab[f"{r['set']}/{k}"][0] += e == "1"
            tab[f"{r['set']}/{k}"][1] += 1
        report[f] = {key: f"{ok}/{n}" for key, (ok, n) in sorted(tab.items())}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
