#!/usr/bin/env python3
"""Held-out perplexity of the exported demo checkpoint through `onecard logits` (reference numerics),
and of the fp32 training model (model.pt, PyTorch exact numerics) on the same examples (written for
onecard). Examples come from DATA/chat_test.jsonl (loss on the completion) and DATA/brown_test.jsonl
(loss on the text after BOS), tokenised with the checkpoint's tokenizer (data_tokens.Encoder: onecard's
BPE through `onecard tokenize --jsonl`, or the tokenizers library where it is installed).

Usage: measure_ppl.py --onecard B --ckpt models/demo --data DATA [--model-pt RUN/model.pt] [--n 100]
Prints and writes (--out) JSON: per source, tokens and perplexity for each model, and bits per byte of
the scored text (which, unlike perplexity per token, compares checkpoints with different tokenizers).
"""

import argparse
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import data_tokens  # noqa: E402


def token_byte_lengths(ckpt):
    """UTF-8 length of each id's text in the checkpoint's tokenizer.json."""
    from tokenizer_build import token_bytes
    return {i: len(b) for i, b in token_bytes(json.loads((Path(ckpt) / "tokenizer.json").read_text())).items()}


def nll_from_logits(logits, ids, mask):
    lg = logits[:-1].astype(np.float64)
    lse = np.log(np.exp(lg - lg.max(-1, keepdims=True)).sum(-1)) + lg.max(-1)
    tgt = np.array(ids[1:])
    nll = lse - lg[np.arange(len(tgt)), tgt]
    m = np.array(mask[1:], dtype=np.float64)
    return float((nll * m).sum()), float(m.sum())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--onecard", required=True)
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--model-pt", default="")
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    data = Path(a.data)
    examples = []
    enc = data_tokens.Encoder(Path(a.ckpt) / "tokenizer.json", a.onecard)
    chats = [json.loads(line) for line in list(open(data / "chat_test.jsonl"))[:a.n]]
    brown = [json.loads(line)["text"] for line in list(open(data / "brown_test.jsonl"))[:a.n]]
    ids = enc.encode_batch([t for d in chats for t in (d["prompt"], d["completion"])] + brown)
    for i in range(len(chats)):
        p, c = ids[2 * i], ids[2 * i + 1]
        examples.append(("chat", p + c, [0] * len(p) + [1] * len(c)))
    for b in ids[2 * len(chats):]:
        b = ([0] + b)[:1024]
        examples.append(("brown", b, [0] + [1] * (len(b) - 1)))
    torch_model = None
    if a.model_pt:
        import torch
        import checkpoint_io
        from dsv4_torch import Numerics
        torch_model = checkpoint_io.load_trained(Path(a.model_pt)).eval()
    acc = {}
    nbytes = token_byte_lengths(a.ckpt)
    with tempfile.TemporaryDirectory() as tmp:
        for i, (src, ids, mask) in enumerate(examples):
            tf, out = Path(tmp) / "t.txt", Path(tmp) / "l.npy"
            tf.write_text(",".join(map(str, ids)))
            subprocess.run([a.onecard, "logits", "--model", str(a.ckpt), "--tokens-file", str(tf), "--numerics",
                            "reference", "--out", str(out)], check=True, capture_output=True)
            n, k = nll_from_logits(np.load(out), ids, mask)
            s = acc.setdefault(src, {"onecard_reference_nll": 0.0, "torch_fp32_nll": 0.0, "tokens": 0.0,
                                     "bytes": 0})
            s["onecard_reference_nll"] += n
            s["tokens"] += k
            s["bytes"] += sum(nbytes[t] for t, m in zip(ids[1:], mask[1:]) if m)
            if torch_model is not None:
                with torch.no_grad():
                    lg, _ = torch_model(torch.tensor([ids]), Numerics("exact"))
                s["torch_fp32_nll"] += nll_from_logits(lg[0].numpy(), ids, mask)[0]
    res = {}
    for src, s in acc.items():
        res[src] = {"tokens": int(s["tokens"]), "examples": sum(1 for e in examples if e[0] == src),
                    "ppl_onecard_quantised_checkpoint": math.exp(s["onecard_reference_nll"] / s["tokens"]),
                    "bytes": s["bytes"],
                    "bits_per_byte_onecard_quantised_checkpoint": s["onecard_reference_nll"] / s["bytes"] / math.log(2)}
        if torch_model is not None:
            res[src]["ppl_torch_fp32"] = math.exp(s["torch_fp32_nll"] / s["tokens"])
    print(json.dumps(res, indent=1))
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
