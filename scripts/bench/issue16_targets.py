#!/usr/bin/env python3
"""Issue 16's targets (speed round 2) from raw benchmark JSON, the figures docs/results.md derived by hand.

For each target: the best matching measurement over all files given (decode: batch and context; prefill:
prompt tokens), its source (file, and run in docs/bench's multi-run bundles), met or not, and its fraction
of the physical limit the bench wrote (decode: the bytes a step must read at the run's copy bandwidth;
prefill: the block-scaled FP8 GEMM rate for the active FLOPs). A ratio target pairs measurements of one
file (one commit, session and machine); only a numerator whose file has no denominator takes the best one
anywhere. Then: every ratio pair; the top op groups of the chosen measurements' profiles (op by op, so a
group includes its launch gaps); the mixed steps (decode.{B}.mixed, bench --mixed-chunk) where written;
and per --max-num-batched-tokens budget of `onecard validate --gates mixed_load`: TTFT and longest gap.

Usage: issue16_targets.py BENCH_JSON... [--validate VALIDATE_JSON] [--top 5] [--json OUT]
e.g.   issue16_targets.py docs/bench/2026-12-03-onecard-bench-*.json \\
           --validate docs/bench/2026-12-03-validate-mixed-1d94027.json
A bench file is a `onecard bench --out` object, a {"runs": {name: {"args", "result"}}} bundle, a list of
either or one a line; a validate file is a `validate --out` object, a {"budgets": {tokens: it}} bundle or a {"runs": {name:
{"result": it}}} bundle."""

import argparse
import json
import math
import os

TARGETS = [  # (target, kind, match, bar); a ratio's adds (its label, the denominator's match, keys shared)
    ("decode b1 ctx 8K >= 200 tok/s (>= 53% of bytes limit)", "decode", {"batch": 1, "context": 8192}, 200),
    ("decode b1 ctx 64K >= 85% of ctx 1K", "decode", {"batch": 1, "context": 65536}, 0.85,
     ("decode b1 64K / 1K", {"batch": 1, "context": 1024}, ())),
    ("decode 64 streams ctx 1K >= 1,900 tok/s", "decode", {"batch": 64, "context": 1024}, 1900),
    ("prefill 8K prompt >= 15,000 tok/s", "prefill", {"tokens": 8192}, 15000),
    ("prefill 64K rate >= 70% of the 8K rate", "prefill", {"tokens": 65536}, 0.70,
     ("prefill 64K / 8K", {"tokens": 8192}, ("chunk",))),
]


def load_docs(path):
    text = open(path).read()
    try:
        return [json.loads(text)]
    except json.JSONDecodeError:  # one JSON object a line
        return [json.loads(line) for line in text.splitlines() if line.strip()]


def measurements(paths):
    """Every decode and prefill measurement, flat; `file` groups one file's for the ratio pairs."""
    ms = []

    def add(path, label, r):
        for b, d in (r.get("decode") or {}).items():
            if isinstance(d, dict) and "tok_s" in d:  # without tok_s: another schema (the peer-transformers runs)
                ms.append({"kind": "decode", "file": path, "src": label, "batch": int(b), "context": d.get("context"),
                           "tok_s": d["tok_s"], "step_ms": d.get("step_ms_median"),
                           "frac": d.get("fraction_of_copy_bandwidth"), "profile": d.get("profile_ms") or {},
                           "mixed": d.get("mixed"), "weights_gib": r.get("weights_gib"),
                           "copy_tb_s": r.get("copy_bandwidth_tb_s")})
        p = r.get("prefill")
        if isinstance(p, dict) and "tok_s" in p:
            ms.append({"kind": "prefill", "file": path, "src": label, "tokens": p.get("tokens"),
                       "chunk": p.get("chunk"), "tok_s": p["tok_s"], "frac": p.get("fraction_of_fp8_block_gemm_rate"),
                       "profile": p.get("profile_ms") or {}, "last_profile": p.get("profile_last_chunk_ms") or {}})

    def walk(path, d, label):
        if isinstance(d, list):
            for i, x in enumerate(d):
                walk(path, x, f"{label}[{i}]")
        elif isinstance(d, dict):
            if "decode" in d or "prefill" in d:
                add(path, label, d)
            elif isinstance(d.get("result"), dict):
                walk(path, d["result"], label)
            elif isinstance(d.get("runs"), dict):
                for name, r in d["runs"].items():
                    walk(path, r, f"{label} run {name}")

    for path in paths:
        docs, base = load_docs(path), os.path.basename(path)
        for i, d in enumerate(docs):
            walk(path, d, base if len(docs) == 1 else f"{base}:{i + 1}")
    return ms


def select(ms, kind, **match):
    return [m for m in ms if m["kind"] == kind and all(m.get(k) == v for k, v in match.items())]


def best(cands):
    return max(cands, key=lambda m: m["tok_s"]) if cands else None


