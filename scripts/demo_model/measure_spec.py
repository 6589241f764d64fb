#!/usr/bin/env python3
"""Speculative decoding's acceptance on a served model, per kind of held-out chat (written for onecard):
the first N prompts of each kind in DATA/chat_test.jsonl (the chat encoder's rendered prompts) go to
URL/v1/completions as text (add_special_tokens false: the prompt already starts with BOS) at temperature 0,
one kind after another, and the server's vLLM spec-decode counters are read from /metrics before and after
each kind. Run it against `onecard serve --speculative-config '{..., "draft_length": "fixed"}'` for the
drafter's acceptance at a fixed length (the default adaptive policy drafts only where it expects a gain, so
its counters measure its own probes).

--out keeps every completion; --against OTHER.json (the same prompts served another way, e.g. without
speculation) counts the completions that differ: greedy speculation must change no token. `looping` counts
the completions caught in a loop (some three-word sequence four or more times: greedy decoding of a small
model repeats itself until max_tokens); --loops SAVED.json counts them in an earlier --out (or any JSON
whose "texts" maps kinds to completions) without a server, and --loops NEW.json OLD.json (the same prompts)
pairs them: the chats only one of the two loops on, and the sign test's p-value.

Usage: measure_spec.py --url http://127.0.0.1:8000 --data DATA [--per-kind 20] [--max-tokens 128] [--jobs 4]
                       [--out FILE] [--against FILE]
       measure_spec.py --loops SAVED.json [OLDER.json]
"""

import argparse
import concurrent.futures as cf
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure_tools import acceptance, metrics, paired, post  # noqa: E402  (one client of the server, its counters)


def complete(url, prompt, max_tokens):
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "add_special_tokens": False}
    resp = post(url, body, "/v1/completions")
    return resp["choices"][0]["text"], resp.get("usage", {}).get("completion_tokens", 0)


def looping(text, n=3, times=4):
    """Whether some n consecutive words occur `times` or more times in text (a greedy loop)."""
    words = text.split()
    counts = {}
    for i in range(len(words) - n + 1):
        key = tuple(words[i:i + n])
        counts[key] = counts.get(key, 0) + 1
        if counts[key] >= times:
            return True
    return False


def loops_by_kind(texts):
    """{kind: completions caught in a loop} and their sum under "all"."""
    out = {kind: sum(looping(t) for t in ts) for kind, ts in sorted(texts.items())}
    out["all"] = sum(out.values())
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url")
    ap.add_argument("--data")
    ap.add_argument("--loops", nargs="+", default=[], metavar="SAVED",
                    help="a saved --out: count its looping completions per kind, no server; a second: paired")
    ap.add_argument("--per-kind", type=int, default=20)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--out", default="")
    ap.add_argument("--against", default="", help="an earlier --out on the same prompts: counts differing texts")
    a = ap.parse_args()
    if a.loops:
        if len(a.loops) > 2:
            ap.error("--loops takes one saved run, or two to pair")
        runs = [json.loads(Path(f).read_text())["texts"] for f in a.loops]
        out = {"looping": loops_by_kind(runs[0])}
        if len(runs) == 2:
            flags = ["".join("1" if looping(t) else "0" for k in sorted(runs[0]) for t in run.get(k, []))
                     for run in runs]
            out["older_looping"] = loops_by_kind(runs[1])
            out["paired"] = paired(*flags)  # only_this: loops here only
        print(json.dumps(out, indent=1))
        return
    if not a.url or not a.data:
        ap.error("--url and --data are required (or --loops SAVED.json)")
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
        fig["looping"] = sum(looping(t) for t, _ in res)
        tokens += fig["completion_tokens"]
        out["per_kind"][kind] = fig
        out["texts"][kind] = [t for t, _ in res]
    out["all"] = {**acceptance(first, metrics(a.url)), "completion_tokens": tokens,
                  "looping": sum(f["looping"] for f in out["per_kind"].values())}
    if a.against:
        other = json.loads(Path(a.against).read_text())["texts"]
        pairs = [(x, y) for k in out["texts"] for x, y in zip(out["texts"][k], other.get(k, []))]
        out["against"] = {"compared": len(pairs), "differ": sum(x != y for x, y in pairs)}
    print(json.dumps({k: v for k, v in out.items() if k != "texts"}, indent=1))
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
