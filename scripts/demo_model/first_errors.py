#!/usr/bin/env python3
"""Where a demo checkpoint first goes wrong on the held-out tool requests, teacher-forced (written for
onecard): each non-thinking request of DATA/tool_eval.jsonl is rendered with its expected call by
`onecard render-chat`, tokenized with the checkpoint's tokenizer (data_tokens.Encoder), and run through
the PyTorch model (dsv4_torch, exact numerics) once; the first completion token whose argmax is not the
expected token is classified by what is being written there (`classify`): the tool name, a parameter
name, a value, or the DSML around them. No grammar: a first error in a tool name the grammar would
reject is still counted, so this says what the model prefers, not what `serve --strict-tools-all` returns.
Thinking-mode requests are left out (their expected reasoning is not in tool_eval.jsonl).

With --weights RUN/model.pt (train.py's fp32 state dict) the checkpoint's own weights are replaced by the
training model's, so the two runs side by side say what the export's rounding (FP8, MXFP4) costs. A request
with no first error is one greedy decoding writes exactly as expected.

Usage (python3 with torch): first_errors.py --onecard build/onecard --ckpt models/demo --data DATA [--n 200]
                            [--weights RUN/model.pt] [--out FILE]
"""

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_data import tool_call_msg  # noqa: E402  (the training data's form of a call)


def classify(written: str) -> str:
    """What the completion text `written` (everything before the wrong token) is in the middle of."""
    if re.search(r'invoke name="[^"]*$', written):
        return "tool name"
    if re.search(r'parameter name="[^"]*$', written):
        return "param name"
    if re.search(r'string="(true|false)">[^<]*$', written):
        return "value"
    return "structure"


def main():
    import torch
    import checkpoint_io
    import data_tokens
    from dsv4_torch import Numerics
    ap = argparse.ArgumentParser()
    ap.add_argument("--onecard", required=True)
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--n", type=int, default=200, help="the first N rows of tool_eval.jsonl (thinking ones skipped)")
    ap.add_argument("--weights", default="",
                    help="train.py's model.pt to run instead of the checkpoint's weights (same shape and tokenizer)")
    ap.add_argument("--out", default="")
    a = ap.parse_args()

    def run(args, text):
        return subprocess.run([a.onecard, *args], input=text.encode(), capture_output=True, check=True).stdout.decode()

    def dec(ids):
        return run(["tokenize", "--tokenizer", a.ckpt, "--decode"], json.dumps(ids))

    rows = [json.loads(line) for line in open(Path(a.data) / "tool_eval.jsonl")][:a.n]
    rows = [r for r in rows if not r["thinking"]]
    reqs = []
    for r in rows:
        calls = [tool_call_msg(c) for c in r["expected"]]
        msgs = r["request"]["messages"] + [{"role": "assistant", "content": "", "tool_calls": calls}]
        reqs.append({**r["request"], "messages": msgs})
    full = [json.loads(line) for line in
            run(["render-chat", "--variant", "v4", "--jsonl"],
                "".join(json.dumps(q, ensure_ascii=False) + "\n" for q in reqs)).splitlines()]
    model = checkpoint_io.load_model(Path(a.ckpt)).eval()
    if a.weights:
        checkpoint_io.load_fitting(model, checkpoint_io.load_weights(Path(a.weights)), a.weights, a.ckpt)
    for r, text in zip(rows, full):
        if not text.startswith(r["prompt"]):
            raise SystemExit("the rendered call does not extend the stored prompt: another encoder?")
    enc = data_tokens.Encoder(Path(a.ckpt) / "tokenizer.json", a.onecard)
    ids = iter(enc.encode_batch([t for r, text in zip(rows, full) for t in (r["prompt"], text[len(r["prompt"]):])]))
    counts, detail = {}, []
    for r in rows:
        p_ids, c_ids = next(ids), next(ids)
        with torch.no_grad():
            logits, _ = model(torch.tensor([p_ids + c_ids])[:, :-1], Numerics("exact"))
        probs = torch.softmax(logits[0, len(p_ids) - 1:], -1)  # [completion tokens, vocab]
        pred = probs.argmax(-1).tolist()
        first = None
        for i, (want, got) in enumerate(zip(c_ids, pred)):
            if want != got:
                written = dec(c_ids[:i])
                first = {"class": classify(written), "want": dec([want]), "got": dec([got]),
                         "p_want": round(probs[i, want].item(), 3), "p_got": round(probs[i, got].item(), 3),
                         "before": written[-60:], "request": r["request"]["messages"][-1]["content"],
                         "offered": [t["function"]["name"] for t in r["request"].get("tools", [])]}
                break
        key = f"{r['set']}/{first['class'] if first else 'none'}"
        counts[key] = counts.get(key, 0) + 1
        detail.append({"set": r["set"], "first_error": first})
    print(json.dumps(dict(sorted(counts.items())), indent=1))
    if a.out:
        Path(a.out).write_text(json.dumps({"counts": counts, "detail": detail}, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
