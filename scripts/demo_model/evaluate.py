#!/usr/bin/env python3
"""Held-out figures of a trained demo model in PyTorch (written for onecard):
  * perplexity on the test split (Brown paragraphs and chat completions), fp32 ("exact") and with the
    exported checkpoint's numerics (reference simulations + FP8/MXFP4 weight rounding);
  * MTP top-1 agreement: how often the MTP block's argmax for token t+2 equals the main model's own
    argmax at t+1 given the true t+1 (what greedy speculation would accept), and the true token;
  * exact tool-call accuracy on DATA/tool_eval.jsonl (unseen tools): greedy generation from the
    prompt, the DSML block parsed, name + arguments compared exactly (JSON equality).
Writes OUT/eval.json.
"""

import argparse
import json
import math
import re
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dsv4_torch import Numerics  # noqa: E402
import checkpoint_io  # noqa: E402
import data_tokens  # noqa: E402

DSML = "｜DSML｜"
INVOKE = re.compile(r"<" + DSML + r'invoke name="([^"]*)">\n(.*?)\n</' + DSML + r"invoke>", re.S)
PARAM = re.compile(r"<" + DSML + r'parameter name="([^"]*)" string="(true|false)">(.*?)</' + DSML + r"parameter>", re.S)


def parse_calls(text: str):
    """DSML tool calls in a completion -> [{name, arguments}] (None if malformed JSON values)."""
    if "</think>" in text:
        text = text.split("</think>", 1)[1]
    calls = []
    for name, body in INVOKE.findall(text):
        args = {}
        for key, is_str, val in PARAM.findall(body):
            if is_str == "true":
                args[key] = val
            else:
                try:
                    args[key] = json.loads(val)
                except ValueError:
                    return None
        calls.append({"name": name, "arguments": args})
    return calls


def calls_equal(got, want):
    if got is None or len(got) != len(want):
        return False
    rest = list(want)
    for g in got:
        for i, w in enumerate(rest):
            if g["name"] == w["name"] and g["arguments"] == w["arguments"]:
                rest.pop(i)
                break
        else:
            return False
    return True


def decode(tokenizer_path, ids):
    try:
        from tokenizers import Tokenizer
        return Tokenizer.from_file(str(tokenizer_path)).decode(ids, skip_special_tokens=False)
    except ImportError:  # merge-free byte-level dry-run tokenizer
        j = json.loads(Path(tokenizer_path).read_text())
        inv = {v: k for k, v in j["model"]["vocab"].items()}
        from tokenizer_build import byte_alphabet
        back = {c: b for b, c in enumerate(byte_alphabet())}
        out = bytearray()
        for i in ids:
            t = inv[i]
            if t in back:
                out.append(back[t])
            else:
                out += t.encode()
        return out.decode(errors="replace")


@torch.no_grad()
def perplexity(model, examples, num, device, batch=16):
    nll, n, mtp_hit_main, mtp_hit_true, n_mtp = 0.0, 0, 0, 0, 0
    for s in range(0, len(examples), batch):
        chunk = examples[s:s + batch]
        L = max(len(e[0]) for e in chunk)
        ids = torch.full((len(chunk), L), 1, dtype=torch.long)
        mask = torch.zeros((len(chunk), L))
        for i, (a, m, _) in enumerate(chunk):
            ids[i, :len(a)] = torch.from_numpy(a).long()
            mask[i, :len(m)] = torch.from_numpy(m).float()
        ids, mask = ids.to(device), mask.to(device)
        logits, X = model(ids[:, :-1], num)
        ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none")
        m = (mask[:, 1:] > 0).float().reshape(-1)  # loss weights (1, or 2 on tool calls) -> plain mean
        nll += (ce * m).sum().item()
        n += m.sum().item()
        mtp_logits, _ = model.forward_mtp(X[:, :-1], ids[:, 1:-1], num)
        draft = mtp_logits.argmax(-1)  # guess for t+2
        target_pred = logits[:, 1:].argmax(-1)  # main model's own prediction at t+1 (given true t+1)
        m2 = (mask[:, 2:] > 0).float()
        mtp_hit_main += ((draft == target_pred).float() * m2).sum().item()
        mtp_hit_true += ((draft == ids[:, 2:]).float() * m2).sum().item()
        n_mtp += m2.sum().item()
    return {"ppl": math.exp(nll / max(n, 1)), "tokens": int(n), "mtp_agree_main": mtp_hit_main / max(n_mtp, 1),
            "mtp_agree_true": mtp_hit_true / max(n_mtp, 1)}


