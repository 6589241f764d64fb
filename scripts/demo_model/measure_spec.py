#!/usr/bin/env python3
"""Speculative decoding's acceptance on a served model, per kind of held-out chat (written for onecard):
the first N prompts of each kind in DATA/chat_test.jsonl (the chat encoder's rendered prompts) go to
URL/v1/completions as text (add_special_tokens false: the prompt already starts with BOS) at temperature 0,
one kind after another, and the server's vLLM spec-decode counters are read from /metrics before and after
each kind. Run it against `onecard serve --speculative-config '{..., "draft_length": "fixed"}'` for the
drafter's acceptance at a fixed length (the default adaptive policy drafts only where it expects a gain, so
its counters measure its own probes).

--out keeps every completion; --against OTHER.json (the same prompts served another way, e.g. without
speculation) counts the completions that differ: greedy speculation must change no token.

Usage: measure_spec.py --url http://127.0.0.1:8000 --data DATA [--per-kind 20] [--max-tokens 128] [--jobs 4]
                       [--out FILE] [--against FILE]
"""

import argparse
import concurrent.futures as cf
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure_tools import acceptance, metrics, post  # noqa: E402  (one client of the server and its counters)


def complete(url, prompt, max_tokens):
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "add_special_tokens": False}
    resp = post(url, body, "/v1/completions")
    return resp["choices"][0]["text"], resp.get("usage", {}).get("completion_tokens", 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--per-kind", type=int, default=20)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--out", default="")
    ap.add_argument("--against", default="", help="an earlier --out on the same prompts: counts differing texts")
    a = ap.parse_args()
    by_kind = {}
    for line in open(Path(a.data) / "chat_test.jsonl"):
        row = json.loads(line)
        rows = by_kind.setdefault(row["kind"], [])
        if len(rows) < a.per_kind:
            rows.append(row["prompt"])
    out = {"per_kind": {}, "texts": {}}
    first = metrics(a.url)
    tokens = 0
    for kind in sorted(by_kind):
        before = metrics(a.url)
        res = list(cf.ThreadPoolExecutor(a.jobs).map(lambda p: complete(a.url, p, a.max_tokens), by_kind[kind]))
        fig = acceptance(before, metrics(a.url))
        fig["requests"], fig["completion_tokens"] = len(res), sum(n for _, n in res)
        tokens += fig["completion_tokens"]
        out["per_kind"][kind] = fig
        out["texts"][kind] = [t for t, _ in res]
    out["all"] = {**acceptance(first, metrics(a.url)), "completion_tokens": tokens}
    if a.against:
        other = json.loads(Path(a.against).read_text())["texts"]
        pairs = [(x, y) for k in out["texts"] for x, y in zip(out["texts"][k], other.get(k, []))]
        out["against"] = {"compared": len(pairs), "differ": sum(x != y for x, y in pairs)}
    print(json.dumps({k: v for k, v in out.items() if k != "texts"}, indent=1))
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
