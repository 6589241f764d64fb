#!/usr/bin/env python3
"""Speculative decoding's projection from a `onecard bench --verify-k` JSON (issue 17).

For each decode batch and each measured k: the verify step's time as a multiple of the decode step
(measured), the multiple of bytes it must read (from the JSON's bytes_ratio_to_decode_step when the
bench wrote it, else derived from the decode figures of two batch sizes under the uniform routing the
bench's byte model assumes), and the PROJECTED tokens per second per sequence and gain over plain decode
at a per-position acceptance curve: tok/s = E(k) / (verify step + draft), the draft's measured time
(draft_chain_ms_median: the MTP block's chain, or DSpark's push + block + Markov slots) where the bench
wrote it, else the draft counted as free (an upper bound, marked "<=").

Usage: spec_projection.py BENCH_JSON [--acceptance 0.74,0.48,0.26,0.17,0.13,0.09,0.04]
(the default is the published DeepSeek-V4-Flash-0731 DSpark curve, docs/results.md)."""

import argparse
import json


def derived_bytes(j):
    """bytes(n tokens) from the decode figures: dense + layers * distinct(n) * per_expert, fitted on the
    two smallest batches (the embedding rows and KV of a few tokens are left out: < 0.1%)."""
    d = j["decode"]
    E, K, L = j["routed_experts"], j["experts_per_token"], j["layers"]

    def distinct(n):
        return E * (1.0 - (1.0 - K / E) ** n)

    b1, b2 = sorted(int(b) for b in d)[:2]
    y1, y2 = d[str(b1)]["bytes_read_per_step"], d[str(b2)]["bytes_read_per_step"]
    per_expert = (y2 - y1) / (L * (distinct(b2) - distinct(b1)))
    dense = y1 - L * distinct(b1) * per_expert
    return lambda n: dense + L * distinct(n) * per_expert


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bench_json")
    ap.add_argument("--acceptance", default="0.74,0.48,0.26,0.17,0.13,0.09,0.04")
    a = ap.parse_args()
    acc = [float(x) for x in a.acceptance.split(",")]
    j = json.load(open(a.bench_json))
    nbytes = derived_bytes(j) if len(j["decode"]) >= 2 else None
    print(f"{'batch':>5} {'k':>3} {'verify ms':>10} {'draft ms':>9} {'x time':>7} {'x bytes':>8} {'E(k)':>6} "
          f"{'tok/s/seq':>10} {'plain':>7} {'gain':>6}")
    for B in sorted(j["decode"], key=int):
        row = j["decode"][B]
        for k, v in sorted(row.get("verify", {}).items(), key=lambda kv: int(kv[0])):
            n = int(B) * (int(k) + 1)
            xb = v.get("bytes_ratio_to_decode_step")
            if xb is None and nbytes is not None:
                xb = nbytes(n) / nbytes(int(B))
            e = 1.0 + sum(acc[: int(k)])
            draft = v.get("draft_chain_ms_median")
            t = v["step_ms_median"] + (draft or 0.0)
            plain = 1e3 / row["step_ms_median"]  # tok/s per sequence without speculation
            bound = "" if draft is not None else " <="
            print(f"{B:>5} {k:>3} {v['step_ms_median']:>10.2f} {draft if draft is not None else float('nan'):>9.2f} "
                  f"{v['ratio_to_decode_step']:>7.2f} {xb if xb is not None else float('nan'):>8.2f} {e:>6.2f} "
                  f"{e / t * 1e3:>10.1f} {plain:>7.1f} {e / t * 1e3 / plain:>6.2f}{bound}")


if __name__ == "__main__":
    main()