def profiled(cands, chosen):
    """The chosen measurement if it carries a profile, else the best matching one that does."""
    return chosen if chosen and chosen["profile"] else best([c for c in cands if c["profile"]])


def src(n, d=None):
    """A measurement's file and run; a ratio's denominator from the same file by its run alone."""
    if not n or not d:
        return n["src"] if n else ""
    base = os.path.basename(d["file"])
    same = d["file"] == n["file"] and d["src"].startswith(base + " ")
    return f"{n['src']} / {d['src'][len(base) + 1:] if same else d['src']}"


def ratio_pairs(nums, dens, same=()):
    """Every (numerator, denominator) of one file with equal `same` keys; a numerator whose file has none
    is paired with the best denominator anywhere, so a figure still comes out."""
    pairs = []
    for n in nums:
        own = [d for d in dens if d["file"] == n["file"] and all(d.get(k) == n.get(k) for k in same)]
        pairs += [(n, d) for d in own] if own else ([(n, best(dens))] if dens else [])
    return pairs


def targets(ms, val):
    """The table's rows (`_used`: the measurement whose profile explains the row) and every ratio pair."""
    rows, all_pairs = [], {}

    def row(name, value, measured, met, frac, source, used=None):
        rows.append({"target": name, "measured": measured, "met": met, "of_limit": frac, "source": source,
                     "value": value, "_used": used})

    for name, kind, match, bar, *ratio in TARGETS:
        c = select(ms, kind, **match)
        if not ratio:
            m = best(c)
            chunk = f" (chunk {m['chunk']})" if m and kind == "prefill" else ""
            what = f"{m['tok_s']:,.1f} tok/s{chunk}" if m else "no run"
            row(name, m and m["tok_s"], what, bool(m) and m["tok_s"] >= bar, m and m["frac"], src(m), profiled(c, m))
            continue
        label, den, same = ratio[0]
        pairs = all_pairs[label] = ratio_pairs(c, select(ms, kind, **den), same)
        # Each numerator against its best denominator (the strictest ratio), then the best numerator.
        strict = {}
        for n, d in pairs:
            if id(n) not in strict or d["tok_s"] > strict[id(n)][1]["tok_s"]:
                strict[id(n)] = (n, d)
        n, d = max(strict.values(), key=lambda p: p[0]["tok_s"] / p[1]["tok_s"]) if strict else (None, None)
        r = n and n["tok_s"] / d["tok_s"]
        what = f"{n['tok_s']:,.1f} / {d['tok_s']:,.1f} = {100 * r:.1f}%" if n else "no run"
        row(name, r, what, bool(n) and r >= bar, n and n["frac"], src(n, d), profiled(c, n))
    if val:
        # The budget nearest its bars: the larger of TTFT and gap over its bar (a failed short request
        # has TTFT -1 and ranks last).
        def worst(g):
            ttft = g["short_ttft_s"] / g["max_ttft_s"] if g["short_ttft_s"] >= 0 else math.inf
            return max(ttft, g["longest_gap_s"] / g["max_gap_s"])

        v = min(val, key=worst)
        row(f"mixed load: TTFT <= {v['max_ttft_s']:g} s, gap <= {v['max_gap_s']:g} s",
            [v["short_ttft_s"], v["longest_gap_s"]],
            f"{v['short_ttft_s']:.3f} s / {v['longest_gap_s']:.3f} s (budget {v['budget']})", v["passed"], None,
            v["src"])
    return rows, all_pairs


def validate_gates(path):
    """The mixed_load gate's figures of each budget, with budget, src and passed."""
    out = []
    for doc in load_docs(path):
        # {"budgets": {tokens: result}}, {"runs": {name: {"result": result}}} or one result.
        runs = {k: v.get("result", v) for k, v in doc["runs"].items()} if "runs" in doc else None
        for b, res in (doc.get("budgets") or runs or {"?": doc}).items():
            for g in res.get("gates", []):
                if g.get("name") == "mixed_load" and not g.get("skipped"):
                    f = dict({"max_ttft_s": 0.3, "max_gap_s": 0.2}, **g["figures"])
                    out.append(dict(f, budget=b, passed=g["passed"], src=f"{os.path.basename(path)} budget {b}"))
    return out


