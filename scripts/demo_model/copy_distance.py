#!/usr/bin/env python3
"""How far back a tool call has to copy from (issue 24, round 3): for every DSML tool call in the
training chats (or tool_eval.jsonl's requests), the distance in tokens from the call's tool name back
to the same name in the prompt's tool schema, and to its nearest earlier occurrence anywhere (the
thinking-mode thought names the tool a few tokens before the call); likewise from each string
argument value back to the request. A sliding-window layer sees 512 tokens back (train.SHAPES), so
distances beyond that can only be bridged by the compressed layers.

Tokens: the trained tokenizer.json through the `tokenizers` library when given and importable, or
through `onecard tokenize --jsonl` with --onecard (data_tokens.Encoder);
and always two proxies: characters / 4, and word pieces (a letter run with its leading space, up to
3 digits, or one other character, as a byte-level BPE on this corpus roughly splits).

Usage: copy_distance.py --data DIR [--tokenizer tokenizer.json [--onecard BIN]] [--file chat_train.jsonl]
                        [--limit N]
"""

import argparse
import bisect
import json
import re
from pathlib import Path

DSML = "｜DSML｜"
INVOKE = re.compile(r"<" + DSML + r'invoke name="([^"]*)">')
PARAM = re.compile(r"<" + DSML + r'parameter name="([^"]*)" string="true">(.*?)</' + DSML + "parameter>", re.S)
PIECE = re.compile(r" ?[A-Za-z]+| ?\d{1,3}|\s+|.", re.S)
WINDOW = 512


def spans(text, prompt_len):
    """[(kind, target position, source position or None, nearest earlier position or None)] for the
    names and string values of the calls in text[prompt_len:]."""
    out = []
    for m in INVOKE.finditer(text, prompt_len):
        name, at = m.group(1), m.start(1)
        schema = text.rfind(f'"{name}"', 0, prompt_len)  # the schema's "name": "..." (quoted)
        near = text.rfind(name, 0, at)
        out.append(("name", at, schema + 1 if schema >= 0 else None, near if near >= 0 else None))
    for m in PARAM.finditer(text, prompt_len):
        val, at = m.group(2), m.start(2)
        src = text.rfind(val, 0, prompt_len)
        near = text.rfind(val, 0, at)
        out.append(("value", at, src if src >= 0 else None, near if near >= 0 else None))
    return out


class Counter:
    """Token position of a character offset: the real tokenizer, or the proxies."""

    def __init__(self, tokenizer, onecard=""):
        self.tok = None
        if tokenizer:
            import data_tokens  # here: the proxies alone need no numpy
            try:
                self.tok = data_tokens.Encoder(Path(tokenizer), onecard or None)
            except RuntimeError as e:
                print(f"{e}: proxies only")

    def positions(self, text, offsets):
        """{"chars/4": [...], "pieces": [...], "tokens": [...] (with a tokenizer)} for the offsets."""
        res = {"chars/4": [o / 4 for o in offsets]}
        ends = [m.end() for m in PIECE.finditer(text)]
        res["pieces"] = [bisect.bisect_right(ends, o) for o in offsets]
        if self.tok is not None:
            res["tokens"] = [len(ids) for ids in self.tok.encode_batch([text[:o] for o in offsets])]
        return res


def quantiles(xs):
    if not xs:
        return {}
    xs = sorted(xs)
    q = lambda p: round(xs[min(len(xs) - 1, int(p * len(xs)))], 1)  # noqa: E731
    return {"n": len(xs), "p10": q(0.1), "p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "max": round(xs[-1], 1),
            f">{WINDOW}": round(sum(x > WINDOW for x in xs) / len(xs), 4),
            ">256": round(sum(x > 256 for x in xs) / len(xs), 4)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--tokenizer", default="")
    ap.add_argument("--onecard", default="", help="onecard binary: its tokenizer when `tokenizers` is missing")
    ap.add_argument("--file", default="chat_train.jsonl")
    ap.add_argument("--limit", type=int, default=5000, help="tool conversations to measure")
    a = ap.parse_args()
    counter = Counter(a.tokenizer, a.onecard)
    dist = {}
    n_rows = 0
    for line in open(Path(a.data) / a.file, encoding="utf-8"):
        row = json.loads(line)
        if "completion" in row:
            prompt, completion = row["prompt"], row["completion"]
        else:  # tool_eval.jsonl: the expected call rendered is not stored; measure the request only
            continue
        if DSML not in completion:
            continue
        text = prompt + completion
        sp = spans(text, len(prompt))
        offs = sorted({o for s in sp for o in s[1:] if o is not None})
        pos = counter.positions(text, offs)
        at = {o: i for i, o in enumerate(offs)}
        for kind, tgt, src, near in sp:
            if src is None:
                dist.setdefault(f"{kind} not in prompt", []).append(0)
            for unit, p in pos.items():
                if src is not None:
                    dist.setdefault(f"{kind}<-prompt [{unit}]", []).append(p[at[tgt]] - p[at[src]])
                if near is not None:
                    dist.setdefault(f"{kind}<-nearest [{unit}]", []).append(p[at[tgt]] - p[at[near]])
        n_rows += 1
        if n_rows >= a.limit:
            break
    print(f"{n_rows} tool-call conversations from {a.file}")
    for k in sorted(dist):
        if "not in prompt" in k:
            print(f"{k}: {len(dist[k])}")
        else:
            print(f"{k}: {json.dumps(quantiles(dist[k]))}")


if __name__ == "__main__":
    main()