@torch.no_grad()
def greedy(model, prompts, num, device, max_new, eos=1):
    """Batched greedy decoding without a cache (right-padded buffer; causal, so padding never
    influences earlier positions)."""
    B = len(prompts)
    lens = torch.tensor([len(p) for p in prompts])
    buf = torch.full((B, int(lens.max()) + max_new), eos, dtype=torch.long)
    for i, p in enumerate(prompts):
        buf[i, :len(p)] = torch.tensor(p)
    buf = buf.to(device)
    cur = lens.clone().to(device)
    done = torch.zeros(B, dtype=torch.bool, device=device)
    out = [[] for _ in range(B)]
    for _ in range(max_new):
        L = int(cur.max())
        logits, _ = model(buf[:, :L], num)
        nxt = logits[torch.arange(B, device=device), cur - 1].argmax(-1)
        for i in range(B):
            if not done[i]:
                out[i].append(int(nxt[i]))
        buf[torch.arange(B, device=device), cur] = torch.where(done, buf[torch.arange(B, device=device), cur], nxt)
        done |= nxt == eos
        cur = torch.where(done, cur, cur + 1)
        if bool(done.all()):
            break
    return out


def tool_accuracy(model, data, enc, tokenizer_path, num, device, limit, max_new=200, batch=100):
    """Exact tool calls on tool_eval.jsonl: name and arguments equal after JSON parsing (dict equality
    ignores key order; 5 == 5.0), overall and per set ("named": realistic unseen tools such as
    get_weather; "generated": unseen tools from the training grammar with realistic values)."""
    rows = [json.loads(l) for l in open(Path(data) / "tool_eval.jsonl")][:limit]
    results = []
    for s in range(0, len(rows), batch):
        chunk = rows[s:s + batch]
        gens = greedy(model, [enc.encode(r["prompt"]) for r in chunk], num, device, max_new)
        for r, g in zip(chunk, gens):
            text = decode(tokenizer_path, g)
            got = parse_calls(text)
            results.append({"ok": calls_equal(got, r["expected"]), "set": r.get("set", "all"),
                            "named": bool(got) and got[0]["name"] == r["expected"][0]["name"],
                            "cut": 1 not in g, "expected": r["expected"], "text": text[-400:]})

    def figures(rs):
        n = max(len(rs), 1)
        return {"n": len(rs), "exact": sum(x["ok"] for x in rs) / n, "name_only": sum(x["named"] for x in rs) / n,
                "cut": sum(x["cut"] for x in rs)}
    acc = figures(results)
    for name in sorted({x["set"] for x in results}):
        acc[name] = figures([x for x in results if x["set"] == name])
    return acc, results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True,
                    help="model.pt from train.py (its train_meta.json beside it), or an exported checkpoint directory")
    ap.add_argument("--data", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tool-limit", type=int, default=200)
    ap.add_argument("--ppl-limit", type=int, default=2000)
    ap.add_argument("--max-new", type=int, default=200)
    ap.add_argument("--seq", type=int, default=0,
                    help="longest held-out example (default: the run's training length; 1024 for a checkpoint), "
                         "so runs trained at different lengths score the same examples")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    t0 = time.time()
    if Path(a.model).is_dir():  # an exported checkpoint (e.g. models/demo), dequantised
        model, seq = checkpoint_io.load_model(Path(a.model)), 1024
    else:
        model, seq = checkpoint_io.load_trained(Path(a.model)), checkpoint_io.train_meta(Path(a.model))["seq"]
    seq = a.seq or seq
    model.to(a.device).eval()
    enc = data_tokens.Encoder(Path(a.tokenizer))
    test, _ = data_tokens.load_examples(Path(a.data), enc, "test", seq + 1)
    res = {}
    for name, num in (("fp32", Numerics("exact")), ("quantised", Numerics("reference", quantize_weights=True))):
        for kind in ("brown", "chat"):
            ex = [e for e in test if (e[2] == "brown") == (kind == "brown")][:a.ppl_limit]
            res[f"{name}/{kind}"] = perplexity(model, ex, num, a.device)
            print(name, kind, res[f"{name}/{kind}"], flush=True)
    acc, detail = tool_accuracy(model, a.data, enc, a.tokenizer, Numerics("reference", quantize_weights=True),
                                a.device, a.tool_limit, max_new=a.max_new)
    res["tool_calls_quantised"] = acc
    print("tool calls", acc, flush=True)
    res["eval_seconds"] = round(time.time() - t0, 1)
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / "eval.json").write_text(json.dumps(res, indent=1))
    (Path(a.out) / "tool_eval_detail.json").write_text(json.dumps(detail, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