def print_profile(title, src_label, prof, n, out):
    """A profile's n largest op groups with their share of its op-by-op total."""
    if not prof:
        return
    total = sum(prof.values()) or 1.0
    top = sorted(prof.items(), key=lambda kv: -kv[1])[:n]
    print(f"\nprofile, {title}: {total:.2f} ms op by op   [{src_label}]")
    for op, t in top:
        print(f"  {t:9.2f} ms {100 * t / total:5.1f}%  {op}")
    out.append({"what": title, "src": src_label, "total_ms": total,
                "top": [{"op": op, "ms": t, "share": t / total} for op, t in top]})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bench_json", nargs="+")
    ap.add_argument("--validate", action="append", default=[], metavar="PATH", help="onecard validate mixed_load JSON")
    ap.add_argument("--top", type=int, default=5, help="op groups printed per profile")
    ap.add_argument("--json", metavar="OUT", help="also write the table and the derived figures here")
    a = ap.parse_args()
    ms = measurements(a.bench_json)
    val = [g for p in a.validate for g in validate_gates(p)]
    rows, all_pairs = targets(ms, val)
    out = {"targets": [{k: v for k, v in r.items() if k != "_used"} for r in rows],
           "ratios": [], "profiles": [], "mixed_steps": [], "mixed_load": []}

    print(f"{'target':<54} {'measured':<34} {'met':<4} {'of limit':>8}  source")
    for r in rows:
        frac = f"{100 * r['of_limit']:.1f}%" if r["of_limit"] is not None else ""
        print(f"{r['target']:<54} {r['measured']:<34} {'yes' if r['met'] else 'no':<4} {frac:>8}  {r['source']}")

    print("\nratios (each pair of one file, or the best denominator anywhere):")
    for label, pairs in all_pairs.items():
        for n, d in pairs:
            x = n["tok_s"] / d["tok_s"]
            print(f"  {label}: {n['tok_s']:,.1f} / {d['tok_s']:,.1f} = {100 * x:.1f}%   [{src(n, d)}]")
            out["ratios"].append({"what": label, "num": n["tok_s"], "den": d["tok_s"], "ratio": x,
                                  "num_src": n["src"], "den_src": d["src"]})

    # Profiles of the measurements the table chose. A prefill's profile_ms is its first chunk, which has
    # no context; profile_last_chunk_ms, where written, is the last one's, which pays for all before it.
    seen = []
    for m in (r["_used"] for r in rows):
        if not m or any(m is x for x in seen):
            continue
        seen.append(m)
        if m["kind"] == "decode":
            print_profile(f"decode b{m['batch']} ctx {m['context']}", m["src"], m["profile"], a.top, out["profiles"])
        else:
            what = f"prefill {m['tokens']} tokens, chunk {m['chunk']}"
            print_profile(what + ", first chunk", m["src"], m["profile"], a.top, out["profiles"])
            print_profile(what + ", last chunk", m["src"], m["last_profile"], a.top, out["profiles"])

    for m in (m for m in ms if m["kind"] == "decode" and m.get("mixed")):
        x = m["mixed"]
        b, n, t = x.get("decode_rows", m["batch"]), x["chunk"], x["step_ms_median"]
        ratio = t / m["step_ms"] if m.get("step_ms") else float("nan")
        print(f"\nmixed step, {b} decode rows + {n} prompt tokens after {x.get('prompt_context')} of context: "
              f"{t:.2f} ms ({ratio:.2f}x the decode step), {b + n} tokens a step, {n / t * 1e3:,.0f} prompt tok/s"
              f"   [{m['src']}]")
        # A step reads each weight at least once: its floor at the copy bandwidth measured in the same run.
        floor = (m["weights_gib"] * 2**30 / (m["copy_tb_s"] * 1e12) * 1e3
                 if m.get("weights_gib") and m.get("copy_tb_s") else None)
        if floor is not None:
            print(f"  every weight read once at the run's copy bandwidth: {floor:.1f} ms ({100 * floor / t:.0f}% of the step)")
        out["mixed_steps"].append({"src": m["src"], "decode_rows": b, "chunk": n, "step_ms": t,
                                   "prompt_context": x.get("prompt_context"), "tokens_per_step": b + n,
                                   "prompt_tok_s": n / t * 1e3, "ratio_to_decode_step": ratio,
                                   "weights_once_ms": floor})
        print_profile(f"mixed step, B {b} + N {n}", m["src"], x.get("profile_ms") or {}, a.top, out["profiles"])

    if val:
        print("\nmixed_load through serve, per --max-num-batched-tokens budget:")
    for g in val:
        # validate writes no step count: the long prompt takes at least ceil(prompt / budget) steps (decode
        # rows share the budget), as docs/results.md counted, so the mean step is an upper bound.
        steps = None
        if str(g["budget"]).isdigit() and g.get("long_prompt_tokens"):
            steps = math.ceil(g["long_prompt_tokens"] / int(g["budget"]))
        mean = g["long_ttft_s"] / steps if steps else None
        extra = f", >= {steps} steps, <= {mean:.3f} s a step" if steps else ""
        print(f"  budget {g['budget']:>5}: short TTFT {g['short_ttft_s']:.3f} s, "
              f"longest gap {g['longest_gap_s']:.3f} s, {g.get('long_prompt_tokens')}-token prompt's TTFT "
              f"{g['long_ttft_s']:.1f} s{extra}, {'passed' if g['passed'] else 'failed'}")
        out["mixed_load"].append({"budget": g["budget"], "short_ttft_s": g["short_ttft_s"], "passed": g["passed"],
                                  "longest_gap_s": g["longest_gap_s"], "long_ttft_s": g["long_ttft_s"],
                                  "long_prompt_steps_at_least": steps, "mean_step_s_at_most": mean})

    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
